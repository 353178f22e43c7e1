/* Transparent mode: connections nftables redirected from a session's TCP 80/443 to the transparent
 * listener. The original destination (SO_ORIGINAL_DST / IP6T_SO_ORIGINAL_DST) is used for its port only:
 * port 80 goes to the HTTP proxy in origin-form mode (the Host header names the destination); anything
 * else must start with a TLS ClientHello whose SNI names the destination. The name is decided by the
 * session's policy, resolved by the engine and dialled at an address the engine checked: never the
 * address the client aimed at. A ClientHello that is unreadable, has no SNI, is split beyond the limits
 * or does not arrive within the header timeout is denied. TLS is not terminated: after the decision,
 * the bytes (the ClientHello first) go through a tunnel. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "proxy_int.h"
#include "tls_sni.h"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* linux/netfilter_ipv4.h */
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80 /* linux/netfilter_ipv6/ip6_tables.h */
#endif

#define TP_READ_MAX TLS_SNI_READ_MAX

struct tp_conn {
	struct proxy_conn base;     /* attached to the session */
	struct proxy_session *s;    /* borrowed */
	struct bufferevent *client; /* owned until the tunnel takes it */
	struct proxy_dial *dial;    /* owned while dialing */
	struct tunnel *tunnel;      /* owned */
	struct event *timer;        /* owned: the ClientHello must arrive within the header timeout */
	struct timespec start_rt;
	uint64_t start_ms;
	uint16_t port; /* original destination port */
	char host[POLICY_HOST_MAX + 1];
	const char *decision;
	char rule[POLICY_WHERE_MAX];
	char address[PROXY_ADDRSTR_MAX];
	char reason[512];
	char error[256];
	uint64_t bytes_out, bytes_in;
};

static void tp_free(struct tp_conn *c)
{
	struct audit_record r;

	if (c->tunnel)
		tunnel_bytes(c->tunnel, &c->bytes_out, &c->bytes_in);
	memset(&r, 0, sizeof r);
	r.start = c->start_rt;
	r.duration_ms = proxy_mono_ms() - c->start_ms;
	r.protocol = "tls-sni";
	r.host = c->host[0] ? c->host : NULL;
	r.port = c->port;
	r.decision = c->decision ? c->decision : "deny";
	r.rule = c->rule;
	r.reason = c->reason[0] ? c->reason : NULL;
	r.address = c->address[0] ? c->address : NULL;
	r.bytes_out = c->bytes_out;
	r.bytes_in = c->bytes_in;
	r.error = c->error[0] ? c->error : NULL;
	if (c->s)
		proxy_session_audit(c->s, &r);
	proxy_dial_cancel(c->dial);
	tunnel_free(c->tunnel);
	if (c->client)
		bufferevent_free(c->client);
	if (c->timer)
		event_free(c->timer);
	proxy_session_detach(&c->base);
	free(c);
}

static void session_close_cb(struct proxy_conn *pc)
{
	struct tp_conn *c = (struct tp_conn *)pc;
	if (!c->error[0])
		snprintf(c->error, sizeof c->error, "session removed");
	tp_free(c);
}

/* The session's policy was replaced: does it still allow this stream's name and port? */
static bool still_allowed_cb(struct proxy_conn *pc, const struct policy *p)
{
	struct tp_conn *c = (struct tp_conn *)pc;
	struct policy_decision d;

	policy_decide(p, c->host, c->port, POLICY_M_CONNECT, &d);
	proxy_ask_granted(c->s, c->host, c->port, &d, NULL, 0);
	if (d.verdict == POLICY_ALLOW)
		return true;
	snprintf(c->error, sizeof c->error, "closed: the session's new policy no longer allows %s:%u", c->host,
	         c->port);
	return false;
}

static void drained_cb(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		tp_free(arg);
}

static void closing_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	tp_free(arg);
}

/* Denies: a fatal TLS alert (access_denied) so the client reports a refusal, then close. */
static void deny(struct tp_conn *c, const char *decision, const char *fmt_reason)
{
	static const uint8_t alert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31};
	struct timeval tv = {5, 0};

	c->decision = decision;
	if (fmt_reason && !c->reason[0])
		snprintf(c->reason, sizeof c->reason, "%s", fmt_reason);
	event_del(c->timer);
	bufferevent_disable(c->client, EV_READ);
	evbuffer_add(bufferevent_get_output(c->client), alert, sizeof alert);
	bufferevent_setwatermark(c->client, EV_WRITE, 0, 0);
	bufferevent_setcb(c->client, NULL, drained_cb, closing_event_cb, c);
	bufferevent_set_timeouts(c->client, NULL, &tv);
	bufferevent_enable(c->client, EV_WRITE);
}

static void tunnel_done(struct tunnel *t, const char *err, void *arg)
{
	struct tp_conn *c = arg;
	(void)t;
	if (err)
		snprintf(c->error, sizeof c->error, "%s", err);
	tp_free(c);
}

static void dialed(struct bufferevent *up, const struct proxy_dial_result *res, void *arg)
{
	struct tp_conn *c = arg;
	struct bufferevent *cl;

	c->dial = NULL;
	snprintf(c->address, sizeof c->address, "%s", res->address);
	if (!up) {
		snprintf(c->reason, sizeof c->reason, "%s", res->reason);
		if (res->status == 403) {
			snprintf(c->rule, sizeof c->rule, "%s", res->rule);
			deny(c, "deny", NULL);
		} else {
			snprintf(c->error, sizeof c->error, "%.255s", res->reason);
			deny(c, "allow", NULL);
		}
		return;
	}
	cl = c->client;
	c->client = NULL;
	/* the ClientHello still waits in cl's input: the tunnel sends it first */
	c->tunnel = tunnel_new(c->s->engine, cl, up, tunnel_done, c);
	if (!c->tunnel) {
		snprintf(c->error, sizeof c->error, "out of memory");
		tp_free(c);
	}
}

/* A complete ClientHello named `sni`: canonicalise, decide, dial. */
static void decide(struct tp_conn *c, const char *sni)
{
	struct policy_decision dec;
	enum policy_canon_err ce;

	ce = policy_canon_host(sni, strlen(sni), c->host);
	if (ce != POLICY_CANON_OK) {
		c->host[0] = '\0';
		snprintf(c->reason, sizeof c->reason, "unusable server name in the ClientHello: %s",
		         ce == POLICY_CANON_IP_LITERAL ? "an IP address" : policy_canon_strerror(ce));
		deny(c, "deny", NULL);
		return;
	}
	policy_decide(c->s->policy, c->host, c->port, POLICY_M_CONNECT, &dec);
	/* "ask" sessions: a host:port approved in this session passes; a redirected TLS connection is not
	 * held (docs/proxy.md), so an undecided one is denied */
	proxy_ask_granted(c->s, c->host, c->port, &dec, NULL, 0);
	if (dec.verdict == POLICY_ASK)
		dec.verdict = POLICY_DENY;
	snprintf(c->rule, sizeof c->rule, "%s", policy_decision_where(&dec));
	if (dec.verdict != POLICY_ALLOW) {
		snprintf(c->reason, sizeof c->reason, "%s", policy_decision_reason(&dec));
		deny(c, policy_verdict_name(dec.verdict), NULL);
		return;
	}
	c->decision = "allow";
	c->base.still_allowed = still_allowed_cb; /* a policy change re-decides the stream */
	event_del(c->timer);
	bufferevent_disable(c->client, EV_READ); /* the hello stays buffered while dialing */
	c->dial = proxy_dial_start(c->s, c->host, NULL, c->port, dialed, c);
	if (!c->dial) {
		snprintf(c->error, sizeof c->error, "cannot start resolving or connecting (out of resources)");
		deny(c, "allow", NULL);
	}
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct tp_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	const uint8_t *buf = evbuffer_pullup(in, -1);
	char sni[TLS_SNI_NAME_MAX + 1];
	const char *why = NULL;

	if (!buf)
		return;
	switch (tls_sni_parse(buf, len, sni, sizeof sni, &why)) {
	case TLS_SNI_MORE:
		if (len >= TP_READ_MAX)
			deny(c, "deny", "ClientHello too large");
		return;
	case TLS_SNI_FOUND: decide(c, sni); return;
	case TLS_SNI_NONE: deny(c, "deny", "ClientHello without a server name (SNI)"); return;
	case TLS_SNI_NOT_TLS:
		deny(c, "deny", "not a TLS ClientHello (transparent mode reads the SNI on this port)");
		return;
	case TLS_SNI_ERROR: deny(c, "deny", why ? why : "malformed ClientHello"); return;
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct tp_conn *c = arg;
	(void)bev;
	(void)what;
	snprintf(c->reason, sizeof c->reason, "the client closed before a complete ClientHello");
	snprintf(c->error, sizeof c->error, "the client closed the connection");
	tp_free(c);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tp_conn *c = arg;
	(void)fd;
	(void)what;
	deny(c, "deny", "no complete ClientHello within the header timeout");
}

/* The original destination port of a redirected connection; -ENOENT when it was not redirected. */
static int original_port(int fd, const struct sockaddr_storage *local, uint16_t *port)
{
	struct sockaddr_storage od;
	socklen_t ol = sizeof od;
	int r;

	memset(&od, 0, sizeof od);
	if (local->ss_family == AF_INET6)
		r = getsockopt(fd, IPPROTO_IPV6, IP6T_SO_ORIGINAL_DST, &od, &ol);
	else
		r = getsockopt(fd, IPPROTO_IP, SO_ORIGINAL_DST, &od, &ol);
	if (r != 0)
		return -errno;
	if (od.ss_family == AF_INET && ol >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)&od, *l = (const struct sockaddr_in *)local;
		if (local->ss_family == AF_INET && a->sin_port == l->sin_port && a->sin_addr.s_addr == l->sin_addr.s_addr)
			return -ENOENT;
		*port = ntohs(a->sin_port);
	} else if (od.ss_family == AF_INET6 && ol >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&od, *l = (const struct sockaddr_in6 *)local;
		if (local->ss_family == AF_INET6 && a->sin6_port == l->sin6_port &&
		    memcmp(&a->sin6_addr, &l->sin6_addr, 16) == 0)
			return -ENOENT;
		*port = ntohs(a->sin6_port);
	} else {
		return -EAFNOSUPPORT;
	}
	return *port ? 0 : -EINVAL;
}

void proxy_transparent_accept(struct proxy_session *s, int fd, const struct sockaddr_storage *local)
{
	struct tp_conn *c;
	uint16_t port = 0;
	int r;

	if (!policy_get_options(s->policy)->transparent) {
		/* netd redirects only sessions whose policy turned the mode on; anything else is a mistake */
		log_warnx("session %s: redirected connection, but its policy does not enable transparent mode", s->id);
		close(fd);
		return;
	}
	r = original_port(fd, local, &port);
	if (r != 0) {
		log_debug("session %s: transparent listener: no original destination (%s); closed", s->id,
		          r == -ENOENT ? "not redirected" : strerror(-r));
		close(fd);
		return;
	}
	if (port == 80) {
		proxy_http_accept_transparent(s, fd, port);
		return;
	}
	c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return;
	}
	c->s = s;
	c->port = port;
	clock_gettime(CLOCK_REALTIME, &c->start_rt);
	c->start_ms = proxy_mono_ms();
	c->base.close = session_close_cb;
	proxy_session_attach(s, &c->base, true);
	c->client = bufferevent_socket_new(s->engine->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(s->engine->base, timer_cb, c);
	if (!c->client || !c->timer) {
		if (!c->client)
			close(fd);
		snprintf(c->error, sizeof c->error, "out of memory");
		tp_free(c);
		return;
	}
	bufferevent_setcb(c->client, read_cb, NULL, event_cb, c);
	bufferevent_setwatermark(c->client, EV_READ, 0, TP_READ_MAX);
	bufferevent_enable(c->client, EV_READ | EV_WRITE);
	event_add(c->timer, s->engine->tv_header);
}
