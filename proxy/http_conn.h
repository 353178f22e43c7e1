/* The HTTP front's connection, shared by its two halves and by nothing else: http.c (the client side:
 * request heads, the decision of each request through the relay, keep-alive, our own responses) and
 * http_forward.c (an allowed request's exchange with the upstream: the rewritten head, both bodies
 * with their framing and back-pressure, the response). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "http_parse.h"
#include "http_rewrite.h"
#include "relay.h"

struct evbuffer;
struct event;
struct splice_pump;

enum http_state { ST_HEAD, ST_ASK, ST_DIAL, ST_FORWARD, ST_CLOSING };

struct http_conn {
	struct proxy_relay r;       /* first: the relay is the connection (r.client, the kept-alive r.up) */
	struct event *timer;        /* owned: header and idle timeouts */
	struct evbuffer *head_out;  /* owned: the rewritten request head */
	struct evbuffer *head_copy; /* owned: kept while a reused upstream may still fail before answering */
	struct evbuffer *tx;        /* owned: response bytes for the client not yet written (send_now) */
	/* A complete small response (tx) and a request head without a body (head_out) are sent at the end of
	 * the loop iteration (http_send_later), not at once; every callback of the connection sends them
	 * first (http_send_pending), so nothing of the connection's own happens between in another order. */
	struct proxy_later later;
	bool tx_later, head_later;
	enum http_state state;
	uint16_t transparent_port; /* 0: forward proxy; else a redirected connection's original port */
	struct http_scanner scan;
	struct timespec head_rt; /* when the current head's first byte came (0 before a first one) */
	/* ... and on proxy_mono_ms's clock (before a first byte: the accept) */
	uint64_t head_ms;
	/* A new connection's accept on that clock, until its first exchange ends (0 then): its first head's
	 * deadline runs from it, and so does the record of that head's timeout. */
	uint64_t accept_ms;
	/* The header timer's deadline (none while waiting with the idle timeout) and whether it has passed (an
	 * incomplete head is then answered 408 at once): head_timeout_spared in http.c. */
	struct proxy_deadline head_due;
	bool head_late;
	/* the kept-alive upstream (r.up) */
	char up_host[POLICY_HOST_MAX + 1];
	uint16_t up_port;
	bool up_reused;
	/* inspected: the upstream's TLS handshake's deadline, and whether its timer read the socket first and
	 * how much OpenSSL had read from it then (inspect.c, up_handshake_spared) */
	struct proxy_deadline up_tls_due;
	bool up_tls_read_first;
	uint64_t up_tls_read;
	bool up_plain;                          /* inspected: r.up is the CONNECT's connection, TLS not started yet */
	char up_address[PROXY_ADDRSTR_MAX];     /* where r.up is connected (the audit records of reuses) */
	struct sockaddr_storage up_sa;          /* ... as an address (plain HTTP: checked again at each reuse) */
	bool up_parent;                         /* r.up goes to the parent proxy (never pooled) */
	uint64_t up_policy_gen;                 /* the session's policy_gen when up_sa was last checked */
	/* the current request */
	bool head_request, client_keep, client_http10;
	bool req_idempotent; /* GET, HEAD, OPTIONS, TRACE, PUT, DELETE: may be retried on a fresh upstream */
	enum http_body_kind req_body;
	uint64_t req_left;
	bool ph_scan;           /* the policy has credentials: the body is searched for placeholders */
	struct http_ph_scan ph; /* the search (http_rewrite.h) */
	struct http_chunked req_ch;
	bool req_done;
	struct http_scanner rscan;
	bool resp_started, resp_head_done, resp_done, resp_keep;
	enum http_body_kind resp_body;
	uint64_t resp_left;
	struct http_chunked resp_ch;
	bool resp_dechunk;        /* a chunked response for an HTTP/1.0 client: its data only, to the close */
	bool resp_spliced;        /* this response's body went (partly) through the pump */
	struct splice_pump *pump; /* owned: made for the connection's first big response body */
	/* HTTPS inspection (inspect.c): r.client and r.up are TLS bufferevents (no splice, no direct writes) */
	bool inspect;
	bool tls_ok;       /* the client finished its TLS handshake */
	/* times the header timer had OpenSSL read the client's socket first since the deadline began (at most
	 * INSPECT_READS_FIRST: the rest of the handshake, then a request) */
	uint8_t tls_reads_first;
	bool plain_tunnel; /* plain HTTP inside a CONNECT tunnel (connect.c): its requests must name its host */
	char inspect_host[POLICY_HOST_MAX + 1]; /* inspect or plain_tunnel: the tunnel's host, every request's */
	uint16_t inspect_port;
};

/* ---- http.c ---- */
/* Feeds the bytes of in that the scanner has not seen yet (a head is at the front of in). */
enum http_scan_result http_scan_input(struct http_scanner *s, struct evbuffer *in);
void http_set_timer(struct http_conn *c, const struct timeval *tv);
/* bufferevent_enable for the events of what not enabled yet: enabling an enabled event re-adds it (an
 * event_add a call, three a keep-alive request), which changes nothing. */
void http_bev_enable(struct bufferevent *bev, short what);
/* A response of our own to the current request (keep-alive when the request had no body). */
void http_respond(struct http_conn *c, int status, const char *decision, const char *body);
/* An upstream failure: our 502/504 when no response reached the client yet, else close. */
void http_fail(struct http_conn *c, int status, const char *why);
/* Back to waiting for the next request on a kept-alive client connection. */
void http_next_request(struct http_conn *c);
/* The current request ends the connection: close once what is queued for the client was written. */
void http_close_after_flush(struct http_conn *c);
/* The client connection ends between requests: a kept-alive plain-HTTP upstream goes to the session's
 * pool (up_pool.c) for its next request rather than closing. */
void http_park_upstream(struct http_conn *c);

/* ---- inspect.c ---- */
/* r.up was dialled for an inspected request: TLS to it (verified), then http_forward_start, or
 * http_fail with 502 and why. */
void http_inspect_upstream(struct http_conn *c);
/* send_now for a TLS bufferevent: data (up to a record's worth) as one SSL_write, made now when nothing
 * is queued on bev; what was not written stays in data for the caller to queue. */
void http_inspect_send_now(struct bufferevent *bev, struct evbuffer *data);
/* The header timer of an inspected connection fired (head_timeout_spared): when the client's socket is
 * readable, OpenSSL takes what it holds first (the TLS bufferevent's read, later in this iteration: the
 * handshake's rest, then a request), and the timer fires again right after it (a head the read began is
 * then 408 unless complete, head_late); at most INSPECT_READS_FIRST times a deadline. True when it will. */
#define INSPECT_READS_FIRST 3
bool http_inspect_read_first(struct http_conn *c);

/* ---- http_forward.c ---- */
/* What http_send_later left for the end of the iteration, sent now (the start of every callback of the
 * connection, and before our own responses and closing). */
void http_send_pending(struct http_conn *c);
/* The connection's later run (conn_start sets it). */
void http_send_later_run(struct proxy_later *l);
/* Builds the head sent upstream for req: origin-form target, our Host, no hop-by-hop fields. */
void http_forward_build_head(struct http_conn *c, const struct http_request *req);
/* r.up is connected (new or kept alive): sends the head, then streams both bodies. */
void http_forward_start(struct http_conn *c);
/* The client sent more (a request body) / its output drained below the watermark. */
void http_forward_client_read(struct http_conn *c);
void http_forward_client_drained(struct http_conn *c);
/* A chunked body's next splice run (a splice_pump_more_cb's work, splice_pump.h): at a chunk boundary
 * the framing waiting on fd is peeked at (MSG_PEEK, up to 512 bytes, nothing taken) and fed to ch, and
 * *limit is that framing with the chunk's data after it (the framer counts the data as passed), *last
 * when the framer saw the body's end (the trailer's last CRLF ends the run: what follows stays on fd).
 * The framer counts the bytes before they move, so it always knows where the body ends, and no byte it
 * refused moves. Returns 0, -EAGAIN (nothing on fd yet), -ENODATA (fd at end of file), -EPROTO (ch->error
 * says why), or -errno. */
int http_forward_chunk_run(struct http_chunked *ch, int fd, uint64_t *limit, bool *last);
