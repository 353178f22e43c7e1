/* HTTP/1.1 forward proxy connections: read and check each request head, decide it, dial (or reuse
 * the kept-alive upstream), forward the rewritten head and stream both bodies with back-pressure,
 * pass responses (redirects included) back, and write one audit line per request. CONNECT heads are
 * handed to connect.c. Responses of our own (400/403/502/504...) say why. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_parse.h"
#include "log.h"
#include "proxy_int.h"

enum http_state { ST_HEAD, ST_ASK, ST_DIAL, ST_FORWARD, ST_CLOSING };

struct http_conn {
	struct proxy_conn base;     /* attached to the session */
	struct proxy_session *s;    /* borrowed */
	struct proxy_engine *e;     /* borrowed */
	struct bufferevent *client; /* owned */
	struct bufferevent *up;     /* owned; NULL when there is none */
	struct proxy_dial *dial;    /* owned while dialing */
	struct proxy_ask_wait wait; /* while held for approval (ST_ASK) */
	struct event *timer;        /* owned: header, idle and flush timeouts */
	struct evbuffer *head_out;  /* owned: the rewritten request head */
	struct evbuffer *head_copy; /* owned: kept while a reused upstream may still fail before answering */
	struct evbuffer *tx;        /* owned: response bytes for the client not yet written (send_now) */
	enum http_state state;
	uint16_t transparent_port; /* 0: forward proxy; else a redirected connection's original port */
	struct http_scanner scan;
	bool requests_seen;
	/* the kept-alive upstream */
	char up_host[POLICY_HOST_MAX + 1];
	uint16_t up_port;
	char up_addr[PROXY_ADDRSTR_MAX];
	bool up_reused;
	/* the current request */
	bool audit_pending;
	struct timespec start_rt;
	uint64_t start_ms;
	char method[33];
	struct proxy_target t;
	const char *decision;
	char rule[POLICY_WHERE_MAX];
	int status;
	bool head_request, client_keep, client_http10;
	enum http_body_kind req_body;
	uint64_t req_left;
	struct http_chunked req_ch;
	bool req_done;
	struct http_scanner rscan;
	bool resp_started, resp_head_done, resp_done, resp_keep;
	enum http_body_kind resp_body;
	uint64_t resp_left;
	struct http_chunked resp_ch;
	uint64_t bytes_out, bytes_in;
	char error[800];
};

static void conn_free(struct http_conn *c);
static void head_read(struct http_conn *c);
static void up_read_cb(struct bufferevent *bev, void *arg);
static void dialed(struct bufferevent *bev, const struct proxy_dial_result *res, void *arg);

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

void proxy_deny_body(char *buf, size_t len, struct proxy_session *s, const char *host, uint16_t port,
                     const char *reason, const char *rule)
{
	snprintf(buf, len,
	         "sluice denied this request.\n\n"
	         "  host:    %s\n  port:    %u\n  session: %s\n  reason:  %s\n  rule:    %s\n\n"
	         "To allow it, add the host to the session's policy, for example\n"
	         "  sluice run --allow %s:%u ...\n"
	         "or an allow rule for \"%s\" in .sluice/policy.json. A deny rule of the organisation policy\n"
	         "(/etc/sluice) can only be changed by its administrator.\n",
	         host, port, s->id, reason, (rule && *rule) ? rule : "none (nothing allows it: default deny)", host,
	         port, host);
}

static void set_timer(struct http_conn *c, const struct timeval *tv)
{
	event_add(c->timer, tv);
}

static void write_audit(struct http_conn *c)
{
	struct audit_record r;

	if (!c->audit_pending)
		return;
	c->audit_pending = false;
	memset(&r, 0, sizeof r);
	r.start = c->start_rt;
	r.duration_ms = proxy_mono_ms() - c->start_ms;
	r.protocol = "http";
	r.host = c->t.host[0] ? c->t.host : NULL;
	r.port = c->t.port;
	r.method = c->method[0] ? c->method : NULL;
	r.decision = c->decision ? c->decision : "deny";
	r.rule = c->rule;
	r.reason = c->t.reason[0] ? c->t.reason : (c->t.why[0] ? c->t.why : NULL);
	r.address = c->up_addr[0] ? c->up_addr : NULL;
	r.status = c->status;
	r.bytes_out = c->bytes_out;
	r.bytes_in = c->bytes_in;
	r.error = c->error[0] ? c->error : NULL;
	if (c->s)
		proxy_session_audit(c->s, &r);
}

static void drop_upstream(struct http_conn *c)
{
	if (c->dial) {
		proxy_dial_cancel(c->dial);
		c->dial = NULL;
	}
	if (c->up) {
		bufferevent_free(c->up);
		c->up = NULL;
	}
	c->up_host[0] = '\0';
}

static void conn_free(struct http_conn *c)
{
	if (c->wait.ask) {
		/* gone while held: it never went anywhere */
		c->decision = "deny";
		proxy_ask_unhold(&c->wait);
	}
	write_audit(c);
	drop_upstream(c);
	if (c->client)
		bufferevent_free(c->client);
	if (c->timer)
		event_free(c->timer);
	if (c->head_out)
		evbuffer_free(c->head_out);
	if (c->head_copy)
		evbuffer_free(c->head_copy);
	if (c->tx)
		evbuffer_free(c->tx);
	proxy_session_detach(&c->base);
	free(c);
}

static void session_close_cb(struct proxy_conn *pc)
{
	struct http_conn *c = (struct http_conn *)pc;
	if (c->audit_pending && !c->error[0])
		snprintf(c->error, sizeof c->error, "session removed");
	conn_free(c);
}

static void client_drained_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	if (evbuffer_get_length(bufferevent_get_output(c->client)) == 0)
		conn_free(c);
}

/* Close only after the last byte queued for the client was written. */
static void close_after_flush(struct http_conn *c)
{
	write_audit(c);
	drop_upstream(c);
	c->state = ST_CLOSING;
	bufferevent_disable(c->client, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->client)) == 0) {
		conn_free(c);
		return;
	}
	bufferevent_setwatermark(c->client, EV_WRITE, 0, 0);
	bufferevent_setcb(c->client, NULL, client_drained_cb, NULL, c);
	bufferevent_enable(c->client, EV_WRITE);
	set_timer(c, c->e->tv_header);
}

/* Back to waiting for the next request on a kept-alive client connection. */
static void next_request(struct http_conn *c)
{
	write_audit(c);
	c->state = ST_HEAD;
	http_scanner_init(&c->scan, false);
	c->method[0] = '\0';
	memset(&c->t, 0, sizeof c->t);
	c->decision = NULL;
	c->rule[0] = c->error[0] = '\0';
	c->status = 0;
	c->bytes_in = c->bytes_out = 0;
	bufferevent_enable(c->client, EV_READ);
	set_timer(c, c->e->tv_idle);
	/* A pipelined request already read is handled from the loop, not by recursion (which a
	 * client could drive deep with many tiny requests). */
	if (evbuffer_get_length(bufferevent_get_input(c->client)))
		bufferevent_trigger(c->client, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
}

/* A response of our own for the current request; keep-alive only when the request had no body. */
static void respond(struct http_conn *c, int status, const char *decision, const char *body)
{
	char dh[POLICY_WHERE_MAX + 32];
	bool keep = c->client_keep && c->req_body == HTTP_BODY_NONE && c->state != ST_FORWARD;

	c->status = status;
	proxy_decision_header(dh, sizeof dh, decision, c->rule);
	proxy_http_error(c->client, status, dh, body, !keep);
	if (keep)
		next_request(c);
	else
		close_after_flush(c);
}

static void fail(struct http_conn *c, int status, const char *why)
{
	char body[768];
	snprintf(c->error, sizeof c->error, "%s", why);
	if (c->resp_started) {
		/* Part of the response is already with the client: all we can do is close. */
		close_after_flush(c);
		return;
	}
	snprintf(body, sizeof body, "sluice: %s %s\n%s\n", proxy_http_status_text(status),
	         status == 504 ? "(upstream timeout)" : "(upstream failure)", why);
	respond(c, status, "error", body);
}

static void maybe_finish(struct http_conn *c)
{
	bool keep_client, keep_up;

	if (!c->req_done || !c->resp_done)
		return;
	keep_up = c->resp_keep && c->up && evbuffer_get_length(bufferevent_get_input(c->up)) == 0;
	keep_client = c->client_keep && c->resp_body != HTTP_BODY_CLOSE;
	if (!keep_up)
		drop_upstream(c);
	if (keep_client)
		next_request(c);
	else
		close_after_flush(c);
}

/* ---- request body: client -> upstream ---- */

static void pump_request(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->client);
	struct evbuffer *out;

	if (c->state != ST_FORWARD || c->req_done || !c->up)
		return;
	out = bufferevent_get_output(c->up);
	while (!c->req_done && evbuffer_get_length(in) > 0) {
		size_t n = evbuffer_get_length(in);
		if (evbuffer_get_length(out) >= PROXY_BUF_HIGH) {
			/* Back-pressure: the upstream is slow; stop reading the client until it drains. */
			bufferevent_disable(c->client, EV_READ);
			bufferevent_setwatermark(c->up, EV_WRITE, PROXY_BUF_HIGH / 2, 0);
			return;
		}
		if (c->req_body == HTTP_BODY_LENGTH) {
			if ((uint64_t)n > c->req_left)
				n = (size_t)c->req_left;
			if (n > PROXY_BUF_HIGH)
				n = PROXY_BUF_HIGH;
			evbuffer_remove_buffer(in, out, n);
			c->req_left -= n;
			c->bytes_out += n;
			if (c->req_left == 0)
				c->req_done = true;
		} else { /* chunked */
			struct evbuffer_iovec v;
			size_t used;
			enum http_chunk_result r;
			if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
				break;
			r = http_chunked_feed(&c->req_ch, v.iov_base, v.iov_len, &used);
			evbuffer_remove_buffer(in, out, used);
			c->bytes_out += used;
			if (r == HTTP_CHUNK_ERROR) {
				snprintf(c->error, sizeof c->error, "malformed chunked request body: %s",
				         c->req_ch.error);
				c->status = 400;
				close_after_flush(c);
				return;
			}
			if (r == HTTP_CHUNK_DONE)
				c->req_done = true;
		}
	}
	if (c->req_done) {
		/* What follows is a pipelined request: it waits in the input buffer (bounded by the read
		 * watermark) until this response is done. Reading stays enabled: a client closing early
		 * is noticed, and no epoll change is paid per request. */
		maybe_finish(c);
	}
}

/* Sends data on bev: written now when nothing is queued ahead of it, and only what the socket did not
 * take is queued. A bufferevent waits for EPOLLOUT before it writes, which costs two epoll_ctl calls
 * and a loop iteration per write; small requests and responses are written at once this way. An
 * error (a reset peer) leaves the data queued, so the bufferevent's own write reports it as usual. */
static void send_now(struct bufferevent *bev, struct evbuffer *data)
{
	struct evbuffer *out = bufferevent_get_output(bev);

	if (evbuffer_get_length(out) == 0 && evbuffer_get_length(data) > 0)
		(void)evbuffer_write(data, bufferevent_getfd(bev));
	if (evbuffer_get_length(data) > 0)
		evbuffer_add_buffer(out, data);
}

/* ---- response: upstream -> client ---- */

/* Response bytes go to c->tx first and out in one write (send_now) when the pump stops. */
static void write_response_head(struct http_conn *c, const struct http_response *r, bool final)
{
	struct evbuffer *o = c->tx;
	bool keep = c->client_keep && r->body != HTTP_BODY_CLOSE;

	evbuffer_add_printf(o, "HTTP/1.1 %u %.*s\r\n", r->status, (int)r->reason_len, r->reason);
	for (unsigned i = 0; i < r->nheaders; i++) {
		const struct http_header *h = &r->headers[i];
		if (h->hop)
			continue;
		evbuffer_add(o, h->name, h->name_len);
		evbuffer_add(o, ": ", 2);
		evbuffer_add(o, h->value, h->value_len);
		evbuffer_add(o, "\r\n", 2);
	}
	evbuffer_add(o, "Via: 1.1 sluice\r\n", 17);
	if (final && !keep)
		evbuffer_add(o, "Connection: close\r\n", 19);
	else if (final && c->client_http10)
		evbuffer_add(o, "Connection: keep-alive\r\n", 24);
	evbuffer_add(o, "\r\n", 2);
}

/* Returns false when the connection was closed. */
static bool response_head(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->up);
	size_t avail = evbuffer_get_length(in);
	struct http_response resp;
	const char *why;
	enum http_scan_result sr = HTTP_SCAN_MORE;
	char msg[800];
	const char *head;

	while (c->rscan.total < avail && sr == HTTP_SCAN_MORE) {
		struct evbuffer_ptr p;
		struct evbuffer_iovec v[4];
		int nv;
		evbuffer_ptr_set(in, &p, c->rscan.total, EVBUFFER_PTR_SET);
		nv = evbuffer_peek(in, (ev_ssize_t)(avail - c->rscan.total), &p, v, 4);
		for (int i = 0; i < nv && i < 4 && sr == HTTP_SCAN_MORE; i++) {
			size_t used;
			sr = http_scanner_feed(&c->rscan, v[i].iov_base, v[i].iov_len, &used);
		}
		if (nv <= 0)
			break;
	}
	if (sr == HTTP_SCAN_MORE)
		return true;
	if (sr == HTTP_SCAN_ERROR) {
		snprintf(msg, sizeof msg, "the upstream sent a malformed response head: %s", c->rscan.error);
		fail(c, 502, msg);
		return false;
	}
	head = (const char *)evbuffer_pullup(in, (ev_ssize_t)c->rscan.total);
	if (!head || http_parse_response(head, c->rscan.total, c->head_request, &resp, &why) != 0) {
		snprintf(msg, sizeof msg, "the upstream sent a malformed response head: %s", head ? why : "no memory");
		fail(c, 502, msg);
		return false;
	}
	if (resp.status == 101) {
		fail(c, 502, "the upstream switched protocols, which this proxy does not support (use CONNECT)");
		return false;
	}
	if (resp.status < 200) {
		write_response_head(c, &resp, false);
		evbuffer_drain(in, c->rscan.total);
		http_scanner_init(&c->rscan, true);
		return true;
	}
	c->status = (int)resp.status;
	c->resp_keep = resp.keep_alive;
	c->resp_body = resp.body;
	c->resp_left = resp.body == HTTP_BODY_LENGTH ? (uint64_t)resp.content_length : 0;
	http_chunked_init(&c->resp_ch);
	write_response_head(c, &resp, true);
	c->bytes_in += c->rscan.total;
	evbuffer_drain(in, c->rscan.total);
	c->resp_started = c->resp_head_done = true;
	if (resp.body == HTTP_BODY_NONE || (resp.body == HTTP_BODY_LENGTH && c->resp_left == 0))
		c->resp_done = true;
	return true;
}

static void pump_response(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->up);
	struct evbuffer *queued = bufferevent_get_output(c->client);
	struct evbuffer *out = c->tx;

	while (c->state == ST_FORWARD && !c->resp_done && evbuffer_get_length(in) > 0) {
		size_t n = evbuffer_get_length(in);
		if (!c->resp_head_done) {
			size_t before = c->rscan.total;
			if (!response_head(c))
				return;
			if (!c->resp_head_done && c->rscan.total == before && evbuffer_get_length(in) == n)
				break; /* need more bytes */
			continue;
		}
		if (evbuffer_get_length(out) + evbuffer_get_length(queued) >= PROXY_BUF_HIGH) {
			send_now(c->client, out);
			if (evbuffer_get_length(queued) >= PROXY_BUF_HIGH) {
				bufferevent_disable(c->up, EV_READ);
				bufferevent_setwatermark(c->client, EV_WRITE, PROXY_BUF_HIGH / 2, 0);
				return;
			}
		}
		if (n > PROXY_BUF_HIGH)
			n = PROXY_BUF_HIGH;
		if (c->resp_body == HTTP_BODY_LENGTH) {
			if ((uint64_t)n > c->resp_left)
				n = (size_t)c->resp_left;
			evbuffer_remove_buffer(in, out, n);
			c->resp_left -= n;
			if (c->resp_left == 0)
				c->resp_done = true;
		} else if (c->resp_body == HTTP_BODY_CHUNKED) {
			struct evbuffer_iovec v;
			enum http_chunk_result r;
			if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
				break;
			r = http_chunked_feed(&c->resp_ch, v.iov_base, v.iov_len, &n);
			if (r == HTTP_CHUNK_ERROR) {
				snprintf(c->error, sizeof c->error, "malformed chunked response body: %s",
				         c->resp_ch.error);
				send_now(c->client, out);
				close_after_flush(c);
				return;
			}
			evbuffer_remove_buffer(in, out, n);
			if (r == HTTP_CHUNK_DONE)
				c->resp_done = true;
		} else { /* until close */
			evbuffer_remove_buffer(in, out, n);
		}
		c->bytes_in += n;
	}
	if (c->state == ST_FORWARD)
		send_now(c->client, out);
	if (c->state == ST_FORWARD && c->resp_done) {
		if (!c->req_done && c->req_body != HTTP_BODY_NONE) {
			/* Answered before the body was all sent (e.g. 413): keep sending it, or close. */
			pump_request(c);
			return;
		}
		maybe_finish(c);
	}
}

static void up_read_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	if (c->state != ST_FORWARD) {
		/* An idle kept-alive upstream must not talk: it is no longer reusable. */
		drop_upstream(c);
		return;
	}
	set_timer(c, c->e->tv_idle);
	pump_response(c);
}

static void up_write_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	/* Output drained below the low watermark: resume reading the client's body. */
	if (c->state == ST_FORWARD && !c->req_done) {
		bufferevent_setwatermark(c->up, EV_WRITE, 0, 0);
		bufferevent_enable(c->client, EV_READ);
		set_timer(c, c->e->tv_idle);
		pump_request(c);
	}
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *c = arg;
	char msg[800];
	int err = EVUTIL_SOCKET_ERROR();
	(void)bev;

	if (c->state != ST_FORWARD) {
		drop_upstream(c); /* the kept-alive upstream went away between requests */
		return;
	}
	if (c->up_reused && !c->resp_started && c->rscan.total == 0 && evbuffer_get_length(c->head_copy) &&
	    evbuffer_get_length(bufferevent_get_input(c->up)) == 0) {
		/* A kept-alive upstream closed as we reused it (the server's idle timeout raced our
		 * request): a request without a body is sent again once, on a fresh connection. */
		log_debug("%s: kept-alive upstream closed before answering; retrying on a new connection", c->t.host);
		drop_upstream(c);
		evbuffer_add_buffer(c->head_out, c->head_copy);
		c->bytes_out = 0;
		c->state = ST_DIAL;
		bufferevent_disable(c->client, EV_READ);
		event_del(c->timer);
		c->dial = proxy_dial_start(c->s, c->t.literal ? NULL : c->t.host, c->t.literal ? &c->t.addr : NULL,
		                           c->t.port, dialed, c);
		if (!c->dial) {
			c->state = ST_HEAD;
			fail(c, 502, "cannot start resolving or connecting (out of resources)");
		}
		return;
	}
	if (what & BEV_EVENT_EOF) {
		pump_response(c);
		if (c->state != ST_FORWARD)
			return;
		if (c->resp_head_done && c->resp_body == HTTP_BODY_CLOSE) {
			c->resp_done = true;
			drop_upstream(c);
			if (!c->req_done)
				c->req_done = true; /* nothing more can be sent */
			maybe_finish(c);
			return;
		}
		if (!c->resp_started) {
			snprintf(msg, sizeof msg, "%s (%s) closed the connection without a response%s", c->t.host,
			         c->up_addr, c->up_reused ? " (kept-alive connection)" : "");
			fail(c, 502, msg);
			return;
		}
		snprintf(c->error, sizeof c->error, "the upstream closed the connection in the middle of the response");
		close_after_flush(c);
		return;
	}
	snprintf(msg, sizeof msg, "connection to %s (%s) failed: %s", c->t.host, c->up_addr,
	         (what & BEV_EVENT_TIMEOUT) ? "timed out" : strerror(err ? err : EIO));
	fail(c, (what & BEV_EVENT_TIMEOUT) ? 504 : 502, msg);
}

static void client_write_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	if (c->state == ST_FORWARD && c->up && !c->resp_done) {
		bufferevent_setwatermark(c->client, EV_WRITE, 0, 0);
		bufferevent_enable(c->up, EV_READ);
		pump_response(c);
	}
}

static void start_forward(struct http_conn *c)
{
	c->state = ST_FORWARD;
	http_scanner_init(&c->rscan, true);
	c->resp_started = c->resp_head_done = c->resp_done = c->resp_keep = false;
	c->bytes_out += evbuffer_get_length(c->head_out);
	bufferevent_setcb(c->up, up_read_cb, up_write_cb, up_event_cb, c);
	bufferevent_set_max_single_read(c->up, PROXY_BUF_HIGH);
	bufferevent_set_max_single_write(c->up, PROXY_BUF_HIGH);
	bufferevent_setwatermark(c->up, EV_READ, 0, PROXY_BUF_HIGH);
	bufferevent_setwatermark(c->up, EV_WRITE, 0, 0);
	/* Enabling EV_WRITE arms the write event even with nothing queued (an epoll_ctl now and another
	 * when it fires idle): only when it is off. send_now writes the head directly. */
	bufferevent_enable(c->up, (bufferevent_get_enabled(c->up) & EV_WRITE) ? EV_READ : EV_READ | EV_WRITE);
	evbuffer_drain(c->head_copy, evbuffer_get_length(c->head_copy));
	if (c->up_reused && c->req_body == HTTP_BODY_NONE)
		evbuffer_add(c->head_copy, evbuffer_pullup(c->head_out, -1), evbuffer_get_length(c->head_out));
	send_now(c->up, c->head_out);
	set_timer(c, c->e->tv_idle);
	bufferevent_enable(c->client, EV_READ);
	if (!c->req_done)
		pump_request(c);
}

static void dialed(struct bufferevent *bev, const struct proxy_dial_result *res, void *arg)
{
	struct http_conn *c = arg;
	char body[1600];

	c->dial = NULL;
	snprintf(c->up_addr, sizeof c->up_addr, "%s", res->address);
	if (!bev) {
		if (res->status == 403) {
			c->decision = "deny";
			snprintf(c->rule, sizeof c->rule, "%s", res->rule);
			snprintf(c->t.reason, sizeof c->t.reason, "%s", res->reason);
			proxy_deny_body(body, sizeof body, c->s, c->t.host, c->t.port, res->reason, res->rule);
			respond(c, 403, "deny", body);
			return;
		}
		c->state = ST_HEAD; /* no upstream: our answer may keep the client */
		fail(c, res->status, res->reason);
		return;
	}
	c->up = bev;
	c->up_reused = false;
	snprintf(c->up_host, sizeof c->up_host, "%s", c->t.host);
	c->up_port = c->t.port;
	start_forward(c);
}

/* Builds the request head sent upstream: origin-form target, our Host, no hop-by-hop fields. */
static void build_head(struct http_conn *c, const struct http_request *req)
{
	struct evbuffer *o = c->head_out;
	const char *slash = (req->path_len == 0 || req->path[0] != '/') ? "/" : "";

	evbuffer_drain(o, evbuffer_get_length(o));
	evbuffer_add(o, req->method, req->method_len);
	evbuffer_add_printf(o, " %s", slash);
	evbuffer_add(o, req->path, req->path_len);
	evbuffer_add_printf(o, " HTTP/1.%u\r\n", req->version_minor);
	if (c->t.literal && c->t.addr.ss_family == AF_INET6)
		evbuffer_add_printf(o, "Host: [%s]", c->t.host);
	else
		evbuffer_add_printf(o, "Host: %s", c->t.host);
	if (c->t.port != 80)
		evbuffer_add_printf(o, ":%u", c->t.port);
	evbuffer_add(o, "\r\n", 2);
	for (unsigned i = 0; i < req->nheaders; i++) {
		const struct http_header *h = &req->headers[i];
		if (h->hop)
			continue;
		evbuffer_add(o, h->name, h->name_len);
		evbuffer_add(o, ": ", 2);
		evbuffer_add(o, h->value, h->value_len);
		evbuffer_add(o, "\r\n", 2);
	}
	evbuffer_add(o, "Via: 1.1 sluice\r\n\r\n", 19);
}

/* The request was allowed and its head built: reuse the kept-alive upstream or dial. */
static void proceed(struct http_conn *c)
{
	if (c->up && strcmp(c->up_host, c->t.host) == 0 && c->up_port == c->t.port) {
		c->up_reused = true;
		start_forward(c);
		return;
	}
	drop_upstream(c);
	c->state = ST_DIAL;
	bufferevent_disable(c->client, EV_READ);
	event_del(c->timer);
	c->dial = proxy_dial_start(c->s, c->t.literal ? NULL : c->t.host, c->t.literal ? &c->t.addr : NULL, c->t.port,
	                           dialed, c);
	if (!c->dial) {
		c->state = ST_HEAD;
		fail(c, 502, "cannot start resolving or connecting (out of resources)");
	}
}

/* The verdict on a held request (ask.c): resume it, or refuse it with who decided (or the timeout). */
static void asked(struct proxy_ask_wait *w, bool allow, const char *reason, void *arg)
{
	struct http_conn *c = arg;
	char body[1600];
	(void)w;

	c->state = ST_HEAD;
	snprintf(c->t.reason, sizeof c->t.reason, "%s", reason);
	c->decision = allow ? "allow" : "deny";
	if (allow) {
		proceed(c);
		return;
	}
	proxy_deny_body(body, sizeof body, c->s, c->t.host, c->t.port, reason, c->rule);
	respond(c, 403, "deny", body);
}

static void handle_request(struct http_conn *c, const struct http_request *req, size_t head_len)
{
	char body[1600];
	struct evbuffer *in = bufferevent_get_input(c->client);
	struct http_authority auth = req->authority;

	if (c->transparent_port) {
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
			c->audit_pending = true;
			c->decision = "deny";
			snprintf(c->t.why, sizeof c->t.why, "%s", why);
			snprintf(body, sizeof body, "sluice: 400 Bad Request\n%s\n", why);
			respond(c, 400, "deny", body);
			return;
		}
		auth = req->host_header;
		auth.port = c->transparent_port;
		auth.has_port = true;
	} else if (req->form == HTTP_FORM_AUTHORITY) {
		struct bufferevent *cl = c->client;
		struct proxy_session *s = c->s;
		struct timespec rt = c->start_rt;
		uint64_t ms = c->start_ms;
		/* The tunnel is a new life for this client connection: connect.c owns it from here. */
		c->client = NULL;
		c->audit_pending = false; /* connect.c writes the record of the tunnel */
		bufferevent_setcb(cl, NULL, NULL, NULL, NULL);
		conn_free(c);
		proxy_connect_begin(s, cl, req, head_len, &rt, ms);
		return;
	}
	c->audit_pending = true;
	c->client_keep = req->keep_alive;
	c->client_http10 = req->version_minor == 0;
	c->head_request = http_token_eq(req->method, req->method_len, "HEAD");
	c->req_body = req->chunked ? HTTP_BODY_CHUNKED : (req->content_length > 0 ? HTTP_BODY_LENGTH : HTTP_BODY_NONE);
	c->req_left = req->content_length > 0 ? (uint64_t)req->content_length : 0;
	c->req_done = c->req_body == HTTP_BODY_NONE;
	http_chunked_init(&c->req_ch);
	c->up_addr[0] = '\0';

	if (proxy_target_decide(c->s, &auth, req->method_bit, &c->t) != 0) {
		evbuffer_drain(in, head_len);
		c->decision = "deny";
		snprintf(body, sizeof body, "sluice: 400 Bad Request\n%s\n", c->t.why);
		respond(c, 400, "deny", body);
		return;
	}
	snprintf(c->rule, sizeof c->rule, "%s", policy_decision_where(&c->t.dec));
	c->decision = policy_verdict_name(c->t.dec.verdict);
	if (c->t.dec.verdict == POLICY_ASK) {
		/* No rule matched and the session asks: hold the request (its head is built now, while req
		 * is valid) until an operator decides or the ask times out. Reading stays on, so a client
		 * that gives up is noticed; what it sends meanwhile waits within the read watermark. */
		build_head(c, req);
		evbuffer_drain(in, head_len);
		event_del(c->timer);
		if (proxy_ask_hold(c->s, &c->wait, "http", c->method, c->t.host, c->t.port, &c->start_rt, asked, c,
		                   c->t.reason, sizeof c->t.reason) == 0) {
			c->state = ST_ASK;
			return;
		}
		c->decision = "deny";
		proxy_deny_body(body, sizeof body, c->s, c->t.host, c->t.port, c->t.reason, c->rule);
		respond(c, 403, c->decision, body);
		return;
	}
	if (c->t.dec.verdict != POLICY_ALLOW) {
		evbuffer_drain(in, head_len);
		proxy_deny_body(body, sizeof body, c->s, c->t.host, c->t.port, c->t.reason, c->rule);
		respond(c, 403, c->decision, body);
		return;
	}
	build_head(c, req);
	evbuffer_drain(in, head_len);
	proceed(c);
}

static void head_read(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->client);
	size_t avail = evbuffer_get_length(in);
	enum http_scan_result sr = HTTP_SCAN_MORE;
	struct http_request *req;
	const char *why, *head;
	char body[400];
	int st;

	if (avail == 0)
		return;
	if (c->scan.total == 0) {
		/* First byte of a request: from now on the head must arrive within the header timeout. */
		clock_gettime(CLOCK_REALTIME, &c->start_rt);
		c->start_ms = proxy_mono_ms();
		set_timer(c, c->e->tv_header);
	}
	while (c->scan.total < avail && sr == HTTP_SCAN_MORE) {
		struct evbuffer_ptr p;
		struct evbuffer_iovec v[8];
		int nv;
		evbuffer_ptr_set(in, &p, c->scan.total, EVBUFFER_PTR_SET);
		nv = evbuffer_peek(in, (ev_ssize_t)(avail - c->scan.total), &p, v, 8);
		if (nv <= 0)
			break;
		for (int i = 0; i < nv && i < 8 && sr == HTTP_SCAN_MORE; i++) {
			size_t used;
			sr = http_scanner_feed(&c->scan, v[i].iov_base, v[i].iov_len, &used);
		}
	}
	if (sr == HTTP_SCAN_MORE)
		return;
	c->requests_seen = true;
	c->audit_pending = true;
	c->client_keep = false;
	if (sr == HTTP_SCAN_ERROR) {
		c->decision = "deny";
		snprintf(c->t.why, sizeof c->t.why, "%s", c->scan.error);
		snprintf(body, sizeof body, "sluice: %d %s\n%s\n", c->scan.status,
		         proxy_http_status_text(c->scan.status), c->scan.error);
		respond(c, c->scan.status, "deny", body);
		return;
	}
	head = (const char *)evbuffer_pullup(in, (ev_ssize_t)c->scan.total);
	req = malloc(sizeof *req);
	if (!head || !req) {
		free(req);
		snprintf(c->error, sizeof c->error, "out of memory");
		close_after_flush(c);
		return;
	}
	st = http_parse_request(head, c->scan.total, c->transparent_port ? HTTP_PARSE_ORIGIN_OK : 0, req, &why);
	if (st != 0) {
		c->decision = "deny";
		snprintf(c->method, sizeof c->method, "%.*s", (int)(req->method_len < 32 ? req->method_len : 32),
		         req->method ? req->method : "");
		snprintf(c->t.why, sizeof c->t.why, "%s", why);
		snprintf(body, sizeof body, "sluice: %d %s\n%s\n", st, proxy_http_status_text(st), why);
		free(req);
		respond(c, st, "deny", body);
		return;
	}
	snprintf(c->method, sizeof c->method, "%.*s", (int)req->method_len, req->method);
	handle_request(c, req, c->scan.total);
	free(req);
}

static void client_read_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	if (c->state == ST_HEAD)
		head_read(c);
	else if (c->state == ST_FORWARD) {
		set_timer(c, c->e->tv_idle);
		pump_request(c);
	}
}

static void client_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	(void)what;
	if (c->audit_pending && !c->error[0])
		snprintf(c->error, sizeof c->error, "the client closed the connection");
	conn_free(c);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *c = arg;
	(void)fd;
	(void)what;
	switch (c->state) {
	case ST_HEAD:
		if (c->scan.total > 0) {
			/* A head that trickles in too slowly (slowloris). */
			c->client_keep = false;
			proxy_http_error(c->client, 408, "error",
			                 "sluice: 408 Request Timeout\nthe request head did not arrive in time\n",
			                 true);
			close_after_flush(c);
		} else {
			conn_free(c); /* idle keep-alive connection */
		}
		break;
	case ST_FORWARD: fail(c, 504, "the upstream did not respond within the idle timeout"); break;
	case ST_DIAL:
	case ST_ASK: break;
	case ST_CLOSING: conn_free(c); break;
	}
}

void proxy_http_accept(struct proxy_session *s, int fd)
{
	proxy_http_accept_transparent(s, fd, 0);
}

void proxy_http_accept_transparent(struct proxy_session *s, int fd, uint16_t orig_port)
{
	struct http_conn *c = calloc(1, sizeof *c);

	if (!c) {
		close(fd);
		return;
	}
	c->s = s;
	c->e = s->engine;
	c->transparent_port = orig_port;
	c->client = bufferevent_socket_new(c->e->base, fd, BEV_OPT_CLOSE_ON_FREE);
	c->timer = evtimer_new(c->e->base, timer_cb, c);
	c->head_out = evbuffer_new();
	c->head_copy = evbuffer_new();
	c->tx = evbuffer_new();
	c->base.close = session_close_cb;
	proxy_session_attach(s, &c->base, true);
	if (!c->client || !c->timer || !c->head_out || !c->head_copy || !c->tx) {
		if (!c->client)
			close(fd);
		conn_free(c);
		return;
	}
	http_scanner_init(&c->scan, false);
	bufferevent_setcb(c->client, client_read_cb, client_write_cb, client_event_cb, c);
	bufferevent_set_max_single_read(c->client, PROXY_BUF_HIGH);
	bufferevent_set_max_single_write(c->client, PROXY_BUF_HIGH);
	/* Bounded memory: never more than a head plus a buffer's worth of unread client bytes. */
	bufferevent_setwatermark(c->client, EV_READ, 0, HTTP_HEAD_MAX + 4096);
	bufferevent_enable(c->client, EV_READ | EV_WRITE);
	set_timer(c, c->e->tv_header);
}
