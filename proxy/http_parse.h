/* Strict HTTP/1.1 message-head parsing for the proxy (hand-written on purpose, see docs/proxy.md):
 * an incremental head scanner, the request and response head parsers, the authority parser and the
 * chunked-body framer. Pure functions over byte buffers: no I/O, no allocation, fuzzable.
 *
 * Trust boundary: request bytes come from a sandbox, response bytes from the internet. Every read
 * is bounded by the length given; nothing here assumes NUL termination.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HTTP_REQLINE_MAX    8192  /* longer request line: 414 */
#define HTTP_HEAD_MAX       65536 /* longer head: 431 (502 for a response) */
#define HTTP_HEADERS_MAX    100   /* more header fields: 431 */
#define HTTP_CHUNK_LINE_MAX 1024  /* chunk-size line incl. extensions */
#define HTTP_TRAILER_MAX    8192

/* ---- head scanner: finds where a head ends, feeding bytes as they arrive ---- */

enum http_scan_result { HTTP_SCAN_MORE = 0, HTTP_SCAN_DONE, HTTP_SCAN_ERROR };

struct http_scanner {
	size_t total;      /* bytes consumed so far */
	size_t line_len;   /* bytes in the current line, excluding CR */
	unsigned lines;    /* completed lines */
	bool cr;           /* previous byte was CR */
	bool is_response;  /* limits say 502 instead of 414/431 */
	int status;        /* on error: 400, 414, 431 (or 502 for responses) */
	const char *error; /* on error: static reason */
};

void http_scanner_init(struct http_scanner *s, bool is_response);
/* Feeds len bytes. On DONE, *used is how many of these bytes belong to the head (the head's total
 * length is s->total). On ERROR, s->status and s->error say why. */
enum http_scan_result http_scanner_feed(struct http_scanner *s, const char *buf, size_t len, size_t *used);

/* ---- authority ---- */

struct http_authority {
	const char *host; /* points into the parsed buffer; for "[v6]" the part inside the brackets */
	size_t host_len;
	uint16_t port;
	bool has_port;
	bool bracketed; /* was "[...]" */
};

/* Parses "host[:port]" (userinfo, percent-encoding, empty ports, ports out of 1..65535, control
 * bytes, spaces are rejected). require_port: the port is mandatory (CONNECT). Returns 0 or -EINVAL
 * with *why set to a static reason. */
int http_parse_authority(const char *s, size_t len, bool require_port, uint16_t default_port,
                         struct http_authority *out, const char **why);

/* ---- request head ---- */

struct http_header {
	const char *name; /* points into the head */
	size_t name_len;
	const char *value; /* OWS trimmed */
	size_t value_len;
	bool hop; /* hop-by-hop (or named by Connection): not forwarded */
};

enum http_target_form { HTTP_FORM_ABSOLUTE, HTTP_FORM_AUTHORITY, HTTP_FORM_ORIGIN };

struct http_request {
	const char *method; /* points into the head */
	size_t method_len;
	unsigned method_bit; /* policy_method_from_name() */
	enum http_target_form form;
	struct http_authority authority; /* absolute- and authority-form */
	const char *path;                /* origin-form part to send upstream ("/..."), absolute/origin forms */
	size_t path_len;
	unsigned version_minor; /* HTTP/1.0 or HTTP/1.1 */
	struct http_header headers[HTTP_HEADERS_MAX];
	unsigned nheaders;
	int64_t content_length; /* -1 when absent */
	bool chunked;
	bool keep_alive; /* the client wants the connection kept */
	bool expect_continue;
	bool has_host_header;
	struct http_authority host_header;
};

/* Parses a complete request head (as delimited by the scanner, CRLF CRLF included). `flags`:
 * HTTP_PARSE_ORIGIN_OK accepts origin-form targets (transparent mode). Returns 0 or an HTTP
 * status (400, 414, 431, 501, 505) with *why set to a static reason. */
#define HTTP_PARSE_ORIGIN_OK 1u
int http_parse_request(const char *buf, size_t len, unsigned flags, struct http_request *req, const char **why);

/* Whether the first len bytes of a stream begin an HTTP request line (after any blanks and empty lines, a
 * token and a blank, then "HTTP/" in any case before the line's LF; or "GET" and a blank, HTTP/0.9
 * included; a blank as lenient servers read one, a bare CR, VT, FF and NBSP included): 1
 * they do, 0 they cannot, -1 not known yet
 * (every byte so far fits one). A CONNECT tunnel's first bytes are read
 * with it: HTTP in a tunnel is decided request by request (connect.c). */
int http_request_line_prefix(const char *buf, size_t len);

/* ---- response head ---- */

enum http_body_kind { HTTP_BODY_NONE, HTTP_BODY_LENGTH, HTTP_BODY_CHUNKED, HTTP_BODY_CLOSE };

struct http_response {
	unsigned status;
	unsigned version_minor;
	const char *reason; /* points into the head */
	size_t reason_len;
	struct http_header headers[HTTP_HEADERS_MAX];
	unsigned nheaders;
	enum http_body_kind body;
	int64_t content_length;
	bool keep_alive; /* the server keeps the connection */
};

/* Parses a complete response head. head_request: the request was HEAD (no body). Returns 0 or -EINVAL
 * with *why set. */
int http_parse_response(const char *buf, size_t len, bool head_request, struct http_response *resp, const char **why);

/* ---- chunked body framing (bytes are forwarded as they are; this finds where the body ends) ---- */

struct http_chunked {
	int state;
	uint64_t remaining; /* data bytes left in the current chunk */
	size_t line_len;    /* bytes in the current size/trailer line */
	size_t trailer_len;
	const char *error;
};

enum http_chunk_result { HTTP_CHUNK_MORE = 0, HTTP_CHUNK_DONE, HTTP_CHUNK_ERROR };

void http_chunked_init(struct http_chunked *c);
/* Feeds len bytes; *used is how many belong to the body (all of them unless DONE). */
enum http_chunk_result http_chunked_feed(struct http_chunked *c, const char *buf, size_t len, size_t *used);
/* If the framer is inside chunk data, how many bytes can be passed without looking at them. */
uint64_t http_chunked_data_left(const struct http_chunked *c);
/* n (at most http_chunked_data_left) data bytes were passed on without being fed (spliced). */
void http_chunked_skip(struct http_chunked *c, uint64_t n);

/* Case-insensitive comparison of a counted string with litlen bytes at lit. */
bool http_token_eq_n(const char *s, size_t len, const char *lit, size_t litlen);
/* ... with a literal (inline: its strlen is made at compile time) */
static inline bool http_token_eq(const char *s, size_t len, const char *lit)
{
	return http_token_eq_n(s, len, lit, strlen(lit));
}
