/* The session's idle upstream connections (what Squid calls server-side persistent connections): a
 * plain-HTTP upstream connection whose last response was framed (a length or chunked), read to its
 * last byte and followed by nothing, is kept here when its client connection ends, and the session's
 * next request to the same host and port takes it instead of dialing. A client that opens a connection
 * per request (ab, HTTP/1.0 tools, one curl per file) then costs the proxy one TCP connection, not two.
 *
 * What keeps it safe: per session (never shared: one session must not ride another's connection, or
 * learn from its timing); taken only by a request whose name the policy just allowed, and only when the
 * connection's address is still what the name resolves to for the session (addr_cache.c, within the
 * answer's TTL) and the policy allows that address now (policy_decide_addr, as the dial checks a fresh
 * answer); emptied when the session's policy is replaced; an idle connection that sends a byte, closes
 * or stays idle PROXY_UP_POOL_IDLE_MS is closed, and a byte or end of file already waiting when it is
 * taken is looked for (MSG_PEEK) so it is never taken. Not kept: connections through a parent proxy
 * and HTTPS inspection's (the callers do not offer them). At most PROXY_UP_POOL_MAX per session; a
 * full pool closes its oldest; beyond PROXY_UP_POOL_ENGINE_MAX in all sessions, none is kept. The memory is
 * allocated on the first connection a session keeps. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy_int.h"

struct up_idle {
	struct proxy_up_pool *pool;   /* borrowed: the pool it is in */
	struct bufferevent *bev;     /* owned; NULL = free */
	char host[POLICY_HOST_MAX + 1];
	uint16_t port;
	struct sockaddr_storage addr; /* connected to (port included) */
	char address[PROXY_ADDRSTR_MAX];
	uint64_t since_ms;
};

struct proxy_up_pool {
	struct proxy_engine *engine; /* borrowed, or NULL: its count of idle connections */
	struct up_idle e[PROXY_UP_POOL_MAX];
};

/* u's connection leaves the pool (bev: it was taken) or is closed. */
static void idle_gone(struct proxy_up_pool *pool, struct up_idle *u, bool taken)
{
	if (!u->bev)
		return;
	if (!taken)
		bufferevent_free(u->bev);
	u->bev = NULL;
	if (pool->engine)
		pool->engine->up_idle--;
}

static void idle_free(struct up_idle *u)
{
	idle_gone(u->pool, u, false);
}

/* An idle connection must not talk: a byte (or its close, an error, the idle timeout) ends it. */
static void idle_read_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	idle_free(arg);
}

static void idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	idle_free(arg);
}

/* The same address (family, bytes, and the port when both have one). */
static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b, bool port)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_addr.s_addr == y->sin_addr.s_addr && (!port || x->sin_port == y->sin_port);
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
		return memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0 &&
		       (!port || x->sin6_port == y->sin6_port);
	}
	return false;
}

void proxy_up_pool_put(struct proxy_session *s, struct bufferevent *bev, const char *host, uint16_t port,
                       const struct sockaddr_storage *addr, const char *address)
{
	static const struct timeval idle = {PROXY_UP_POOL_IDLE_MS / 1000, (PROXY_UP_POOL_IDLE_MS % 1000) * 1000};
	struct up_idle *u = NULL;

	if (strlen(host) > POLICY_HOST_MAX || (addr->ss_family != AF_INET && addr->ss_family != AF_INET6) ||
	    evbuffer_get_length(bufferevent_get_input(bev)) > 0 || evbuffer_get_length(bufferevent_get_output(bev)) > 0 ||
	    (s->engine && s->engine->up_idle >= PROXY_UP_POOL_ENGINE_MAX) ||
	    (!s->up_pool && !(s->up_pool = calloc(1, sizeof *s->up_pool)))) {
		bufferevent_free(bev);
		return;
	}
	s->up_pool->engine = s->engine;
	for (size_t i = 0; i < PROXY_UP_POOL_MAX; i++) {
		struct up_idle *x = &s->up_pool->e[i];
		if (!x->bev) {
			u = x;
			break;
		}
		if (!u || x->since_ms < u->since_ms)
			u = x; /* full: the oldest goes */
	}
	idle_free(u);
	u->pool = s->up_pool;
	u->bev = bev;
	if (s->engine)
		s->engine->up_idle++;
	strcpy(u->host, host);
	u->port = port;
	u->addr = *addr;
	snprintf(u->address, sizeof u->address, "%s", address);
	u->since_ms = proxy_mono_ms();
	bufferevent_setcb(bev, idle_read_cb, NULL, idle_event_cb, u);
	bufferevent_set_timeouts(bev, &idle, NULL);
	bufferevent_setwatermark(bev, EV_READ, 0, 0);
	/* (writing stays enabled: with nothing queued it costs no epoll change, and the next request's
	 * head is written at once without one) */
	bufferevent_enable(bev, EV_READ);
}

bool proxy_up_pool_allows(struct proxy_session *s, const struct proxy_target *t,
                          const struct sockaddr_storage *addr)
{
	struct policy_decision dec;

	if (addr->ss_family != AF_INET && addr->ss_family != AF_INET6)
		return false;
	if (t->literal && !same_addr(&t->addr, addr, false))
		return false;
	policy_decide_addr(s->policy, (const struct sockaddr *)addr, t->port, !t->literal, &dec);
	return dec.verdict == POLICY_ALLOW;
}

/* Whether the session may send t's request on a connection to addr now: t's name still resolves to it
 * (a literal: it is the address) and the policy allows it. */
static bool fits(struct proxy_session *s, const struct proxy_target *t, const struct sockaddr_storage *addr)
{
	struct sockaddr_storage now[PROXY_RESOLVE_MAX];
	size_t n;
	bool found = t->literal; /* (proxy_up_pool_allows compares a literal) */

	if (!t->literal) {
		n = proxy_addr_cache_get(s, t->host, now);
		for (size_t i = 0; i < n && !found; i++)
			found = same_addr(&now[i], addr, false);
	}
	return found && proxy_up_pool_allows(s, t, addr);
}

struct bufferevent *proxy_up_pool_take(struct proxy_session *s, const struct proxy_target *t,
                                       struct sockaddr_storage *addr, char address[PROXY_ADDRSTR_MAX])
{
	struct bufferevent *bev;

	if (!s->up_pool)
		return NULL;
	for (;;) {
		struct up_idle *best = NULL;
		char b;
		ssize_t n;
		for (size_t i = 0; i < PROXY_UP_POOL_MAX; i++) {
			struct up_idle *u = &s->up_pool->e[i];
			if (u->bev && u->port == t->port && strcmp(u->host, t->host) == 0 &&
			    (!best || u->since_ms > best->since_ms))
				best = u; /* the most recently used: the least likely to have been closed by the origin */
		}
		if (!best)
			return NULL;
		/* checked now (the name moved, or the policy no longer allows the address: closed); and a
		 * byte or an end of file the loop did not see yet means it is closed, never taken */
		if (!fits(s, t, &best->addr) || evbuffer_get_length(bufferevent_get_input(best->bev)) > 0 ||
		    !((n = recv(bufferevent_getfd(best->bev), &b, 1, MSG_PEEK | MSG_DONTWAIT)) < 0 &&
		      (errno == EAGAIN || errno == EWOULDBLOCK))) {
			idle_free(best);
			continue;
		}
		bev = best->bev;
		idle_gone(s->up_pool, best, true);
		*addr = best->addr;
		snprintf(address, PROXY_ADDRSTR_MAX, "%s", best->address);
		bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
		bufferevent_set_timeouts(bev, NULL, NULL);
		return bev;
	}
}

size_t proxy_up_pool_count(const struct proxy_session *s)
{
	size_t n = 0;
	for (size_t i = 0; s->up_pool && i < PROXY_UP_POOL_MAX; i++)
		n += s->up_pool->e[i].bev != NULL;
	return n;
}

void proxy_up_pool_flush(struct proxy_session *s)
{
	for (size_t i = 0; s->up_pool && i < PROXY_UP_POOL_MAX; i++)
		idle_free(&s->up_pool->e[i]);
}

void proxy_up_pool_session_free(struct proxy_session *s)
{
	proxy_up_pool_flush(s);
	free(s->up_pool);
	s->up_pool = NULL;
}
