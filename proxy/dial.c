/* Dialing upstream for one request or tunnel: resolve the canonical name (only after the name was
 * allowed), ask the policy about every address (forbidden ranges: loopback, private, metadata...),
 * and connect to exactly an address that was checked, trying the allowed ones in order. What the resolver
 * answered is kept for the session for the answer's TTL (addr_cache.c) and checked again at every use. With a parent
 * proxy (parent.h) the connection goes to the parent instead: every address sluice could resolve must
 * pass the same checks (the parent picks the address), then a tunnel is asked for with CONNECT, or the
 * caller speaks HTTP to the parent in absolute form. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_parse.h"
#include "log.h"
#include "parent.h"
#include "proxy_int.h"

#define PARENT_HEAD_MAX 16384 /* the parent's answer to CONNECT */

struct proxy_dial {
	struct proxy_session *session; /* borrowed */
	struct proxy_engine *engine;   /* borrowed */
	char host[POLICY_HOST_MAX + 1];
	uint16_t port;
	proxy_dial_cb cb;
	void *arg;
	struct proxy_resolve *resolve; /* owned until it calls back */
	struct event *defer;           /* owned: runs the literal or cached path from the loop */
	struct bufferevent *bev;       /* owned: the connection attempt */
	struct sockaddr_storage cand[PROXY_RESOLVE_MAX];
	size_t ncand, next;
	struct sockaddr_storage cached[PROXY_RESOLVE_MAX]; /* the session's addresses for host (addr_cache.c) */
	size_t ncached;
	struct proxy_dial_result res;
	int last_err;
	bool timed_out;
	struct proxy_deadline due;         /* the connect timeout of the attempt, then of the parent's answer to
	                                    * CONNECT (a grace after a stall: event_cb, parent_event_cb) */
	const struct proxy_parent *parent; /* borrowed from the engine: go through it, or NULL */
	bool tunnel;                       /* with a parent: ask it for a CONNECT tunnel */
};

static void dial_free(struct proxy_dial *d)
{
	if (d->bev)
		bufferevent_free(d->bev);
	if (d->defer)
		event_free(d->defer);
	free(d);
}

static void done(struct proxy_dial *d)
{
	struct bufferevent *bev = d->res.status == 0 ? d->bev : NULL;
	if (bev)
		d->bev = NULL;
	d->cb(bev, &d->res, d->arg);
	dial_free(d);
}

static void try_next(struct proxy_dial *d);

/* The dial fails with "the parent proxy HOST:PORT <what>". */
static void parent_failed(struct proxy_dial *d, int status, const char *what)
{
	d->res.status = status;
	snprintf(d->res.reason, sizeof d->res.reason, "the parent proxy %s %s", d->parent->where, what);
	done(d);
}

/* The parent's answer to our CONNECT: 2xx opens the tunnel; anything else fails the dial with what the
 * parent said (its body is not passed on). */
static void parent_read_cb(struct bufferevent *bev, void *arg)
{
	struct proxy_dial *d = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	struct http_response resp;
	const char *why = NULL;
	char detail[400];
	size_t len;

	if (end.pos < 0) {
		if (evbuffer_get_length(in) >= PARENT_HEAD_MAX)
			parent_failed(d, 502, "sent an answer head over 16 KiB to CONNECT");
		else /* (the read timeout runs again from each read: so does the deadline) */
			proxy_deadline_start(&d->due, proxy_mono_ms(), d->engine->connect_timeout_ms);
		return;
	}
	len = (size_t)end.pos + 4;
	if (http_parse_response((const char *)evbuffer_pullup(in, (ssize_t)len), len, false, &resp, &why) != 0) {
		snprintf(detail, sizeof detail, "sent a malformed answer to CONNECT (%s)", why ? why : "unreadable");
		parent_failed(d, 502, detail);
		return;
	}
	if (resp.status == 407) {
		parent_failed(d, 502, d->parent->auth[0] ?
		              "refused sluice's credentials (407 Proxy Authentication Required): check the auth_file "
		              "of upstream_proxy" :
		              "asks for credentials (407 Proxy Authentication Required): set auth_file in upstream_proxy");
		return;
	}
	if (resp.status < 200 || resp.status > 299) {
		snprintf(detail, sizeof detail, "answered %u %.*s to CONNECT %s:%u", resp.status, (int)resp.reason_len,
		         resp.reason, d->host, d->port);
		parent_failed(d, resp.status == 504 ? 504 : 502, detail);
		return;
	}
	evbuffer_drain(in, len);
	bufferevent_set_timeouts(d->bev, NULL, NULL);
	bufferevent_setcb(d->bev, NULL, NULL, NULL, NULL);
	d->res.status = 0;
	d->res.reason[0] = '\0';
	done(d);
}

/* The timeout measures the parent, not the engine (docs/proxy.md): what the socket holds is read first and
 * goes to parent_read_cb (an answer that came in time, unread after a stall); with nothing there, a timer
 * noticed more than PROXY_STALL_MS late gives the parent its time again, once (on a paused machine it could
 * not answer either). */
static void parent_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct proxy_dial *d = arg;
	bool got = false;

	if ((what & BEV_EVENT_TIMEOUT) &&
	    ((got = proxy_bev_read_now(bev, PARENT_HEAD_MAX) > 0) ||
	     proxy_deadline_stalled(&d->due, d->engine->connect_timeout_ms, d->session->id,
	                            "a parent proxy's answer to CONNECT"))) {
		bufferevent_set_timeouts(bev, d->engine->tv_connect, NULL);
		bufferevent_enable(bev, EV_READ); /* (the timeout disabled it) */
		if (got)
			bufferevent_trigger(bev, EV_READ, 0); /* parent_read_cb (may free d) */
		return;
	}
	parent_failed(d, (what & BEV_EVENT_TIMEOUT) ? 504 : 502,
	              (what & BEV_EVENT_TIMEOUT) ? "did not answer CONNECT in time" :
	                                           "closed the connection before answering CONNECT");
}

/* Connected to the parent: ask for a tunnel to the destination. */
static void parent_connect(struct proxy_dial *d)
{
	struct evbuffer *o = bufferevent_get_output(d->bev);
	bool v6 = strchr(d->host, ':') != NULL; /* an IPv6 literal */

	evbuffer_add_printf(o, "CONNECT %s%s%s:%u HTTP/1.1\r\nHost: %s%s%s:%u\r\n", v6 ? "[" : "", d->host,
	                    v6 ? "]" : "", d->port, v6 ? "[" : "", d->host, v6 ? "]" : "", d->port);
	if (d->parent->auth[0])
		evbuffer_add_printf(o, "Proxy-Authorization: %s\r\n", d->parent->auth);
	evbuffer_add(o, "\r\n", 2);
	bufferevent_setcb(d->bev, parent_read_cb, NULL, parent_event_cb, d);
	bufferevent_set_timeouts(d->bev, d->engine->tv_connect, NULL);
	proxy_deadline_start(&d->due, proxy_mono_ms(), d->engine->connect_timeout_ms);
	bufferevent_setwatermark(d->bev, EV_READ, 0, PARENT_HEAD_MAX);
	bufferevent_enable(d->bev, EV_READ | EV_WRITE);
}

/* d->bev is connected: ask the parent for a tunnel, or hand it over. */
static void connected(struct proxy_dial *d)
{
	bufferevent_set_timeouts(d->bev, NULL, NULL);
	bufferevent_setcb(d->bev, NULL, NULL, NULL, NULL);
	proxy_bev_fast_read(d->bev); /* (its fd is final now: bufferevent_socket_connect set it again) */
	if (d->parent && d->tunnel) {
		parent_connect(d);
		return;
	}
	d->res.status = 0;
	d->res.reason[0] = '\0';
	done(d);
}

/* A non-blocking connect to a nearby host (a namespace on this machine, the loopback) has often
 * completed by the time connect() returns EINPROGRESS: the handshake ran in the kernel meanwhile. Then
 * the connection is used at once rather than after a round through the event loop. */
static bool established(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof ti;

	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
	       len >= offsetof(struct tcp_info, tcpi_ca_state) && ti.tcpi_state == TCP_ESTABLISHED;
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct proxy_dial *d = arg;
	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		connected(d);
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		/* The timeout measures the upstream, not the engine: a connection that completed while the engine
		 * was not running (after a stall epoll hands the loop a batch of ready sockets at a time, and the
		 * expired timers run behind the first) is reported by libevent as connected once its socket is
		 * watched again; a timer noticed more than PROXY_STALL_MS late gives the attempt its time again,
		 * once (on a paused machine the handshake could not go on either). */
		if (established(bufferevent_getfd(bev)) ||
		    proxy_deadline_stalled(&d->due, d->engine->connect_timeout_ms, d->session->id,
		                           "a connection upstream")) {
			bufferevent_set_timeouts(d->bev, NULL, d->engine->tv_connect);
			bufferevent_enable(d->bev, EV_WRITE); /* (the timeout disabled it; the connect goes on) */
			return;
		}
		d->timed_out = true;
		d->last_err = ETIMEDOUT;
	} else {
		d->last_err = EVUTIL_SOCKET_ERROR();
		if (!d->last_err)
			d->last_err = ECONNREFUSED;
	}
	log_debug("dial %s: %s: %s", d->host, d->res.address, strerror(d->last_err));
	bufferevent_free(d->bev);
	d->bev = NULL;
	try_next(d);
}

static void try_next(struct proxy_dial *d)
{
	while (d->next < d->ncand) {
		struct sockaddr_storage *ss = &d->cand[d->next++];
		socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);

		int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		bool now;

		proxy_addr_str((struct sockaddr *)ss, d->res.address, true);
		d->res.addr = *ss;
		d->res.via_parent = d->parent != NULL;
		if (fd < 0) {
			d->last_err = errno;
			continue;
		}
		if (connect(fd, (struct sockaddr *)ss, len) == 0) {
			now = true;
		} else if (errno == EINPROGRESS) {
			now = established(fd);
		} else {
			d->last_err = errno;
			close(fd);
			continue;
		}
		d->bev = bufferevent_socket_new(d->engine->base, fd, BEV_OPT_CLOSE_ON_FREE);
		if (!d->bev) {
			d->last_err = ENOMEM;
			close(fd);
			continue;
		}
		if (now) {
			/* (called back from the loop: try_next runs in a resolver, timer or event callback) */
			connected(d);
			return;
		}
		bufferevent_setcb(d->bev, NULL, NULL, event_cb, d);
		bufferevent_set_timeouts(d->bev, NULL, d->engine->tv_connect);
		proxy_deadline_start(&d->due, proxy_mono_ms(), d->engine->connect_timeout_ms);
		/* connect() was called: the bufferevent waits until the socket is writable and reports */
		if (bufferevent_socket_connect(d->bev, NULL, 0) != 0) {
			d->last_err = errno ? errno : ENETUNREACH;
			bufferevent_free(d->bev);
			d->bev = NULL;
			continue;
		}
		return;
	}
	if (d->parent) {
		d->res.status = d->timed_out ? 504 : 502;
		snprintf(d->res.reason, sizeof d->res.reason, "cannot connect to the parent proxy %s: %s",
		         d->parent->where, strerror(d->last_err));
	} else if (d->timed_out && d->ncand == 1) {
		d->res.status = 504;
		snprintf(d->res.reason, sizeof d->res.reason, "connecting to %s (%s) timed out after %u ms", d->host,
		         d->res.address, d->engine->connect_timeout_ms);
	} else if (d->timed_out && d->last_err == ETIMEDOUT) {
		d->res.status = 504;
		snprintf(d->res.reason, sizeof d->res.reason, "connecting to %s timed out (%zu addresses tried)",
		         d->host, d->ncand);
	} else {
		d->res.status = 502;
		snprintf(d->res.reason, sizeof d->res.reason, "cannot connect to %s (%s): %s", d->host, d->res.address,
		         strerror(d->last_err));
	}
	done(d);
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* The parent proxy is the one candidate. */
static void via_parent(struct proxy_dial *d)
{
	d->cand[0] = d->parent->addr;
	d->ncand = 1;
	d->next = 0;
	try_next(d);
}

/* The addresses of the name, fresh from the resolver or kept by the session: each is checked now. */
static void check_addrs(struct proxy_dial *d, int err, const struct sockaddr_storage *addrs, size_t n)
{
	struct policy_decision dec, first_deny;
	char denied[PROXY_ADDRSTR_MAX] = "";

	if (n == 0 && d->parent) {
		/* sluice's resolver does not know the name (or there is none): the parent resolves it, and
		 * only the policy's decision on the name applies (docs/proxy.md, "Parent proxy") */
		via_parent(d);
		return;
	}
	if (n == 0) {
		d->res.status = err == PROXY_RESOLVE_TIMEOUT ? 504 : 502;
		snprintf(d->res.reason, sizeof d->res.reason, "cannot resolve %s: %s", d->host,
		         proxy_resolve_strerror(err));
		done(d);
		return;
	}
	memset(&first_deny, 0, sizeof first_deny);
	for (size_t i = 0; i < n; i++) {
		struct sockaddr_storage ss = addrs[i];
		set_port(&ss, d->port);
		policy_decide_addr(d->session->policy, (struct sockaddr *)&ss, d->port, true, &dec);
		if (dec.verdict == POLICY_ALLOW) {
			d->cand[d->ncand++] = ss;
		} else if (!denied[0]) {
			proxy_addr_str((struct sockaddr *)&ss, denied, false);
			first_deny = dec;
		}
	}
	if (d->parent && d->ncand < n) {
		/* the parent chooses among the addresses: every one must be acceptable */
		d->res.status = 403;
		snprintf(d->res.reason, sizeof d->res.reason,
		         "%s resolves to an address the policy forbids (%s), and the parent proxy could connect to it: %s",
		         d->host, denied, policy_decision_reason(&first_deny));
		snprintf(d->res.address, sizeof d->res.address, "%s", denied);
		snprintf(d->res.rule, sizeof d->res.rule, "%s", policy_rule_where(first_deny.rule));
		done(d);
		return;
	}
	if (d->parent) {
		via_parent(d);
		return;
	}
	if (d->ncand == 0) {
		d->res.status = 403;
		snprintf(d->res.reason, sizeof d->res.reason,
		         "%s resolves only to addresses the policy forbids (%s): %s", d->host, denied,
		         policy_decision_reason(&first_deny));
		snprintf(d->res.address, sizeof d->res.address, "%s", denied);
		snprintf(d->res.rule, sizeof d->res.rule, "%s", policy_rule_where(first_deny.rule));
		done(d);
		return;
	}
	try_next(d);
}

static void resolved(int err, const struct sockaddr_storage *addrs, size_t n, uint32_t ttl, void *arg)
{
	struct proxy_dial *d = arg;

	d->resolve = NULL;
	proxy_addr_cache_put(d->session, d->host, addrs, n, ttl);
	check_addrs(d, err, addrs, n);
}

static void defer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_dial *d = arg;
	(void)fd;
	(void)what;
	if (d->ncached > 0)
		check_addrs(d, 0, d->cached, d->ncached);
	else
		try_next(d);
}

/* Goes on from the loop (the caller is called back later, never from proxy_dial_start): d, or NULL. */
static struct proxy_dial *defer(struct proxy_dial *d)
{
	d->defer = evtimer_new(d->engine->base, defer_cb, d);
	if (!d->defer) {
		dial_free(d);
		return NULL;
	}
	event_active(d->defer, EV_TIMEOUT, 1);
	return d;
}

const struct proxy_parent *proxy_parent_for(const struct proxy_engine *e, const struct proxy_target *t)
{
	if (!e->parent || proxy_parent_bypass(e->parent, t->host))
		return NULL;
	return e->parent;
}

struct proxy_dial *proxy_dial_start(struct proxy_session *s, const struct proxy_target *t, bool tunnel,
                                    proxy_dial_cb cb, void *arg)
{
	struct proxy_dial *d = calloc(1, sizeof *d);

	if (!d)
		return NULL;
	d->session = s;
	d->engine = s->engine;
	d->port = t->port;
	d->cb = cb;
	d->arg = arg;
	d->parent = proxy_parent_for(s->engine, t);
	d->tunnel = tunnel;
	snprintf(d->host, sizeof d->host, "%s", t->host);
	if (t->literal || (d->parent && !d->parent->resolve)) {
		/* an address the caller decided as such: connect to exactly it (or through the parent); or a
		 * name only the parent resolves */
		if (d->parent) {
			d->cand[0] = d->parent->addr;
		} else {
			d->cand[0] = t->addr;
			set_port(&d->cand[0], t->port);
		}
		d->ncand = 1;
		return defer(d);
	}
	d->ncached = proxy_addr_cache_get(s, d->host, d->cached);
	if (d->ncached > 0) /* resolved for this session within the answer's TTL: checked like a fresh answer */
		return defer(d);
	d->resolve = proxy_resolve_start(d->engine, d->host, resolved, d);
	if (!d->resolve) {
		dial_free(d);
		return NULL;
	}
	return d;
}

void proxy_dial_cancel(struct proxy_dial *d)
{
	if (!d)
		return;
	if (d->resolve)
		proxy_resolve_cancel(d->resolve);
	dial_free(d);
}
