/* The DNS relay: a few connected UDP sockets (each its own random source port) to the upstream
 * resolver, fresh random query ids, replies matched by socket and id (and then by question, by the
 * caller), and a timeout per query (all queries have the same timeout, so they expire in the order
 * they were sent: one FIFO and one sweep timer, no timer per query). Only queries dns.c rebuilt for
 * allowed names come here. */
#include <errno.h>
#include <stdbool.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "proxy_int.h"

#define RELAY_SOCKS      4
#define RELAY_TIMEOUT_MS 4000
#define RELAY_BATCH      32
#define RELAY_ANSWER_MAX 4096
#define RELAY_OUT_MAX    64  /* queries queued for one sendmmsg(2) */
#define RELAY_QUERY_MAX  300 /* a rebuilt query: header, a name of at most 255 bytes, type, class, OPT */
#define RELAY_SWEEP_MS   250

struct dns_relay_query {
	struct dns_relay *r; /* borrowed */
	unsigned sock;
	uint16_t id;
	dns_relay_cb cb;
	void *arg;
	uint64_t deadline_ms;
	TAILQ_ENTRY(dns_relay_query) entry; /* in the relay's FIFO (UDP) */
	int out_slot;                       /* index in the relay's send queue while queued, else -1 */
	struct bufferevent *bev;            /* owned: the TCP connection (TCP queries only) */
	struct proxy_deadline due;          /* TCP: when its timeout (from the last read) is due */
};

struct relay_sock {
	int fd;                         /* owned */
	bool connected;                 /* connected to the upstream and reading */
	struct event *ev;               /* owned; added only once connected */
	struct dns_relay_query **by_id; /* owned array of 65536 borrowed pointers */
};

struct dns_relay {
	struct proxy_engine *e; /* borrowed */
	struct relay_sock socks[RELAY_SOCKS];
	unsigned next;
	struct event *sweep;   /* owned */
	uint64_t sweep_due_ms; /* when the sweep should run (proxy_mono_ms): a later run means a stall */
	TAILQ_HEAD(, dns_relay_query) fifo;
	/* queries dns_relay_queue() holds until dns_relay_flush() */
	bool flushing; /* a query made while flushing (by a callback) is sent at once */
	unsigned nout;
	struct {
		struct dns_relay_query *q; /* borrowed; NULL once cancelled */
		size_t len;
		uint8_t wire[RELAY_QUERY_MAX];
	} out[RELAY_OUT_MAX];
};

/* Query ids: unpredictable (arc4random), drawn from a pool refilled 256 ids at a time, since glibc's
 * arc4random makes one getrandom(2) call per call (5% of the relay's CPU when it was called per query). */
static uint16_t fresh_id(void)
{
	static uint16_t pool[256];
	static size_t left;

	if (left == 0) {
		arc4random_buf(pool, sizeof pool);
		left = sizeof pool / sizeof pool[0];
	}
	return pool[--left];
}

static void query_free(struct dns_relay_query *q)
{
	if (q->bev) {
		bufferevent_free(q->bev);
	} else {
		q->r->socks[q->sock].by_id[q->id] = NULL;
		TAILQ_REMOVE(&q->r->fifo, q, entry);
		if (q->out_slot >= 0)
			q->r->out[q->out_slot].q = NULL;
	}
	free(q);
}

static int read_batch(struct relay_sock *rs);

/* The sweep runs only while queries are in flight, so an idle engine does not wake up. */
static void arm_sweep(struct dns_relay *r)
{
	struct timeval tv = {0, RELAY_SWEEP_MS * 1000};
	if (!event_pending(r->sweep, EV_TIMEOUT, NULL)) {
		event_add(r->sweep, &tv);
		r->sweep_due_ms = proxy_mono_ms() + RELAY_SWEEP_MS;
	}
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns_relay *r = arg;
	uint64_t now = proxy_mono_ms();
	struct dns_relay_query *q;
	(void)fd;
	(void)what;
	/* The timeout measures the upstream, not the engine: a sweep noticed more than PROXY_STALL_MS late means
	 * the engine did not run meanwhile (on a paused machine nor did the resolver), so the queries' deadlines
	 * move by as much; and answers that came in time but wait unread (after a stall the expired timers may
	 * run before every socket was read) are taken before anything expires. */
	if (now > r->sweep_due_ms + PROXY_STALL_MS)
		for (q = TAILQ_FIRST(&r->fifo); q; q = TAILQ_NEXT(q, entry))
			q->deadline_ms += now - r->sweep_due_ms;
	if ((q = TAILQ_FIRST(&r->fifo)) != NULL && q->deadline_ms <= now)
		dns_relay_read_now(r);
	while ((q = TAILQ_FIRST(&r->fifo)) != NULL && q->deadline_ms <= now) {
		dns_relay_cb cb = q->cb;
		void *cbarg = q->arg;
		query_free(q);
		cb(NULL, 0, cbarg);
	}
	if (!TAILQ_EMPTY(&r->fifo))
		arm_sweep(r);
	proxy_dns_udp_flush();
}

/* Answers are read RELAY_BATCH at a time with one recvmmsg(2). An answer longer than RELAY_ANSWER_MAX
 * (we advertise an EDNS size of DNS_EDNS_SIZE, so a resolver sends at most that, or TC) is ignored and its
 * query times out. */
static int read_batch(struct relay_sock *rs)
{
	static uint8_t buf[RELAY_BATCH][RELAY_ANSWER_MAX];
	static struct iovec iov[RELAY_BATCH];
	static struct mmsghdr msgs[RELAY_BATCH];
	int n;

	for (int i = 0; i < RELAY_BATCH; i++) {
		iov[i].iov_base = buf[i];
		iov[i].iov_len = sizeof buf[i];
		memset(&msgs[i], 0, sizeof msgs[i]);
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	n = recvmmsg(rs->fd, msgs, RELAY_BATCH, MSG_DONTWAIT, NULL);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR && errno != ECONNREFUSED)
			log_warn("dns relay: recvmmsg");
		return 0;
	}
	for (int i = 0; i < n; i++) {
		struct dns_relay_query *q;
		if (msgs[i].msg_len < 12 || (msgs[i].msg_hdr.msg_flags & MSG_TRUNC))
			continue;
		q = rs->by_id[(uint16_t)(buf[i][0] << 8 | buf[i][1])];
		if (!q)
			continue; /* late or spoofed */
		if (q->cb(buf[i], msgs[i].msg_len, q->arg))
			query_free(q);
	}
	proxy_dns_udp_flush();
	return n;
}

/* Bounded: a socket holds answers to at most 65536 open queries (one per id), so this many full batches
 * take every answer that can match; a resolver flooding its socket faster than it is read cannot hold
 * the engine here (the rest is read by the socket's event). */
#define RELAY_READ_NOW_BATCHES (65536 / RELAY_BATCH + 1)

void dns_relay_read_now(struct dns_relay *r)
{
	for (unsigned i = 0; i < RELAY_SOCKS; i++)
		for (unsigned b = 0;
		     b < RELAY_READ_NOW_BATCHES && r->socks[i].connected && read_batch(&r->socks[i]) == RELAY_BATCH; b++)
			;
}

static void read_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)read_batch(arg);
}

/* Connects a relay socket to the upstream and starts reading it. An unconnected UDP socket would
 * accept answers from anyone, so nothing is read before the connect succeeded. */
static int relay_sock_connect(struct dns_relay *r, struct relay_sock *rs)
{
	if (rs->connected)
		return 0;
	if (connect(rs->fd, (struct sockaddr *)&r->e->upstream_dns, r->e->upstream_dns_len) != 0)
		return -errno;
	if (event_add(rs->ev, NULL) != 0)
		return -EIO;
	rs->connected = true;
	return 0;
}

struct dns_relay *dns_relay_new(struct proxy_engine *e)
{
	struct dns_relay *r = calloc(1, sizeof *r);

	if (!r)
		return NULL;
	r->e = e;
	TAILQ_INIT(&r->fifo);
	r->sweep = evtimer_new(e->base, sweep_cb, r);
	if (!r->sweep) {
		dns_relay_free(r);
		return NULL;
	}
	for (unsigned i = 0; i < RELAY_SOCKS; i++)
		r->socks[i].fd = -1;
	for (unsigned i = 0; i < RELAY_SOCKS; i++) {
		struct relay_sock *rs = &r->socks[i];
		int rcv = 1 << 20;
		rs->fd = socket(e->upstream_dns.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (rs->fd < 0)
			goto fail;
		(void)setsockopt(rs->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
		rs->by_id = calloc(65536, sizeof *rs->by_id);
		rs->ev = event_new(e->base, rs->fd, EV_READ | EV_PERSIST, read_cb, rs);
		if (!rs->by_id || !rs->ev)
			goto fail;
		/* The upstream may be unreachable now (no route yet, laptop offline): the engine still
		 * starts, and each query retries; until then queries fail (SERVFAIL), never open. */
		(void)relay_sock_connect(r, rs);
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
	if (r->sweep)
		event_free(r->sweep);
	free(r);
}

static struct dns_relay_query *relay_query(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg,
                                           bool queue)
{
	struct dns_relay_query *q;
	unsigned s = r->next++ % RELAY_SOCKS;
	struct relay_sock *rs = &r->socks[s];
	uint16_t id = 0;
	int tries;

	if (len < 12 || relay_sock_connect(r, rs) < 0)
		return NULL;
	for (tries = 0; tries < 32; tries++) {
		id = fresh_id();
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
	q->out_slot = -1;
	wire[0] = (uint8_t)(id >> 8);
	wire[1] = (uint8_t)id;
	if (queue && !r->flushing && len <= RELAY_QUERY_MAX) {
		if (r->nout == RELAY_OUT_MAX)
			dns_relay_flush(r);
		q->out_slot = (int)r->nout++;
		r->out[q->out_slot].q = q;
		r->out[q->out_slot].len = len;
		memcpy(r->out[q->out_slot].wire, wire, len);
	} else if (send(rs->fd, wire, len, MSG_DONTWAIT) != (ssize_t)len) {
		free(q);
		return NULL;
	}
	q->deadline_ms = proxy_mono_ms() + RELAY_TIMEOUT_MS;
	rs->by_id[id] = q;
	TAILQ_INSERT_TAIL(&r->fifo, q, entry);
	arm_sweep(r);
	return q;
}

struct dns_relay_query *dns_relay_send(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg)
{
	return relay_query(r, wire, len, cb, arg, false);
}

struct dns_relay_query *dns_relay_queue(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg)
{
	return relay_query(r, wire, len, cb, arg, true);
}

void dns_relay_flush(struct dns_relay *r)
{
	struct mmsghdr msgs[RELAY_OUT_MAX];
	struct iovec iov[RELAY_OUT_MAX];
	unsigned slot[RELAY_OUT_MAX];
	unsigned n = r->nout;

	r->flushing = true;
	for (unsigned s = 0; s < RELAY_SOCKS; s++) {
		unsigned m = 0, i = 0;
		for (unsigned k = 0; k < n; k++) {
			if (!r->out[k].q || r->out[k].q->sock != s)
				continue;
			iov[m].iov_base = r->out[k].wire;
			iov[m].iov_len = r->out[k].len;
			memset(&msgs[m], 0, sizeof msgs[m]);
			msgs[m].msg_hdr.msg_iov = &iov[m];
			msgs[m].msg_hdr.msg_iovlen = 1;
			slot[m++] = k;
		}
		while (i < m) {
			int sent = sendmmsg(r->socks[s].fd, msgs + i, m - i, MSG_DONTWAIT);
			if (sent > 0) {
				for (int k = 0; k < sent; k++)
					if (r->out[slot[i + (unsigned)k]].q)
						r->out[slot[i + (unsigned)k]].q->out_slot = -1;
				i += (unsigned)sent;
				continue;
			}
			/* this query cannot go: it fails now (SERVFAIL to its client), the others still go */
			log_debug("dns relay: sendmmsg: %s", sent < 0 ? strerror(errno) : "nothing sent");
			if (r->out[slot[i]].q) {
				struct dns_relay_query *q = r->out[slot[i]].q;
				dns_relay_cb cb = q->cb;
				void *arg = q->arg;
				query_free(q);
				cb(NULL, 0, arg);
			}
			i++;
		}
	}
	r->nout = 0;
	r->flushing = false;
}

/* ---- TCP: for answers that did not fit in UDP ---- */

static void tcp_fail(struct dns_relay_query *q)
{
	dns_relay_cb cb = q->cb;
	void *arg = q->arg;
	query_free(q);
	cb(NULL, 0, arg);
}

static void tcp_read_cb(struct bufferevent *bev, void *arg)
{
	struct dns_relay_query *q = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	uint8_t hdr[2];
	size_t n;
	uint8_t *msg;

	proxy_deadline_start(&q->due, proxy_mono_ms(), RELAY_TIMEOUT_MS); /* (libevent's timer runs from a read) */
	if (evbuffer_copyout(in, hdr, 2) != 2)
		return;
	n = (size_t)hdr[0] << 8 | hdr[1];
	if (evbuffer_get_length(in) < n + 2)
		return;
	msg = evbuffer_pullup(in, (ev_ssize_t)n + 2);
	if (!msg || n < 12 || (uint16_t)(msg[2] << 8 | msg[3]) != q->id) {
		tcp_fail(q);
		proxy_dns_udp_flush();
		return;
	}
	if (q->cb(msg + 2, n, q->arg))
		query_free(q);
	else
		tcp_fail(q); /* one answer per connection: a wrong one ends it */
	proxy_dns_udp_flush();
}

/* A TCP query's timeout measures the upstream, not the engine, as the UDP sweep's does: an answer waiting
 * unread in the socket (it came in time; after a stall the expired timers may run before every socket was
 * read) is read first, and a timeout noticed more than PROXY_STALL_MS late gives the upstream its time
 * again, once (on a paused machine it could not answer either). libevent took the timed-out direction's
 * event off; it goes back on. True when the query goes on (q may be gone: answered). */
static bool tcp_spared(struct dns_relay_query *q, short what)
{
	struct bufferevent *bev = q->bev;

	if ((what & BEV_EVENT_READING) && proxy_bev_read_now(bev, DNS_MSG_MAX + 2) > 0) {
		bufferevent_enable(bev, EV_READ);
		tcp_read_cb(bev, q);
		return true;
	}
	if (!proxy_deadline_stalled(&q->due, RELAY_TIMEOUT_MS, "-", "an upstream DNS query over TCP"))
		return false;
	bufferevent_enable(bev, (what & BEV_EVENT_READING) ? EV_READ : EV_WRITE);
	return true;
}

static void tcp_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if ((what & BEV_EVENT_TIMEOUT) ? !tcp_spared(arg, what) : (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) != 0)
		tcp_fail(arg);
	proxy_dns_udp_flush();
}

struct dns_relay_query *dns_relay_send_tcp(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg)
{
	struct dns_relay_query *q;
	struct timeval tv = {RELAY_TIMEOUT_MS / 1000, (RELAY_TIMEOUT_MS % 1000) * 1000};
	uint8_t hdr[2] = {(uint8_t)(len >> 8), (uint8_t)len};

	if (len < 12 || len > DNS_MSG_MAX)
		return NULL;
	q = calloc(1, sizeof *q);
	if (!q)
		return NULL;
	q->r = r;
	q->cb = cb;
	q->arg = arg;
	q->out_slot = -1;
	q->id = fresh_id();
	wire[0] = (uint8_t)(q->id >> 8);
	wire[1] = (uint8_t)q->id;
	q->bev = bufferevent_socket_new(r->e->base, -1, BEV_OPT_CLOSE_ON_FREE);
	if (!q->bev || bufferevent_socket_connect(q->bev, (struct sockaddr *)&r->e->upstream_dns,
	                                          (int)r->e->upstream_dns_len) != 0) {
		if (q->bev)
			bufferevent_free(q->bev);
		free(q);
		return NULL;
	}
	bufferevent_setcb(q->bev, tcp_read_cb, NULL, tcp_event_cb, q);
	bufferevent_set_timeouts(q->bev, &tv, &tv);
	proxy_deadline_start(&q->due, proxy_mono_ms(), RELAY_TIMEOUT_MS);
	bufferevent_setwatermark(q->bev, EV_READ, 0, DNS_MSG_MAX + 2);
	bufferevent_write(q->bev, hdr, 2);
	bufferevent_write(q->bev, wire, len);
	bufferevent_enable(q->bev, EV_READ | EV_WRITE);
	return q;
}

void dns_relay_cancel(struct dns_relay_query *q)
{
	if (q)
		query_free(q);
}
