/* What of a request goes upstream (http_rewrite.h): the head sent upstream, a pure function of the
 * parsed request and its destination, and the body's placeholder search. Trust boundary: the request's
 * bytes are the sandbox's; the target and Host come from the decided destination only, never from the
 * client's bytes; the credential's secret is written in its own field and nowhere else. */
#include "http_rewrite.h"

#include <string.h>

#include "util.h"

static void put_str(void (*put)(void *, const void *, size_t), void *ctx, const char *s)
{
	put(ctx, s, strlen(s));
}

/* ":port" (snprintf was a tenth of a keep-alive request head's rewriting, issue 16) */
static void put_port(void (*put)(void *, const void *, size_t), void *ctx, uint16_t port)
{
	char num[8], *d = util_u64_dec(num + sizeof num, port);

	*--d = ':';
	put(ctx, d, (size_t)(num + sizeof num - d));
}

void http_rewrite_head(const struct http_request *req, const struct http_rewrite *rw,
                       void (*put)(void *ctx, const void *data, size_t len), void *ctx)
{
	const char *slash = (req->path_len == 0 || req->path[0] != '/') ? "/" : "";
	const char *ob = rw->v6 ? "[" : "", *cb = rw->v6 ? "]" : "";

	put(ctx, req->method, req->method_len);
	put_str(put, ctx, " ");
	if (rw->absolute) {
		put_str(put, ctx, "http://");
		put_str(put, ctx, ob);
		put_str(put, ctx, rw->host);
		put_str(put, ctx, cb);
		if (rw->port != 80)
			put_port(put, ctx, rw->port);
	}
	put_str(put, ctx, slash);
	put(ctx, req->path, req->path_len);
	/* our own version, whatever the client's (RFC 9110 6.2): an HTTP/1.0 client's request leaves the
	 * upstream connection open for the next one (up_pool.c); a chunked answer is unframed for it */
	put_str(put, ctx, " HTTP/1.1\r\n");
	if (rw->absolute && rw->proxy_auth && *rw->proxy_auth) {
		put_str(put, ctx, "Proxy-Authorization: ");
		put_str(put, ctx, rw->proxy_auth);
		put_str(put, ctx, "\r\n");
	}
	put_str(put, ctx, "Host: ");
	put_str(put, ctx, ob);
	put_str(put, ctx, rw->host);
	put_str(put, ctx, cb);
	if (rw->port != (rw->tls ? 443 : 80))
		put_port(put, ctx, rw->port);
	put_str(put, ctx, "\r\n");
	for (unsigned i = 0; i < req->nheaders; i++) {
		const struct http_header *h = &req->headers[i];
		/* the credential's field is ours: whatever the client sent in it (the placeholder, say) is
		 * dropped */
		if (h->hop || (rw->cred && http_token_eq(h->name, h->name_len, rw->cred->header)))
			continue;
		put(ctx, h->name, h->name_len);
		put_str(put, ctx, ": ");
		put(ctx, h->value, h->value_len);
		put_str(put, ctx, "\r\n");
	}
	if (rw->cred) {
		put_str(put, ctx, rw->cred->header);
		put_str(put, ctx, ": ");
		put_str(put, ctx, rw->cred->value);
		put_str(put, ctx, "\r\n");
	}
	put_str(put, ctx, "Via: 1.1 sluice\r\n\r\n");
}

void http_ph_scan_init(struct http_ph_scan *s, const struct policy *p, const struct policy_credential *own)
{
	s->p = p;
	s->own = own;
	s->tail_len = 0;
}

const struct policy_credential *http_ph_scan_feed(struct http_ph_scan *s, const void *data, size_t len)
{
	const size_t keep = POLICY_PLACEHOLDER_LEN - 1;
	const char *d = data;
	char join[2 * POLICY_PLACEHOLDER_LEN];
	size_t k = len < keep ? len : keep;
	const struct policy_credential *found;

	/* one that straddles the last piece and this one, then one inside this one */
	memcpy(join, s->tail, s->tail_len);
	memcpy(join + s->tail_len, d, k);
	found = policy_credential_find_placeholder(s->p, s->own, join, s->tail_len + k);
	if (!found)
		found = policy_credential_find_placeholder(s->p, s->own, d, len);
	if (len >= keep) {
		memcpy(s->tail, d + len - keep, keep);
		s->tail_len = keep;
	} else {
		size_t old = s->tail_len < keep - len ? s->tail_len : keep - len;
		memmove(s->tail, s->tail + s->tail_len - old, old);
		memcpy(s->tail + old, d, len);
		s->tail_len = old + len;
	}
	return found;
}
