/* CONNECT requests: decide on the canonical name before any DNS lookup or byte forwarded (a denied
 * name is never resolved), dial an address the policy accepted, answer 200, check that a TLS
 * ClientHello the client sends first names the same host (domain fronting is refused), and hand both
 * sockets to a tunnel; one audit line when the tunnel closes (bytes each way, duration). */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"
#include "log.h"
#include "proxy_int.h"
#include "tls_sni.h"

struct connect_conn {
	struct proxy_conn base;     /* attached to the session */
	struct proxy_session *s;    /* borrowed */
	struct bufferevent *client; /* owned until the tunnel takes it */
	struct bufferevent *up;     /* owned while the first client bytes are inspected */
	struct proxy_dial *dial;    /* owned while dialing */
	struct proxy_ask_wait wait; /* while held for approval */
	struct tunnel *tunnel;      /* owned */
	struct timespec start_rt;
	uint64_t start_ms;
	struct proxy_target t;
	const char *decision;
	char rule[POLICY_WHERE_MAX];
	char address[PROXY_ADDRSTR_MAX];
	char reason[512];
	char error[256];
	int status;
	uint64_t bytes_out, bytes_in;
	uint64_t pre_in; /* upstream bytes passed to the client before the tunnel started */
};

static void cc_free(struct connect_conn *c)
{
	struct audit_record r;

	if (c->wait.ask) {
		/* gone while held for approval: it never went anywhere */
		c->decision = "deny";
		proxy_ask_unhold(&c->wait);
	}
	if (c->tunnel)
		tunnel_bytes(c->tunnel, &c->bytes_out, &c->bytes_in);
	c->bytes_in += c->pre_in;
	memset(&r, 0, sizeof r);
	r.start = c->start_rt;
	r.duration_ms = proxy_mono_ms() - c->start_ms;
	r.protocol = "connect";
	r.host = c->t.host[0] ? c->t.host : NULL;
	r.port = c->t.port;
	r.method = "CONNECT";
	r.decision = c->decision ? c->decision : "deny";
	r.rule = c->rule;
	r.reason = c->reason[0] ? c->reason : (c->t.reason[0] ? c->t.reason : NULL);
	r.address = c->address[0] ? c->address : NULL;
	r.status = c->status;
	r.bytes_out = c->bytes_out;
	r.bytes_in = c->bytes_in;
	r.error = c->error[0] ? c->error : NULL;
	if (c->s)
		proxy_session_audit(c->s, &r);
	proxy_dial_cancel(c->dial);
	tunnel_free(c->tunnel);
	if (c->client)
		bufferevent_free(c->client);
	if (c->up)
		bufferevent_free(c->up);
	proxy_session_detach(&c->base);
	free(c);
}

static void session_close_cb(struct proxy_conn *pc)
{
	struct connect_conn *c = (struct connect_conn *)pc;
	if (!c->error[0])
		snprintf(c->error, sizeof c->error, "session removed");
	cc_free(c);
}

/* The session's policy was replaced: does it still allow this tunnel's destination? If not, the session
 * closes the tunnel (its audit record says why). */
static bool still_allowed_cb(struct proxy_conn *pc, const struct policy *p)
{
	struct connect_conn *c = (struct connect_conn *)pc;
	struct policy_decision d;

	if (c->t.literal)
		policy_decide_addr(p, (const struct sockaddr *)&c->t.addr, c->t.port, false, &d);
	else
		policy_decide(p, c->t.host, c->t.port, POLICY_M_CONNECT, &d);
	proxy_ask_granted(c->s, c->t.host, c->t.port, &d, NULL, 0);
	if (d.verdict == POLICY_ALLOW)
		return true;
	snprintf(c->error, sizeof c->error, "closed: the session's new policy no longer allows %s:%u", c->t.host,
	         c->t.port);
	return false;
}

static void drained_cb(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		cc_free(arg);
}

static void closing_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	cc_free(arg);
}

/* Answers with our own response, then closes once it was written. */
static void refuse(struct connect_conn *c, int status, const char *decision, const char *body)
{
	char dh[POLICY_WHERE_MAX + 32];
	struct timeval tv = {5, 0};

	c->status = status;
	proxy_decision_header(dh, sizeof dh, decision, c->rule);
	proxy_http_error(c->client, status, dh, body, true);
	bufferevent_disable(c->client, EV_READ);
	bufferevent_setwatermark(c->client, EV_WRITE, 0, 0);
	bufferevent_setcb(c->client, NULL, drained_cb, closing_event_cb, c);
	bufferevent_set_timeouts(c->client, NULL, &tv);
	bufferevent_enable(c->client, EV_WRITE);
}

static void tunnel_done(struct tunnel *t, const char *err, void *arg)
{
	struct connect_conn *c = arg;
	(void)t;
	if (err)
		snprintf(c->error, sizeof c->error, "%s", err);
	cc_free(c);
}

static void start_tunnel(struct connect_conn *c)
{
	struct bufferevent *cl = c->client, *up = c->up;

	c->client = c->up = NULL;
	c->tunnel = tunnel_new(c->s->engine, cl, up, tunnel_done, c);
	if (!c->tunnel) {
		snprintf(c->error, sizeof c->error, "out of memory");
		cc_free(c);
	}
}

/* Refuses after the 200 was sent: a fatal TLS alert (access_denied) to the client, then close. */
static void refuse_tls(struct connect_conn *c, const char *reason)
{
	static const uint8_t alert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31};
	struct timeval tv = {5, 0};

	c->decision = "deny";
	snprintf(c->reason, sizeof c->reason, "%s", reason);
	bufferevent_free(c->up);
	c->up = NULL;
	bufferevent_disable(c->client, EV_READ);
	evbuffer_add(bufferevent_get_output(c->client), alert, sizeof alert);
	bufferevent_setwatermark(c->client, EV_WRITE, 0, 0);
	bufferevent_setcb(c->client, NULL, drained_cb, closing_event_cb, c);
	bufferevent_set_timeouts(c->client, NULL, &tv);
	bufferevent_enable(c->client, EV_WRITE);
}

/* The client's first bytes after the 200. Anything that is not TLS is tunnelled as it is; a TLS
 * ClientHello must be readable and, when the CONNECT named a host, its SNI must name the same host:
 * otherwise the tunnel would carry a TLS session to whatever else the server at that address hosts
 * (domain fronting), behind an allowed name. */
static void inspect_read_cb(struct bufferevent *bev, void *arg)
{
	struct connect_conn *c = arg;
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
			refuse_tls(c, "ClientHello too large");
		return;
	case TLS_SNI_NOT_TLS:
	case TLS_SNI_NONE: start_tunnel(c); return;
	case TLS_SNI_ERROR:
		snprintf(reason, sizeof reason, "unreadable ClientHello in the tunnel: %s", why ? why : "malformed");
		refuse_tls(c, reason);
		return;
	case TLS_SNI_FOUND: break;
	}
	if (c->t.literal) { /* an address the policy allowed as such: there is no name to front */
		start_tunnel(c);
		return;
	}
	if (policy_canon_host(sni, strlen(sni), canon) != POLICY_CANON_OK || strcmp(canon, c->t.host) != 0) {
		snprintf(reason, sizeof reason,
		         "domain fronting: the ClientHello names \"%.255s\", the CONNECT named %s", sni, c->t.host);
		log_info("session %s: %s; tunnel refused", c->s->id, reason);
		refuse_tls(c, reason);
		return;
	}
	start_tunnel(c);
}

/* Until the client spoke, what the server sends (SSH banners...) is passed on as it comes. */
static void inspect_up_read_cb(struct bufferevent *bev, void *arg)
{
	struct connect_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	c->pre_in += evbuffer_get_length(in);
	evbuffer_add_buffer(bufferevent_get_output(c->client), in);
}

static void inspect_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct connect_conn *c = arg;
	if (what & BEV_EVENT_TIMEOUT)
		snprintf(c->error, sizeof c->error, "the client sent nothing within the idle timeout");
	else
		snprintf(c->error, sizeof c->error, "%s closed the connection before the tunnel started",
		         bev == c->up ? "the upstream" : "the client");
	cc_free(c);
}

static void dialed(struct bufferevent *up, const struct proxy_dial_result *res, void *arg)
{
	struct connect_conn *c = arg;
	char body[1600];

	c->dial = NULL;
	snprintf(c->address, sizeof c->address, "%s", res->address);
	if (!up) {
		snprintf(c->reason, sizeof c->reason, "%s", res->reason);
		if (res->status == 403) {
			c->decision = "deny";
			snprintf(c->rule, sizeof c->rule, "%s", res->rule);
			proxy_deny_body(body, sizeof body, c->s, c->t.host, c->t.port, res->reason, res->rule);
			refuse(c, 403, "deny", body);
		} else {
			snprintf(c->error, sizeof c->error, "%.255s", res->reason);
			snprintf(body, sizeof body, "sluice: %d %s\n%s\n", res->status,
			         proxy_http_status_text(res->status), res->reason);
			refuse(c, res->status, "error", body);
		}
		return;
	}
	c->status = 200;
	c->up = up;
	evbuffer_add(bufferevent_get_output(c->client), "HTTP/1.1 200 Connection established\r\n\r\n", 39);
	{
		const struct timeval *idle = c->s->engine->tv_idle;
		bufferevent_setcb(c->client, inspect_read_cb, NULL, inspect_event_cb, c);
		bufferevent_setcb(up, inspect_up_read_cb, NULL, inspect_event_cb, c);
		bufferevent_set_timeouts(c->client, idle, NULL);
		bufferevent_setwatermark(c->client, EV_READ, 0, TLS_SNI_READ_MAX);
		bufferevent_enable(c->client, EV_READ | EV_WRITE);
		bufferevent_enable(up, EV_READ | EV_WRITE);
	}
	if (evbuffer_get_length(bufferevent_get_input(c->client)) > 0)
		inspect_read_cb(c->client, c); /* an eager ClientHello behind the CONNECT head */
}

static void early_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct connect_conn *c = arg;
	(void)bev;
	(void)what;
	snprintf(c->error, sizeof c->error, "the client closed the connection");
	cc_free(c);
}

/* Allowed: dial while the client's early bytes stay buffered (bounded by the read watermark). */
static void proceed(struct connect_conn *c)
{
	bufferevent_setcb(c->client, NULL, NULL, early_event_cb, c);
	c->dial = proxy_dial_start(c->s, c->t.literal ? NULL : c->t.host, c->t.literal ? &c->t.addr : NULL, c->t.port,
	                           dialed, c);
	if (!c->dial) {
		snprintf(c->error, sizeof c->error, "cannot start resolving or connecting (out of resources)");
		refuse(c, 502, "error", "sluice: 502 Bad Gateway\ncannot start resolving or connecting\n");
	}
}

/* The verdict on a held CONNECT (ask.c). */
static void asked(struct proxy_ask_wait *w, bool allow, const char *reason, void *arg)
{
	struct connect_conn *c = arg;
	char body[1600];
	(void)w;

	snprintf(c->reason, sizeof c->reason, "%s", reason);
	c->decision = allow ? "allow" : "deny";
	if (allow) {
		proceed(c);
		return;
	}
	proxy_deny_body(body, sizeof body, c->s, c->t.host, c->t.port, reason, c->rule);
	refuse(c, 403, "deny", body);
}

void proxy_connect_begin(struct proxy_session *s, struct bufferevent *client, const struct http_request *req,
                         size_t head_len, const struct timespec *start_rt, uint64_t start_ms)
{
	struct connect_conn *c = calloc(1, sizeof *c);
	char body[1600];
	int r;

	if (!c) {
		bufferevent_free(client);
		return;
	}
	c->s = s;
	c->client = client;
	c->start_rt = *start_rt;
	c->start_ms = start_ms;
	c->base.close = session_close_cb;
	proxy_session_attach(s, &c->base, true);
	/* Decided on the canonical name alone: nothing is resolved or sent before this says allow. */
	r = proxy_target_decide(s, &req->authority, POLICY_M_CONNECT, &c->t);
	evbuffer_drain(bufferevent_get_input(client), head_len);
	if (r != 0) {
		c->decision = "deny";
		snprintf(c->reason, sizeof c->reason, "%s", c->t.why);
		snprintf(body, sizeof body, "sluice: 400 Bad Request\n%s\n", c->t.why);
		refuse(c, 400, "deny", body);
		return;
	}
	snprintf(c->rule, sizeof c->rule, "%s", policy_decision_where(&c->t.dec));
	c->decision = policy_verdict_name(c->t.dec.verdict);
	c->base.still_allowed = still_allowed_cb; /* a policy change re-decides the tunnel */
	if (c->t.dec.verdict == POLICY_ASK) {
		/* No rule matched and the session asks: hold the tunnel until an operator decides. A client
		 * that gives up is noticed (early_event_cb); nothing is resolved or sent meanwhile. */
		bufferevent_setcb(client, NULL, NULL, early_event_cb, c);
		if (proxy_ask_hold(s, &c->wait, "connect", "CONNECT", c->t.host, c->t.port, start_rt, asked, c,
		                   c->reason, sizeof c->reason) == 0)
			return;
		c->decision = "deny";
		proxy_deny_body(body, sizeof body, s, c->t.host, c->t.port, c->reason, c->rule);
		refuse(c, 403, c->decision, body);
		return;
	}
	if (c->t.dec.verdict != POLICY_ALLOW) {
		proxy_deny_body(body, sizeof body, s, c->t.host, c->t.port, c->t.reason, c->rule);
		refuse(c, 403, c->decision, body);
		return;
	}
	proceed(c);
}
