/* Strict HTTP/1.1 head parsing: scanner, request and response heads, authority, chunked framing.
 * See http_parse.h for the contract and docs/proxy.md for the rules and why they are hand-written. */
#include "http_parse.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "policy.h"

#define CL_MAX ((int64_t)1 << 62)

/* Byte classes, a table lookup a byte where the scanner and the parsers walk every byte of a head (the
 * per-byte comparisons and a strchr per header-name byte were a fifth of the proxy's user-space
 * instructions per keep-alive request, issue 16):
 *   C_TCHAR  a token character (RFC 9110 5.6.2): ALPHA, DIGIT and !#$%&'*+-.^_`|~
 *   C_EOL    a byte that ends a run of line content: CR, LF and NUL (which the scanner and next_line
 *            look at one at a time)
 *   C_CTL    a control byte not allowed in a header value or reason phrase: below 0x20 but HTAB, and DEL */
enum { C_TCHAR = 1, C_EOL = 2, C_CTL = 4 };

#define T C_TCHAR
#define C C_CTL
#define E (C_EOL | C_CTL)
static const unsigned char byte_class[256] = {
	E, C, C, C, C, C, C, C, C, 0, E, C, C, E, C, C, /* NUL, HTAB (allowed), LF, CR */
	C, C, C, C, C, C, C, C, C, C, C, C, C, C, C, C,
	0, T, 0, T, T, T, T, T, 0, 0, T, T, 0, T, T, 0, /* ! # $ % & ' * + - . */
	T, T, T, T, T, T, T, T, T, T, 0, 0, 0, 0, 0, 0, /* 0-9 */
	0, T, T, T, T, T, T, T, T, T, T, T, T, T, T, T, /* A-O */
	T, T, T, T, T, T, T, T, T, T, T, 0, 0, 0, T, T, /* P-Z ^ _ */
	T, T, T, T, T, T, T, T, T, T, T, T, T, T, T, T, /* ` a-o */
	T, T, T, T, T, T, T, T, T, T, T, 0, T, 0, T, C, /* p-z | ~ DEL */
};
#undef T
#undef C
#undef E

static bool is_tchar(unsigned char c)
{
	return byte_class[c] & C_TCHAR;
}

static bool is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static unsigned char lower(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

static bool ci_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++)
		if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
			return false;
	return true;
}

bool http_token_eq_n(const char *s, size_t len, const char *lit, size_t litlen)
{
	return ci_eq(s, len, lit, litlen);
}

/* ---- scanner ---- */

void http_scanner_init(struct http_scanner *s, bool is_response)
{
	memset(s, 0, sizeof *s);
	s->is_response = is_response;
}

static enum http_scan_result scan_fail(struct http_scanner *s, int status, const char *why)
{
	s->status = s->is_response ? 502 : status;
	s->error = why;
	return HTTP_SCAN_ERROR;
}

enum http_scan_result http_scanner_feed(struct http_scanner *s, const char *buf, size_t len, size_t *used)
{
	*used = 0;
	if (s->error)
		return HTTP_SCAN_ERROR;
	for (size_t i = 0; i < len; i++) {
		unsigned char c;
		if (!s->cr) {
			/* A run of line content (no CR, LF or NUL) within both limits is counted at once; the byte
			 * that ends it, or would pass a limit, goes through the checks below one at a time. */
			size_t room = HTTP_HEAD_MAX - s->total, j = i;
			if (s->lines == 0 && HTTP_REQLINE_MAX - s->line_len < room)
				room = HTTP_REQLINE_MAX - s->line_len;
			if (room > len - i)
				room = len - i;
			while (j < i + room && !(byte_class[(unsigned char)buf[j]] & C_EOL))
				j++;
			s->total += j - i;
			s->line_len += j - i;
			i = j;
			if (i == len)
				break;
		}
		c = (unsigned char)buf[i];
		s->total++;
		if (s->total > HTTP_HEAD_MAX)
			return scan_fail(s, 431, "message head larger than 64 KiB");
		if (c == '\n') {
			if (!s->cr)
				return scan_fail(s, 400, "bare LF line ending (lines must end in CRLF)");
			s->cr = false;
			if (s->line_len == 0) {
				if (s->lines == 0)
					return scan_fail(s, 400, "empty request line");
				*used = i + 1;
				return HTTP_SCAN_DONE;
			}
			s->lines++;
			s->line_len = 0;
			if (s->lines > HTTP_HEADERS_MAX + 1)
				return scan_fail(s, 431, "more than 100 header fields");
			continue;
		}
		if (s->cr)
			return scan_fail(s, 400, "CR not followed by LF");
		if (c == '\r') {
			s->cr = true;
			continue;
		}
		if (c == '\0')
			return scan_fail(s, 400, "NUL byte in message head");
		s->line_len++;
		if (s->lines == 0 && s->line_len > HTTP_REQLINE_MAX)
			return scan_fail(s, 414, "request line longer than 8 KiB");
	}
	*used = len;
	return HTTP_SCAN_MORE;
}

/* ---- authority ---- */

int http_parse_authority(const char *s, size_t len, bool require_port, uint16_t default_port,
                         struct http_authority *out, const char **why)
{
	size_t host_end, i;

	memset(out, 0, sizeof *out);
	out->port = default_port;
	if (len == 0) {
		*why = "empty host";
		return -EINVAL;
	}
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '@') {
			*why = "userinfo (user@) in the authority is not allowed";
			return -EINVAL;
		}
		if (c <= 0x20 || c >= 0x7f) {
			*why = "control byte, space or non-ASCII byte in the authority";
			return -EINVAL;
		}
	}
	if (s[0] == '[') {
		const char *close = memchr(s, ']', len);
		if (!close) {
			*why = "unterminated [IPv6] literal";
			return -EINVAL;
		}
		out->host = s + 1;
		out->host_len = (size_t)(close - s) - 1;
		out->bracketed = true;
		if (out->host_len == 0 || out->host_len > 45) {
			*why = "bad [IPv6] literal length";
			return -EINVAL;
		}
		for (i = 0; i < out->host_len; i++) {
			unsigned char c = (unsigned char)out->host[i];
			if (hexval(c) < 0 && c != ':' && c != '.') {
				*why = "invalid character in [IPv6] literal";
				return -EINVAL;
			}
		}
		host_end = (size_t)(close - s) + 1;
		if (host_end < len && s[host_end] != ':') {
			*why = "garbage after [IPv6] literal";
			return -EINVAL;
		}
	} else {
		const char *colon = memchr(s, ':', len);
		host_end = colon ? (size_t)(colon - s) : len;
		if (colon && memchr(colon + 1, ':', len - host_end - 1)) {
			*why = "IPv6 literals must be written in brackets";
			return -EINVAL;
		}
		out->host = s;
		out->host_len = host_end;
		if (host_end == 0) {
			*why = "empty host";
			return -EINVAL;
		}
		if (host_end > POLICY_HOST_MAX + 1) {
			*why = "host name longer than 253 bytes";
			return -EINVAL;
		}
		for (i = 0; i < host_end; i++) {
			unsigned char c = (unsigned char)s[i];
			if (c == '%') {
				*why = "percent-encoding in the host is not allowed";
				return -EINVAL;
			}
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '.' ||
			      c == '_')) {
				*why = "invalid character in host";
				return -EINVAL;
			}
		}
	}
	if (host_end < len) { /* s[host_end] == ':' */
		const char *p = s + host_end + 1;
		size_t n = len - host_end - 1;
		unsigned long v = 0;
		if (n == 0) {
			*why = "empty port after ':'";
			return -EINVAL;
		}
		if (n > 5 || (p[0] == '0')) {
			*why = "bad port (1-65535, no leading zeros)";
			return -EINVAL;
		}
		for (i = 0; i < n; i++) {
			if (!is_digit((unsigned char)p[i])) {
				*why = "bad port (not a number)";
				return -EINVAL;
			}
			v = v * 10 + (unsigned)(p[i] - '0');
		}
		if (v == 0 || v > 65535) {
			*why = "bad port (1-65535)";
			return -EINVAL;
		}
		out->port = (uint16_t)v;
		out->has_port = true;
	} else if (require_port) {
		*why = "missing port (CONNECT needs host:port)";
		return -EINVAL;
	}
	return 0;
}

/* ---- shared head helpers ---- */

struct line {
	const char *p;
	size_t len;
};

/* Next CRLF-terminated line from *pos; false at the end or on a bad line ending. */
static int next_line(const char *buf, size_t len, size_t *pos, struct line *l, const char **why)
{
	size_t start = *pos;
	for (size_t i = start; i < len; i++) {
		if (!(byte_class[(unsigned char)buf[i]] & C_EOL))
			continue;
		if (buf[i] == '\r') {
			if (i + 1 >= len || buf[i + 1] != '\n') {
				*why = "CR not followed by LF";
				return -1;
			}
			l->p = buf + start;
			l->len = i - start;
			*pos = i + 2;
			return 1;
		}
		if (buf[i] == '\n') {
			*why = "bare LF line ending (lines must end in CRLF)";
			return -1;
		}
		if (buf[i] == '\0') {
			*why = "NUL byte in message head";
			return -1;
		}
	}
	*why = "message head not terminated by an empty line";
	return -1;
}

#define HOP(s) {s, sizeof s - 1}
static const struct {
	const char *name;
	size_t len;
} hop_headers[] = {
        HOP("connection"),         HOP("keep-alive"), HOP("proxy-connection"), HOP("proxy-authorization"),
        HOP("proxy-authenticate"), HOP("te"),         HOP("trailer"),          HOP("upgrade"),
};
#undef HOP

/* Parses one header line into h; returns 0 or -1 with *why. */
static int parse_header_line(const struct line *l, struct http_header *h, const char **why)
{
	size_t i = 0, end;

	if (l->len > 0 && (l->p[0] == ' ' || l->p[0] == '\t')) {
		*why = "obsolete line folding (header line starts with whitespace)";
		return -1;
	}
	while (i < l->len && is_tchar((unsigned char)l->p[i]))
		i++;
	if (i == 0 || i >= l->len || l->p[i] != ':') {
		*why = (i < l->len && (l->p[i] == ' ' || l->p[i] == '\t')) ? "whitespace between header name and colon"
		                                                           : "malformed header field name";
		return -1;
	}
	h->name = l->p;
	h->name_len = i;
	i++;
	while (i < l->len && (l->p[i] == ' ' || l->p[i] == '\t'))
		i++;
	end = l->len;
	while (end > i && (l->p[end - 1] == ' ' || l->p[end - 1] == '\t'))
		end--;
	for (size_t k = i; k < end; k++) {
		if (byte_class[(unsigned char)l->p[k]] & C_CTL) {
			*why = "control byte in header value";
			return -1;
		}
	}
	h->value = l->p + i;
	h->value_len = end - i;
	h->hop = false;
	for (size_t k = 0; k < sizeof hop_headers / sizeof hop_headers[0]; k++)
		if (ci_eq(h->name, h->name_len, hop_headers[k].name, hop_headers[k].len))
			h->hop = true;
	return 0;
}

/* Iterates comma-separated list elements of a header value (OWS trimmed, empty ones skipped). */
static bool next_elem(const char *v, size_t len, size_t *pos, const char **e, size_t *elen)
{
	while (*pos < len) {
		size_t s = *pos, t;
		while (*pos < len && v[*pos] != ',')
			(*pos)++;
		t = *pos;
		if (*pos < len)
			(*pos)++;
		while (s < t && (v[s] == ' ' || v[s] == '\t'))
			s++;
		while (t > s && (v[t - 1] == ' ' || v[t - 1] == '\t'))
			t--;
		if (t > s) {
			*e = v + s;
			*elen = t - s;
			return true;
		}
	}
	return false;
}

/* Content-Length: a list of equal decimal values; merges with *cl (-1 = not seen yet). */
static int merge_content_length(const struct http_header *h, int64_t *cl, const char **why)
{
	size_t pos = 0, n;
	const char *e;
	bool any = false;

	while (next_elem(h->value, h->value_len, &pos, &e, &n)) {
		int64_t v = 0;
		any = true;
		if (n > 18) {
			*why = "Content-Length too large";
			return -1;
		}
		for (size_t i = 0; i < n; i++) {
			if (!is_digit((unsigned char)e[i])) {
				*why = "Content-Length is not a number";
				return -1;
			}
			v = v * 10 + (e[i] - '0');
		}
		if (v > CL_MAX) {
			*why = "Content-Length too large";
			return -1;
		}
		if (*cl >= 0 && *cl != v) {
			*why = "differing Content-Length values";
			return -1;
		}
		*cl = v;
	}
	if (!any) {
		*why = "empty Content-Length";
		return -1;
	}
	return 0;
}

/* Transfer-Encoding: 1 = ends in chunked, 0 = some other coding last; -1 invalid. */
static int te_is_chunked(const struct http_header *h, bool *only_chunked)
{
	size_t pos = 0, n, count = 0;
	const char *e, *last = NULL;
	size_t last_len = 0;

	while (next_elem(h->value, h->value_len, &pos, &e, &n)) {
		last = e;
		last_len = n;
		count++;
	}
	if (!last)
		return -1;
	*only_chunked = count == 1;
	return http_token_eq(last, last_len, "chunked") ? 1 : 0;
}

/* Marks headers named in Connection tokens as hop-by-hop; returns close/keep-alive flags. */
static void apply_connection(struct http_header *hs, unsigned n, bool *saw_close, bool *saw_keepalive)
{
	for (unsigned i = 0; i < n; i++) {
		size_t pos = 0, tl;
		const char *t;
		if (!http_token_eq(hs[i].name, hs[i].name_len, "connection") &&
		    !http_token_eq(hs[i].name, hs[i].name_len, "proxy-connection"))
			continue;
		while (next_elem(hs[i].value, hs[i].value_len, &pos, &t, &tl)) {
			if (http_token_eq(t, tl, "close"))
				*saw_close = true;
			else if (http_token_eq(t, tl, "keep-alive"))
				*saw_keepalive = true;
			for (unsigned k = 0; k < n; k++)
				if (ci_eq(hs[k].name, hs[k].name_len, t, tl))
					hs[k].hop = true;
		}
	}
}

/* Whether Connection named a framing field (apply_connection marked it hop-by-hop): it would be dropped
 * while its body is forwarded, and the next hop would read the body as the next message (smuggling). */
static bool names_framing(const struct http_header *hs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (hs[i].hop && (http_token_eq(hs[i].name, hs[i].name_len, "content-length") ||
		                  http_token_eq(hs[i].name, hs[i].name_len, "transfer-encoding")))
			return true;
	return false;
}

static bool same_host(const struct http_authority *a, const struct http_authority *b)
{
	size_t la = a->host_len, lb = b->host_len;
	if (la && a->host[la - 1] == '.')
		la--;
	if (lb && b->host[lb - 1] == '.')
		lb--;
	if (la != lb || a->port != b->port)
		return false;
	for (size_t i = 0; i < la; i++)
		if (lower((unsigned char)a->host[i]) != lower((unsigned char)b->host[i]))
			return false;
	return true;
}

/* ---- request ---- */

static int parse_version(const char *p, size_t n, unsigned *minor)
{
	if (n != 8 || memcmp(p, "HTTP/", 5) != 0 || !is_digit((unsigned char)p[5]) || p[6] != '.' ||
	    !is_digit((unsigned char)p[7]))
		return 400;
	if (p[5] != '1' || (p[7] != '0' && p[7] != '1'))
		return 505;
	*minor = (unsigned)(p[7] - '0');
	return 0;
}

static int parse_target(const char *t, size_t n, bool is_connect, unsigned flags, struct http_request *req,
                        const char **why)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)t[i];
		if (c <= 0x20 || c >= 0x7f) {
			*why = "control byte, space or non-ASCII byte in the request target";
			return 400;
		}
		if (c == '#') {
			*why = "fragment (#) in the request target";
			return 400;
		}
	}
	if (is_connect) {
		req->form = HTTP_FORM_AUTHORITY;
		if (http_parse_authority(t, n, true, 0, &req->authority, why) != 0)
			return 400;
		return 0;
	}
	if (n >= 7 && http_token_eq(t, 7, "http://")) {
		size_t a = 7, e = 7;
		while (e < n && t[e] != '/' && t[e] != '?')
			e++;
		req->form = HTTP_FORM_ABSOLUTE;
		if (http_parse_authority(t + a, e - a, false, 80, &req->authority, why) != 0)
			return 400;
		req->path = t + e;
		req->path_len = n - e;
		return 0;
	}
	if (n >= 8 && http_token_eq(t, 8, "https://")) {
		*why = "https:// request targets are not proxied in the clear: use CONNECT";
		return 400;
	}
	if (t[0] == '/' && (flags & HTTP_PARSE_ORIGIN_OK)) {
		req->form = HTTP_FORM_ORIGIN;
		req->path = t;
		req->path_len = n;
		return 0;
	}
	if (t[0] == '/')
		*why = "origin-form request target: this is a forward proxy, send absolute URIs (http://host/path)";
	else
		*why = "unsupported request target (only http:// URIs and CONNECT host:port)";
	return 400;
}

/* A byte some server reads as a blank in a request line: Python's http.server splits the line (up to its LF,
 * read as Latin-1) on whatever str.split() takes for white space, CR, VT, FF, 0x1c-0x1f, NEL and NBSP
 * included, and skips it before the method; Apache's "HttpProtocolOptions Unsafe" takes isspace(). */
static bool line_blank(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0;
}

int http_request_line_prefix(const char *buf, size_t len)
{
	size_t i = 0, m;

	/* servers skip empty lines before a request line (RFC 9112 2.2; nginx, Node and Go skip any), and
	 * Python's skips blanks before the method */
	while (i < len && line_blank((unsigned char)buf[i]))
		i++;
	for (m = i; i < len && is_tchar((unsigned char)buf[i]); i++)
		;
	if (i == len)
		return -1;
	if (i == m || buf[i] == '\n' || !line_blank((unsigned char)buf[i]))
		return 0;
	/* "GET" and a blank: an HTTP/0.9 request line ("GET target", no version) when no "HTTP/" follows, which
	 * servers still answer (nginx, Python's http.server), and an absolute-form target picks the virtual
	 * host by its name (nginx: "GET http://evil.test/x" is served as evil.test). The front refuses it.
	 * (Upper case, as those servers want it: memcached's "get key" still passes.) */
	if (i - m == 3 && memcmp(buf + m, "GET", 3) == 0)
		return 1;
	/* the rest of the line, to its LF (Python's reads a bare CR as a blank), holds "HTTP/" in any case
	 * (lenient servers take runs of blanks, "http/1.1"): read as a request line, which is the stricter
	 * reading; without it the line ends as no request line (an SSH banner) */
	for (; i < len && buf[i] != '\n'; i++)
		if (len - i >= 5 && strncasecmp(buf + i, "HTTP/", 5) == 0)
			return 1;
	return i == len ? -1 : 0;
}

int http_parse_request(const char *buf, size_t len, unsigned flags, struct http_request *req, const char **why)
{
	struct line l;
	size_t pos = 0, sp1, sp2;
	bool saw_close = false, saw_keepalive = false, te_seen = false, cl_seen = false;
	int r;

	memset(req, 0, sizeof *req);
	req->content_length = -1;
	*why = "malformed request";
	if (len > HTTP_HEAD_MAX) {
		*why = "request head larger than 64 KiB";
		return 431;
	}
	if (next_line(buf, len, &pos, &l, why) != 1)
		return 400;
	if (l.len > HTTP_REQLINE_MAX) {
		*why = "request line longer than 8 KiB";
		return 414;
	}
	/* method SP target SP version */
	for (sp1 = 0; sp1 < l.len && is_tchar((unsigned char)l.p[sp1]); sp1++)
		;
	if (sp1 == 0 || sp1 >= l.len || l.p[sp1] != ' ' || sp1 > 32) {
		*why = "malformed method in request line";
		return 400;
	}
	for (sp2 = sp1 + 1; sp2 < l.len && l.p[sp2] != ' '; sp2++)
		;
	if (sp2 == sp1 + 1 || sp2 >= l.len) {
		*why = "malformed request line (METHOD SP target SP HTTP/1.1)";
		return 400;
	}
	req->method = l.p;
	req->method_len = sp1;
	req->method_bit = policy_method_from_name(l.p, sp1);
	r = parse_version(l.p + sp2 + 1, l.len - sp2 - 1, &req->version_minor);
	if (r) {
		*why = r == 505 ? "HTTP version not supported (1.0 and 1.1 are)" : "malformed HTTP version";
		return r;
	}
	r = parse_target(l.p + sp1 + 1, sp2 - sp1 - 1, http_token_eq(l.p, sp1, "CONNECT"), flags, req, why);
	if (r)
		return r;

	for (;;) {
		struct http_header *h;
		if (next_line(buf, len, &pos, &l, why) != 1)
			return 400;
		if (l.len == 0)
			break;
		if (req->nheaders >= HTTP_HEADERS_MAX) {
			*why = "more than 100 header fields";
			return 431;
		}
		h = &req->headers[req->nheaders];
		if (parse_header_line(&l, h, why) != 0)
			return 400;
		req->nheaders++;
		if (http_token_eq(h->name, h->name_len, "host")) {
			if (req->has_host_header) {
				*why = "more than one Host header";
				return 400;
			}
			req->has_host_header = true;
			if (http_parse_authority(h->value, h->value_len, false,
			                         req->form == HTTP_FORM_AUTHORITY ? req->authority.port : 80,
			                         &req->host_header, why) != 0) {
				*why = "malformed Host header";
				return 400;
			}
			h->hop = true; /* rewritten from the request target */
		} else if (http_token_eq(h->name, h->name_len, "content-length")) {
			cl_seen = true;
			if (merge_content_length(h, &req->content_length, why) != 0)
				return 400;
		} else if (http_token_eq(h->name, h->name_len, "transfer-encoding")) {
			bool only;
			int c = te_is_chunked(h, &only);
			if (te_seen) {
				*why = "more than one Transfer-Encoding header";
				return 400;
			}
			te_seen = true;
			if (c < 0) {
				*why = "empty Transfer-Encoding";
				return 400;
			}
			if (c == 0 || !only) {
				*why = "Transfer-Encoding other than chunked is not supported";
				return 501;
			}
			req->chunked = true;
			h->hop = false; /* the chunked framing is forwarded as it is */
		} else if (http_token_eq(h->name, h->name_len, "expect")) {
			if (http_token_eq(h->value, h->value_len, "100-continue"))
				req->expect_continue = true;
		}
	}
	if (pos != len) {
		*why = "bytes after the end of the head";
		return 400;
	}
	if (te_seen && cl_seen) {
		*why = "both Content-Length and Transfer-Encoding";
		return 400;
	}
	if (te_seen && req->version_minor == 0) {
		*why = "Transfer-Encoding in an HTTP/1.0 request";
		return 400;
	}
	if (req->version_minor == 1 && !req->has_host_header) {
		*why = "HTTP/1.1 request without a Host header";
		return 400;
	}
	if (req->has_host_header && req->form != HTTP_FORM_ORIGIN && !same_host(&req->authority, &req->host_header)) {
		*why = "Host header disagrees with the request target";
		return 400;
	}
	if (req->form == HTTP_FORM_AUTHORITY && (req->chunked || req->content_length > 0)) {
		*why = "CONNECT request with a body";
		return 400;
	}
	apply_connection(req->headers, req->nheaders, &saw_close, &saw_keepalive);
	if (names_framing(req->headers, req->nheaders)) {
		*why = "Connection names a framing header (Content-Length or Transfer-Encoding)";
		return 400;
	}
	req->keep_alive = req->version_minor == 1 ? !saw_close : (saw_keepalive && !saw_close);
	return 0;
}

/* ---- response ---- */

int http_parse_response(const char *buf, size_t len, bool head_request, struct http_response *resp, const char **why)
{
	struct line l;
	size_t pos = 0;
	bool saw_close = false, saw_keepalive = false, te_seen = false, cl_seen = false, te_chunked = false;

	memset(resp, 0, sizeof *resp);
	resp->content_length = -1;
	*why = "malformed response";
	if (next_line(buf, len, &pos, &l, why) != 1)
		return -EINVAL;
	if (l.len < 12 || memcmp(l.p, "HTTP/1.", 7) != 0 || (l.p[7] != '0' && l.p[7] != '1') || l.p[8] != ' ' ||
	    !is_digit((unsigned char)l.p[9]) || !is_digit((unsigned char)l.p[10]) ||
	    !is_digit((unsigned char)l.p[11]) || (l.len > 12 && l.p[12] != ' ')) {
		*why = "malformed status line";
		return -EINVAL;
	}
	resp->version_minor = (unsigned)(l.p[7] - '0');
	resp->status = (unsigned)((l.p[9] - '0') * 100 + (l.p[10] - '0') * 10 + (l.p[11] - '0'));
	if (resp->status < 100) {
		*why = "status code below 100";
		return -EINVAL;
	}
	resp->reason = l.len > 13 ? l.p + 13 : l.p + l.len;
	resp->reason_len = l.len > 13 ? l.len - 13 : 0;
	for (size_t i = 0; i < resp->reason_len; i++) {
		if (byte_class[(unsigned char)resp->reason[i]] & C_CTL) {
			*why = "control byte in reason phrase";
			return -EINVAL;
		}
	}
	for (;;) {
		struct http_header *h;
		if (next_line(buf, len, &pos, &l, why) != 1)
			return -EINVAL;
		if (l.len == 0)
			break;
		if (resp->nheaders >= HTTP_HEADERS_MAX) {
			*why = "more than 100 header fields";
			return -EINVAL;
		}
		h = &resp->headers[resp->nheaders];
		if (parse_header_line(&l, h, why) != 0)
			return -EINVAL;
		resp->nheaders++;
		if (http_token_eq(h->name, h->name_len, "content-length")) {
			cl_seen = true;
			if (merge_content_length(h, &resp->content_length, why) != 0)
				return -EINVAL;
		} else if (http_token_eq(h->name, h->name_len, "transfer-encoding")) {
			bool only;
			int c = te_is_chunked(h, &only);
			if (te_seen || c < 0) {
				*why = "repeated or empty Transfer-Encoding";
				return -EINVAL;
			}
			te_seen = true;
			te_chunked = c == 1;
		}
	}
	if (pos != len) {
		*why = "bytes after the end of the head";
		return -EINVAL;
	}
	if (te_seen && cl_seen) {
		*why = "both Content-Length and Transfer-Encoding in the response";
		return -EINVAL;
	}
	apply_connection(resp->headers, resp->nheaders, &saw_close, &saw_keepalive);
	if (names_framing(resp->headers, resp->nheaders)) {
		*why = "Connection names a framing header (Content-Length or Transfer-Encoding) in the response";
		return -EINVAL;
	}
	resp->keep_alive = resp->version_minor == 1 ? !saw_close : (saw_keepalive && !saw_close);
	if (head_request || resp->status < 200 || resp->status == 204 || resp->status == 304)
		resp->body = HTTP_BODY_NONE;
	else if (te_seen)
		resp->body = te_chunked ? HTTP_BODY_CHUNKED : HTTP_BODY_CLOSE;
	else if (cl_seen)
		resp->body = HTTP_BODY_LENGTH;
	else
		resp->body = HTTP_BODY_CLOSE;
	if (resp->body == HTTP_BODY_CLOSE)
		resp->keep_alive = false;
	if (te_seen && te_chunked) {
		for (unsigned i = 0; i < resp->nheaders; i++)
			if (http_token_eq(resp->headers[i].name, resp->headers[i].name_len, "transfer-encoding"))
				resp->headers[i].hop = false;
	}
	return 0;
}

/* ---- chunked ---- */

enum {
	CH_SIZE_FIRST,
	CH_SIZE,
	CH_EXT,
	CH_SIZE_LF,
	CH_DATA,
	CH_DATA_CR,
	CH_DATA_LF,
	CH_TRAILER_START,
	CH_TRAILER_LINE,
	CH_TRAILER_LF,
	CH_FINAL_LF,
	CH_DONE,
	CH_ERROR,
};

void http_chunked_init(struct http_chunked *c)
{
	memset(c, 0, sizeof *c);
	c->state = CH_SIZE_FIRST;
}

uint64_t http_chunked_data_left(const struct http_chunked *c)
{
	return c->state == CH_DATA ? c->remaining : 0;
}

void http_chunked_skip(struct http_chunked *c, uint64_t n)
{
	if (n == 0)
		return;
	if (c->state != CH_DATA || n > c->remaining) {
		c->state = CH_ERROR;
		c->error = "body bytes passed beyond the chunk";
		return;
	}
	c->remaining -= n;
	if (c->remaining == 0)
		c->state = CH_DATA_CR;
}

static enum http_chunk_result chunk_fail(struct http_chunked *c, const char *why)
{
	c->state = CH_ERROR;
	c->error = why;
	return HTTP_CHUNK_ERROR;
}

enum http_chunk_result http_chunked_feed(struct http_chunked *c, const char *buf, size_t len, size_t *used)
{
	size_t i = 0;

	*used = 0;
	if (c->state == CH_ERROR)
		return HTTP_CHUNK_ERROR;
	if (c->state == CH_DONE)
		return HTTP_CHUNK_DONE;
	while (i < len) {
		unsigned char ch = (unsigned char)buf[i];
		if (c->state == CH_DATA) {
			size_t take = len - i;
			if ((uint64_t)take > c->remaining)
				take = (size_t)c->remaining;
			c->remaining -= take;
			i += take;
			if (c->remaining == 0)
				c->state = CH_DATA_CR;
			continue;
		}
		i++;
		switch (c->state) {
		case CH_SIZE_FIRST:
		case CH_SIZE: {
			int v = hexval(ch);
			if (v >= 0) {
				if (c->remaining > (UINT64_MAX >> 8))
					return chunk_fail(c, "chunk size too large");
				c->remaining = c->remaining * 16 + (uint64_t)v;
				c->state = CH_SIZE;
				if (++c->line_len > 16)
					return chunk_fail(c, "chunk size too large");
			} else if (c->state == CH_SIZE && ch == ';') {
				c->state = CH_EXT;
			} else if (c->state == CH_SIZE && ch == '\r') {
				c->state = CH_SIZE_LF;
			} else {
				return chunk_fail(c, "malformed chunk size");
			}
			break;
		}
		case CH_EXT:
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			else if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
				return chunk_fail(c, "control byte in chunk extension");
			else if (++c->line_len > HTTP_CHUNK_LINE_MAX)
				return chunk_fail(c, "chunk extension too long");
			break;
		case CH_SIZE_LF:
			if (ch != '\n')
				return chunk_fail(c, "chunk size line not ended by CRLF");
			c->line_len = 0;
			c->state = c->remaining ? CH_DATA : CH_TRAILER_START;
			break;
		case CH_DATA_CR:
			if (ch != '\r')
				return chunk_fail(c, "chunk data not followed by CRLF");
			c->state = CH_DATA_LF;
			break;
		case CH_DATA_LF:
			if (ch != '\n')
				return chunk_fail(c, "chunk data not followed by CRLF");
			c->state = CH_SIZE_FIRST;
			c->remaining = 0;
			c->line_len = 0;
			break;
		case CH_TRAILER_START:
			if (ch == '\r') {
				c->state = CH_FINAL_LF;
				break;
			}
			if (ch == ' ' || ch == '\t')
				return chunk_fail(c, "obsolete line folding in trailer");
			c->state = CH_TRAILER_LINE;
			__attribute__((fallthrough));
		case CH_TRAILER_LINE:
			if (ch == '\r') {
				c->state = CH_TRAILER_LF;
				break;
			}
			if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
				return chunk_fail(c, "control byte in trailer");
			if (++c->trailer_len > HTTP_TRAILER_MAX)
				return chunk_fail(c, "trailer section too large");
			break;
		case CH_TRAILER_LF:
			if (ch != '\n')
				return chunk_fail(c, "trailer line not ended by CRLF");
			c->state = CH_TRAILER_START;
			break;
		case CH_FINAL_LF:
			if (ch != '\n')
				return chunk_fail(c, "last chunk not ended by CRLF");
			c->state = CH_DONE;
			*used = i;
			return HTTP_CHUNK_DONE;
		default: return chunk_fail(c, "chunk framer in a bad state");
		}
	}
	*used = len;
	return HTTP_CHUNK_MORE;
}
