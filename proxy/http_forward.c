/* The HTTP front's upstream half (http_conn.h): an allowed request's exchange with the upstream. The
 * rewritten head goes out, the request body follows with its framing checked (length or chunked),
 * the response head is parsed strictly and rewritten, its body streamed back with back-pressure both
 * ways (stop reading one side while the other's output is full), and the upstream is kept for the
 * next request to the same host:port when both sides allow it. A big response body (a length, or a
 * chunked body past 256 KiB) passes from socket to socket with splice(2) (splice_pump.c) once the bytes
 * already read went out: the parser sees the head and the chunk framing only. */
#include <errno.h>
#include <stddef.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "http_conn.h"
#include "log.h"
#include "parent.h"
#include "splice_pump.h"

#include <event2/bufferevent_ssl.h>

/* Body bytes left (of the body, or of the current chunk) for which the response passes through a pipe */
#define SPLICE_BODY_MIN (256 * 1024)

static void up_read_cb(struct bufferevent *bev, void *arg);
static void up_write_cb(struct bufferevent *bev, void *arg);
static void up_event_cb(struct bufferevent *bev, short what, void *arg);

static void maybe_finish(struct http_conn *c)
{
	bool keep_client, keep_up;

	if (!c->req_done || !c->resp_done)
		return;
	keep_up = c->resp_keep && c->r.up && evbuffer_get_length(bufferevent_get_input(c->r.up)) == 0;
	if (keep_up && c->resp_spliced) {
		/* read from the socket itself: whatever the upstream sent past the body (or its close) is
		 * still there, and would be taken for the next response */
		char b;
		ssize_t n = recv(bufferevent_getfd(c->r.up), &b, 1, MSG_PEEK | MSG_DONTWAIT);
		keep_up = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
	}
	c->resp_spliced = false;
	keep_client = c->client_keep && c->resp_body != HTTP_BODY_CLOSE;
	if (!keep_up)
		proxy_relay_drop_upstream(&c->r);
	if (keep_client) {
		http_next_request(c);
		return;
	}
	if (keep_up)
		http_park_upstream(c); /* (a connection per request: the session's next one takes it) */
	http_close_after_flush(c);
}

/* ---- request body: client -> upstream ---- */

/* The next n bytes of the client's input are request body about to go upstream: with credentials in
 * the policy, they are searched for a placeholder that does not belong to the destination (the bytes
 * that came with the head were searched before the head went: http.c). Found: nothing more is sent, the
 * upstream is dropped (it has an incomplete request) and the request is refused as exfiltration;
 * returns false. The literal placeholder is looked for, as the client's bytes carry it (a placeholder
 * encoded, compressed or split by chunk framing is not seen: it is a tripwire, and not the secret). */
static bool body_scan_ok(struct http_conn *c, struct evbuffer *in, size_t n)
{
	const struct policy_credential *found = NULL;
	struct evbuffer_iovec v[16];
	struct evbuffer_ptr at;
	size_t done = 0;
	char body[800];

	if (!c->ph_scan)
		return true;
	while (done < n && !found) {
		int nv;
		if (evbuffer_ptr_set(in, &at, done, EVBUFFER_PTR_SET) != 0 ||
		    (nv = evbuffer_peek(in, (ev_ssize_t)(n - done), &at, v, 16)) <= 0)
			break;
		for (int i = 0; i < nv && i < 16 && done < n && !found; i++) {
			size_t len = v[i].iov_len < n - done ? v[i].iov_len : n - done;
			found = http_ph_scan_feed(&c->ph, v[i].iov_base, len);
			done += len;
		}
	}
	if (!found)
		return true;
	snprintf(c->r.rule, sizeof c->r.rule, "%s", found->where);
	log_warnx("session %s: the placeholder of $%s (credential of %s) was sent to %s in a request body: refused",
	          c->r.s->id, found->placeholder_env, found->where, c->r.t.host);
	proxy_relay_drop_upstream(&c->r); /* what it did not take yet goes nowhere */
	c->r.decision = "deny";
	snprintf(c->r.reason, sizeof c->r.reason,
	         "exfiltration: this request's body carries the placeholder of a credential that belongs to another "
	         "host (policy %s); it was cut off before it",
	         found->where);
	if (c->resp_started) {
		http_close_after_flush(c);
		return false;
	}
	snprintf(body, sizeof body, "sluice: 403 %s\n%s\n", proxy_http_status_text(403), c->r.reason);
	c->client_keep = false;
	http_respond(c, 403, "deny", body);
	return false;
}

void http_forward_client_read(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->r.client);
	struct evbuffer *out;

	if (c->state != ST_FORWARD || c->req_done || !c->r.up)
		return;
	out = bufferevent_get_output(c->r.up);
	while (!c->req_done && evbuffer_get_length(in) > 0) {
		size_t n = evbuffer_get_length(in);
		if (evbuffer_get_length(out) >= PROXY_BUF_HIGH) {
			/* Back-pressure: the upstream is slow; stop reading the client until it drains. */
			bufferevent_disable(c->r.client, EV_READ);
			bufferevent_setwatermark(c->r.up, EV_WRITE, PROXY_BUF_HIGH / 2, 0);
			return;
		}
		if (c->req_body == HTTP_BODY_LENGTH) {
			if ((uint64_t)n > c->req_left)
				n = (size_t)c->req_left;
			if (n > PROXY_BUF_HIGH)
				n = PROXY_BUF_HIGH;
			if (!body_scan_ok(c, in, n))
				return;
			evbuffer_remove_buffer(in, out, n);
			c->req_left -= n;
			c->r.bytes_out += n;
			if (c->req_left == 0)
				c->req_done = true;
		} else { /* chunked */
			struct evbuffer_iovec v;
			size_t used;
			enum http_chunk_result r;
			if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
				break;
			r = http_chunked_feed(&c->req_ch, v.iov_base, v.iov_len, &used);
			if (!body_scan_ok(c, in, used))
				return;
			evbuffer_remove_buffer(in, out, used);
			c->r.bytes_out += used;
			if (r == HTTP_CHUNK_ERROR) {
				snprintf(c->r.error, sizeof c->r.error, "malformed chunked request body: %s",
				         c->req_ch.error);
				c->r.status = 400;
				http_close_after_flush(c);
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

	if (bufferevent_openssl_get_ssl(bev))
		http_inspect_send_now(bev, data); /* TLS (HTTPS inspection): inspect.c */
	else if (evbuffer_get_length(out) == 0 && evbuffer_get_length(data) > 0 && !bufferevent_get_underlying(bev))
		(void)evbuffer_write(data, bufferevent_getfd(bev));
	if (evbuffer_get_length(data) > 0)
		evbuffer_add_buffer(out, data);
}

/* Sends data on bev (c's client or upstream) at the end of this loop iteration: with 64 connections
 * ready at once, the responses of a wake-up went out one by one between the other connections' work,
 * and a client (or origin) woken by one often went back to sleep before the next: a wake-up, a context
 * switch and an epoll_wait of its per request. Sent together, one wake-up finds several (issue 16). The
 * bytes wait in their own buffer (tx, head_out), which nothing else appends to before they go. */
static void send_later(struct http_conn *c, bool to_client)
{
	if (to_client)
		c->tx_later = true;
	else
		c->head_later = true;
	proxy_later_add(c->r.e, &c->later);
}

void http_send_later_run(struct proxy_later *l)
{
	struct http_conn *c = (struct http_conn *)((char *)l - offsetof(struct http_conn, later));

	if (c->head_later && c->r.up)
		send_now(c->r.up, c->head_out);
	if (c->tx_later && c->r.client)
		send_now(c->r.client, c->tx);
	c->head_later = c->tx_later = false;
}

void http_send_pending(struct http_conn *c)
{
	if (!c->later.pprev)
		return;
	proxy_later_cancel(&c->later);
	http_send_later_run(&c->later);
}

/* A head being written to an evbuffer in pieces, gathered here first: one evbuffer_add for a head
 * rather than four per header field. */
struct head_buf {
	struct evbuffer *o; /* borrowed: where the bytes go */
	size_t n;
	char b[1024];
};

static void head_put(void *ctx, const void *data, size_t len)
{
	struct head_buf *h = ctx;

	if (h->n + len > sizeof h->b) {
		evbuffer_add(h->o, h->b, h->n);
		h->n = 0;
		if (len > sizeof h->b) {
			evbuffer_add(h->o, data, len);
			return;
		}
	}
	memcpy(h->b + h->n, data, len);
	h->n += len;
}

static void head_flush(struct head_buf *h)
{
	if (h->n)
		evbuffer_add(h->o, h->b, h->n);
	h->n = 0;
}

/* ---- response: upstream -> client ---- */

/* The end-to-end header fields of a response head (hop-by-hop ones, and those Connection names, stay here). */
static void put_headers(struct head_buf *o, const struct http_header *hs, unsigned n, bool dechunk)
{
	for (unsigned i = 0; i < n; i++) {
		if (hs[i].hop || (dechunk && (http_token_eq(hs[i].name, hs[i].name_len, "transfer-encoding") ||
		                              http_token_eq(hs[i].name, hs[i].name_len, "content-length"))))
			continue;
		head_put(o, hs[i].name, hs[i].name_len);
		head_put(o, ": ", 2);
		head_put(o, hs[i].value, hs[i].value_len);
		head_put(o, "\r\n", 2);
	}
}

/* Response bytes go to c->tx first and out in one write (send_now) when the pump stops. */
static void write_response_head(struct http_conn *c, const struct http_response *r, bool final)
{
	struct head_buf hb = {.o = c->tx};
	struct head_buf *o = &hb;
	bool keep = c->client_keep && r->body != HTTP_BODY_CLOSE;

	/* "HTTP/1.1 %u %s\r\n" without printf: the parser let through three digits and a reason without
	 * control bytes */
	char sl[] = "HTTP/1.1 000 ";
	sl[9] = (char)('0' + r->status / 100 % 10);
	sl[10] = (char)('0' + r->status / 10 % 10);
	sl[11] = (char)('0' + r->status % 10);
	head_put(o, sl, sizeof sl - 1);
	head_put(o, r->reason, r->reason_len);
	head_put(o, "\r\n", 2);
	put_headers(o, r->headers, r->nheaders, final && c->resp_dechunk);
	head_put(o, "Via: 1.1 sluice\r\n", 17);
	if (final && !keep)
		head_put(o, "Connection: close\r\n", 19);
	else if (final && c->client_http10)
		head_put(o, "Connection: keep-alive\r\n", 24);
	head_put(o, "\r\n", 2);
	head_flush(o);
}

/* Returns false when the connection was closed. */
static bool response_head(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->r.up);
	struct http_response resp;
	const char *why;
	enum http_scan_result sr = http_scan_input(&c->rscan, in);
	char msg[800];
	const char *head;

	if (sr == HTTP_SCAN_MORE)
		return true;
	if (sr == HTTP_SCAN_ERROR) {
		snprintf(msg, sizeof msg, "the upstream sent a malformed response head: %s", c->rscan.error);
		http_fail(c, 502, msg);
		return false;
	}
	head = (const char *)evbuffer_pullup(in, (ev_ssize_t)c->rscan.total);
	if (!head || http_parse_response(head, c->rscan.total, c->head_request, &resp, &why) != 0) {
		snprintf(msg, sizeof msg, "the upstream sent a malformed response head: %s", head ? why : "no memory");
		http_fail(c, 502, msg);
		return false;
	}
	if (resp.status == 101) {
		http_fail(c, 502, "the upstream switched protocols, which this proxy does not support (use CONNECT)");
		return false;
	}
	if (resp.status == 407 && !c->inspect && proxy_parent_for(c->r.e, &c->r.t)) {
		/* the parent's demand for credentials is sluice's configuration problem, not the client's to
		 * answer (it must never send credentials for the parent) */
		const struct proxy_parent *p = proxy_parent_for(c->r.e, &c->r.t);
		snprintf(msg, sizeof msg, "the parent proxy %s %s", p->where,
		         p->auth[0] ? "refused sluice's credentials (407 Proxy Authentication Required): check the "
		                      "auth_file of upstream_proxy" :
		                      "asks for credentials (407 Proxy Authentication Required): set auth_file in "
		                      "upstream_proxy");
		http_fail(c, 502, msg);
		return false;
	}
	if (resp.status < 200) {
		if (!c->client_http10) /* (HTTP/1.0 has no 1xx: RFC 9110 15.2) */
			write_response_head(c, &resp, false);
		evbuffer_drain(in, c->rscan.total);
		http_scanner_init(&c->rscan, true);
		return true;
	}
	c->r.status = (int)resp.status;
	c->resp_keep = resp.keep_alive;
	c->resp_body = resp.body;
	c->resp_left = resp.body == HTTP_BODY_LENGTH ? (uint64_t)resp.content_length : 0;
	http_chunked_init(&c->resp_ch);
	/* An HTTP/1.0 client cannot read chunked framing (the request went upstream as HTTP/1.1): it gets the
	 * data, and the connection's end ends the body */
	c->resp_dechunk = c->client_http10 && resp.body == HTTP_BODY_CHUNKED;
	if (c->resp_dechunk)
		c->client_keep = false;
	write_response_head(c, &resp, true);
	c->r.bytes_in += c->rscan.total;
	evbuffer_drain(in, c->rscan.total);
	c->resp_started = c->resp_head_done = true;
	if (resp.body == HTTP_BODY_NONE || (resp.body == HTTP_BODY_LENGTH && c->resp_left == 0))
		c->resp_done = true;
	return true;
}

static void pump_response(struct http_conn *c);

/* Ends the response's splicing on an error of the upstream (or its framing): close after what was
 * sent. The error is what, then ": detail" when there is one. */
static void splice_fail(struct http_conn *c, const char *what, const char *detail)
{
	snprintf(c->r.error, sizeof c->r.error, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
	http_close_after_flush(c);
}

static void resp_pump_cb(struct splice_pump *p, enum splice_pump_event ev, size_t n, void *arg)
{
	struct http_conn *c = arg;
	(void)p;
	switch (ev) {
	case SPLICE_PUMP_MOVED:
		c->r.bytes_in += n; /* (for a chunked body, the framer saw them before they moved: chunk_more) */
		if (c->resp_body == HTTP_BODY_LENGTH)
			c->resp_left -= n;
		http_set_timer(c, c->r.e->tv_idle);
		return;
	case SPLICE_PUMP_DONE: /* the limit was resp_left, or the framer saw the chunked body's end */
		c->resp_done = true;
		bufferevent_enable(c->r.up, EV_READ);
		pump_response(c);
		return;
	case SPLICE_PUMP_EOF:
		splice_fail(c, "the upstream closed the connection in the middle of the response", NULL);
		return;
	case SPLICE_PUMP_BAD_FRAMING:
		splice_fail(c, "malformed chunked response body", c->resp_ch.error);
		return;
	case SPLICE_PUMP_READ_ERR:
		splice_fail(c, "reading the response from the upstream failed", strerror((int)n));
		return;
	case SPLICE_PUMP_WRITE_ERR:
		if (!c->r.error[0])
			snprintf(c->r.error, sizeof c->r.error, "the client closed the connection");
		proxy_relay_end(&c->r);
		return;
	}
}

int http_forward_chunk_run(struct http_chunked *ch, int fd, uint64_t *limit, bool *last)
{
	char buf[512];
	size_t used = 0;
	enum http_chunk_result r;
	ssize_t n = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);

	if (n < 0)
		return errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
	if (n == 0)
		return -ENODATA;
	r = http_chunked_feed(ch, buf, (size_t)n, &used);
	if (r == HTTP_CHUNK_ERROR)
		return -EPROTO;
	*last = r == HTTP_CHUNK_DONE;
	*limit = used + (*last ? 0 : http_chunked_data_left(ch));
	http_chunked_skip(ch, http_chunked_data_left(ch));
	return 0;
}

static int chunk_more(struct splice_pump *p, int up, uint64_t *limit, bool *last, void *arg)
{
	struct http_conn *c = arg;
	(void)p;
	return http_forward_chunk_run(&c->resp_ch, up, limit, last);
}

/* Called with the upstream's input empty and c->tx sent: a big body (a length of 256 KiB or more left,
 * or a chunked response that carried that much) goes from the upstream's socket to the client's
 * through a pipe, once what is queued for the client was written (until then the upstream is not
 * read). Without a pipe, bufferevents go on. */
static void maybe_splice_response(struct http_conn *c)
{
	int up = bufferevent_getfd(c->r.up), client = bufferevent_getfd(c->r.client), rc;

	if (c->inspect || c->resp_done || c->resp_dechunk || evbuffer_get_length(bufferevent_get_input(c->r.up)) > 0)
		return; /* (TLS both ways, or the framing dropped: no splice) */
	if (c->resp_body == HTTP_BODY_LENGTH ? c->resp_left < SPLICE_BODY_MIN
	                                     : (c->resp_body != HTTP_BODY_CHUNKED || c->r.bytes_in < SPLICE_BODY_MIN))
		return;
	bufferevent_disable(c->r.up, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->r.client)) > 0) {
		bufferevent_setwatermark(c->r.client, EV_WRITE, 0, 0); /* http_forward_client_drained: empty */
		return;
	}
	if (!c->pump)
		c->pump = splice_pump_new(c->r.e->base, resp_pump_cb, c);
	if (!c->pump) {
		bufferevent_enable(c->r.up, EV_READ); /* no pipe: through user space */
		return;
	}
	c->resp_spliced = true;
	if (c->resp_body == HTTP_BODY_CHUNKED) {
		/* the rest of the current chunk's data (the framer saw its size) is the first run */
		uint64_t left = http_chunked_data_left(&c->resp_ch);
		rc = splice_pump_start_framed(c->pump, up, client, left, chunk_more);
		if (rc == 0)
			http_chunked_skip(&c->resp_ch, left);
	} else {
		rc = splice_pump_start(c->pump, up, client, c->resp_left);
	}
	if (rc != 0)
		bufferevent_enable(c->r.up, EV_READ); /* through user space */
}

/* Up to *n bytes of in through the chunk framer, the data to out and the framing dropped (resp_dechunk);
 * *n becomes the bytes consumed. The framing is fed a byte at a time, so the framer never takes data
 * bytes for framing. */
static enum http_chunk_result dechunk(struct http_conn *c, struct evbuffer *in, struct evbuffer *out, size_t *n)
{
	enum http_chunk_result r = HTTP_CHUNK_MORE;
	size_t done = 0, used;
	char b;

	while (done < *n && r == HTTP_CHUNK_MORE) {
		uint64_t left = http_chunked_data_left(&c->resp_ch);
		if (left > 0) {
			size_t k = left < *n - done ? (size_t)left : *n - done;
			evbuffer_remove_buffer(in, out, k);
			http_chunked_skip(&c->resp_ch, k);
			done += k;
			continue;
		}
		if (evbuffer_remove(in, &b, 1) != 1)
			break;
		r = http_chunked_feed(&c->resp_ch, &b, 1, &used);
		done++;
	}
	*n = done;
	return r;
}

static void pump_response(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->r.up);
	struct evbuffer *queued = bufferevent_get_output(c->r.client);
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
			send_now(c->r.client, out);
			if (evbuffer_get_length(queued) >= PROXY_BUF_HIGH) {
				bufferevent_disable(c->r.up, EV_READ);
				bufferevent_setwatermark(c->r.client, EV_WRITE, PROXY_BUF_HIGH / 2, 0);
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
			if (c->resp_dechunk) {
				r = dechunk(c, in, out, &n);
			} else {
				if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
					break;
				r = http_chunked_feed(&c->resp_ch, v.iov_base, v.iov_len, &n);
			}
			if (r == HTTP_CHUNK_ERROR) {
				snprintf(c->r.error, sizeof c->r.error, "malformed chunked response body: %s",
				         c->resp_ch.error);
				send_now(c->r.client, out);
				http_close_after_flush(c);
				return;
			}
			if (!c->resp_dechunk)
				evbuffer_remove_buffer(in, out, n);
			if (r == HTTP_CHUNK_DONE)
				c->resp_done = true;
		} else { /* until close */
			evbuffer_remove_buffer(in, out, n);
		}
		c->r.bytes_in += n;
	}
	if (c->state == ST_FORWARD) {
		if (c->resp_done && !c->inspect)
			send_later(c, true); /* (a response done is never spliced) */
		else
			send_now(c->r.client, out);
		maybe_splice_response(c);
	}
	if (c->state == ST_FORWARD && c->resp_done) {
		if (!c->req_done && c->req_body != HTTP_BODY_NONE) {
			/* Answered before the body was all sent (e.g. 413): keep sending it, or close. */
			http_forward_client_read(c);
			return;
		}
		maybe_finish(c);
	}
}

static void up_read_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	http_send_pending(c);
	if (c->state != ST_FORWARD) {
		/* An idle kept-alive upstream must not talk: it is no longer reusable. */
		proxy_relay_drop_upstream(&c->r);
		return;
	}
	http_set_timer(c, c->r.e->tv_idle);
	pump_response(c);
}

static void up_write_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	(void)bev;
	http_send_pending(c);
	/* Output drained below the low watermark: resume reading the client's body. */
	if (c->state == ST_FORWARD && !c->req_done) {
		bufferevent_setwatermark(c->r.up, EV_WRITE, 0, 0);
		bufferevent_enable(c->r.client, EV_READ);
		http_set_timer(c, c->r.e->tv_idle);
		http_forward_client_read(c);
	}
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *c = arg;
	char msg[800];
	int err = EVUTIL_SOCKET_ERROR();
	(void)bev;

	http_send_pending(c); /* (the head first: a reused upstream's close then retries it as before) */

	if (c->state != ST_FORWARD) {
		proxy_relay_drop_upstream(&c->r); /* the kept-alive upstream went away between requests */
		return;
	}
	if (c->up_reused && !c->resp_started && c->rscan.total == 0 && evbuffer_get_length(c->head_copy) &&
	    evbuffer_get_length(bufferevent_get_input(c->r.up)) == 0) {
		/* A kept-alive upstream closed as we reused it (the server's idle timeout raced our
		 * request): an idempotent request without a body is sent again once, on a fresh connection
		 * (anything else gets the 502 below: the server may have acted on it). */
		log_debug("%s: kept-alive upstream closed before answering; retrying on a new connection", c->r.t.host);
		proxy_relay_drop_upstream(&c->r);
		evbuffer_add_buffer(c->head_out, c->head_copy);
		c->r.bytes_out = 0;
		c->state = ST_DIAL;
		bufferevent_disable(c->r.client, EV_READ);
		event_del(c->timer);
		proxy_relay_dial(&c->r);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		pump_response(c);
		if (c->state != ST_FORWARD)
			return;
		if (c->resp_head_done && c->resp_body == HTTP_BODY_CLOSE) {
			c->resp_done = true;
			proxy_relay_drop_upstream(&c->r);
			if (!c->req_done)
				c->req_done = true; /* nothing more can be sent */
			maybe_finish(c);
			return;
		}
		if (!c->resp_started) {
			snprintf(msg, sizeof msg, "%s (%s) closed the connection without a response%s", c->r.t.host,
			         c->r.address, c->up_reused ? " (kept-alive connection)" : "");
			http_fail(c, 502, msg);
			return;
		}
		snprintf(c->r.error, sizeof c->r.error,
		         "the upstream closed the connection in the middle of the response");
		http_close_after_flush(c);
		return;
	}
	snprintf(msg, sizeof msg, "connection to %s (%s) failed: %s", c->r.t.host, c->r.address,
	         (what & BEV_EVENT_TIMEOUT) ? "timed out" : strerror(err ? err : EIO));
	http_fail(c, (what & BEV_EVENT_TIMEOUT) ? 504 : 502, msg);
}

void http_forward_client_drained(struct http_conn *c)
{
	if (c->state == ST_FORWARD && c->r.up && !c->resp_done && !splice_pump_running(c->pump)) {
		bufferevent_setwatermark(c->r.client, EV_WRITE, 0, 0);
		bufferevent_enable(c->r.up, EV_READ);
		pump_response(c);
	}
}

void http_forward_start(struct http_conn *c)
{
	size_t lo, hi;

	c->state = ST_FORWARD;
	http_scanner_init(&c->rscan, true);
	c->resp_started = c->resp_head_done = c->resp_done = c->resp_keep = c->resp_spliced = c->resp_dechunk = false;
	c->r.bytes_out += evbuffer_get_length(c->head_out);
	bufferevent_setcb(c->r.up, up_read_cb, up_write_cb, up_event_cb, c);
	bufferevent_set_max_single_read(c->r.up, PROXY_BUF_HIGH);
	bufferevent_set_max_single_write(c->r.up, PROXY_BUF_HIGH);
	/* (set again only when changed: setting the read watermark re-adds the read event; a kept-alive
	 * upstream has these from its last request) */
	if (bufferevent_getwatermark(c->r.up, EV_READ, &lo, &hi) != 0 || lo != 0 || hi != PROXY_BUF_HIGH)
		bufferevent_setwatermark(c->r.up, EV_READ, 0, PROXY_BUF_HIGH);
	if (bufferevent_getwatermark(c->r.up, EV_WRITE, &lo, &hi) != 0 || lo != 0 || hi != 0)
		bufferevent_setwatermark(c->r.up, EV_WRITE, 0, 0);
	/* Enabling EV_WRITE arms the write event even with nothing queued (an epoll_ctl now and another
	 * when it fires idle): only when it is off. send_now writes the head directly. */
	http_bev_enable(c->r.up, EV_READ | EV_WRITE);
	if (evbuffer_get_length(c->head_copy))
		evbuffer_drain(c->head_copy, evbuffer_get_length(c->head_copy));
	if (c->up_reused && c->req_body == HTTP_BODY_NONE && c->req_idempotent)
		evbuffer_add(c->head_copy, evbuffer_pullup(c->head_out, -1), evbuffer_get_length(c->head_out));
	if (c->req_done && !c->inspect)
		send_later(c, false); /* no body follows the head */
	else
		send_now(c->r.up, c->head_out);
	http_set_timer(c, c->r.e->tv_idle);
	http_bev_enable(c->r.client, EV_READ);
	if (!c->req_done)
		http_forward_client_read(c);
}

void http_forward_build_head(struct http_conn *c, const struct http_request *req)
{
	/* inside an inspected tunnel the origin gets origin form over TLS (a parent, if any, only tunnels) */
	const struct proxy_parent *parent = c->inspect ? NULL : proxy_parent_for(c->r.e, &c->r.t);
	struct http_rewrite rw = {
	        .host = c->r.t.host,
	        .port = c->r.t.port,
	        .v6 = c->r.t.literal && c->r.t.addr.ss_family == AF_INET6,
	        .tls = c->inspect,
	        .absolute = parent != NULL,
	        .proxy_auth = parent ? parent->auth : NULL,
	        /* HTTPS inspection's credential: on requests to its host only, after inspection; never logged */
	        .cred = c->inspect ? policy_credential_for(c->r.s->policy, c->r.t.host) : NULL,
	};

	struct head_buf hb = {.o = c->head_out};

	evbuffer_drain(c->head_out, evbuffer_get_length(c->head_out));
	http_rewrite_head(req, &rw, head_put, &hb);
	head_flush(&hb);
}
