/* What of a request goes upstream (http_rewrite.c), as pure functions: the head an allowed request is
 * sent with (from the parsed request and where it goes), and the search of its body for placeholders of
 * credentials that are not the destination's (exfiltration). http.c and http_forward.c use them;
 * tests/fuzz/fuzz_http_rewrite.c checks them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_parse.h"
#include "policy.h"

struct http_rewrite {
	const char *host; /* borrowed: the decided destination (canonical name or literal) */
	uint16_t port;
	bool v6;                              /* host is an IPv6 literal: bracketed in Host and the target */
	bool tls;                             /* the origin speaks TLS (HTTPS inspection): Host's default port is 443 */
	bool absolute;                        /* to a parent proxy: absolute-form target (http://host[:port]/path) */
	const char *proxy_auth;               /* borrowed: to a parent proxy, its Proxy-Authorization value, or NULL */
	const struct policy_credential *cred; /* borrowed: HTTPS inspection's credential for host, or NULL */
};

/* Writes the head for req (parsed by http_parse_request) through put(ctx, bytes, len), piece by piece:
 * the request line (origin form, or absolute form to a parent), Proxy-Authorization for the parent, our
 * Host, the end-to-end header fields of req (hop-by-hop ones and those Connection names stay here), the
 * credential's field with its secret in place of any field of that name the client sent, and Via. The
 * secret goes nowhere else; nothing here frames the body (Content-Length and Transfer-Encoding are the
 * client's, as parsed). */
void http_rewrite_head(const struct http_request *req, const struct http_rewrite *rw,
                       void (*put)(void *ctx, const void *data, size_t len), void *ctx);

/* The body's placeholder search, piece by piece as the body goes upstream: a placeholder split across
 * pieces is found too. */
struct http_ph_scan {
	const struct policy *p;              /* borrowed */
	const struct policy_credential *own; /* borrowed: the destination's own credential (inspected), or NULL */
	char tail[POLICY_PLACEHOLDER_LEN];   /* the last bytes already searched (at most a placeholder's length - 1) */
	size_t tail_len;
};

void http_ph_scan_init(struct http_ph_scan *s, const struct policy *p, const struct policy_credential *own);
/* Searches the next len bytes: a credential other than own whose placeholder ends in them, or NULL. */
const struct policy_credential *http_ph_scan_feed(struct http_ph_scan *s, const void *data, size_t len);
