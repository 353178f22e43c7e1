/* Fuzz target: what of a request goes upstream (proxy/http_rewrite.c): the head rewritten for the
 * upstream, with HTTPS inspection's credential set, and the search for placeholders of credentials that
 * are not the destination's (exfiltration).
 *
 * Input: one flag byte, one byte of piece sizes, then a request head and its body. In them "@A@" and
 * "@B@" stand for the placeholders of the policy's two credentials (random per process, so the input
 * names them this way). Flags: bits 0-1 the destination (a.test: credential A; b.test: credential B;
 * c.test: inspected, none; d.test: not inspected), bit 2 the request is inspected (HTTPS inside the
 * tunnel: origin form), bit 3 through a parent proxy (absolute form, not when inspected), bit 4 a port
 * other than the default.
 *
 * Checked: the placeholder search finds a placeholder of a credential other than the destination's own
 * wherever it is in the head or the body (against memmem), also when the body comes in pieces; and for a
 * head the strict parser accepts: the rewritten head parses again with the same method, target, framing
 * (Content-Length, chunked) and number of framing fields; it has one Host (the destination's), no
 * hop-by-hop field but the parent's Proxy-Authorization; a request to the credential's host carries its
 * field exactly once, with the secret; the secret is in no other request (unless the input itself had
 * it) and nowhere else in the head. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"
#include "http_rewrite.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET_A "fuzz-secret-A-6b1f0c"
#define SECRET_B "fuzz-secret-B-93d2e4"
#define IN_MAX   (96 * 1024)

static const struct policy *policy_get(void)
{
	static struct policy *p;
	static const char json[] =
	        "{\"allow\": [\"a.test\", \"b.test\", \"c.test\", \"d.test\"], \"inspect\": ["
	        "{\"host\": \"a.test\", \"credential\": {\"header\": \"Authorization: Bearer {secret}\", "
	        "\"secret_env\": \"SLUICE_FUZZ_SECRET_A\"}},"
	        "{\"host\": \"b.test\", \"credential\": {\"header\": \"X-Api-Key: k={secret};\", "
	        "\"secret_env\": \"SLUICE_FUZZ_SECRET_B\"}},"
	        "{\"host\": \"c.test\"}]}";
	if (!p) {
		struct policy_builder *b = policy_builder_new();
		struct policy_error err;
		setenv("SLUICE_FUZZ_SECRET_A", SECRET_A, 1);
		setenv("SLUICE_FUZZ_SECRET_B", SECRET_B, 1);
		if (!b || policy_builder_add_json(b, POLICY_LAYER_USER, "fuzz", json, sizeof json - 1, &err) < 0 ||
		    !(p = policy_builder_compile(b, &err))) {
			fprintf(stderr, "fuzz_http_rewrite: policy: %s\n", err.msg);
			abort();
		}
		policy_builder_free(b);
		if (policy_credential_count(p) != 2)
			abort();
	}
	return p;
}

struct out {
	char buf[2 * HTTP_HEAD_MAX + 16384];
	size_t len;
	bool overflow;
};

static void put(void *ctx, const void *data, size_t len)
{
	struct out *o = ctx;
	if (len > sizeof o->buf - o->len) {
		o->overflow = true;
		return;
	}
	memcpy(o->buf + o->len, data, len);
	o->len += len;
}

static bool has(const char *d, size_t len, const char *s)
{
	return memmem(d, len, s, strlen(s)) != NULL;
}

static size_t count(const char *d, size_t len, const char *s)
{
	size_t n = 0, sl = strlen(s);
	for (const char *at = d; (at = memmem(at, len - (size_t)(at - d), s, sl)) != NULL; at += sl)
		n++;
	return n;
}

static unsigned fields(const struct http_request *r, const char *name)
{
	unsigned n = 0;
	for (unsigned i = 0; i < r->nheaders; i++)
		n += http_token_eq(r->headers[i].name, r->headers[i].name_len, name);
	return n;
}

/* The reference: does a placeholder of a credential other than own appear in d? */
static bool ref_leak(const struct policy *p, const struct policy_credential *own, const char *d, size_t len)
{
	for (size_t i = 0; i < policy_credential_count(p); i++) {
		const struct policy_credential *c = policy_credential_at(p, i);
		if (c != own && has(d, len, c->placeholder))
			return true;
	}
	return false;
}

static void check_rewrite(const struct http_request *req, const struct http_rewrite *rw, const char *in, size_t in_len)
{
	static struct out o;
	static struct http_request back;
	const char *why;
	char host[64];
	int st;

	o.len = 0;
	o.overflow = false;
	http_rewrite_head(req, rw, put, &o);
	if (o.overflow)
		abort(); /* a head is at most HTTP_HEAD_MAX; what is added is bounded */
	if (o.len < 4 || memmem(o.buf, o.len, "\r\n\r\n", 4) != o.buf + o.len - 4)
		abort(); /* one head, ending where it says */
	/* the secret: in its own field to its host, exactly once; in no other request (an input that names
	 * a secret itself is not checked for it) */
	if (!has(in, in_len, "fuzz-secret-")) {
		if (count(o.buf, o.len, "fuzz-secret-") != (rw->cred ? 1u : 0u))
			abort();
		if (rw->cred) {
			char line[256];
			snprintf(line, sizeof line, "\r\n%s: %s\r\n", rw->cred->header, rw->cred->value);
			if (!has(o.buf, o.len, line))
				abort();
		}
	}
	st = http_parse_request(o.buf, o.len, rw->absolute ? 0 : HTTP_PARSE_ORIGIN_OK, &back, &why);
	if (st == 431 || st == 414)
		return; /* the fields and the target we add can pass a limit the client's head was just under */
	if (st != 0) {
		fprintf(stderr, "rewritten head does not parse (%d %s):\n%.*s\n", st, why, (int)o.len, o.buf);
		abort();
	}
	/* the same request: method, target, framing */
	if (back.method_len != req->method_len || memcmp(back.method, req->method, req->method_len) != 0)
		abort();
	size_t skip = (req->path_len == 0 || req->path[0] != '/') ? 1 : 0;
	if (back.path_len != req->path_len + skip || memcmp(back.path + skip, req->path, req->path_len) != 0)
		abort();
	if (back.chunked != req->chunked || back.content_length != req->content_length ||
	    fields(&back, "content-length") != fields(req, "content-length") ||
	    fields(&back, "transfer-encoding") != fields(req, "transfer-encoding") ||
	    back.version_minor != 1)
		abort();
	/* one Host, the destination's */
	if (!back.has_host_header || fields(&back, "host") != 1)
		abort();
	snprintf(host, sizeof host, "%s", rw->host);
	/* (a port not written reads as 80) */
	uint16_t want_port = rw->port != (rw->tls ? 443 : 80) ? rw->port : 80;
	if (back.host_header.host_len != strlen(host) || memcmp(back.host_header.host, host, strlen(host)) != 0 ||
	    back.host_header.port != want_port)
		abort();
	/* nothing hop-by-hop, but the parent's credentials */
	for (unsigned i = 0; i < back.nheaders; i++) {
		const struct http_header *h = &back.headers[i];
		if (http_token_eq(h->name, h->name_len, "host"))
			continue;
		if (http_token_eq(h->name, h->name_len, "proxy-authorization") && rw->absolute && rw->proxy_auth)
			continue;
		if (h->hop)
			abort();
	}
	if (rw->cred && fields(&back, rw->cred->header) != 1)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const hosts[] = {"a.test", "b.test", "c.test", "d.test"};
	static char in[IN_MAX];
	static struct http_request req;
	const struct policy *p = policy_get();
	const struct policy_credential *pa = policy_credential_for(p, "a.test"),
	                               *pb = policy_credential_for(p, "b.test");
	size_t len = 0;
	const char *why, *end;

	if (size < 2 || size > HTTP_HEAD_MAX + 16384)
		return 0;
	uint8_t flags = data[0], pieces = data[1];
	/* the input, with the placeholders in place of @A@ and @B@ */
	for (size_t i = 2; i < size;) {
		if (size - i >= 3 && data[i] == '@' && (data[i + 1] == 'A' || data[i + 1] == 'B') &&
		    data[i + 2] == '@') {
			const char *ph = data[i + 1] == 'A' ? pa->placeholder : pb->placeholder;
			if (strlen(ph) > sizeof in - len)
				return 0;
			memcpy(in + len, ph, strlen(ph));
			len += strlen(ph);
			i += 3;
		} else {
			if (len == sizeof in)
				return 0;
			in[len++] = (char)data[i++];
		}
	}
	const char *host = hosts[flags & 3];
	bool inspect = (flags & 4) && (flags & 3) != 3;
	struct http_rewrite rw = {
	        .host = host,
	        .port = (flags & 16) ? 8443 : (inspect ? 443 : 80),
	        .tls = inspect,
	        .absolute = !inspect && (flags & 8),
	        .proxy_auth = (!inspect && (flags & 8)) ? "Basic dXNlcjpwYXNz" : NULL,
	        .cred = inspect ? policy_credential_for(p, host) : NULL,
	};
	const struct policy_credential *own = rw.cred;

	/* head and body */
	end = memmem(in, len, "\r\n\r\n", 4);
	size_t head_len = end ? (size_t)(end - in) + 4 : len;
	const char *body = in + head_len;
	size_t body_len = len - head_len;

	/* the placeholder search: the head at once, the body in pieces of sizes taken from `pieces` */
	bool want_head = ref_leak(p, own, in, head_len), want_body = ref_leak(p, own, body, body_len);
	const struct policy_credential *got = policy_credential_find_placeholder(p, own, in, head_len);
	if ((got != NULL) != want_head || (got && got == own))
		abort();
	struct http_ph_scan scan;
	http_ph_scan_init(&scan, p, own);
	got = NULL;
	for (size_t off = 0, step = 1 + (pieces & 63); off < body_len && !got;
	     off += step, step = 1 + ((step * 7 + pieces) & 127)) {
		size_t n = body_len - off < step ? body_len - off : step;
		got = http_ph_scan_feed(&scan, body + off, n);
	}
	if ((got != NULL) != want_body || (got && got == own))
		abort();

	/* the rewritten head, for a head the strict parser accepts in the form this destination takes */
	if (!end || http_parse_request(in, head_len, inspect ? HTTP_PARSE_ORIGIN_OK : 0, &req, &why) != 0)
		return 0;
	if (inspect ? req.form != HTTP_FORM_ORIGIN : req.form != HTTP_FORM_ABSOLUTE)
		return 0; /* http.c refuses these before anything is rewritten */
	check_rewrite(&req, &rw, in, len);
	return 0;
}
