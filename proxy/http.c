/* The HTTP front's client half (http_conn.h): one client connection of the forward proxy (or of
 * transparent mode's port 80). Each request head is read within the limits, checked by the strict
 * parser and decided through the relay (relay.h: name, policy, ask, dial, audit records); an allowed
 * request goes on in http_forward.c. Keep-alive both ways, pipelined requests one after the other,
 * CONNECT heads handed to connect.c, and our own responses (400/403/502/504...) that say why. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine.h"
#include "http_conn.h"
#include "log.h"
#include "util.h"
#include "parent.h"
#include "splice_pump.h"

/* ---- our own responses ---- */

const char *proxy_http_status_text(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 408: return "Request Timeout";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	default: return "Error";
	}
}

/* Header values must never carry CR/LF or control bytes, whatever a policy path contains. */
static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
			*s = '?';
}

void proxy_decision_header(char *buf, size_t len, const char *decision, const char *rule)
{
	if (rule && *rule)
		snprintf(buf, len, "%s; rule=%s", decision, rule);
	else
		snprintf(buf, len, "%s", decision);
	sanitize(buf);
}

void proxy_http_error(struct bufferevent *out, int status, const char *decision_hdr, const char *body, bool close)
{
	struct evbuffer *o = bufferevent_get_output(out);
	char dh[POLICY_WHERE_MAX + 32];

	snprintf(dh, sizeof dh, "%s", decision_hdr ? decision_hdr : "error");
	sanitize(dh);
	evbuffer_add_printf(o,
	                    "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Sluice-Decision: %s\r\n"
	                    "Content-Length: %zu\r\nCache-Control: no-store\r\n%s\r\n%s",
	                    status, proxy_http_status_text(status), dh, strlen(body),
	                    close ? "Connection: close\r\n" : "", body);
}

enum http_scan_result http_scan_input(struct http_scanner *s, struct evbuffer *in)
{
	size_t avail = evbuffer_get_length(in);
	enum http_scan_result sr = HTTP_SCAN_MORE;

	while (s->total < avail && sr == HTTP_SCAN_MORE) {
		struct evbuffer_ptr p;
		struct evbuffer_iovec v[8];
		int nv;
		evbuffer_ptr_set(in, &p, s->total, EVBUFFER_PTR_SET);
		nv = evbuffer_peek(in, (ev_ssize_t)(avail - s->total), &p, v, 8);
		if (nv <= 0)
			break;
		for (int i = 0; i < nv && i < 8 && sr == HTTP_SCAN_MORE; i++) {
			size_t used;
			sr = http_scanner_feed(s, v[i].iov_base, v[i].iov_len, &used);
		}
	}
	return sr;
}

void http_set_timer(struct http_conn *c, const struct timeval *tv)
{
	event_add(c->timer, tv);
}

void http_bev_enable(struct bufferevent *bev, short what)
{
	short missing = (short)(what & ~bufferevent_get_enabled(bev));

	if (missing)
		bufferevent_enable(bev, missing);
}

void http_close_after_flush(struct http_conn *c)
{
	http_send_pending(c);
	if (c->pump)
		splice_pump_stop(c->pump); /* before the upstream's socket closes under it */
	c->state = ST_CLOSING;
	event_del(c->timer);
	proxy_relay_close_after_flush(&c->r); /* may free c */
}

void http_next_request(struct http_conn *c)
{
	proxy_relay_finish(&c->r);
	c->state = ST_HEAD;
	c->head_due.due_ms = 0; /* (the idle timeout: no stall grace, head_timeout_spared) */
	c->tls_reads_first = 0;
	c->accept_ms = 0;
	http_scanner_init(&c->scan, false);
	http_bev_enable(c->r.client, EV_READ);
	http_set_timer(c, c->r.e->tv_idle);
	/* A pipelined request already read is handled from the loop, not by recursion (which a
	 * client could drive deep with many tiny requests). */
	if (evbuffer_get_length(bufferevent_get_input(c->r.client)))
		bufferevent_trigger(c->r.client, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
}

void http_respond(struct http_conn *c, int status, const char *decision, const char *body)
{
	char dh[POLICY_WHERE_MAX + 32];
	bool keep = c->client_keep && c->req_body == HTTP_BODY_NONE && c->state != ST_FORWARD;

	http_send_pending(c); /* (a response before ours goes first) */
	c->r.status = status;
	proxy_decision_header(dh, sizeof dh, decision, c->r.rule);
	proxy_http_error(c->r.client, status, dh, body, !keep);
	if (keep)
		http_next_request(c);
	else
		http_close_after_flush(c);
}

void http_fail(struct http_conn *c, int status, const char *why)
{
	char body[800];

	snprintf(c->r.error, sizeof c->r.error, "%s", why);
	if (c->resp_started) {
		/* Part of the response is already with the client: all we can do is close. */
		http_close_after_flush(c);
		return;
	}
	snprintf(body, sizeof body, "sluice: %d %s\n%s\n", status, proxy_http_status_text(status), why);
	http_respond(c, status, "error", body);
}

/* ---- the relay's hooks ---- */

static void refuse(struct proxy_relay *r, int status, const char *decision, const char *body)
{
	http_respond((struct http_conn *)r, status, decision, body);
}

void http_park_upstream(struct http_conn *c)
{
	struct bufferevent *up = c->r.up;

	if (!up || c->inspect || c->up_plain || c->up_parent || c->r.dial)
		return;
	c->r.up = NULL;
	proxy_up_pool_put(c->r.s, up, c->up_host, c->up_port, &c->up_sa, c->up_address);
}

/* Takes an idle upstream of the session for the allowed request from the pool: true when r->up is now
 * one. */
static bool take_pooled(struct http_conn *c)
{
	struct proxy_relay *r = &c->r;
	struct bufferevent *up;

	if (c->inspect || proxy_parent_for(r->e, &r->t))
		return false;
	up = proxy_up_pool_take(r->s, &r->t, &c->up_sa, c->up_address);
	if (!up)
		return false;
	/* The decision record is on disk before the request goes out, as before a dial (batched, it would
	 * be written at the end of this loop iteration, after the request: a kill -9 in between would lose
	 * it). A connection per request has one record in the batch: the same one write, earlier. */
	(void)proxy_engine_flush_audit(r->e);
	proxy_relay_drop_upstream(r); /* (one never pooled: through the parent proxy) */
	r->up = up;
	c->up_parent = false;
	c->up_policy_gen = r->s->policy_gen; /* (checked by the take) */
	util_strlcpy(c->up_host, r->t.host, sizeof c->up_host);
	c->up_port = r->t.port;
	return true;
}

/* Allowed (at once or approved): reuse the kept-alive upstream for the same host and port (its address
 * allowed by the policy now), or an idle one of the session's (up_pool.c), or dial. */
static void allowed(struct proxy_relay *r)
{
	struct http_conn *c = (struct http_conn *)r;
	bool same = r->up && strcmp(c->up_host, r->t.host) == 0 && c->up_port == r->t.port;

	if (same && !c->inspect && !c->up_plain && !c->up_parent && c->up_policy_gen != r->s->policy_gen) {
		/* the policy was replaced since the address was checked: again */
		same = proxy_up_pool_allows(r->s, &r->t, &c->up_sa);
		if (!same)
			proxy_relay_drop_upstream(r); /* never reused */
		c->up_policy_gen = r->s->policy_gen;
	}
	if (r->up && !same)
		http_park_upstream(c); /* another host's, idle: the session's next request to it may take it */
	if ((same && (!c->up_plain || evbuffer_get_length(bufferevent_get_input(r->up)) == 0)) || take_pooled(c)) {
		util_strlcpy(r->address, c->up_address, sizeof r->address);
		if (c->up_plain) {
			/* the inspected CONNECT's own connection: its TLS now (verified), then the request */
			c->up_plain = false;
			c->state = ST_DIAL;
			bufferevent_disable(r->client, EV_READ);
			event_del(c->timer);
			http_inspect_upstream(c);
			return;
		}
		c->up_reused = true;
		http_forward_start(c);
		return;
	}
	c->up_plain = false;
	c->state = ST_DIAL;
	bufferevent_disable(r->client, EV_READ);
	event_del(c->timer);
	proxy_relay_dial(r);
}

/* The session's policy was replaced while a request is held: what was checked when it was read, under the
 * old policy, beyond its destination. An inspected request's HTTP rules (and the credential its head
 * carries), and the search for credential placeholders (c->ph borrows the policy it was set up for), are
 * not made again: such a request is refused, the client sends it again. */
static const char *held_bound(struct proxy_relay *r, const struct policy *p)
{
	struct http_conn *c = (struct http_conn *)r;

	if (c->inspect)
		return "its HTTP rules were applied under the old one";
	if (c->ph_scan || policy_credential_count(p))
		return "the policies name credentials, and its search for their placeholders was made under the old "
		       "one";
	return NULL;
}

/* Held for approval: reading stays on, so a client that gives up is noticed; what it sends meanwhile
 * waits within the read watermark. A policy change meanwhile decides it again (relay.c, held_redecide). */
static void held(struct proxy_relay *r)
{
	struct http_conn *c = (struct http_conn *)r;

	c->state = ST_ASK;
	event_del(c->timer);
}

static void connected(struct proxy_relay *r)
{
	struct http_conn *c = (struct http_conn *)r;

	snprintf(c->up_address, sizeof c->up_address, "%s", r->address);
	c->up_sa = r->up_addr;
	c->up_parent = r->up_via_parent;
	c->up_policy_gen = r->s->policy_gen; /* (the dial checked the address) */
	if (c->inspect) {
		http_inspect_upstream(c); /* TLS first; it goes on with http_forward_start */
		return;
	}
	c->up_reused = false;
	snprintf(c->up_host, sizeof c->up_host, "%s", r->t.host);
	c->up_port = r->t.port;
	http_forward_start(c);
}

static void conn_free(struct proxy_relay *r)
{
	struct http_conn *c = (struct http_conn *)r;

	proxy_later_cancel(&c->later); /* (its bufferevents are gone) */
	if (c->timer)
		event_free(c->timer);
	if (c->head_out)
		evbuffer_free(c->head_out);
	if (c->head_copy)
		evbuffer_free(c->head_copy);
	if (c->tx)
		evbuffer_free(c->tx);
	splice_pump_free(c->pump);
	free(c);
}

static const struct proxy_relay_ops http_ops = {
        .protocol = "http",
        .hold_asks = true,
        .speaks_http = true,
        .redecide = false, /* a request being answered finishes; the next one is decided anew */
        .refuse = refuse,
        .allowed = allowed,
        .held = held,
        .held_bound = held_bound,
        .connected = connected,
        .free = conn_free,
};

/* Inspected HTTPS requests: the same, but recorded as protocol "https". */
static const struct proxy_relay_ops https_ops = {
        .protocol = "https",
        .hold_asks = true,
        .redecide = false,
        .refuse = refuse,
        .allowed = allowed,
        .held = held,
        .held_bound = held_bound,
        .connected = connected,
        .free = conn_free,
};

/* ---- requests ---- */

/* A request whose head carries the placeholder of a credential that is not the destination's own
 * (or any placeholder on a host that has none) is an attempt to send it elsewhere: true, with the
 * denial set up (rule: the credential's entry). Inspected requests and plain HTTP ones are checked;
 * the head and the body bytes already read are searched here, before anything is sent; the rest of
 * the body is searched as it goes upstream (http_forward.c, ph_scan). */
static bool placeholder_leak(struct http_conn *c, const char *host, const char *head, size_t head_len)
{
	const struct policy *p = c->r.s->policy;
	struct evbuffer *in = bufferevent_get_input(c->r.client);
	const struct policy_credential *found, *own;
	size_t more;

	if (!policy_credential_count(p))
		return false;
	own = c->inspect ? policy_credential_for(p, host) : NULL;
	c->ph_scan = true;
	http_ph_scan_init(&c->ph, p, own);
	found = policy_credential_find_placeholder(p, own, head, head_len);
	if (!found) {
		/* the start of a body that came with the head */
		char body[16384];
		struct evbuffer_ptr at;
		more = evbuffer_get_length(in) - head_len;
		if (more > sizeof body)
			more = sizeof body;
		/* copied out: a pullup could move the head that req points into */
		if (more && evbuffer_ptr_set(in, &at, head_len, EVBUFFER_PTR_SET) == 0 &&
		    evbuffer_copyout_from(in, &at, body, more) == (ev_ssize_t)more)
			found = policy_credential_find_placeholder(p, own, body, more);
	}
	if (!found)
		return false;
	snprintf(c->r.rule, sizeof c->r.rule, "%s", found->where);
	log_warnx("session %s: the placeholder of $%s (credential of %s) was sent to %s: refused", c->r.s->id,
	          found->placeholder_env, found->where, host);
	return true;
}

/* An inspected request: decided by the HTTP rules once the host's own decision allowed it or would hold
 * it for approval (ask), so a request they refuse is a 403 with the rule at once, never held, and an
 * approval can only release a request they allow. Returns false when it was refused (the caller stops). */
static bool inspect_request(struct http_conn *c, const struct http_request *req, size_t head_len)
{
	const struct policy *p = c->r.s->policy;
	struct policy_http_decision *hd = malloc(sizeof *hd);
	char msg[POLICY_ERR_MAX + 300];
	size_t q;

	if (!hd) {
		proxy_relay_deny(&c->r, 503, "out of memory");
		return false;
	}
	policy_decide_http(p, c->inspect_host, req->method, req->method_len, req->path, req->path_len, hd);
	/* the audit record's path: normalised, its query only when the policy asks ("log_query") */
	snprintf(c->r.path, sizeof c->r.path, "%s", hd->path[0] ? hd->path : "(unreadable)");
	const char *qm = memchr(req->path, '?', req->path_len);
	q = qm ? (size_t)(qm - req->path) : req->path_len;
	if (policy_inspect_log_query(p, c->inspect_host) && hd->path[0] && q < req->path_len)
		snprintf(c->r.path + strlen(c->r.path), sizeof c->r.path - strlen(c->r.path), "%.*s",
		         (int)(req->path_len - q), req->path + q);
	if (hd->verdict != POLICY_ALLOW) {
		snprintf(c->r.rule, sizeof c->r.rule, "%s", hd->where);
		snprintf(msg, sizeof msg, "%s %s on %s: %s; see it with `sluicectl policy explain %.32s https://%s%s`",
		         c->r.method, hd->path[0] ? hd->path : "(unreadable path)", c->inspect_host, hd->reason,
		         c->r.method, c->inspect_host, hd->path[0] ? hd->path : "/");
		free(hd);
		evbuffer_drain(bufferevent_get_input(c->r.client), head_len);
		proxy_relay_deny(&c->r, 403, msg);
		return false;
	}
	free(hd);
	return true;
}


static void handle_request(struct http_conn *c, const struct http_request *req, size_t head_len)
{
	struct evbuffer *in = bufferevent_get_input(c->r.client);
	struct http_authority auth = req->authority;
	enum policy_verdict v;

	if (c->inspect || c->plain_tunnel) {
		/* Inside a CONNECT (its TLS, or plain HTTP): the tunnel's host is the destination; a Host header
		 * must name it */
		char hh[POLICY_HOST_MAX + 1];
		const char *why = NULL;
		if (req->form == HTTP_FORM_AUTHORITY)
			why = "a CONNECT inside a tunnel";
		else if (req->form != HTTP_FORM_ORIGIN)
			why = "a tunnel carries origin-form requests (GET /path), for its own host";
		else if (req->has_host_header &&
		         (policy_canon_host(req->host_header.host, req->host_header.host_len, hh) != POLICY_CANON_OK ||
		          strcmp(hh, c->inspect_host) != 0 || (req->host_header.has_port && req->host_header.port != c->inspect_port)))
			why = "the Host header names another host than the tunnel";
		if (why) {
			evbuffer_drain(in, head_len);
			proxy_relay_deny(&c->r, 400, why);
			return;
		}
		auth.host = c->inspect_host;
		auth.host_len = strlen(c->inspect_host);
		auth.bracketed = false;
		auth.port = c->inspect_port;
		auth.has_port = true;
	} else if (c->transparent_port) {
		/* The client believes it talks to the origin: the Host header names the destination, the
		 * port is the one it connected to (nftables kept it for us), and the address it aimed at is
		 * ignored: the name is decided, resolved and dialled like any other. */
		const char *why = NULL;
		if (req->form != HTTP_FORM_ORIGIN)
			why = "transparent mode: expected an origin-form request (GET /path)";
		else if (!req->has_host_header)
			why = "transparent mode: a request without a Host header names no destination";
		else if (req->host_header.has_port && req->host_header.port != c->transparent_port)
			why = "transparent mode: the Host header's port differs from the port connected to";
		if (why) {
			evbuffer_drain(in, head_len);
			proxy_relay_deny(&c->r, 400, why);
			return;
		}
		auth = req->host_header;
		auth.port = c->transparent_port;
		auth.has_port = true;
	} else if (req->form == HTTP_FORM_AUTHORITY) {
		/* The tunnel is a new life for this client connection: connect.c owns it from here and
		 * writes its records. */
		struct bufferevent *cl = c->r.client;
		struct proxy_session *s = c->r.s;
		struct timespec rt = c->head_rt;
		uint64_t ms = c->head_ms;
		c->r.client = NULL;
		c->r.active = false;
		bufferevent_setcb(cl, NULL, NULL, NULL, NULL);
		proxy_relay_end(&c->r);
		proxy_connect_begin(s, cl, req, head_len, &rt, ms);
		return;
	}
	c->client_keep = req->keep_alive;
	c->client_http10 = req->version_minor == 0;
	c->head_request = http_token_eq(req->method, req->method_len, "HEAD");
	/* RFC 9110 9.2.2: only an idempotent request may be sent again when a kept-alive upstream fails before
	 * answering (the server may have acted on a POST and then closed) */
	c->req_idempotent = (req->method_bit & (POLICY_M_GET | POLICY_M_HEAD | POLICY_M_OPTIONS | POLICY_M_TRACE |
	                                        POLICY_M_PUT | POLICY_M_DELETE)) != 0;
	c->req_body = req->chunked ? HTTP_BODY_CHUNKED : (req->content_length > 0 ? HTTP_BODY_LENGTH : HTTP_BODY_NONE);
	c->req_left = req->content_length > 0 ? (uint64_t)req->content_length : 0;
	c->req_done = c->req_body == HTTP_BODY_NONE;
	http_chunked_init(&c->req_ch);
	c->ph_scan = false; /* placeholder_leak turns it on when the policy has credentials */

	v = proxy_relay_decide(&c->r, auth.host, auth.host_len, auth.bracketed, auth.port, req->method_bit, 0);
	if ((v == POLICY_ALLOW || v == POLICY_ASK) &&
	    placeholder_leak(c, c->r.t.host[0] ? c->r.t.host : "?", (const char *)evbuffer_pullup(in, (ev_ssize_t)head_len), head_len)) {
		char msg[600];
		snprintf(msg, sizeof msg, "exfiltration: this request carries the placeholder of a credential that belongs "
		         "to another host (policy %s); it was not sent", c->r.rule);
		evbuffer_drain(in, head_len);
		proxy_relay_deny(&c->r, 403, msg);
		return;
	}
	if ((v == POLICY_ALLOW || v == POLICY_ASK) && !c->inspect && http_token_eq(req->method, req->method_len, "TRACE")) {
		/* TRACE to a parent proxy that holds sluice's credentials: with Max-Forwards: 0 the parent answers
		 * itself, echoing the request, Proxy-Authorization included unless it redacts it */
		const struct proxy_parent *parent = proxy_parent_for(c->r.e, &c->r.t);
		if (parent && parent->auth[0]) {
			evbuffer_drain(in, head_len);
			proxy_relay_deny(&c->r, 405, "TRACE is not sent through the parent proxy: the parent could echo the "
			                 "credentials sluice adds for it");
			return;
		}
	}
	if ((v == POLICY_ALLOW || v == POLICY_ASK) && c->inspect && !inspect_request(c, req, head_len))
		return;
	/* the head for the upstream is built while req is valid: now, also for a request that is held */
	if (v == POLICY_ALLOW || v == POLICY_ASK)
		http_forward_build_head(c, req);
	evbuffer_drain(in, head_len);
	proxy_relay_proceed(&c->r);
}

static void client_read_cb(struct bufferevent *bev, void *arg);

/* The header timeout passed (after head_timeout_spared): one record, which says so (the exchange begun
 * when a kept-alive connection's head's first byte came, or when a new connection was accepted). */
static void head_timeout_record(struct http_conn *c, const char *what)
{
	if (c->accept_ms) { /* (a new connection's head: its time ran from the accept) */
		c->head_ms = c->accept_ms;
		c->head_rt.tv_sec = 0;
	}
	if (c->head_rt.tv_sec == 0) { /* no byte yet: the wall clock's time of the accept (head_ms) */
		uint64_t ago = proxy_mono_ms() - c->head_ms;
		clock_gettime(CLOCK_REALTIME, &c->head_rt);
		c->head_rt.tv_sec -= (time_t)(ago / 1000);
		c->head_rt.tv_nsec -= (long)(ago % 1000) * 1000000L;
		if (c->head_rt.tv_nsec < 0) {
			c->head_rt.tv_sec--;
			c->head_rt.tv_nsec += 1000000000L;
		}
	}
	proxy_relay_begin(&c->r, &c->head_rt, c->head_ms, NULL);
	if (c->inspect || c->plain_tunnel) { /* (inside a CONNECT: its host) */
		util_strlcpy(c->r.t.host, c->inspect_host, sizeof c->r.t.host);
		c->r.t.port = c->inspect_port;
	} else {
		c->r.t.port = c->transparent_port; /* (transparent mode: the port connected to; else 0) */
	}
	snprintf(c->r.error, sizeof c->r.error, "%s within the header timeout (%u ms)", what,
	         c->r.e->header_timeout_ms);
}

/* A head that trickles in too slowly (slowloris): 408, then close. */
static void head_timed_out(struct http_conn *c)
{
	head_timeout_record(c, "the request head did not complete");
	c->r.status = 408;
	c->client_keep = false;
	proxy_http_error(c->r.client, 408, "error",
	                 "sluice: 408 Request Timeout\nthe request head did not arrive in time\n", true);
	http_close_after_flush(c);
}

/* Reads what the client's socket (a plain one, not TLS) holds now into its input, up to the input's limit. */
static ssize_t read_now(struct http_conn *c)
{
	return proxy_bev_read_now(c->r.client, HTTP_HEAD_MAX + 4096);
}

/* The header timeout measures the client, not the engine. When it fires: (1) what the socket holds is
 * read first: bytes that came while the engine was busy or not running count as in time (after a stall,
 * epoll hands the loop a batch of ready sockets at a time and the expired timers run behind the first
 * batch: their sockets' heads were there, unread); (2) a timer that fires more than PROXY_STALL_MS after it
 * was due means the engine did not run meanwhile, and on a loaded or paused machine nor did the client:
 * once per head, the client gets the header timeout again from now. True when the connection goes on (c
 * may have been freed). */
static bool head_timeout_spared(struct http_conn *c)
{
	size_t before = c->scan.total;

	/* (a TLS client of HTTPS inspection is read by OpenSSL, not here: its read event takes the bytes later in
	 * this iteration, and the timer looks again in the next) */
	if (c->inspect && http_inspect_read_first(c))
		return true;
	if (!c->inspect && read_now(c) > 0) {
		/* A head's deadline passed (begun by its first byte, or a new connection's, begun by its accept):
		 * complete now, or 408; after a stall a new connection's first bytes get its grace instead. Else
		 * this was the idle timeout of a kept-alive connection: its next head begins. */
		if (before > 0)
			c->head_late = true;
		else if (c->head_due.due_ms &&
		         !proxy_deadline_stalled(&c->head_due, c->r.e->header_timeout_ms, c->r.s->id, "a request head"))
			c->head_late = true;
		else if (c->head_due.due_ms)
			http_set_timer(c, c->r.e->tv_header);
		client_read_cb(c->r.client, c); /* (may free c) */
		return true;
	}
	if (proxy_deadline_stalled(&c->head_due, c->r.e->header_timeout_ms, c->r.s->id, "a request head")) {
		http_set_timer(c, c->r.e->tv_header);
		return true;
	}
	return false;
}

static void head_read(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->r.client);
	size_t avail = evbuffer_get_length(in);
	enum http_scan_result sr;
	struct http_request rq, *req = &rq; /* (on the stack like a response's: a 4 KiB malloc a request was
	                                     * one glibc's per-thread cache does not serve) */
	const char *why, *head;
	size_t mlen;
	int st;

	if (avail == 0)
		return;
	if (c->scan.total == 0) {
		/* First byte of a request: its exchange begins. A kept-alive connection's head must arrive within
		 * the header timeout from now; a new connection's deadline runs from its accept (conn_start), so
		 * a first byte late in it earns no second header timeout. */
		clock_gettime(CLOCK_REALTIME, &c->head_rt);
		c->head_ms = proxy_mono_ms();
		if (!c->head_due.due_ms) {
			proxy_deadline_start(&c->head_due, c->head_ms, c->r.e->header_timeout_ms);
			c->head_late = false;
			c->tls_reads_first = 0;
			http_set_timer(c, c->r.e->tv_header);
		}
	}
	sr = http_scan_input(&c->scan, in);
	if (sr == HTTP_SCAN_MORE) {
		if (c->head_late)
			head_timed_out(c); /* the rest came too late (read when the timer fired) */
		return;
	}
	/* a complete head (or a broken one): one exchange, one audit record at least */
	proxy_relay_begin(&c->r, &c->head_rt, c->head_ms, NULL);
	c->client_keep = false;
	c->req_body = HTTP_BODY_NONE;
	c->resp_started = false; /* (the last exchange's: http_fail would close without its answer) */
	if (sr == HTTP_SCAN_ERROR) {
		proxy_relay_deny(&c->r, c->scan.status, c->scan.error);
		return;
	}
	head = (const char *)evbuffer_pullup(in, (ev_ssize_t)c->scan.total);
	if (!head) {
		snprintf(c->r.error, sizeof c->r.error, "out of memory");
		http_close_after_flush(c);
		return;
	}
	st = http_parse_request(head, c->scan.total,
	                        c->transparent_port || c->inspect || c->plain_tunnel ? HTTP_PARSE_ORIGIN_OK : 0, req, &why);
	/* (the first 32 bytes of a longer one) */
	mlen = !req->method ? 0 : req->method_len < sizeof c->r.method ? req->method_len : sizeof c->r.method - 1;
	memcpy(c->r.method, req->method ? req->method : "", mlen);
	c->r.method[mlen] = '\0';
	if (st != 0) {
		proxy_relay_deny(&c->r, st, why);
		return;
	}
	/* Fail closed, as for a new connection: a request of a connection kept alive from before a write of
	 * the audit log failed is not decided (its record, and the requests after it, would wait in memory,
	 * and past AUDIT_PENDING_MAX be lost while the requests still went out) */
	if (!proxy_audit_writable(c->r.e)) {
		http_fail(c, 503, "the audit log cannot be written; requests are refused until it can");
		return;
	}
	handle_request(c, req, c->scan.total);
}

static void client_read_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	http_send_pending(c);
	if (c->state == ST_HEAD)
		head_read(c);
	else if (c->state == ST_FORWARD) {
		http_set_timer(c, c->r.e->tv_idle);
		http_forward_client_read(c);
	}
}

static void client_write_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	http_send_pending(arg);
	http_forward_client_drained(arg);
}

static void client_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	http_send_pending(c); /* (a client that only shut its sending side still gets what was answered) */
	if (c->inspect && (what & BEV_EVENT_CONNECTED)) {
		c->tls_ok = true; /* the client accepted the session CA's certificate */
		return;
	}
	if (c->inspect && !c->tls_ok) {
		/* A client that refuses our certificate (it pins, or does not trust the session CA) ends
		 * here: say so in the log, as a denial the summary shows, not as silence. */
		proxy_relay_begin(&c->r, NULL, 0, NULL);
		snprintf(c->r.t.host, sizeof c->r.t.host, "%s", c->inspect_host);
		c->r.t.port = c->inspect_port;
		snprintf(c->r.reason, sizeof c->r.reason,
		         "the client ended the TLS handshake with the inspecting proxy (it does not trust the session CA, "
		         "or pins certificates): inspected hosts need clients that use the sandbox's CA bundle");
		snprintf(c->r.error, sizeof c->r.error, "TLS handshake with the client failed");
		proxy_relay_end(&c->r);
		return;
	}
	if (c->r.active && !c->r.error[0])
		snprintf(c->r.error, sizeof c->r.error, "the client closed the connection");
	if (c->state == ST_HEAD)
		http_park_upstream(c);
	proxy_relay_end(&c->r);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *c = arg;
	(void)fd;
	(void)what;
	http_send_pending(c);
	switch (c->state) {
	case ST_HEAD:
		if (head_timeout_spared(c))
			break;
		if (c->scan.total > 0) {
			head_timed_out(c);
		} else if (c->head_due.due_ms) {
			/* a new connection that sent nothing: closed without an answer (there is no request to
			 * answer), but not without a record */
			head_timeout_record(c, "no request");
			proxy_relay_end(&c->r);
		} else {
			http_park_upstream(c);
			proxy_relay_end(&c->r); /* idle keep-alive connection */
		}
		break;
	case ST_FORWARD: http_fail(c, 504, "the upstream did not respond within the idle timeout"); break;
	case ST_DIAL:
	case ST_ASK:
	case ST_CLOSING: break; /* the dial, the ask or the client's write timeout ends these */
	}
}

void proxy_http_accept(struct proxy_session *s, int fd)
{
	proxy_http_accept_transparent(s, fd, 0);
}

/* Sets up c (zeroed) on client (owned from now); false when it was freed for want of memory. */
static bool conn_start(struct http_conn *c, struct proxy_session *s, struct bufferevent *client,
                       const struct proxy_relay_ops *ops, uint16_t orig_port)
{
	proxy_relay_init(&c->r, s, ops, client);
	c->later.run = http_send_later_run;
	c->transparent_port = orig_port;
	c->timer = evtimer_new(s->engine->base, timer_cb, c);
	c->head_out = evbuffer_new();
	c->head_copy = evbuffer_new();
	c->tx = evbuffer_new();
	if (!c->timer || !c->head_out || !c->head_copy || !c->tx) {
		proxy_relay_end(&c->r);
		return false;
	}
	http_scanner_init(&c->scan, false);
	bufferevent_setcb(client, client_read_cb, client_write_cb, client_event_cb, c);
	bufferevent_set_max_single_read(client, PROXY_BUF_HIGH);
	bufferevent_set_max_single_write(client, PROXY_BUF_HIGH);
	/* Bounded memory: never more than a head plus a buffer's worth of unread client bytes. */
	bufferevent_setwatermark(client, EV_READ, 0, HTTP_HEAD_MAX + 4096);
	bufferevent_enable(client, EV_READ | EV_WRITE);
	c->head_ms = c->accept_ms = proxy_mono_ms(); /* (and head_rt 0: a record of a connection that sends nothing
	                                               * starts here) */
	proxy_deadline_start(&c->head_due, c->head_ms, s->engine->header_timeout_ms);
	http_set_timer(c, s->engine->tv_header);
	return true;
}

void proxy_http_accept_transparent(struct proxy_session *s, int fd, uint16_t orig_port)
{
	struct http_conn *c = calloc(1, sizeof *c);
	struct bufferevent *client = c ? bufferevent_socket_new(s->engine->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;

	if (!client) {
		free(c);
		close(fd);
		return;
	}
	proxy_bev_fast_read(client);
	if (!conn_start(c, s, client, &http_ops, orig_port))
		return;
	/* A client sends its request right behind the handshake, so it is usually here by the time the
	 * connection is accepted: read it now rather than after a round through the event loop (a new
	 * connection per request pays that round on every request). Nothing there yet: the read event
	 * brings it as usual. One recv into the input's own space: evbuffer_read would ask the socket how
	 * much it holds (ioctl FIONREAD) first. */
	if (read_now(c) > 0)
		client_read_cb(client, c); /* (may free c) */
}

void proxy_http_accept_tunnel(struct proxy_session *s, struct bufferevent *client, const char *host, uint16_t port)
{
	struct http_conn *c = calloc(1, sizeof *c);

	if (!c) {
		bufferevent_free(client);
		return;
	}
	c->plain_tunnel = true;
	snprintf(c->inspect_host, sizeof c->inspect_host, "%s", host);
	c->inspect_port = port;
	if (!conn_start(c, s, client, &http_ops, 0))
		return;
	if (evbuffer_get_length(bufferevent_get_input(client)) > 0)
		client_read_cb(client, c); /* the request that made it one (may free c) */
}

/* The CONNECT's connection while no request took it: an upstream that speaks first or goes away is
 * not kept (the next request dials). */
static void plain_up_read_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	proxy_relay_drop_upstream(&((struct http_conn *)arg)->r);
}

static void plain_up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	proxy_relay_drop_upstream(&((struct http_conn *)arg)->r);
}

void proxy_http_accept_inspected(struct proxy_session *s, struct bufferevent *tls, const char *host, uint16_t port,
                                 struct bufferevent *up, const char *address)
{
	struct http_conn *c = calloc(1, sizeof *c);

	if (!c) {
		bufferevent_free(tls);
		if (up)
			bufferevent_free(up);
		return;
	}
	c->inspect = true;
	c->r.upstream_tls = true; /* TLS to the origin: through a parent proxy, a CONNECT tunnel */
	snprintf(c->inspect_host, sizeof c->inspect_host, "%s", host);
	c->inspect_port = port;
	if (!conn_start(c, s, tls, &https_ops, 0)) {
		if (up)
			bufferevent_free(up);
		return;
	}
	if (up) {
		c->r.up = up;
		c->up_plain = true;
		snprintf(c->up_host, sizeof c->up_host, "%s", host);
		c->up_port = port;
		snprintf(c->up_address, sizeof c->up_address, "%s", address);
		bufferevent_setcb(up, plain_up_read_cb, NULL, plain_up_event_cb, c);
		bufferevent_enable(up, EV_READ);
	}
}
