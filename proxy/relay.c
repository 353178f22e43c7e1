/* The one relay path (relay.h): an exchange's decision (name or literal, policy, session verdicts,
 * held for approval), the dial to an address the policy checked, the tunnel, the refusals every front
 * shares, and the exchange's audit records (a decision record before anything is dialled, a close
 * record at the end, linked by a flow id). */
#include "relay.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* ---- audit ---- */

/* The one place an exchange's record is built; event is AUDIT_EVENT_*. */
static void relay_audit(struct proxy_relay *r, const char *event)
{
	struct audit_record a;
	uint64_t out = r->bytes_out, in = r->bytes_in;

	if (r->tunnel) {
		uint64_t tout, tin;
		tunnel_bytes(r->tunnel, &tout, &tin);
		out += tout;
		in += tin;
	}
	memset(&a, 0, sizeof a);
	a.start = r->start_rt;
	a.event = event;
	a.flow = r->flow;
	a.duration_ms = proxy_mono_ms() - r->start_ms;
	a.protocol = r->ops->protocol;
	a.host = r->t.host[0] ? r->t.host : NULL;
	a.port = r->t.port;
	a.method = r->method[0] ? r->method : NULL;
	a.path = r->path[0] ? r->path : NULL;
	a.decision = r->decision ? r->decision : "deny";
	a.rule = r->rule;
	a.reason = r->reason[0] ? r->reason : r->t.reason[0] ? r->t.reason : r->t.why[0] ? r->t.why : NULL;
	a.address = r->address[0] ? r->address : NULL;
	a.error = r->error[0] ? r->error : NULL;
	if (strcmp(event, AUDIT_EVENT_DECISION) != 0) { /* what a decision record cannot know yet */
		a.status = r->status;
		a.bytes_out = out;
		a.bytes_in = in;
	} else {
		a.duration_ms = 0;
	}
	proxy_session_audit(r->s, &a);
}

/* Whether the last decision record already says what r->decision says. */
static bool decision_logged(const struct proxy_relay *r)
{
	return r->decision && r->logged && strcmp(r->decision, r->logged) == 0;
}

void proxy_relay_log_decision(struct proxy_relay *r)
{
	if (!r->active || !r->decision || decision_logged(r))
		return;
	relay_audit(r, AUDIT_EVENT_DECISION);
	r->logged = r->decision;
}

void proxy_relay_finish(struct proxy_relay *r)
{
	if (!r->active)
		return;
	r->active = false;
	/* A decision not yet written (denied at once, or changed since: a verdict, a forbidden address,
	 * domain fronting) makes the last record a decision too. */
	relay_audit(r, decision_logged(r) ? AUDIT_EVENT_CLOSE : AUDIT_EVENT_COMPLETE);
}

/* ---- life cycle ---- */

static void session_close_cb(struct proxy_conn *pc)
{
	struct proxy_relay *r = (struct proxy_relay *)pc;
	if (r->active && !r->error[0])
		snprintf(r->error, sizeof r->error, "session removed");
	proxy_relay_end(r);
}

/* The exchange's destination decided again under p, as proxy_relay_decide decided it (the name or the
 * literal, the method, the session's verdicts); the decision in *d. */
enum policy_verdict proxy_relay_redecide(const struct proxy_relay *r, const struct policy *p, struct policy_decision *d)
{
	if (r->t.literal)
		policy_decide_addr(p, (const struct sockaddr *)&r->t.addr, r->t.port, false, d);
	else
		policy_decide(p, r->t.host, r->t.port, r->method_bit, d);
	proxy_ask_granted(r->s, r->t.host, r->t.port, d, NULL, 0);
	return d->verdict;
}

void proxy_relay_init(struct proxy_relay *r, struct proxy_session *s, const struct proxy_relay_ops *ops,
                      struct bufferevent *client)
{
	r->s = s;
	r->e = s->engine;
	r->ops = ops;
	r->client = client;
	r->conn.close = session_close_cb;
	proxy_session_attach(s, &r->conn, true);
}

void proxy_relay_begin(struct proxy_relay *r, const struct timespec *start_rt, uint64_t start_ms, const char *method)
{
	proxy_relay_finish(r);
	if (start_rt) {
		r->start_rt = *start_rt;
		r->start_ms = start_ms;
	} else {
		clock_gettime(CLOCK_REALTIME, &r->start_rt);
		r->start_ms = proxy_mono_ms();
	}
	r->active = true;
	r->flow = proxy_flow_next(r->e);
	memset(&r->t, 0, sizeof r->t);
	r->method_bit = 0;
	util_strlcpy(r->method, method ? method : "", sizeof r->method);
	r->decision = r->logged = NULL;
	r->rule[0] = r->address[0] = r->reason[0] = r->error[0] = '\0';
	r->status = 0;
	r->bytes_out = r->bytes_in = 0;
	r->bad_target = false;
}

void proxy_relay_drop_upstream(struct proxy_relay *r)
{
	proxy_dial_cancel(r->dial);
	r->dial = NULL;
	if (r->up) {
		bufferevent_free(r->up);
		r->up = NULL;
	}
}

void proxy_relay_end(struct proxy_relay *r)
{
	if (r->ending)
		return;
	r->ending = true;
	if (r->wait.ask) {
		/* gone while held for approval: it never went anywhere */
		r->decision = "deny";
		proxy_ask_unhold(&r->wait);
	}
	proxy_relay_finish(r);
	proxy_relay_drop_upstream(r);
	tunnel_free(r->tunnel);
	r->tunnel = NULL;
	if (r->client) {
		bufferevent_free(r->client);
		r->client = NULL;
	}
	if (r->handshake_timer) {
		event_free(r->handshake_timer);
		r->handshake_timer = NULL;
	}
	proxy_session_detach(&r->conn);
	r->ops->free(r);
}

/* The handshake's deadline, which measures the client, not the engine (docs/proxy.md): what the socket
 * holds is read first and goes to the front's read callback (the bytes came in time, unread after a stall);
 * if the handshake is still not complete, the timer comes back here at once (handshake_late) and the client
 * gets the header timeout again when the engine noticed the deadline more than PROXY_STALL_MS late (once),
 * or the front's timeout otherwise. */
static void handshake_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_relay *r = arg;

	if (!r->handshake_late && proxy_bev_read_now(r->client, r->handshake_read_max) > 0) {
		r->handshake_late = true;
		/* (back here after the read callback, unless a complete handshake deleted it or an end freed it) */
		event_active(r->handshake_timer, EV_TIMEOUT, 1);
		bufferevent_trigger(r->client, EV_READ, 0); /* (may free r) */
		return;
	}
	r->handshake_late = false;
	if (proxy_deadline_stalled(&r->handshake_due, r->e->header_timeout_ms, r->s->id, "a handshake")) {
		event_add(r->handshake_timer, r->e->tv_header);
		return;
	}
	r->handshake_timeout(fd, what, r);
}

int proxy_relay_accept_handshake(struct proxy_relay *r, struct proxy_session *s, const struct proxy_relay_ops *ops,
                                 int fd, size_t read_max, void (*read_cb)(struct bufferevent *, void *),
                                 void (*event_cb)(struct bufferevent *, short, void *),
                                 void (*timer_cb)(int, short, void *))
{
	struct bufferevent *client = bufferevent_socket_new(s->engine->base, fd, BEV_OPT_CLOSE_ON_FREE);

	if (!client)
		close(fd);
	proxy_relay_init(r, s, ops, client);
	proxy_relay_begin(r, NULL, 0, NULL);
	if (client)
		r->handshake_timer = evtimer_new(s->engine->base, handshake_timer_cb, r);
	r->handshake_timeout = timer_cb;
	r->handshake_read_max = read_max;
	if (!client || !r->handshake_timer) {
		snprintf(r->error, sizeof r->error, "out of memory");
		proxy_relay_end(r);
		return -ENOMEM;
	}
	proxy_bev_fast_read(client);
	bufferevent_setcb(client, read_cb, NULL, event_cb, r);
	bufferevent_setwatermark(client, EV_READ, 0, read_max);
	bufferevent_enable(client, EV_READ | EV_WRITE);
	proxy_deadline_start(&r->handshake_due, r->start_ms, r->e->header_timeout_ms); /* (begun now) */
	event_add(r->handshake_timer, r->e->tv_header);
	return 0;
}

void proxy_relay_handshake_done(struct proxy_relay *r)
{
	if (r->handshake_timer)
		event_del(r->handshake_timer);
}

void proxy_relay_handshake_gone(struct proxy_relay *r, const char *reason)
{
	snprintf(r->reason, sizeof r->reason, "%s", reason);
	snprintf(r->error, sizeof r->error, "the client closed the connection");
	proxy_relay_end(r);
}

/* ---- refusals ---- */

/* The helpful 403 body: what was denied, why, and how to allow it. */
static void deny_body(char *buf, size_t len, const struct proxy_relay *r, const char *reason)
{
	const char *host = r->t.host;
	unsigned port = r->t.port;

	snprintf(buf, len,
	         "sluice denied this request.\n\n"
	         "  host:    %s\n  port:    %u\n  session: %s\n  reason:  %s\n  rule:    %s\n\n"
	         "To allow it, add the host to the session's policy, for example\n"
	         "  sluice run --allow %s:%u ...\n"
	         "or an allow rule for \"%s\" in .sluice/policy.json. A deny rule of the organisation policy\n"
	         "(/etc/sluice) can only be changed by its administrator.\n",
	         host, port, r->s->id, reason, r->rule[0] ? r->rule : "none (nothing allows it: default deny)", host,
	         port, host);
}

/* A policy denial of the decided destination: 403 with the helpful body. */
static void refuse_denied(struct proxy_relay *r, const char *reason)
{
	char body[1600];

	r->decision = "deny";
	deny_body(body, sizeof body, r, reason);
	r->ops->refuse(r, 403, "deny", body);
}

void proxy_relay_deny(struct proxy_relay *r, int status, const char *reason)
{
	char body[800];

	r->decision = "deny";
	snprintf(r->reason, sizeof r->reason, "%s", reason);
	snprintf(body, sizeof body, "sluice: %d %s\n%s\n", status, proxy_http_status_text(status), reason);
	r->ops->refuse(r, status, "deny", body);
}

/* An upstream failure (the decision stands): 502/504 with the reason. */
static void refuse_error(struct proxy_relay *r, int status, const char *reason)
{
	char body[800];

	snprintf(r->error, sizeof r->error, "%s", reason);
	snprintf(body, sizeof body, "sluice: %d %s\n%s\n", status, proxy_http_status_text(status), reason);
	r->ops->refuse(r, status, "error", body);
}

static void drained_cb(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		proxy_relay_end(arg);
}

static void closing_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	proxy_relay_end(arg);
}

void proxy_relay_close_after_flush(struct proxy_relay *r)
{
	proxy_relay_finish(r);
	proxy_relay_drop_upstream(r);
	if (r->wait.ask)
		proxy_ask_unhold(&r->wait);
	if (!r->client || evbuffer_get_length(bufferevent_get_output(r->client)) == 0) {
		proxy_relay_end(r);
		return;
	}
	bufferevent_disable(r->client, EV_READ);
	bufferevent_setwatermark(r->client, EV_WRITE, 0, 0);
	bufferevent_setcb(r->client, NULL, drained_cb, closing_event_cb, r);
	bufferevent_set_timeouts(r->client, NULL, r->e->tv_header);
	bufferevent_enable(r->client, EV_WRITE);
}

void proxy_relay_send_close(struct proxy_relay *r, const void *data, size_t len)
{
	if (r->client)
		evbuffer_add(bufferevent_get_output(r->client), data, len);
	proxy_relay_close_after_flush(r);
}

void proxy_relay_refuse_tls(struct proxy_relay *r, const char *reason)
{
	static const uint8_t alert[] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31}; /* fatal access_denied */

	if (reason) {
		r->decision = "deny";
		if (!r->reason[0])
			snprintf(r->reason, sizeof r->reason, "%s", reason);
	}
	proxy_relay_send_close(r, alert, sizeof alert);
}

void proxy_relay_client_gone_cb(struct bufferevent *bev, short what, void *arg)
{
	struct proxy_relay *r = arg;
	(void)bev;
	(void)what;
	if (r->active && !r->error[0])
		snprintf(r->error, sizeof r->error, "the client closed the connection");
	proxy_relay_end(r);
}

/* ---- decide, hold, dial ---- */

static void go_on(struct proxy_relay *r)
{
	/* Fail closed: nothing goes out unless its decision record can reach the log. New connections are
	 * refused at their accept (proxy_session_admit); this is for one admitted before a write failed and
	 * decided after it (a SOCKS5 or TLS handshake, a held ask, a kept-alive connection's CONNECT), whose
	 * record would otherwise wait in memory while its bytes went out. */
	if (!proxy_audit_writable(r->e)) {
		r->decision = "deny";
		refuse_error(r, 503, "the audit log cannot be written; connections are refused until it can");
		return;
	}
	proxy_relay_log_decision(r); /* before anything is resolved or sent */
	if (r->ops->allowed)
		r->ops->allowed(r);
	else
		proxy_relay_dial(r);
}

/* The verdict on a held exchange (ask.c). */
static void asked(struct proxy_ask_wait *w, bool allow, const char *reason, void *arg)
{
	struct proxy_relay *r = arg;
	(void)w;

	snprintf(r->reason, sizeof r->reason, "%s", reason);
	if (allow) {
		r->decision = "allow";
		go_on(r);
		return;
	}
	refuse_denied(r, reason);
}

/* The session's policy was replaced while the exchange is held for approval: the new policy decides it as
 * an operator's verdict would. Still undecided (ask): it stays held on its ask, which the operator still
 * sees and may decide; allowed now: released as if approved; denied now: refused (403, or the front's own
 * refusal), its record naming the new policy's rule and reason. An exchange checked under the old policy
 * for more than its destination (ops->held_bound: an inspected request, by the host's HTTP rules, with its
 * credential) is refused on any change: those checks are not made again here (fail closed), and the
 * client sends it again. It acts at once, within the session's walk of its connections
 * (proxy_session_set_policy): a release only starts a dial (its work is deferred to the loop) or a send
 * on this exchange's own connections, and a refusal ends this exchange alone. Returns true: the session
 * does not close it. */
static bool held_redecide(struct proxy_relay *r, const struct policy *p)
{
	struct policy_decision d;
	const char *bound = r->ops->held_bound ? r->ops->held_bound(r, p) : NULL;

	if (bound) {
		char why[400];
		snprintf(why, sizeof why,
		         "the session's policy changed while this request was held for approval (%s); send it again",
		         bound);
		proxy_ask_unhold(&r->wait);
		proxy_relay_deny(r, 403, why);
		return true;
	}
	switch (proxy_relay_redecide(r, p, &d)) {
	case POLICY_ASK: return true;
	case POLICY_ALLOW:
		proxy_ask_unhold(&r->wait); /* (the ask ends with its last waiter: gone from the operator's list) */
		util_strlcpy(r->rule, policy_decision_where(&d), sizeof r->rule);
		snprintf(r->reason, sizeof r->reason,
		         "released while held for approval: the session's new policy allows %s:%u", r->t.host,
		         r->t.port);
		r->decision = "allow";
		go_on(r);
		return true;
	case POLICY_DENY: break;
	}
	proxy_ask_unhold(&r->wait);
	util_strlcpy(r->rule, policy_decision_where(&d), sizeof r->rule);
	snprintf(r->reason, sizeof r->reason, "the session's new policy denies it while it was held for approval: %s",
	         policy_decision_reason(&d));
	refuse_denied(r, r->reason);
	return true;
}

/* proxy_conn.still_allowed: the session's policy was replaced. A held exchange: held_redecide. A tunnel
 * (or its dial) of a front that decides again (ops->redecide) goes on if the new policy allows its
 * destination, and the session closes it otherwise (its record says why). An HTTP request being answered
 * finishes: the next one is decided anew. */
static bool still_allowed_cb(struct proxy_conn *pc, const struct policy *p)
{
	struct proxy_relay *r = (struct proxy_relay *)pc;
	struct policy_decision d;

	if (r->wait.ask)
		return held_redecide(r, p);
	if (!r->ops->redecide || proxy_relay_redecide(r, p, &d) == POLICY_ALLOW)
		return true;
	snprintf(r->error, sizeof r->error, "closed: the session's new policy no longer allows %s:%u", r->t.host,
	         r->t.port);
	return false;
}

enum policy_verdict proxy_relay_decide(struct proxy_relay *r, const char *host, size_t len, bool bracketed,
                                       uint16_t port, unsigned method_bit, unsigned flags)
{
	r->method_bit = method_bit;
	/* Decided on the canonical name (or the literal) alone: nothing is resolved or sent before this
	 * says allow. */
	r->bad_target = proxy_target_decide(r->s, host, len, bracketed, port, method_bit, flags & PROXY_RELAY_NAME_ONLY,
	                                    &r->t) != 0;
	if (r->bad_target) {
		r->decision = "deny";
		return POLICY_DENY;
	}
	util_strlcpy(r->rule, policy_decision_where(&r->t.dec), sizeof r->rule);
	if (r->ops->redecide)
		r->conn.still_allowed = still_allowed_cb; /* a policy change decides the destination again */
	if (r->t.dec.verdict == POLICY_ASK && !r->ops->hold_asks)
		r->t.dec.verdict = POLICY_DENY; /* a front that cannot hold: an undecided destination is denied */
	r->decision = policy_verdict_name(r->t.dec.verdict);
	return r->t.dec.verdict;
}

void proxy_relay_proceed(struct proxy_relay *r)
{
	if (r->bad_target) {
		proxy_relay_deny(r, 400, r->t.why);
		return;
	}
	if (r->t.dec.verdict == POLICY_ASK) {
		/* No rule matched and the session asks: hold until an operator decides or the ask times
		 * out. Nothing is resolved or sent meanwhile. */
		/* (the operator sees the method it was decided as: a SOCKS5 connect names none, a CONNECT's) */
		const char *m = r->method[0] || r->method_bit != POLICY_M_CONNECT ? r->method : "CONNECT";
		if (proxy_ask_hold(r->s, &r->wait, r->ops->protocol, m, r->t.host, r->t.port, asked, r, r->reason,
		                   sizeof r->reason) != 0) {
			refuse_denied(r, r->reason);
			return;
		}
		proxy_relay_log_decision(r);
		r->conn.still_allowed = still_allowed_cb; /* a policy change decides it again */
		if (r->ops->held)
			r->ops->held(r);
		return;
	}
	if (r->t.dec.verdict != POLICY_ALLOW) {
		refuse_denied(r, r->t.reason);
		return;
	}
	go_on(r);
}

static void dialed(struct bufferevent *up, const struct proxy_dial_result *res, void *arg)
{
	struct proxy_relay *r = arg;

	r->dial = NULL;
	snprintf(r->address, sizeof r->address, "%s", res->address);
	if (!up) {
		if (res->status == 403) {
			/* every address of the name is in a range the policy forbids */
			snprintf(r->rule, sizeof r->rule, "%s", res->rule);
			snprintf(r->reason, sizeof r->reason, "%s", res->reason);
			refuse_denied(r, res->reason);
		} else {
			refuse_error(r, res->status, res->reason);
		}
		return;
	}
	r->up = up;
	r->up_addr = res->addr;
	r->up_via_parent = res->via_parent;
	r->ops->connected(r);
}

void proxy_relay_dial(struct proxy_relay *r)
{
	proxy_relay_drop_upstream(r);
	r->dial = proxy_dial_start(r->s, &r->t, !r->ops->speaks_http || r->upstream_tls, dialed, r);
	if (!r->dial)
		refuse_error(r, 502, "cannot start resolving or connecting (out of resources)");
}

/* ---- tunnel ---- */

static void tunnel_done(struct tunnel *t, const char *err, void *arg)
{
	struct proxy_relay *r = arg;
	(void)t;
	if (err && !r->error[0])
		snprintf(r->error, sizeof r->error, "%s", err);
	proxy_relay_end(r);
}

void proxy_relay_tunnel(struct proxy_relay *r)
{
	struct bufferevent *cl = r->client, *up = r->up;

	r->client = r->up = NULL;
	r->tunnel = tunnel_new(r->e, cl, up, tunnel_done, r); /* frees both on failure */
	if (!r->tunnel) {
		snprintf(r->error, sizeof r->error, "out of memory");
		proxy_relay_end(r);
	}
}
