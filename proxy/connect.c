/* CONNECT requests, a front of the relay (relay.h): the decision on the canonical name comes before
 * any DNS lookup or byte forwarded (a denied name is never resolved); after the dial, a 200, then the
 * check that a TLS ClientHello the client sends first names the same host (domain fronting is
 * refused), then the tunnel; plain HTTP in a tunnel to a name is read request by request (plain_http). Refusals before the 200 are HTTP responses, after it TLS alerts. The
 * SOCKS5 front (socks5.c) ends in the same checked tunnel (proxy_connect_tunnel_checked). */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"
#include "log.h"
#include "relay.h"
#include "tls_sni.h"

/* Before the 200: an HTTP response, then close. */
static void refuse(struct proxy_relay *r, int status, const char *decision, const char *body)
{
	char dh[POLICY_WHERE_MAX + 32];

	r->status = status;
	proxy_decision_header(dh, sizeof dh, decision, r->rule);
	proxy_http_error(r->client, status, dh, body, true);
	proxy_relay_close_after_flush(r);
}

/* Unparsed bytes both ways, or, for a host the policy inspects, HTTPS inspection (inspect.c). */
static void start_tunnel(struct proxy_relay *r)
{
	if (!r->t.literal && policy_inspects(r->s->policy, r->t.host)) {
		proxy_inspect_begin(r);
		return;
	}
	proxy_relay_tunnel(r);
}

/* Plain HTTP in a tunnel to a name: a request could name another host (Host, or an absolute-form target)
 * that the server at the name's address also serves (name-based virtual hosts, a CDN: the plain-text
 * twin of domain fronting, and a server reads every request of a kept-alive connection on its own). The
 * CONNECT's exchange ends here (its close record says why) and the client connection goes to the HTTP
 * front, which reads, decides and forwards each request to the tunnel's host (proxy_http_accept_tunnel);
 * the connection the CONNECT dialled goes, each request dials or reuses its own. */
static void plain_http(struct proxy_relay *r)
{
	struct proxy_session *s = r->s;
	struct bufferevent *cl = r->client;
	char host[POLICY_HOST_MAX + 1];
	uint16_t port = r->t.port;

	snprintf(host, sizeof host, "%s", r->t.host);
	snprintf(r->reason, sizeof r->reason, "%s; plain HTTP in the tunnel (its requests are decided one by one)",
	         r->t.reason[0] ? r->t.reason : "allowed");
	r->client = NULL;
	bufferevent_setcb(cl, NULL, NULL, NULL, NULL);
	bufferevent_set_timeouts(cl, NULL, NULL);
	proxy_relay_end(r); /* frees r and its upstream */
	proxy_http_accept_tunnel(s, cl, host, port);
}

/* The client's first bytes after the 200. Anything that is not TLS is tunnelled as it is; a TLS
 * ClientHello must be readable and, when the CONNECT named a host, its SNI must name the same host:
 * otherwise the tunnel would carry a TLS session to whatever else the server at that address hosts
 * (domain fronting), behind an allowed name. */
static void inspect_read_cb(struct bufferevent *bev, void *arg)
{
	struct proxy_relay *r = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len = evbuffer_get_length(in);
	const uint8_t *buf = evbuffer_pullup(in, -1);
	char sni[TLS_SNI_NAME_MAX + 1], canon[POLICY_HOST_MAX + 1], reason[POLICY_HOST_MAX * 2 + 128];
	const char *why = NULL;

	if (!buf)
		return;
	switch (tls_sni_parse(buf, len, sni, sizeof sni, &why)) {
	case TLS_SNI_MORE:
		if (len >= TLS_SNI_READ_MAX)
			proxy_relay_refuse_tls(r, "ClientHello too large");
		return;
	case TLS_SNI_NOT_TLS:
		if (!r->t.literal && policy_inspects(r->s->policy, r->t.host)) {
			proxy_relay_refuse_tls(r, "the policy inspects this host, and the tunnel does not carry TLS");
			return;
		}
		if (!r->t.literal) {
			int h = http_request_line_prefix((const char *)buf, len);
			if (h < 0 && len < TLS_SNI_READ_MAX)
				return; /* the rest of the first line */
			if (h != 0) {
				plain_http(r);
				return;
			}
		}
		start_tunnel(r);
		return;
	case TLS_SNI_NONE: start_tunnel(r); return;
	case TLS_SNI_ERROR:
		snprintf(reason, sizeof reason, "unreadable ClientHello in the tunnel: %s", why ? why : "malformed");
		proxy_relay_refuse_tls(r, reason);
		return;
	case TLS_SNI_FOUND: break;
	}
	if (r->t.literal) { /* an address the policy allowed as such: there is no name to front */
		start_tunnel(r);
		return;
	}
	if (policy_canon_host(sni, strlen(sni), canon) != POLICY_CANON_OK || strcmp(canon, r->t.host) != 0) {
		snprintf(reason, sizeof reason,
		         "domain fronting: the ClientHello names \"%.255s\", the CONNECT named %s", sni, r->t.host);
		log_info("session %s: %s; tunnel refused", r->s->id, reason);
		proxy_relay_refuse_tls(r, reason);
		return;
	}
	start_tunnel(r);
}

/* Until the client spoke, what the server sends (SSH banners...) is passed on as it comes. */
static void inspect_up_read_cb(struct bufferevent *bev, void *arg)
{
	struct proxy_relay *r = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	r->bytes_in += evbuffer_get_length(in);
	evbuffer_add_buffer(bufferevent_get_output(r->client), in);
}

static void inspect_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct proxy_relay *r = arg;

	if (bev == r->client && (what & BEV_EVENT_EOF) && !r->t.literal &&
	    !policy_inspects(r->s->policy, r->t.host)) {
		/* The client's last bytes are the start of a line that could have become a request line: it
		 * never will (the client sent all it sends), so they go as they are, then its FIN (the tunnel
		 * reads the end of file again). */
		struct evbuffer *in = bufferevent_get_input(bev);
		size_t len = evbuffer_get_length(in);
		const uint8_t *buf = len ? evbuffer_pullup(in, -1) : NULL;
		char sni[TLS_SNI_NAME_MAX + 1];
		const char *why = NULL;
		if (buf && tls_sni_parse(buf, len, sni, sizeof sni, &why) == TLS_SNI_NOT_TLS &&
		    http_request_line_prefix((const char *)buf, len) < 0) {
			start_tunnel(r);
			return;
		}
	}
	if (what & BEV_EVENT_TIMEOUT)
		snprintf(r->error, sizeof r->error, "the client sent nothing within the idle timeout");
	else
		snprintf(r->error, sizeof r->error, "%s closed the connection before the tunnel started",
		         bev == r->up ? "the upstream" : "the client");
	proxy_relay_end(r);
}

void proxy_connect_tunnel_checked(struct proxy_relay *r)
{
	bufferevent_setcb(r->client, inspect_read_cb, NULL, inspect_event_cb, r);
	bufferevent_setcb(r->up, inspect_up_read_cb, NULL, inspect_event_cb, r);
	bufferevent_set_timeouts(r->client, r->e->tv_idle, NULL);
	bufferevent_setwatermark(r->client, EV_READ, 0, TLS_SNI_READ_MAX);
	bufferevent_enable(r->client, EV_READ | EV_WRITE);
	bufferevent_enable(r->up, EV_READ | EV_WRITE);
	if (evbuffer_get_length(bufferevent_get_input(r->client)) > 0)
		inspect_read_cb(r->client, r); /* an eager ClientHello behind the CONNECT head */
}

static void connected(struct proxy_relay *r)
{
	r->status = 200;
	evbuffer_add(bufferevent_get_output(r->client), "HTTP/1.1 200 Connection established\r\n\r\n", 39);
	proxy_connect_tunnel_checked(r);
}

static void conn_free(struct proxy_relay *r)
{
	free(r);
}

static const struct proxy_relay_ops connect_ops = {
        .protocol = "connect",
        .hold_asks = true,
        .redecide = true,
        .refuse = refuse,
        .connected = connected,
        .free = conn_free,
};

void proxy_connect_begin(struct proxy_session *s, struct bufferevent *client, const struct http_request *req,
                         size_t head_len, const struct timespec *start_rt, uint64_t start_ms)
{
	struct proxy_relay *r = calloc(1, sizeof *r);

	if (!r) {
		bufferevent_free(client);
		return;
	}
	proxy_relay_init(r, s, &connect_ops, client);
	proxy_relay_begin(r, start_rt, start_ms, "CONNECT");
	proxy_relay_decide(r, req->authority.host, req->authority.host_len, req->authority.bracketed,
	                   req->authority.port, POLICY_M_CONNECT, 0);
	evbuffer_drain(bufferevent_get_input(client), head_len); /* req pointed into it */
	/* While held or dialing, the client's early bytes stay buffered (bounded by the read watermark);
	 * a client that gives up is noticed. */
	bufferevent_setcb(client, NULL, NULL, proxy_relay_client_gone_cb, r);
	proxy_relay_proceed(r);
}
