/* SOCKS5 (RFC 1928), a front of the relay (relay.h) on the session's gateway: NO AUTHENTICATION, CONNECT
 * to a name (ATYP domain: the client lets sluice resolve, socks5h://) or an address (IPv4/IPv6). The
 * name is decided like a CONNECT to it (method CONNECT, the same policy, asks, SSRF checks on every
 * address the engine resolves or is given) before anything is resolved or dialled. BIND and UDP
 * ASSOCIATE get COMMAND NOT SUPPORTED; a client that offers no NO AUTHENTICATION method gets NO
 * ACCEPTABLE METHODS. After the success reply, the tunnel is the CONNECT tunnel: a TLS ClientHello sent
 * first must name the decided host (connect.c). The greeting and the request must arrive within the
 * header timeout. The reply's BND.ADDR is 0.0.0.0:0: the engine's own outbound address is not the
 * sandbox's business. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "relay.h"
#include "socks5_parse.h"

enum socks5_state { S5_GREETING, S5_REQUEST, S5_DECIDED };

struct socks5_conn {
	struct proxy_relay r; /* first: the relay is the connection (its handshake timer: greeting and request) */
	enum socks5_state state;
};

static void send_reply(struct proxy_relay *r, uint8_t rep)
{
	const uint8_t msg[10] = {SOCKS5_VERSION, rep, 0, SOCKS5_ATYP_IPV4, 0, 0, 0, 0, 0, 0};
	evbuffer_add(bufferevent_get_output(r->client), msg, sizeof msg);
}

/* The relay's refusal (HTTP status) as a SOCKS reply code, then close. */
static void refuse(struct proxy_relay *r, int status, const char *decision, const char *body)
{
	struct socks5_conn *c = (struct socks5_conn *)r;
	uint8_t rep;
	(void)decision;
	(void)body;

	proxy_relay_handshake_done(r);
	switch (status) {
	case 400:
	case 403: rep = SOCKS5_REP_NOT_ALLOWED; break;
	case 502: rep = SOCKS5_REP_HOST_UNREACH; break;
	case 504: rep = SOCKS5_REP_TTL_EXPIRED; break;
	default: rep = SOCKS5_REP_FAILURE; break;
	}
	r->status = status;
	if (c->state == S5_GREETING) {
		proxy_relay_close_after_flush(r); /* no request yet: nothing to answer */
		return;
	}
	send_reply(r, rep);
	proxy_relay_close_after_flush(r);
}

static void connected(struct proxy_relay *r)
{
	r->status = 200;
	send_reply(r, SOCKS5_REP_OK);
	proxy_connect_tunnel_checked(r);
}

static void socks5_free(struct proxy_relay *r)
{
	free(r);
}

static const struct proxy_relay_ops socks5_ops = {
        .protocol = "socks5",
        .hold_asks = true,
        .redecide = true,
        .refuse = refuse,
        .connected = connected,
        .free = socks5_free,
};

/* A protocol error before a decision: recorded as a denial of a malformed request; the request's
 * reply code when there was a request, a method refusal when the greeting failed. */
static void protocol_error(struct socks5_conn *c, uint8_t rep, const char *why)
{
	char reason[256];

	proxy_relay_handshake_done(&c->r);
	snprintf(reason, sizeof reason, "SOCKS5: %s", why);
	c->r.decision = "deny";
	snprintf(c->r.reason, sizeof c->r.reason, "%s", reason);
	c->r.status = 400;
	if (c->state == S5_REQUEST)
		send_reply(&c->r, rep);
	proxy_relay_close_after_flush(&c->r);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct socks5_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	const char *why = "malformed";
	size_t used = 0;

	for (;;) {
		size_t len = evbuffer_get_length(in);
		const uint8_t *buf = evbuffer_pullup(in, -1);

		if (!buf || len == 0)
			return;
		if (c->state == S5_GREETING) {
			bool noauth = false;
			const uint8_t none[2] = {SOCKS5_VERSION, SOCKS5_METHOD_NONE};
			const uint8_t ok[2] = {SOCKS5_VERSION, SOCKS5_METHOD_NOAUTH};

			switch (socks5_parse_greeting(buf, len, &used, &noauth, &why)) {
			case SOCKS5_MORE: return;
			case SOCKS5_ERROR: protocol_error(c, SOCKS5_REP_FAILURE, why); return;
			case SOCKS5_OK: break;
			}
			evbuffer_drain(in, used);
			if (!noauth) {
				evbuffer_add(bufferevent_get_output(c->r.client), none, sizeof none);
				protocol_error(c, SOCKS5_REP_FAILURE,
				               "the client offers no NO AUTHENTICATION method (sluice asks for none)");
				return;
			}
			evbuffer_add(bufferevent_get_output(c->r.client), ok, sizeof ok);
			c->state = S5_REQUEST;
			continue;
		}
		struct socks5_request req;
		switch (socks5_parse_request(buf, len, &used, &req, &why)) {
		case SOCKS5_MORE: return;
		case SOCKS5_ERROR:
			if (req.host[0]) { /* the destination is known: record it with the refusal */
				snprintf(c->r.t.host, sizeof c->r.t.host, "%s", req.host);
				c->r.t.port = req.port;
			}
			protocol_error(c, req.rep, why);
			return;
		case SOCKS5_OK: break;
		}
		evbuffer_drain(in, used);
		proxy_relay_handshake_done(&c->r);
		c->state = S5_DECIDED;
		/* the client's early bytes stay buffered (read watermark) while held or dialing */
		bufferevent_setcb(bev, NULL, NULL, proxy_relay_client_gone_cb, &c->r);
		proxy_relay_decide(&c->r, req.host, strlen(req.host), req.atyp == SOCKS5_ATYP_IPV6, req.port,
		                   POLICY_M_CONNECT, 0);
		proxy_relay_proceed(&c->r);
		return;
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	proxy_relay_handshake_gone(arg, "SOCKS5: the client closed before a complete request");
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct socks5_conn *c = arg;
	(void)fd;
	(void)what;
	protocol_error(c, SOCKS5_REP_FAILURE, "no complete greeting and request within the header timeout");
}

void proxy_socks5_accept(struct proxy_session *s, int fd)
{
	struct socks5_conn *c = calloc(1, sizeof *c);

	if (!c) {
		close(fd);
		return;
	}
	(void)proxy_relay_accept_handshake(&c->r, s, &socks5_ops, fd,
	                                   SOCKS5_GREETING_MAX + SOCKS5_REQUEST_MAX + 64 * 1024, read_cb, event_cb,
	                                   timer_cb);
}
