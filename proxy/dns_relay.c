/* The DNS relay: a few connected UDP sockets (each its own random source port) to the upstream
 * resolver, fresh random query ids, replies matched by socket and id (and then by question, by the
 * caller), and a timeout per query. Only queries dns.c rebuilt for allowed names come here. */
#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "proxy_int.h"

#define RELAY_SOCKS 4
#define RELAY_TIMEOUT_MS 4000
#define RELAY_BATCH 32

struct dns_relay_query {
	struct dns_relay *r; /* borrowed */
	unsigned sock;
	uint16_t id;
	dns_relay_cb cb;
	void *arg;
	struct event *timer; /* owned */
};

struct relay_sock {
	int fd;                           /* owned */
	struct event *ev;                 /* owned */
	struct dns_relay_query **by_id;   /* owned array of 65536 borrowed pointers */
};

struct dns_relay {
	struct proxy_engine *e; /* borrowed */
	struct relay_sock socks[RELAY_SOCKS];
	unsigned next;
	const struct timeval *tv;
};

static void query_free(struct dns_relay_query *q)
{
	q->r->socks[q->sock].by_id[q->id] = NULL;
	event_free(q->timer);
	free(q);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns_relay_query *q = arg;
	dns_relay_cb cb = q->cb;
	void *cbarg = q->arg;
	(void)fd;
	(void)what;
	query_free(q);
	cb(NULL, 0, cbarg);
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct relay_sock *rs = arg;
	uint8_t buf[DNS_MSG_MAX];
	(void)what;

	for (int i = 0; i < RELAY_BATCH; i++) {
		ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
		struct dns_relay_query *q;
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNREFUSED)
				log_warn("dns relay: recv");
			return;
		}
		if (n < 12)
			continue;
		q = rs->by_id[(uint16_t)(buf[0] << 8 | buf[1])];
		if (!q)
			continue; /* late or spoofed */
		if (q->cb(buf, (size_t)n, q->arg))
			query_free(q);
	}
}

struct dns_relay *dns_relay_new(struct proxy_engine *e)
{
	struct dns_relay *r = calloc(1, sizeof *r);
	struct timeval tv = { RELAY_TIMEOUT_MS / 1000, (RELAY_TIMEOUT_MS % 1000) * 1000 };

	if (!r)
		return NULL;
	r->e = e;
	r->tv = event_base_init_common_timeout(e->base, &tv);
	for (unsigned i = 0; i < RELAY_SOCKS; i++)
		r->socks[i].fd = -1;
	for (unsigned i = 0; i < RELAY_SOCKS; i++) {
		struct relay_sock *rs = &r->socks[i];
		int rcv = 1 << 20;
		rs->fd = socket(e->upstream_dns.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (rs->fd < 0 || connect(rs->fd, (struct sockaddr *)&e->upstream_dns, e->upstream_dns_len) != 0)
			goto fail;
		(void)setsockopt(rs->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
		rs->by_id = calloc(65536, sizeof *rs->by_id);
		rs->ev = event_new(e->base, rs->fd, EV_READ | EV_PERSIST, read_cb, rs);
		if (!rs->by_id || !rs->ev || event_add(rs->ev, NULL) != 0)
			goto fail;
	}
	return r;
fail:
	dns_relay_free(r);
	return NULL;
}

void dns_relay_free(struct dns_relay *r)
{
	if (!r)
		return;
	for (unsigned i = 0; i < RELAY_SOCKS; i++) {
		struct relay_sock *rs = &r->socks[i];
		if (rs->by_id) {
			for (unsigned id = 0; id < 65536; id++) {
				struct dns_relay_query *q = rs->by_id[id];
				if (q) {
					dns_relay_cb cb = q->cb;
					void *arg = q->arg;
					query_free(q);
					cb(NULL, 0, arg);
				}
			}
			free(rs->by_id);
		}
		if (rs->ev)
			event_free(rs->ev);
		if (rs->fd >= 0)
			close(rs->fd);
	}
	free(r);
}

struct dns_relay_query *dns_relay_send(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg)
{
	struct dns_relay_query *q;
	unsigned s = r->next++ % RELAY_SOCKS;
	struct relay_sock *rs = &r->socks[s];
	uint16_t id = 0;
	int tries;

	if (len < 12)
		return NULL;
	for (tries = 0; tries < 32; tries++) {
		id = (uint16_t)arc4random();
		if (!rs->by_id[id])
			break;
	}
	if (tries == 32)
		return NULL;
	q = calloc(1, sizeof *q);
	if (!q)
		return NULL;
	q->r = r;
	q->sock = s;
	q->id = id;
	q->cb = cb;
	q->arg = arg;
	q->timer = evtimer_new(r->e->base, timeout_cb, q);
	if (!q->timer) {
		free(q);
		return NULL;
	}
	wire[0] = (uint8_t)(id >> 8);
	wire[1] = (uint8_t)id;
	if (send(rs->fd, wire, len, MSG_DONTWAIT) != (ssize_t)len) {
		event_free(q->timer);
		free(q);
		return NULL;
	}
	rs->by_id[id] = q;
	event_add(q->timer, r->tv);
	return q;
}

void dns_relay_cancel(struct dns_relay_query *q)
{
	if (q)
		query_free(q);
}
