/* The engine: creation and teardown, listeners (accept, session lookup, admission, back-off when
 * out of file descriptors), the audit-log health timer, and the public API of engine.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "proxy_int.h"
#include "util.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000

uint64_t proxy_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct event_base *proxy_event_base_new(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base;

	if (!cfg)
		return NULL;
	/* Without the cache each timer is armed from a clock read (the vDSO's, tens of ns). With it, a
	 * connection accepted after a stall in the middle of an iteration (the listener's accept loop goes on
	 * where it stopped) had its header timer expire before its client could send a byte. */
	event_config_set_flag(cfg, EVENT_BASE_FLAG_NO_CACHE_TIME);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return base;
}

void proxy_deadline_start(struct proxy_deadline *d, uint64_t now_ms, unsigned timeout_ms)
{
	d->due_ms = now_ms + timeout_ms;
	d->spared = false;
}

bool proxy_deadline_stalled(struct proxy_deadline *d, unsigned timeout_ms, const char *sid, const char *what)
{
	uint64_t now = proxy_mono_ms();

	if (!d->due_ms || d->spared || now <= d->due_ms + PROXY_STALL_MS)
		return false;
	log_debug("session %s: the engine ran %" PRIu64
	          " ms late for the timeout of %s; the peer gets its time again",
	          sid, now - d->due_ms, what);
	d->spared = true;
	d->due_ms = now + timeout_ms;
	return true;
}

uint64_t proxy_flow_next(struct proxy_engine *e)
{
	return e->flow_next++;
}

const char *proxy_addr_str(const struct sockaddr *sa, char buf[PROXY_ADDRSTR_MAX], bool with_port)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
		port = ntohs(s4->sin_port);
		if (with_port)
			snprintf(buf, PROXY_ADDRSTR_MAX, "%s:%u", ip, port);
		else
			snprintf(buf, PROXY_ADDRSTR_MAX, "%s", ip);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
		port = ntohs(s6->sin6_port);
		if (with_port)
			snprintf(buf, PROXY_ADDRSTR_MAX, "[%s]:%u", ip, port);
		else
			snprintf(buf, PROXY_ADDRSTR_MAX, "%s", ip);
	} else {
		snprintf(buf, PROXY_ADDRSTR_MAX, "?");
	}
	return buf;
}

static void audit_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_engine *e = arg;
	(void)fd;
	(void)what;
	if (!audit_log_flush(e->audit))
		proxy_audit_failed(e);
}

static void audit_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_engine *e = arg;
	(void)fd;
	(void)what;
	/* The batch first: a request head left for the end of the iteration (a kept-alive upstream's, no
	 * dial before it) goes out after its decision record is in the file, so a kill -9 between the two
	 * cannot lose the decision. (The sends make no records; a record they did make would go with the
	 * next batch: appending schedules it again.) */
	if (!audit_log_flush(e->audit))
		proxy_audit_failed(e);
	while (e->later) {
		struct proxy_later *l = e->later;
		proxy_later_cancel(l);
		l->run(l);
	}
}

void proxy_audit_schedule(struct proxy_engine *e)
{
	/* Activated now, it runs after the callbacks already due in this iteration: one write for all
	 * of their records. */
	if (!event_pending(e->audit_flush, EV_TIMEOUT, NULL))
		event_active(e->audit_flush, EV_TIMEOUT, 1);
}

void proxy_later_add(struct proxy_engine *e, struct proxy_later *l)
{
	if (l->pprev)
		return;
	l->next = e->later;
	if (l->next)
		l->next->pprev = &l->next;
	e->later = l;
	l->pprev = &e->later;
	proxy_audit_schedule(e);
}

void proxy_later_cancel(struct proxy_later *l)
{
	if (!l->pprev)
		return;
	*l->pprev = l->next;
	if (l->next)
		l->next->pprev = l->pprev;
	l->next = NULL;
	l->pprev = NULL;
}

bool proxy_audit_writable(struct proxy_engine *e)
{
	if (audit_log_healthy(e->audit) || audit_log_flush(e->audit))
		return true;
	proxy_audit_failed(e);
	return false;
}

void proxy_audit_failed(struct proxy_engine *e)
{
	struct timeval tv = {1, 0};
	if (!event_pending(e->audit_retry, EV_TIMEOUT, NULL))
		event_add(e->audit_retry, &tv);
}

/* A refusal that costs nothing: one short non-blocking send, then close. */
static void refuse(int fd, enum proxy_listener_kind kind, const char *why)
{
	if (kind == PROXY_LISTEN_HTTP) {
		char msg[256];
		int n = snprintf(
		        msg, sizeof msg,
		        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nX-Sluice-Decision: error\r\n"
		        "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
		        strlen(why) + 1, why);
		if (n > 0)
			(void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	close(fd);
}

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *peer, int peerlen, void *arg)
{
	struct proxy_listener *l = arg;
	struct sockaddr_storage local;
	socklen_t llen = sizeof local;
	struct proxy_session *s;
	int r;

	(void)lev;
	(void)peerlen;
	l->backoff_ms = 0;
	if (getsockname(fd, (struct sockaddr *)&local, &llen) != 0) {
		close(fd);
		return;
	}
	s = proxy_session_find(l->engine, peer, (struct sockaddr *)&local);
	if (!s) {
		char a[PROXY_ADDRSTR_MAX];
		log_debug("connection from %s: no session has this address; closed", proxy_addr_str(peer, a, true));
		close(fd);
		return;
	}
	r = proxy_session_admit(s);
	if (r == -EIO) {
		refuse(fd, l->kind, "sluice: the audit log cannot be written; new connections are refused");
		return;
	}
	if (r == -EMFILE) {
		log_warnx("session %s: connection cap (%u) reached; connection refused", s->id, l->engine->max_conns);
		refuse(fd, l->kind, "sluice: too many connections for this session");
		return;
	}
	if (l->kind == PROXY_LISTEN_HTTP)
		proxy_http_accept(s, fd);
	else if (l->kind == PROXY_LISTEN_TRANSPARENT)
		proxy_transparent_accept(s, fd, &local);
	else if (l->kind == PROXY_LISTEN_SOCKS5)
		proxy_socks5_accept(s, fd);
	else
		proxy_dns_tcp_accept(s, fd);
}

static void backoff_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_listener *l = arg;
	(void)fd;
	(void)what;
	evconnlistener_enable(l->lev);
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct proxy_listener *l = arg;
	int err = EVUTIL_SOCKET_ERROR();
	struct timeval tv;

	if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
		/* Out of descriptors: stop accepting for a while instead of spinning on a readable
		 * listener; pending connections wait in the backlog. */
		l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : BACKOFF_MIN_MS;
		if (l->backoff_ms > BACKOFF_MAX_MS)
			l->backoff_ms = BACKOFF_MAX_MS;
		log_warnx("accept: %s; pausing the listener for %u ms", strerror(err), l->backoff_ms);
		evconnlistener_disable(lev);
		tv.tv_sec = l->backoff_ms / 1000;
		tv.tv_usec = (l->backoff_ms % 1000) * 1000;
		event_add(l->backoff, &tv);
		return;
	}
	if (err != EAGAIN && err != ECONNABORTED && err != EINTR)
		log_warnx("accept: %s", strerror(err));
}

static void listener_free(struct proxy_listener *l)
{
	if (l->lev)
		evconnlistener_free(l->lev);
	if (l->ev) {
		event_free(l->ev);
		close(l->fd);
	}
	if (l->backoff)
		event_free(l->backoff);
	free(l);
}

int proxy_engine_add_listener(struct proxy_engine *e, int fd, enum proxy_listener_kind kind)
{
	struct proxy_listener *l;
	cleanup_fd int owned = fd;

	if (fd < 0)
		return -EBADF;
	if (kind != PROXY_LISTEN_HTTP && kind != PROXY_LISTEN_DNS_UDP && kind != PROXY_LISTEN_DNS_TCP &&
	    kind != PROXY_LISTEN_TRANSPARENT && kind != PROXY_LISTEN_SOCKS5)
		return -EINVAL;
	if (evutil_make_socket_nonblocking(fd) != 0 || evutil_make_socket_closeonexec(fd) != 0)
		return -errno;
	l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	l->engine = e;
	l->kind = kind;
	l->fd = fd;
	if (kind == PROXY_LISTEN_DNS_UDP) {
		int r = proxy_dns_udp_setup(fd, &l->dns_bound, &l->dns_local);
		if (r) {
			free(l);
			return r;
		}
		l->ev = event_new(e->base, fd, EV_READ | EV_PERSIST, proxy_dns_udp_cb, l);
		if (!l->ev || event_add(l->ev, NULL) != 0) {
			if (l->ev)
				owned = -1; /* closed by listener_free */
			listener_free(l);
			return -ENOMEM;
		}
	} else {
		l->lev =
		        evconnlistener_new(e->base, accept_cb, l, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
		l->backoff = evtimer_new(e->base, backoff_cb, l);
		if (!l->lev || !l->backoff) {
			if (l->lev)
				owned = -1;
			listener_free(l);
			return -ENOMEM;
		}
		evconnlistener_set_error_cb(l->lev, accept_error_cb);
	}
	owned = -1;
	TAILQ_INSERT_TAIL(&e->listeners, l, entry);
	return 0;
}

static bool upstream_ok(const struct proxy_config *cfg)
{
	if (cfg->upstream_dns.ss_family == AF_INET)
		return cfg->upstream_dns_len >= sizeof(struct sockaddr_in) &&
		       ((const struct sockaddr_in *)&cfg->upstream_dns)->sin_port != 0;
	if (cfg->upstream_dns.ss_family == AF_INET6)
		return cfg->upstream_dns_len >= sizeof(struct sockaddr_in6) &&
		       ((const struct sockaddr_in6 *)&cfg->upstream_dns)->sin6_port != 0;
	return false;
}

struct proxy_engine *proxy_engine_new(struct event_base *base, const struct proxy_config *cfg, char *err, size_t errlen)
{
	struct proxy_engine *e = NULL;
	struct timeval tv;
	int audit_fd = cfg ? cfg->audit_fd : -1;

	if (!base || !cfg) {
		snprintf(err, errlen, "no event base or configuration");
		goto fail;
	}
	if (!upstream_ok(cfg)) {
		snprintf(err, errlen, "upstream DNS resolver address missing or without a port");
		goto fail;
	}
	e = calloc(1, sizeof *e);
	if (!e) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	e->base = base;
	TAILQ_INIT(&e->sessions);
	TAILQ_INIT(&e->listeners);
	{
		/* flow ids of different engine lives must not meet in one log (a decision of a killed engine
		 * would seem closed by a new one's record): 24 random bits, then 40 bits of counter */
		uint32_t rnd = 0;
		if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
			rnd = (uint32_t)proxy_mono_ms() ^ (uint32_t)getpid();
		e->flow_next = ((uint64_t)(rnd & 0xffffff) << 40) | 1;
	}
	e->upstream_dns = cfg->upstream_dns;
	e->upstream_dns_len = cfg->upstream_dns_len;
	e->ask_notify = cfg->ask_notify;
	e->ask_arg = cfg->ask_arg;
	e->direct_notify = cfg->direct_notify;
	e->direct_arg = cfg->direct_arg;
	e->parent = cfg->parent;
	e->max_conns = cfg->max_conns_per_session ? cfg->max_conns_per_session : PROXY_DEFAULT_MAX_CONNS;
	e->header_timeout_ms = cfg->header_timeout_ms ? cfg->header_timeout_ms : PROXY_DEFAULT_HEADER_TIMEOUT_MS;
	e->idle_timeout_ms = cfg->idle_timeout_ms ? cfg->idle_timeout_ms : PROXY_DEFAULT_IDLE_TIMEOUT_MS;
	e->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : PROXY_DEFAULT_CONNECT_TIMEOUT_MS;
	tv.tv_sec = e->header_timeout_ms / 1000;
	tv.tv_usec = (e->header_timeout_ms % 1000) * 1000;
	e->tv_header = event_base_init_common_timeout(base, &tv);
	tv.tv_sec = e->idle_timeout_ms / 1000;
	tv.tv_usec = (e->idle_timeout_ms % 1000) * 1000;
	e->tv_idle = event_base_init_common_timeout(base, &tv);
	tv.tv_sec = e->connect_timeout_ms / 1000;
	tv.tv_usec = (e->connect_timeout_ms % 1000) * 1000;
	e->tv_connect = event_base_init_common_timeout(base, &tv);

	e->audit = audit_log_open(cfg->audit_path, audit_fd, err, errlen);
	audit_fd = -1;
	if (!e->audit)
		goto fail;
	audit_log_set_batching(e->audit, true);
	e->audit_retry = evtimer_new(base, audit_retry_cb, e);
	e->audit_flush = evtimer_new(base, audit_flush_cb, e);
	if (!e->audit_retry || !e->audit_flush) {
		snprintf(err, errlen, "cannot set up the engine's timers");
		goto fail;
	}
	/* the DNS proxy's relay and the engine's own resolver (resolve.c) share it */
	if (cfg->dns_cache_entries && !(e->dns_cache = dns_cache_new(cfg->dns_cache_entries))) {
		snprintf(err, errlen, "cannot allocate the DNS cache");
		goto fail;
	}
	e->relay = dns_relay_new(e);
	if (!e->relay) {
		snprintf(err, errlen, "cannot create the DNS relay sockets: %s", strerror(errno));
		goto fail;
	}
	return e;
fail:
	if (audit_fd >= 0)
		close(audit_fd);
	if (cfg && (!e || e->parent != cfg->parent))
		free(cfg->parent);
	proxy_engine_free(e);
	return NULL;
}

void proxy_engine_free(struct proxy_engine *e)
{
	struct proxy_listener *l;

	if (!e)
		return;
	while ((l = TAILQ_FIRST(&e->listeners)) != NULL) {
		TAILQ_REMOVE(&e->listeners, l, entry);
		listener_free(l);
	}
	proxy_session_free_all(e);
	proxy_inspect_engine_free(e);
	dns_relay_free(e->relay);
	dns_cache_free(e->dns_cache);
	if (e->audit_retry)
		event_free(e->audit_retry);
	if (e->audit_flush)
		event_free(e->audit_flush);
	audit_log_free(e->audit);
	free(e->parent);
	free(e);
}

int proxy_engine_session_add(struct proxy_engine *e, const struct proxy_session_info *s)
{
	return proxy_session_add(e, s);
}

int proxy_engine_session_set_policy(struct proxy_engine *e, const char *id, struct policy *p)
{
	struct proxy_session *s = proxy_session_by_id(e, id);
	return proxy_session_set_policy(e, id, p, s && s->policy_version ? s->policy_version + 1 : 0);
}

int proxy_engine_session_set_policy_version(struct proxy_engine *e, const char *id, struct policy *p,
                                            uint32_t version)
{
	return proxy_session_set_policy(e, id, p, version);
}

int proxy_engine_session_grant(struct proxy_engine *e, const char *id, const char *host, uint16_t port, bool allow,
                               uid_t by)
{
	struct proxy_session *s = proxy_session_by_id(e, id);
	char canon[POLICY_HOST_MAX + 1];

	if (!s)
		return -ENOENT;
	if (!host || policy_canon_host(host, strlen(host), canon) != POLICY_CANON_OK || port == 0)
		return -EINVAL; /* verdicts are given on canonical names (asks hold names only) */
	proxy_ask_grant_add(s, canon, port, allow, by);
	return 0;
}

int proxy_engine_session_remove(struct proxy_engine *e, const char *id)
{
	return proxy_session_remove(e, id);
}

int proxy_engine_flush_audit(struct proxy_engine *e)
{
	if (audit_log_flush(e->audit))
		return 0;
	proxy_audit_failed(e);
	return -EIO;
}

int proxy_engine_audit_drop(struct proxy_engine *e, const struct sockaddr *src, const struct sockaddr *dst, int ipproto)
{
	struct proxy_session *s;
	struct audit_record r;
	char host[PROXY_ADDRSTR_MAX], from[PROXY_ADDRSTR_MAX], reason[160], proto[16];
	int rc;

	if (!src || !dst || (dst->sa_family != AF_INET && dst->sa_family != AF_INET6))
		return -EINVAL;
	memset(&r, 0, sizeof r);
	clock_gettime(CLOCK_REALTIME, &r.start);
	r.protocol = "drop";
	r.host = proxy_addr_str(dst, host, false);
	r.port = ntohs(dst->sa_family == AF_INET ? ((const struct sockaddr_in *)dst)->sin_port
	                                         : ((const struct sockaddr_in6 *)dst)->sin6_port);
	switch (ipproto) {
	case IPPROTO_TCP: r.method = "tcp"; break;
	case IPPROTO_UDP: r.method = "udp"; break;
	case IPPROTO_ICMP: r.method = "icmp"; break;
	case IPPROTO_ICMPV6: r.method = "icmpv6"; break;
	default: snprintf(proto, sizeof proto, "ip-%d", ipproto); r.method = proto;
	}
	r.decision = "deny";
	snprintf(reason, sizeof reason, "packet from %s dropped by the firewall (not through the proxy)",
	         proxy_addr_str(src, from, true));
	r.reason = reason;
	s = proxy_session_find(e, src, NULL);
	if (s) {
		proxy_session_audit(s, &r);
		return 0;
	}
	r.flow = proxy_flow_next(e);
	rc = audit_log_write(e->audit, &r);
	proxy_metrics_note(&e->metrics, &r, rc);
	if (rc)
		proxy_audit_failed(e);
	proxy_audit_schedule(e); /* batched: written at the end of this loop iteration */
	return rc;
}

int proxy_engine_audit_drop_summary(struct proxy_engine *e, const char *id, uint32_t over_rate, uint32_t lost,
                                    uint32_t unsent)
{
	const struct proxy_session *s = id ? proxy_session_by_id(e, id) : NULL;
	struct audit_record r;
	char reason[192];
	uint64_t total = (uint64_t)over_rate + lost + unsent;
	int rc;

	if (!total)
		return -EINVAL;
	memset(&r, 0, sizeof r);
	clock_gettime(CLOCK_REALTIME, &r.start);
	r.protocol = "drop-summary";
	r.decision = "deny";
	/* the numbers in a fixed order and wording (docs/audit-log.md): readers parse them */
	snprintf(reason, sizeof reason,
	         "%llu dropped packets not audited one by one: %u over the rate limit, %u lost by the kernel, "
	         "%u not taken by the engine",
	         (unsigned long long)total, over_rate, lost, unsent);
	r.reason = reason;
	if (s) { /* the session whose interface the drops came in on (one that ended meanwhile: none) */
		r.session = s->id;
		r.uid = s->uid;
		r.has_uid = true;
		r.command = s->command;
		r.policy_version = s->policy_version;
	}
	r.flow = proxy_flow_next(e);
	/* no decision of its own: not counted in the metrics' decisions, only a failed write */
	rc = audit_log_write(e->audit, &r);
	if (rc) {
		e->metrics.audit_write_errors++;
		proxy_audit_failed(e);
	}
	proxy_audit_schedule(e); /* batched: written at the end of this loop iteration */
	return rc;
}

void proxy_engine_metrics(const struct proxy_engine *e, struct proxy_metrics *out)
{
	*out = e->metrics;
	out->audit_lost = audit_log_lost(e->audit);
}

int proxy_engine_reopen_log(struct proxy_engine *e)
{
	return audit_log_reopen(e->audit);
}

int proxy_engine_replace_log_fd(struct proxy_engine *e, int fd)
{
	return audit_log_replace_fd(e->audit, fd);
}
