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
#include "relay.h"
#include "tls_sni.h"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80 /* linux/netfilter_ipv4.h */
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80 /* linux/netfilter_ipv6/ip6_tables.h */
#endif

#define TP_READ_MAX TLS_SNI_READ_MAX

struct tp_conn {
	struct proxy_relay r; /* first: the relay is the connection (its handshake timer: the ClientHello's deadline) */
	uint16_t port;        /* original destination port */
};

/* Refused: a fatal TLS alert (access_denied) so the client reports a refusal, then close. No HTTP
 * status reached the client, so none is recorded. */
static void refuse(struct proxy_relay *r, int status, const char *decision, const char *body)
{
	(void)status;
	(void)decision;
	(void)body;
	proxy_relay_handshake_done(r);
	proxy_relay_refuse_tls(r, NULL);
}

/* Allowed: the hello stays buffered while dialing; the tunnel sends it first. */
static void allowed(struct proxy_relay *r)
{
	proxy_relay_handshake_done(r);
	bufferevent_disable(r->client, EV_READ);
	bufferevent_setcb(r->client, NULL, NULL, proxy_relay_client_gone_cb, r);
	proxy_relay_dial(r);
}

static void tp_free(struct proxy_relay *r)
{
	free(r);
}

static const struct proxy_relay_ops tp_ops = {
        .protocol = "tls-sni",
        .hold_asks = false, /* a redirected hello is decided at once (docs/proxy.md) */
        .redecide = true,
        .refuse = refuse,
        .allowed = allowed,
        .connected = proxy_relay_tunnel,
        .free = tp_free,
};

static void deny(struct tp_conn *c, const char *reason)
{
	proxy_relay_handshake_done(&c->r);
	proxy_relay_refuse_tls(&c->r, reason);
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
			deny(c, "ClientHello too large");
		return;
	case TLS_SNI_FOUND:
		/* the name is decided as a CONNECT to it and the original port; "ask" sessions: a host:port
		 * approved in this session passes, an undecided one is denied (tp_ops.hold_asks) */
		proxy_relay_decide(&c->r, sni, strlen(sni), false, c->port, POLICY_M_CONNECT, PROXY_RELAY_NAME_ONLY);
		proxy_relay_proceed(&c->r);
		return;
	case TLS_SNI_NONE: deny(c, "ClientHello without a server name (SNI)"); return;
	case TLS_SNI_NOT_TLS: deny(c, "not a TLS ClientHello (transparent mode reads the SNI on this port)"); return;
	case TLS_SNI_ERROR: deny(c, why ? why : "malformed ClientHello"); return;
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	proxy_relay_handshake_gone(arg, "the client closed before a complete ClientHello");
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tp_conn *c = arg;
	(void)fd;
	(void)what;
	deny(c, "no complete ClientHello within the header timeout");
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
		if (local->ss_family == AF_INET && a->sin_port == l->sin_port &&
		    a->sin_addr.s_addr == l->sin_addr.s_addr)
			return -ENOENT;
		*port = ntohs(a->sin_port);
	} else if (od.ss_family == AF_INET6 && ol >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&od,
		                          *l = (const struct sockaddr_in6 *)local;
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
	c->port = port;
	if (proxy_relay_accept_handshake(&c->r, s, &tp_ops, fd, TP_READ_MAX, read_cb, event_cb, timer_cb) == 0)
		c->r.t.port = port; /* recorded even when no name arrives */
}
