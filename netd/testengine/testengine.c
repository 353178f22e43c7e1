/* Test listener standing in for the proxy engine while the engine is not on this branch: it lets
 * the netd lab tests prove the wiring end to end. It implements the engine API, identifies the
 * session of each connection by its source address exactly as the engine must, and answers:
 *   HTTP listener: "HTTP/1.1 200 OK" with body "sluice-test-engine session=<id>" (403 for an unknown
 *   source); DNS (UDP/TCP): the query echoed back with QR set and RCODE REFUSED (5) for an unknown
 *   source, NOERROR with no answers for a session. audit_drop appends a JSON line to the audit log.
 * It is never a proxy: it forwards nothing. */
#include "engine.h"
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define TE_MAX_SESSIONS 8192
#define TE_MAX_LISTENERS 16

struct te_session {
	char id[64];
	struct sockaddr_storage a4, a6;
};

struct proxy_engine {
	struct event_base *base;       /* borrowed */
	int audit_fd;                  /* owned */
	struct te_session *sessions;   /* owned array */
	size_t nsessions;
	struct event *lev[TE_MAX_LISTENERS]; /* owned */
	int lfd[TE_MAX_LISTENERS];           /* owned */
	int lkind[TE_MAX_LISTENERS];
	size_t nl;
};

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	if (a->ss_family != b->sa_family)
		return false;
	if (b->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (b->sa_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
	return false;
}

static const char *te_find(struct proxy_engine *e, const struct sockaddr *src)
{
	for (size_t i = 0; i < e->nsessions; i++)
		if (same_ip(&e->sessions[i].a4, src) || same_ip(&e->sessions[i].a6, src))
			return e->sessions[i].id;
	return NULL;
}

struct proxy_engine *proxy_engine_new(struct event_base *base, const struct proxy_config *cfg, char *err,
				      size_t errlen)
{
	struct proxy_engine *e = calloc(1, sizeof *e);

	if (!e) {
		snprintf(err, errlen, "out of memory");
		if (cfg->audit_fd >= 0)
			close(cfg->audit_fd);
		return NULL;
	}
	e->base = base;
	e->audit_fd = cfg->audit_fd;
	if (e->audit_fd < 0 && cfg->audit_path)
		e->audit_fd = open(cfg->audit_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	e->sessions = calloc(TE_MAX_SESSIONS, sizeof *e->sessions);
	if (e->audit_fd < 0 || !e->sessions) {
		snprintf(err, errlen, "test engine: cannot open the audit log");
		proxy_engine_free(e);
		return NULL;
	}
	return e;
}

void proxy_engine_free(struct proxy_engine *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->nl; i++) {
		event_free(e->lev[i]);
		close(e->lfd[i]);
	}
	if (e->audit_fd >= 0)
		close(e->audit_fd);
	free(e->sessions);
	free(e);
}

static void te_http(struct proxy_engine *e, int lfd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	int c = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
	char req[2048], body[128], resp[256];
	const char *id;
	struct timeval tv = {1, 0};

	if (c < 0)
		return;
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (recv(c, req, sizeof req, 0) < 0) { /* one read is enough for a test client's request */
		close(c);
		return;
	}
	id = te_find(e, (struct sockaddr *)&ss);
	snprintf(body, sizeof body, "sluice-test-engine session=%s\n", id ? id : "unknown");
	snprintf(resp, sizeof resp, "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
		 id ? "200 OK" : "403 Forbidden", strlen(body), body);
	if (send(c, resp, strlen(resp), MSG_NOSIGNAL) < 0) {
		/* the client went away: nothing to do */
	}
	close(c);
}

static void te_dns_answer(unsigned char *q, size_t len, bool known)
{
	if (len < 12)
		return;
	q[2] |= 0x80;                             /* QR */
	q[3] = (unsigned char)((q[3] & 0xf0) | (known ? 0 : 5)); /* RCODE */
}

static void te_dns_udp(struct proxy_engine *e, int fd)
{
	unsigned char q[512];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	ssize_t n = recvfrom(fd, q, sizeof q, 0, (struct sockaddr *)&ss, &sl);

	if (n < 12)
		return;
	te_dns_answer(q, (size_t)n, te_find(e, (struct sockaddr *)&ss) != NULL);
	sendto(fd, q, (size_t)n, 0, (struct sockaddr *)&ss, sl);
}

static void te_dns_tcp(struct proxy_engine *e, int lfd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	int c = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
	unsigned char q[514];
	struct timeval tv = {1, 0};
	ssize_t n;

	if (c < 0)
		return;
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	n = recv(c, q, sizeof q, MSG_WAITALL);
	if (n >= 14 && (size_t)((q[0] << 8) | q[1]) == (size_t)n - 2) {
		te_dns_answer(q + 2, (size_t)n - 2, te_find(e, (struct sockaddr *)&ss) != NULL);
		if (send(c, q, (size_t)n, MSG_NOSIGNAL) < 0) {
			/* client gone */
		}
	}
	close(c);
}

static void te_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_engine *e = arg;

	for (size_t i = 0; i < e->nl; i++) {
		if (e->lfd[i] != fd)
			continue;
		if (e->lkind[i] == PROXY_LISTEN_HTTP)
			te_http(e, fd);
		else if (e->lkind[i] == PROXY_LISTEN_DNS_UDP)
			te_dns_udp(e, fd);
		else if (e->lkind[i] == PROXY_LISTEN_DNS_TCP)
			te_dns_tcp(e, fd);
	}
}

int proxy_engine_add_listener(struct proxy_engine *e, int fd, enum proxy_listener_kind kind)
{
	if (kind == PROXY_LISTEN_TRANSPARENT || e->nl >= TE_MAX_LISTENERS) {
		close(fd);
		return kind == PROXY_LISTEN_TRANSPARENT ? -EOPNOTSUPP : -ENOSPC;
	}
	e->lev[e->nl] = event_new(e->base, fd, EV_READ | EV_PERSIST, te_cb, e);
	if (!e->lev[e->nl]) {
		close(fd);
		return -ENOMEM;
	}
	event_add(e->lev[e->nl], NULL);
	e->lfd[e->nl] = fd;
	e->lkind[e->nl] = (int)kind;
	e->nl++;
	return 0;
}

int proxy_engine_session_add(struct proxy_engine *e, const struct proxy_session_info *s)
{
	struct te_session *t;

	if (!s->policy || (!s->addr4.ss_family && !s->addr6.ss_family))
		return -EINVAL;
	for (size_t i = 0; i < e->nsessions; i++)
		if (strcmp(e->sessions[i].id, s->id) == 0)
			return -EEXIST;
	if (e->nsessions >= TE_MAX_SESSIONS)
		return -ENOSPC;
	t = &e->sessions[e->nsessions++];
	util_strlcpy(t->id, s->id, sizeof t->id);
	t->a4 = s->addr4;
	t->a6 = s->addr6;
	return 0;
}

int proxy_engine_session_remove(struct proxy_engine *e, const char *id)
{
	for (size_t i = 0; i < e->nsessions; i++) {
		if (strcmp(e->sessions[i].id, id) == 0) {
			e->sessions[i] = e->sessions[--e->nsessions];
			return 0;
		}
	}
	return -ENOENT;
}

int proxy_engine_flush_audit(struct proxy_engine *e)
{
	(void)e;
	return 0;
}

static void te_addr(const struct sockaddr *sa, char *buf, size_t len, unsigned *port)
{
	buf[0] = '\0';
	*port = 0;
	if (sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
		*port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
		*port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	}
}

int proxy_engine_audit_drop(struct proxy_engine *e, const struct sockaddr *src, const struct sockaddr *dst,
			    int ipproto)
{
	char s[64], d[64], line[512];
	unsigned sp, dp;
	const char *id = te_find(e, src);
	int n;

	/* the field names and order of the engine's records, so the same tests read both */
	te_addr(src, s, sizeof s, &sp);
	te_addr(dst, d, sizeof d, &dp);
	n = snprintf(line, sizeof line,
		     "{\"time\":%lld,\"session\":\"%s\",\"protocol\":\"drop\",\"host\":\"%s\",\"port\":%u,"
		     "\"method\":\"ip-%d\",\"decision\":\"deny\",\"reason\":\"packet from %s:%u dropped\"}\n",
		     (long long)time(NULL), id ? id : "", d, dp, ipproto, s, sp);
	if (n < 0 || n >= (int)sizeof line || write(e->audit_fd, line, (size_t)n) != n)
		return -EIO;
	return 0;
}

int proxy_engine_reopen_log(struct proxy_engine *e)
{
	return -EBADF;
}

/* The test listener decides nothing and writes no records: every counter stays 0. */
void proxy_engine_metrics(const struct proxy_engine *e, struct proxy_metrics *out)
{
	(void)e;
	memset(out, 0, sizeof *out);
}

int proxy_engine_replace_log_fd(struct proxy_engine *e, int fd)
{
	if (fd < 0)
		return -EBADF;
	close(e->audit_fd);
	e->audit_fd = fd;
	return 0;
}
