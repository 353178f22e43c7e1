/* HTTPS inspection in the policy, at request time: whether the proxy opens a host's TLS (the "inspect"
 * list), the request-path normaliser, the path glob, the decision on a request by the host's HTTP rules
 * (methods, path patterns, a query parameter; deny wins), and which credential the proxy adds to one
 * host's requests. Reading all of it from policy files, and writing it out, is http_load.c.
 *
 * Trust boundary: request targets come from the sandbox and are hostile; they are normalised here once
 * (and deny rules are tried again on a fully decoded form) so that an escape or a dot segment never
 * slips a request past a rule. */
#include "policy_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- the path normaliser ---- */

const char *policy_path_strerror(enum policy_path_err e)
{
	switch (e) {
	case POLICY_PATH_OK: return "ok";
	case POLICY_PATH_EMPTY: return "empty request target";
	case POLICY_PATH_TOO_LONG: return "request path too long";
	case POLICY_PATH_BAD_CHAR: return "control byte, space, non-ASCII byte, backslash or '#' in the path";
	case POLICY_PATH_BAD_ESCAPE: return "bad percent escape in the path (or %00)";
	case POLICY_PATH_NOT_ORIGIN: return "request target is not a path";
	}
	return "bad path";
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool is_unreserved(unsigned char c)
{
	return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* policy_path_normalize, and *dots: how many "." and ".." segments it removed. decode_all also cuts each
 * segment's ';' parameters (what Tomcat, Jetty and Spring do before routing: "/admin;x" is "/admin",
 * "/a/..;/b" is "/b"). */
static enum policy_path_err normalize(const char *target, size_t len, bool decode_all, char *out, size_t outlen,
				      size_t *query_off, unsigned *dots)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t start = 0, end, o = 0, w;
	char *dec = NULL;
	enum policy_path_err rc = POLICY_PATH_OK;

	*query_off = len;
	*dots = 0;
	if (outlen < 2)
		return POLICY_PATH_TOO_LONG;
	out[0] = '\0';
	if (len == 0)
		return POLICY_PATH_EMPTY;
	if (len == 1 && target[0] == '*') {
		memcpy(out, "*", 2);
		return POLICY_PATH_OK;
	}
	if (len > POLICY_PATH_MAX)
		return POLICY_PATH_TOO_LONG;
	if (target[0] != '/') {
		/* absolute-form: the scheme's case does not matter; the authority is decided elsewhere */
		size_t s;
		if (len >= 7 && strncasecmp(target, "http://", 7) == 0)
			s = 7;
		else if (len >= 8 && strncasecmp(target, "https://", 8) == 0)
			s = 8;
		else
			return POLICY_PATH_NOT_ORIGIN;
		while (s < len && target[s] != '/' && target[s] != '?' && target[s] != '#')
			s++;
		start = s;
	}
	for (end = start; end < len && target[end] != '?'; end++)
		;
	if (end < len)
		*query_off = end + 1;
	for (size_t i = *query_off; i < len; i++) {
		unsigned char c = (unsigned char)target[i];
		if (c <= 0x20 || c >= 0x7f || c == '#')
			return POLICY_PATH_BAD_CHAR;
	}
	/* pass 1: escapes (decoding only shrinks: the decoded path fits in len + 1 bytes, "/" included) */
	dec = malloc(end - start + 2);
	if (!dec)
		return POLICY_PATH_TOO_LONG;
	w = 0;
	if (start == end || target[start] != '/')
		dec[w++] = '/';
	for (size_t i = start; i < end; i++) {
		unsigned char c = (unsigned char)target[i];
		if (c <= 0x20 || c >= 0x7f || c == '#' || c == '\\') {
			if (c == '\\' && decode_all) {
				dec[w++] = '/';
				continue;
			}
			rc = POLICY_PATH_BAD_CHAR;
			goto out;
		}
		if (c != '%') {
			dec[w++] = (char)c;
			continue;
		}
		if (i + 2 >= end) {
			rc = POLICY_PATH_BAD_ESCAPE;
			goto out;
		}
		int hi = hexval(target[i + 1]), lo = hexval(target[i + 2]);
		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
			rc = POLICY_PATH_BAD_ESCAPE;
			goto out;
		}
		unsigned char d = (unsigned char)(hi * 16 + lo);
		i += 2;
		if (is_unreserved(d) || (decode_all && d > 0x20 && d < 0x7f)) {
			dec[w++] = d == '\\' ? '/' : (char)d;
		} else {
			dec[w++] = '%';
			dec[w++] = hex[d >> 4];
			dec[w++] = hex[d & 15];
		}
	}
	/* pass 2: segments: empty ones (duplicate slashes) and "." dropped, ".." removes the one before */
	bool trailing = false;
	size_t i = 1; /* dec[0] == '/' */
	while (i <= w) {
		size_t j = i;
		while (j < w && dec[j] != '/')
			j++;
		size_t sl = j - i;
		const char *semi = decode_all ? memchr(dec + i, ';', sl) : NULL;
		if (semi)
			sl = (size_t)(semi - (dec + i));
		if (sl == 0) {
			trailing = true;
		} else if (sl == 1 && dec[i] == '.') {
			trailing = true;
			++*dots;
		} else if (sl == 2 && dec[i] == '.' && dec[i + 1] == '.') {
			++*dots;
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--; /* the '/' before it */
			trailing = true;
		} else {
			if (o + 1 + sl + 2 > outlen) {
				rc = POLICY_PATH_TOO_LONG;
				goto out;
			}
			out[o++] = '/';
			memcpy(out + o, dec + i, sl);
			o += sl;
			trailing = false;
		}
		i = j + 1;
	}
	if (o == 0 || trailing)
		out[o++] = '/';
	out[o] = '\0';
out:
	if (rc != POLICY_PATH_OK)
		out[0] = '\0';
	free(dec);
	return rc;
}

enum policy_path_err policy_path_normalize(const char *target, size_t len, bool decode_all, char *out,
					   size_t outlen, size_t *query_off)
{
	unsigned dots;

	return normalize(target, len, decode_all, out, outlen, query_off, &dots);
}

/* ---- glob ---- */

enum { G_LIT, G_STAR, G_DSTAR };

/* fold: ASCII letters compare without case */
static bool glob_match(const char *pattern, const char *path, bool fold)
{
	unsigned char kind[POLICY_PATTERN_MAX + 1];
	char lit[POLICY_PATTERN_MAX + 1];
	bool cur[POLICY_PATTERN_MAX + 2], nxt[POLICY_PATTERN_MAX + 2];
	size_t n = 0;

	for (const char *p = pattern; *p; p++) {
		if (n >= POLICY_PATTERN_MAX)
			return false; /* longer than any pattern the loader accepts */
		if (p[0] == '*' && p[1] == '*') {
			kind[n++] = G_DSTAR;
			while (p[1] == '*')
				p++;
		} else if (*p == '*') {
			kind[n++] = G_STAR;
		} else {
			kind[n] = G_LIT;
			lit[n++] = *p;
		}
	}
	memset(cur, 0, n + 1);
	cur[0] = true;
	for (size_t k = 0; k < n; k++) /* epsilon: a star may match nothing */
		if (cur[k] && kind[k] != G_LIT)
			cur[k + 1] = true;
	for (const char *s = path; *s; s++) {
		bool any = false;
		memset(nxt, 0, n + 1);
		for (size_t k = 0; k < n; k++) {
			if (!cur[k])
				continue;
			if (kind[k] == G_LIT) {
				if (lit[k] == *s || (fold && tolower((unsigned char)lit[k]) == tolower((unsigned char)*s)))
					nxt[k + 1] = true;
			} else if (kind[k] == G_DSTAR || *s != '/') {
				nxt[k] = true;
			}
		}
		for (size_t k = 0; k < n; k++)
			if (nxt[k] && kind[k] != G_LIT)
				nxt[k + 1] = true;
		for (size_t k = 0; k <= n; k++) {
			cur[k] = nxt[k];
			any |= nxt[k];
		}
		if (!any)
			return false;
	}
	return cur[n];
}

bool policy_path_glob(const char *pattern, const char *path)
{
	return glob_match(pattern, path, false);
}

/* ---- matching ---- */

static bool entry_matches(const struct policy_inspect *e, const char *host)
{
	size_t hl = strlen(host), sl = strlen(e->suffix);

	if (!e->wild)
		return strcmp(host, e->suffix) == 0;
	return hl > sl + 1 && host[hl - sl - 1] == '.' && strcmp(host + hl - sl, e->suffix) == 0;
}

bool policy_inspects(const struct policy *p, const char *canon_host)
{
	for (size_t i = 0; i < p->ninspects; i++)
		if (entry_matches(&p->inspects[i], canon_host))
			return true;
	return false;
}

bool policy_inspects_any(const struct policy *p)
{
	return p->ninspects > 0;
}

bool policy_inspect_log_query(const struct policy *p, const char *canon_host)
{
	for (size_t i = 0; i < p->ninspects; i++)
		if (entry_matches(&p->inspects[i], canon_host) && p->inspects[i].log_query)
			return true;
	return false;
}

/* Does one parameter of the query (split at '&' and ';', '+' read as space, every escape decoded)
 * equal want ("name=value"), or, for want without '=', have that name? */
static bool query_has(const char *q, size_t qlen, const char *want)
{
	size_t wl = strlen(want);
	bool name_only = !strchr(want, '=');
	size_t i = 0;

	while (i <= qlen) {
		size_t j = i, k = 0;
		bool ok = true, done = false;
		while (j < qlen && q[j] != '&' && q[j] != ';')
			j++;
		/* compare the decoded parameter q[i..j) with want, byte by byte */
		for (size_t x = i; x < j && ok; x++) {
			char c = q[x];
			if (c == '+')
				c = ' ';
			else if (c == '%' && x + 2 < j && hexval(q[x + 1]) >= 0 &&
				 hexval(q[x + 2]) >= 0) {
				c = (char)(hexval(q[x + 1]) * 16 + hexval(q[x + 2]));
				x += 2;
			}
			if (name_only && c == '=' && k == wl) {
				done = true;
				break;
			}
			if (k >= wl || want[k] != c)
				ok = false;
			k++;
		}
		if (ok && (done || k == wl))
			return true;
		i = j + 1;
	}
	return false;
}

/* fold: the path compares without ASCII case (deny rules: GitHub, IIS and others route "/MyOrg" as "/myorg") */
static bool rule_matches(const struct policy_http_rule *r, unsigned mbit, const char *path, const char *q,
			 size_t qlen, bool fold)
{
	if (r->methods && !(r->methods & mbit))
		return false;
	if (r->prefix) {
		size_t pl = strlen(r->path);
		if ((fold ? strncasecmp(path, r->path, pl) : strncmp(path, r->path, pl)) != 0)
			return false;
		if (path[pl] != '\0' && path[pl] != '/' && r->path[pl - 1] != '/')
			return false; /* "/org" covers "/org" and "/org/x", not "/orgx" */
	} else if (!glob_match(r->path, path, fold)) {
		return false;
	}
	return !r->query || query_has(q, qlen, r->query);
}

static void describe(const struct policy_http_rule *r, char *buf, size_t len)
{
	size_t o = 0;

	o += (size_t)snprintf(buf, len, "%s ", r->deny ? "deny" : "allow");
	if (r->methods) {
		for (unsigned bit = 1; bit <= POLICY_M_TRACE && o < len; bit <<= 1)
			if (r->methods & bit)
				o += (size_t)snprintf(buf + o, len - o, "%s%s", policy_method_name(bit),
						      (r->methods & ~((bit << 1) - 1)) ? "," : " ");
	}
	if (o < len)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", r->prefix ? "prefix " : "", r->path);
	if (r->query && o < len)
		snprintf(buf + o, len - o, " ?%s", r->query);
}

void policy_decide_http(const struct policy *p, const char *canon_host, const char *method, size_t mlen,
			const char *target, size_t tlen, struct policy_http_decision *out)
{
	char *all = NULL, desc[POLICY_PATTERN_MAX + 128];
	size_t qoff, qoff2;
	unsigned dots, dots_all, mbit = policy_method_from_name(method, mlen);
	enum policy_path_err pe;
	const struct policy_http_rule *allowed_by = NULL;
	const struct policy_inspect *entry = NULL;

	out->verdict = POLICY_DENY;
	out->where[0] = '\0';
	out->reason[0] = '\0';
	if (!mbit) {
		snprintf(out->reason, sizeof out->reason, "denied: the method is not an HTTP token");
		out->path[0] = '\0';
		return;
	}
	pe = normalize(target, tlen, false, out->path, sizeof out->path, &qoff, &dots);
	all = malloc(POLICY_PATH_MAX);
	if (pe == POLICY_PATH_OK && !all)
		pe = POLICY_PATH_TOO_LONG;
	if (pe == POLICY_PATH_OK)
		pe = normalize(target, tlen, true, all, POLICY_PATH_MAX, &qoff2, &dots_all);
	if (pe != POLICY_PATH_OK) {
		snprintf(out->reason, sizeof out->reason, "denied: %s", policy_path_strerror(pe));
		goto out;
	}
	const char *q = target + qoff;
	size_t qlen = tlen - qoff;
	/* deny rules of every layer first: on the normalised and on the fully decoded path, in any case */
	for (size_t i = 0; i < p->ninspects; i++) {
		const struct policy_inspect *e = &p->inspects[i];
		if (!entry_matches(e, canon_host))
			continue;
		entry = entry ? entry : e;
		for (size_t k = 0; k < e->nrules; k++) {
			const struct policy_http_rule *r = &e->rules[k];
			if (r->deny && (rule_matches(r, mbit, out->path, q, qlen, true) || rule_matches(r, mbit, all, q, qlen, true))) {
				describe(r, desc, sizeof desc);
				snprintf(out->where, sizeof out->where, "%s", r->where);
				snprintf(out->reason, sizeof out->reason, "denied by %s (%s)", r->where, desc);
				goto out;
			}
		}
	}
	if (!entry) {
		out->verdict = POLICY_ALLOW;
		snprintf(out->reason, sizeof out->reason, "allowed: %s is not inspected", canon_host);
		goto out;
	}
	/* A dot segment that only the lenient reading sees ("..%2F", "..%5C", "..;"): servers disagree on
	 * where such a path leads (nginx and Apache resolve an escaped slash, Tomcat and Spring a ';'
	 * parameter), so no allow rule can vouch for it. No client needs one. */
	if (dots_all != dots) {
		snprintf(out->where, sizeof out->where, "%s", entry->where);
		snprintf(out->reason, sizeof out->reason,
			 "denied: ambiguous path: a \".\" or \"..\" segment behind an escaped slash, a backslash or a ';' "
			 "parameter (servers differ on where it leads)");
		goto out;
	}
	/* then every layer that lists allow rules for the host must allow the request with one of them */
	for (int layer = 0; layer < POLICY_LAYER_COUNT; layer++) {
		const struct policy_inspect *first = NULL;
		const struct policy_http_rule *hit = NULL;
		for (size_t i = 0; i < p->ninspects && !hit; i++) {
			const struct policy_inspect *e = &p->inspects[i];
			if ((int)e->layer != layer || !entry_matches(e, canon_host))
				continue;
			for (size_t k = 0; k < e->nrules && !hit; k++) {
				const struct policy_http_rule *r = &e->rules[k];
				if (r->deny)
					continue;
				first = first ? first : e;
				if (rule_matches(r, mbit, out->path, q, qlen, false))
					hit = r;
			}
		}
		if (first && !hit) {
			snprintf(out->where, sizeof out->where, "%s", first->where);
			snprintf(out->reason, sizeof out->reason,
				 "denied: no HTTP rule of %s (the %s layer's rules for %s) allows %.*s %s", first->where,
				 policy_layer_name((enum policy_layer)layer), first->pattern, (int)(mlen > 32 ? 32 : mlen),
				 method, out->path);
			goto out;
		}
		if (hit && !allowed_by)
			allowed_by = hit;
	}
	out->verdict = POLICY_ALLOW;
	if (allowed_by) {
		describe(allowed_by, desc, sizeof desc);
		snprintf(out->where, sizeof out->where, "%s", allowed_by->where);
		snprintf(out->reason, sizeof out->reason, "allowed by %s (%s)", allowed_by->where, desc);
	} else {
		snprintf(out->where, sizeof out->where, "%s", entry->where);
		snprintf(out->reason, sizeof out->reason, "allowed: inspected by %s, no HTTP rule refuses it", entry->where);
	}
out:
	free(all);
}

/* ---- credentials ---- */

const struct policy_credential *policy_credential_for(const struct policy *p, const char *canon_host)
{
	for (size_t i = 0; i < p->ninspects; i++)
		if (p->inspects[i].cred.header && entry_matches(&p->inspects[i], canon_host))
			return &p->inspects[i].cred;
	return NULL;
}

size_t policy_credential_count(const struct policy *p)
{
	size_t n = 0;
	for (size_t i = 0; i < p->ninspects; i++)
		n += p->inspects[i].cred.header != NULL;
	return n;
}

const struct policy_credential *policy_credential_at(const struct policy *p, size_t idx)
{
	for (size_t i = 0; i < p->ninspects; i++)
		if (p->inspects[i].cred.header && idx-- == 0)
			return &p->inspects[i].cred;
	return NULL;
}

const struct policy_credential *policy_credential_find_placeholder(const struct policy *p,
								   const struct policy_credential *own,
								   const void *data, size_t len)
{
	static const char pre[] = POLICY_PLACEHOLDER_PREFIX;
	const char *d = data, *hit;
	size_t off = 0;

	while (off < len && (hit = memmem(d + off, len - off, pre, sizeof pre - 1)) != NULL) {
		size_t at = (size_t)(hit - d);
		for (size_t i = 0; i < p->ninspects; i++) {
			const char *ph = p->inspects[i].cred.placeholder;
			if (ph && &p->inspects[i].cred != own && len - at >= strlen(ph) && memcmp(hit, ph, strlen(ph)) == 0)
				return &p->inspects[i].cred;
		}
		off = at + 1;
	}
	return NULL;
}
