/* Policy file parsing: JSON with comments (json-c) and plain-text domain lists, into builder rules.
 *
 * Trust boundary: policy files come from users, projects and (for `sluice run`) the sandboxed
 * project directory itself, so every value is checked and every error names file:line:col. Unsafe
 * patterns (`*`, `*.com`, wildcards across a public suffix, addresses where a name was meant) are
 * refused at load rather than silently widening egress. */
#include "jsonpos.h"
#include "policy_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <errno.h>
#include <libpsl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const psl_ctx_t *policy_psl;
static pthread_once_t policy_psl_once = PTHREAD_ONCE_INIT;

static void psl_init(void)
{
	/* The newer of the built-in list and the system's /usr/share/publicsuffix copy. */
	policy_psl = psl_latest(NULL);
	if (!policy_psl)
		policy_psl = psl_builtin();
}

static bool is_public_suffix(const char *name)
{
	pthread_once(&policy_psl_once, psl_init);
	if (!policy_psl)
		return true; /* no list at all: refuse every wildcard rather than guess */
	return psl_is_public_suffix2(policy_psl, name, PSL_TYPE_ANY) != 0;
}

int policy_parse_ports_text(const char *text, struct policy_rule *r, char *why, size_t whylen)
{
	const char *p = text;

	if (strcmp(text, "*") == 0) {
		r->any_port = true;
		return 0;
	}
	while (*p) {
		char *end;
		unsigned long lo, hi;

		if (!isdigit((unsigned char)*p))
			goto bad;
		lo = strtoul(p, &end, 10);
		hi = lo;
		if (*end == '-') {
			if (!isdigit((unsigned char)end[1]))
				goto bad;
			hi = strtoul(end + 1, &end, 10);
		}
		if (lo < 1 || hi > 65535 || lo > hi) {
			snprintf(why, whylen, "port out of range in \"%s\" (1-65535, LO-HI with LO <= HI)", text);
			return -EINVAL;
		}
		if (r->nports >= POLICY_MAX_PORT_RANGES) {
			snprintf(why, whylen, "too many port ranges (at most %d)", POLICY_MAX_PORT_RANGES);
			return -EINVAL;
		}
		r->ports[r->nports].lo = (uint16_t)lo;
		r->ports[r->nports].hi = (uint16_t)hi;
		r->nports++;
		if (*end == ',') {
			p = end + 1;
			if (!*p)
				goto bad;
			continue;
		}
		if (*end)
			goto bad;
		p = end;
	}
	if (r->nports == 0)
		goto bad;
	return 0;
bad:
	snprintf(why, whylen, "bad port list \"%s\" (examples: 443, 80,443, 8000-8100, *)", text);
	return -EINVAL;
}

int policy_rule_check_protos(const struct policy_rule *r, char *why, size_t whylen)
{
	if (!(r->protos & POLICY_PB_UDP) || r->kind == RULE_DENY)
		return 0;
	if (r->methods) {
		snprintf(why, whylen, "a rule that names UDP cannot have \"methods\" (they are HTTP's): write a "
			 "separate rule for the UDP ports");
		return -EINVAL;
	}
	if (r->nports == 0 && !r->any_port) {
		snprintf(why, whylen, "a rule that names UDP must list its ports (e.g. \"host:5353/udp\" or \"ports\": "
			 "[5353]): UDP has no default port");
		return -EINVAL;
	}
	if (r->kind != RULE_ALLOW)
		return 0; /* a ceiling may cap UDP with ranges or "*" */
	if (r->any_port) {
		snprintf(why, whylen, "UDP is reached only in direct mode, which opens single ports: list them "
			 "(\"*\" would open nothing)");
		return -EINVAL;
	}
	for (unsigned i = 0; i < r->nports; i++) {
		uint16_t p = r->ports[i].lo;

		if (r->ports[i].lo != r->ports[i].hi) {
			snprintf(why, whylen, "UDP is reached only in direct mode, which opens single ports: list them "
				 "(the range %u-%u would open nothing)", r->ports[i].lo, r->ports[i].hi);
			return -EINVAL;
		}
		if (p == 53) {
			snprintf(why, whylen, "UDP port 53 cannot be allowed: DNS goes through the session's DNS proxy, "
				 "which refuses names the policy does not allow (a resolver reached directly would "
				 "answer any name)");
			return -EINVAL;
		}
		if (p == 80 || p == 443) {
			snprintf(why, whylen, "UDP port %u (QUIC) cannot be allowed: web traffic goes through the proxy, "
				 "which decides by name (and method); QUIC clients fall back to TCP", p);
			return -EINVAL;
		}
	}
	return 0;
}

int policy_parse_pattern(struct policy_builder *b, const char *text, struct policy_rule *r, char *why,
			 size_t whylen)
{
	char host[POLICY_HOST_MAX + 8], ports[128];
	char canon[POLICY_HOST_MAX + 1];
	const char *colon, *slash, *name;
	size_t hlen;
	bool wild = false;
	enum policy_canon_err ce;

	if (!*text) {
		snprintf(why, whylen, "empty pattern");
		return -EINVAL;
	}
	if (strstr(text, "://")) {
		snprintf(why, whylen, "\"%s\" looks like a URL: write the host name only (e.g. pypi.org or pypi.org:443)", text);
		return -EINVAL;
	}
	colon = strchr(text, ':');
	if (colon && strchr(colon + 1, ':')) {
		snprintf(why, whylen, "\"%s\" is an IPv6 address where a host name was expected; "
			 "write addresses as {\"cidr\": \"ADDR/128\"}", text);
		return -EINVAL;
	}
	slash = strchr(text, '/');
	if (slash && colon && slash > colon && !strchr(slash + 1, '/')) {
		/* "HOST:PORTS/udp": the protocol of the ports (a path or a range has no ':' before its '/') */
		if (strcmp(slash + 1, "udp") == 0) {
			r->protos = POLICY_PB_UDP;
		} else if (strcmp(slash + 1, "tcp") == 0) {
			r->protos = POLICY_PB_TCP;
		} else {
			snprintf(why, whylen, "\"%s\": unknown protocol \"%s\" after the ports (write HOST:PORTS/udp or "
				 "HOST:PORTS/tcp)", text, slash + 1);
			return -EINVAL;
		}
		if ((size_t)(slash - colon - 1) >= sizeof ports) {
			snprintf(why, whylen, "bad port list in \"%s\"", text);
			return -EINVAL;
		}
		memcpy(ports, colon + 1, (size_t)(slash - colon - 1));
		ports[slash - colon - 1] = '\0';
	} else if (slash && slash[1] && strspn(slash + 1, "0123456789") == strlen(slash + 1)) {
		snprintf(why, whylen, "\"%s\" is an address range where a host name was expected; "
			 "write ranges as {\"cidr\": \"%s\"}", text, text);
		return -EINVAL;
	} else if (slash) {
		/* "github.com/org": rules never see a path (HTTPS hides it), so name the host alone */
		snprintf(why, whylen, "\"%s\" has a path where a host name was expected: a rule names a host "
			 "(and ports, methods), never a path; write \"%.*s\"", text, (int)(slash - text), text);
		return -EINVAL;
	} else if (colon) {
		snprintf(ports, sizeof ports, "%s", colon + 1);
		if (strlen(colon + 1) >= sizeof ports) {
			snprintf(why, whylen, "bad port list in \"%s\"", text);
			return -EINVAL;
		}
	}
	hlen = colon ? (size_t)(colon - text) : strlen(text);
	if (hlen >= sizeof host) {
		snprintf(why, whylen, "host name longer than %d bytes", POLICY_HOST_MAX);
		return -EINVAL;
	}
	memcpy(host, text, hlen);
	host[hlen] = '\0';
	if (colon && policy_parse_ports_text(ports, r, why, whylen) < 0)
		return -EINVAL;
	if (policy_rule_check_protos(r, why, whylen) < 0)
		return -EINVAL;

	name = host;
	if (strcmp(host, "*") == 0 || strcmp(host, "*.") == 0) {
		snprintf(why, whylen, "\"*\" matches every host: list the hosts to allow instead");
		return -EINVAL;
	}
	if (strncmp(host, "*.", 2) == 0) {
		wild = true;
		name = host + 2;
	}
	if (strchr(name, '*')) {
		snprintf(why, whylen, "\"%s\": only a leading \"*.\" wildcard is supported (e.g. *.example.org)", host);
		return -EINVAL;
	}
	ce = policy_canon_host(name, strlen(name), canon);
	if (ce == POLICY_CANON_IP_LITERAL) {
		snprintf(why, whylen, "\"%s\" is an IP address where a host name was expected; "
			 "write addresses as {\"cidr\": \"%s/32\"}", name, name);
		return -EINVAL;
	}
	if (ce != POLICY_CANON_OK) {
		snprintf(why, whylen, "\"%s\": %s", host, policy_canon_strerror(ce));
		return -EINVAL;
	}
	if (wild) {
		if (!strchr(canon, '.')) {
			snprintf(why, whylen, "\"*.%s\" covers a whole top-level domain: name a registrable domain", canon);
			return -EINVAL;
		}
		if (is_public_suffix(canon)) {
			snprintf(why, whylen, "\"*.%s\" is a wildcard across the public suffix \"%s\" (anyone can register "
				 "names under it): name the hosts instead", canon, canon);
			return -EINVAL;
		}
	}
	r->pat = wild ? PAT_WILDCARD : PAT_EXACT;
	r->suffix = policy_arena_strndup(&b->arena, canon, strlen(canon));
	if (wild) {
		char full[POLICY_HOST_MAX + 3];
		snprintf(full, sizeof full, "*.%s", canon);
		r->pattern = policy_arena_strndup(&b->arena, full, strlen(full));
	} else {
		r->pattern = r->suffix;
	}
	if (!r->pattern || !r->suffix) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* ---- JSON ---- */

void policy_jwhere(const struct jctx *c, const char *path, unsigned *line, unsigned *col)
{
	if (!jpos_find(c->pos, path, line, col)) {
		*line = 0;
		*col = 0;
	}
}

int policy_jfail(const struct jctx *c, const char *path, const char *fmt, ...)
{
	char msg[POLICY_ERR_MAX];
	unsigned line, col;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	policy_jwhere(c, path, &line, &col);
	return policy_err(c->err, c->name, line, col, "%s", msg);
}

/* Path of a key itself (for "unknown key" errors), bounded whatever the key's length. */
static const char *key_path(char *buf, size_t len, const char *parent, const char *key)
{
	snprintf(buf, len, "%s/%s#key", parent, key);
	return buf;
}

static const char *jtype(json_object *o)
{
	return json_type_to_name(json_object_get_type(o));
}

static int parse_ports_json(const struct jctx *c, const char *path, json_object *v, struct policy_rule *r)
{
	char why[256], sub[600];

	if (json_object_is_type(v, json_type_string)) {
		if (policy_parse_ports_text(json_object_get_string(v), r, why, sizeof why) < 0)
			return policy_jfail(c, path, "%s", why);
		return 0;
	}
	if (json_object_is_type(v, json_type_int)) {
		snprintf(sub, sizeof sub, "%" PRId64, json_object_get_int64(v));
		if (policy_parse_ports_text(sub, r, why, sizeof why) < 0)
			return policy_jfail(c, path, "%s", why);
		return 0;
	}
	if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0)
		return policy_jfail(c, path, "\"ports\" must be a non-empty list of ports (e.g. [443, \"8000-8100\"]) or \"*\"");
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		json_object *e = json_object_array_get_idx(v, i);
		snprintf(sub, sizeof sub, "%s/%zu", path, i);
		if (json_object_is_type(e, json_type_int)) {
			int64_t p = json_object_get_int64(e);
			if (p < 1 || p > 65535)
				return policy_jfail(c, sub, "port %" PRId64 " out of range (1-65535)", p);
			char t[16];
			snprintf(t, sizeof t, "%" PRId64, p);
			if (policy_parse_ports_text(t, r, why, sizeof why) < 0)
				return policy_jfail(c, sub, "%s", why);
		} else if (json_object_is_type(e, json_type_string)) {
			const char *t = json_object_get_string(e);
			if (strcmp(t, "*") == 0)
				return policy_jfail(c, sub, "\"*\" stands alone: write \"ports\": \"*\"");
			if (policy_parse_ports_text(t, r, why, sizeof why) < 0)
				return policy_jfail(c, sub, "%s", why);
		} else {
			return policy_jfail(c, sub, "a port is a number or a \"LO-HI\" string, not %s", jtype(e));
		}
	}
	return 0;
}

static int parse_methods_json(const struct jctx *c, const char *path, json_object *v, struct policy_rule *r)
{
	char sub[600];

	if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0)
		return policy_jfail(c, path, "\"methods\" must be a non-empty list such as [\"GET\", \"HEAD\"]");
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		json_object *e = json_object_array_get_idx(v, i);
		snprintf(sub, sizeof sub, "%s/%zu", path, i);
		if (!json_object_is_type(e, json_type_string))
			return policy_jfail(c, sub, "a method is a string such as \"GET\"");
		const char *m = json_object_get_string(e);
		unsigned bit = policy_method_from_name(m, strlen(m));
		if (bit == 0 || bit == POLICY_M_OTHER)
			return policy_jfail(c, sub, "unknown method \"%s\" (GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, CONNECT, TRACE)", m);
		r->methods |= bit;
	}
	return 0;
}

/* "protocol": "tcp", "udp" or a list of them (the protocols of the rule's ports). */
static int parse_protocol_json(const struct jctx *c, const char *path, json_object *v, struct policy_rule *r)
{
	size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 1;

	if (!json_object_is_type(v, json_type_string) && (!json_object_is_type(v, json_type_array) || n == 0))
		return policy_jfail(c, path, "\"protocol\" must be \"tcp\", \"udp\" or a list of them such as [\"tcp\", \"udp\"]");
	r->protos = 0;
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_is_type(v, json_type_array) ? json_object_array_get_idx(v, i) : v;
		const char *t = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
		char sub[600];

		snprintf(sub, sizeof sub, "%s/%zu", path, i);
		if (t && strcmp(t, "tcp") == 0)
			r->protos |= POLICY_PB_TCP;
		else if (t && strcmp(t, "udp") == 0)
			r->protos |= POLICY_PB_UDP;
		else
			return policy_jfail(c, json_object_is_type(v, json_type_array) ? sub : path,
					    "unknown protocol%s%s%s: write \"tcp\" or \"udp\"", t ? " \"" : "",
					    t ? t : "", t ? "\"" : "");
	}
	return 0;
}

/* The file name part of a "where": a name too long for POLICY_WHERE_MAX keeps its end (the file
 * name) behind "...", so that line:col survive and a serialised policy still reloads. */
static const char *where_name(const char *name, size_t *len, bool *cut)
{
	const size_t max = POLICY_WHERE_MAX - 32; /* room for "...", ":LINE:COL" and the NUL */
	const char *s;

	*cut = *len > max;
	if (!*cut)
		return name;
	s = name + *len - (max - 3);
	while (((unsigned char)*s & 0xc0) == 0x80)
		s++; /* not in the middle of a UTF-8 character */
	*len = (size_t)(name + *len - s);
	return s;
}

const char *policy_json_where(const struct jctx *c, const char *path)
{
	char w[POLICY_WHERE_MAX];
	unsigned line, col;
	size_t nlen = strlen(c->name);
	bool cut;
	const char *n = where_name(c->name, &nlen, &cut);

	policy_jwhere(c, path, &line, &col);
	snprintf(w, sizeof w, "%s%.*s:%u:%u", cut ? "..." : "", (int)nlen, n, line, col);
	return policy_arena_strndup(&c->b->arena, w, strlen(w));
}

static int set_where(const struct jctx *c, const char *path, struct policy_rule *r)
{
	r->where = policy_json_where(c, path);
	return r->where ? 0 : policy_err(c->err, c->name, 0, 0, "out of memory");
}

static enum policy_layer layer_from_name(const char *s, bool *ok)
{
	*ok = true;
	for (int l = 0; l < POLICY_LAYER_COUNT; l++)
		if (strcmp(s, policy_layer_name((enum policy_layer)l)) == 0)
			return (enum policy_layer)l;
	*ok = false;
	return POLICY_LAYER_CLI;
}

/* One entry of an allow/deny/ceiling list (or of the compiled "rules" list). */
static int parse_rule_json(const struct jctx *c, const char *path, json_object *v, enum policy_rule_kind kind)
{
	struct policy_rule r = { .layer = c->layer, .kind = kind };
	char why[POLICY_ERR_MAX], sub[600];

	if (json_object_is_type(v, json_type_string)) {
		const char *t = json_object_get_string(v);
		if (policy_parse_pattern(c->b, t, &r, why, sizeof why) < 0)
			return policy_jfail(c, path, "%s", why);
		if (set_where(c, path, &r) < 0)
			return -ENOMEM;
		return policy_builder_push(c->b, &r);
	}
	if (!json_object_is_type(v, json_type_object))
		return policy_jfail(c, path, "a rule is a string (\"pypi.org\", \"*.npmjs.org:443\") or an object "
			     "({\"host\": ..., \"ports\": [...], \"methods\": [...]} or {\"cidr\": ...}), not %s", jtype(v));

	json_object *host = NULL, *cidr = NULL;
	json_object_object_foreach(v, key, val) {
		snprintf(sub, sizeof sub, "%s/%s", path, key);
		if (strcmp(key, "host") == 0)
			host = val;
		else if (strcmp(key, "cidr") == 0)
			cidr = val;
		else if (strcmp(key, "ports") == 0 || strcmp(key, "methods") == 0 || strcmp(key, "protocol") == 0 ||
			 strcmp(key, "comment") == 0)
			;
		else if (c->compiled && (strcmp(key, "where") == 0 || strcmp(key, "layer") == 0 || strcmp(key, "kind") == 0))
			;
		else
			return policy_jfail(c, key_path(sub, sizeof sub, path, key), "unknown key \"%s\" in a rule (expected host or cidr, ports, methods, protocol, comment)", key);
	}
	if (!!host == !!cidr)
		return policy_jfail(c, path, "a rule object needs exactly one of \"host\" and \"cidr\"");
	if (host) {
		snprintf(sub, sizeof sub, "%s/host", path);
		if (!json_object_is_type(host, json_type_string))
			return policy_jfail(c, sub, "\"host\" must be a string");
		const char *t = json_object_get_string(host);
		if (strchr(t, ':'))
			return policy_jfail(c, sub, "\"host\" takes a name only; put ports in \"ports\"");
		if (policy_parse_pattern(c->b, t, &r, why, sizeof why) < 0)
			return policy_jfail(c, sub, "%s", why);
	} else {
		snprintf(sub, sizeof sub, "%s/cidr", path);
		if (!json_object_is_type(cidr, json_type_string))
			return policy_jfail(c, sub, "\"cidr\" must be a string such as \"10.0.0.0/8\"");
		const char *t = json_object_get_string(cidr);
		if (policy_parse_cidr(t, &r, why, sizeof why) < 0)
			return policy_jfail(c, sub, "%s", why);
		/* The project file ships with the (untrusted) code: it may not open loopback, private or
		 * metadata ranges to it. The user's own policy or the command line can. */
		if (!c->compiled && c->layer == POLICY_LAYER_PROJECT && kind == RULE_ALLOW && policy_cidr_touches_forbidden(&r))
			return policy_jfail(c, sub, "a project policy cannot allow \"%s\": it overlaps a forbidden range (loopback, "
				     "private, link-local/metadata, CGNAT, ...); put it in your user policy "
				     "(~/.config/sluice/policy.json) or pass --policy FILE on the command line", t);
		char canon[64], abuf[48];
		inet_ntop(r.family, r.addr, abuf, sizeof abuf);
		snprintf(canon, sizeof canon, "%s/%u", abuf, r.prefix);
		r.pattern = policy_arena_strndup(&c->b->arena, canon, strlen(canon));
		if (!r.pattern)
			return -ENOMEM;
	}
	json_object *ports = NULL, *methods = NULL;
	if (json_object_object_get_ex(v, "ports", &ports)) {
		snprintf(sub, sizeof sub, "%s/ports", path);
		r.nports = 0;
		r.any_port = false;
		if (parse_ports_json(c, sub, ports, &r) < 0)
			return -EINVAL;
	}
	if (json_object_object_get_ex(v, "methods", &methods)) {
		snprintf(sub, sizeof sub, "%s/methods", path);
		if (r.pat == PAT_CIDR)
			return policy_jfail(c, sub, "\"methods\" applies to host rules only");
		if (parse_methods_json(c, sub, methods, &r) < 0)
			return -EINVAL;
	}
	json_object *proto = NULL;
	if (json_object_object_get_ex(v, "protocol", &proto)) {
		snprintf(sub, sizeof sub, "%s/protocol", path);
		if (parse_protocol_json(c, sub, proto, &r) < 0)
			return -EINVAL;
	}
	if (c->compiled) {
		json_object *w, *l, *k;
		bool ok;
		if (!json_object_object_get_ex(v, "where", &w) || !json_object_is_type(w, json_type_string) ||
		    !json_object_object_get_ex(v, "layer", &l) || !json_object_is_type(l, json_type_string) ||
		    !json_object_object_get_ex(v, "kind", &k) || !json_object_is_type(k, json_type_string))
			return policy_jfail(c, path, "compiled rule needs string \"where\", \"layer\" and \"kind\"");
		const char *ws = json_object_get_string(w);
		size_t wl = strlen(ws);
		if (wl == 0 || wl >= POLICY_WHERE_MAX)
			return policy_jfail(c, path, "bad \"where\"");
		for (size_t i = 0; i < wl; i++)
			if ((unsigned char)ws[i] < 0x20 || ws[i] == 0x7f)
				return policy_jfail(c, path, "control byte in \"where\"");
		r.where = policy_arena_strndup(&c->b->arena, ws, wl);
		enum policy_layer lay = layer_from_name(json_object_get_string(l), &ok);
		if (!ok)
			return policy_jfail(c, path, "unknown layer \"%s\"", json_object_get_string(l));
		/* A serialised policy can never claim to be stronger than the layer it is loaded at. */
		r.layer = lay > c->layer ? lay : c->layer;
		if (lay < c->layer) {
			/* keep the claim visible: the log must not quote /etc/sluice for a client's rule */
			char claimed[POLICY_WHERE_MAX];
			snprintf(claimed, sizeof claimed, "%s (claimed %s layer)", ws, policy_layer_name(lay));
			r.where = policy_arena_strndup(&c->b->arena, claimed, strlen(claimed));
			if (!r.where)
				return -ENOMEM;
		}
		const char *ks = json_object_get_string(k);
		if (strcmp(ks, "allow") == 0)
			r.kind = RULE_ALLOW;
		else if (strcmp(ks, "deny") == 0)
			r.kind = RULE_DENY;
		else if (strcmp(ks, "ceiling") == 0)
			r.kind = RULE_CEILING;
		else
			return policy_jfail(c, path, "unknown kind \"%s\"", ks);
		if (r.kind == RULE_CEILING && r.layer != POLICY_LAYER_ORG)
			return 0; /* a ceiling only binds from the organisation layer; from below it is void */
	} else if (set_where(c, path, &r) < 0) {
		return -ENOMEM;
	}
	if (policy_rule_check_protos(&r, why, sizeof why) < 0)
		return policy_jfail(c, path, "%s", why);
	return policy_builder_push(c->b, &r);
}

static int parse_list_json(const struct jctx *c, const char *key, json_object *v, enum policy_rule_kind kind)
{
	char path[64], sub[80];

	snprintf(path, sizeof path, "/%s", key);
	if (!json_object_is_type(v, json_type_array))
		return policy_jfail(c, path, "\"%s\" must be a list", key);
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		snprintf(sub, sizeof sub, "%s/%zu", path, i);
		int r = parse_rule_json(c, sub, json_object_array_get_idx(v, i), kind);
		if (r < 0)
			return r;
	}
	return 0;
}

static int parse_options_json(const struct jctx *c, json_object *v)
{
	char sub[80];
	struct policy_opt_state *o = &c->b->opts;
	bool org = c->layer == POLICY_LAYER_ORG;

	if (!json_object_is_type(v, json_type_object))
		return policy_jfail(c, "/options", "\"options\" must be an object");
	json_object_object_foreach(v, key, val) {
		snprintf(sub, sizeof sub, "/options/%s", key);
		int *slot = NULL;
		bool *forbid = NULL;
		if (strcmp(key, "direct") == 0) {
			slot = &o->direct;
			forbid = &o->org_forbids_direct;
		} else if (strcmp(key, "transparent") == 0) {
			slot = &o->transparent;
			forbid = &o->org_forbids_transparent;
		} else if (strcmp(key, "ask") == 0) {
			slot = &o->ask;
			forbid = &o->org_forbids_ask;
		} else if (strcmp(key, "ask_timeout") == 0) {
			if (!json_object_is_type(val, json_type_int) || json_object_get_int64(val) < 1 ||
			    json_object_get_int64(val) > 3600)
				return policy_jfail(c, sub, "\"ask_timeout\" is a number of seconds, 1 to 3600");
			o->ask_timeout_s = (unsigned)json_object_get_int64(val);
			continue;
		} else if (strcmp(key, "learn") == 0) {
			/* Learn mode allows what no rule allows: a file (a project's above all, which ships
			 * with untrusted code) must not be able to turn it on. Only `sluice run --learn`
			 * does, and the serialised policy carries it to sluiced and the engine. */
			if (!json_object_is_type(val, json_type_boolean))
				return policy_jfail(c, sub, "\"learn\" must be true or false");
			if (json_object_get_boolean(val)) {
				if (!c->compiled)
					return policy_jfail(c, sub, "\"learn\": true cannot be set in a policy file; learn mode is turned "
					             "on with `sluice run --learn FILE` (an organisation file may set false to forbid it)");
				o->learn = true;
			} else if (org && !c->compiled && !o->org_forbids_learn) {
				unsigned line, col;
				policy_jwhere(c, sub, &line, &col);
				o->org_forbids_learn = true;
				snprintf(o->org_learn_where, sizeof o->org_learn_where, "%s:%u:%u", c->name, line, col);
			}
			continue;
		} else if (c->compiled && strncmp(key, "org_forbids_", 12) == 0) {
			/* only meaningful when the compiled policy is loaded at the org layer */
			if (!json_object_is_type(val, json_type_boolean))
				return policy_jfail(c, sub, "must be true or false");
			if (org && json_object_get_boolean(val)) {
				if (strcmp(key + 12, "direct") == 0)
					o->org_forbids_direct = true;
				else if (strcmp(key + 12, "transparent") == 0)
					o->org_forbids_transparent = true;
				else if (strcmp(key + 12, "ask") == 0)
					o->org_forbids_ask = true;
				else if (strcmp(key + 12, "learn") == 0 && !o->org_forbids_learn) {
					o->org_forbids_learn = true;
					snprintf(o->org_learn_where, sizeof o->org_learn_where, "%s", c->name);
				}
			}
			continue;
		} else {
			return policy_jfail(c, key_path(sub, sizeof sub, "/options", key), "unknown option \"%s\" (direct, transparent, ask, ask_timeout, learn)", key);
		}
		if (!json_object_is_type(val, json_type_boolean))
			return policy_jfail(c, sub, "\"%s\" must be true or false", key);
		if (json_object_get_boolean(val))
			*slot = 1;
		else if (org)
			*forbid = true; /* the organisation pins it off for every layer */
	}
	return 0;
}

static int parse_presets_json(const struct jctx *c, json_object *v)
{
	char sub[80];

	if (!json_object_is_type(v, json_type_array))
		return policy_jfail(c, "/presets", "\"presets\" must be a list of preset names such as [\"npm\", \"pypi\"]");
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		json_object *e = json_object_array_get_idx(v, i);
		snprintf(sub, sizeof sub, "/presets/%zu", i);
		if (!json_object_is_type(e, json_type_string))
			return policy_jfail(c, sub, "a preset name is a string");
		struct policy_error perr;
		if (policy_builder_add_preset(c->b, c->layer, json_object_get_string(e), &perr) < 0) {
			if (perr.file[0] && strcmp(perr.file, c->name) != 0 && perr.line) {
				/* the error is inside the preset file: say both places */
				char inner[POLICY_ERR_MAX];
				policy_error_format(&perr, inner, sizeof inner);
				return policy_jfail(c, sub, "in preset \"%s\": %s", json_object_get_string(e), inner);
			}
			return policy_jfail(c, sub, "%s", perr.msg);
		}
	}
	return 0;
}

int policy_load_json(struct policy_builder *b, enum policy_layer layer, const char *name, const char *text,
		     size_t len, bool compiled_ok, struct policy_error *err)
{
	struct json_tokener *tok = NULL;
	json_object *root = NULL;
	struct jctx c = { .b = b, .layer = layer, .name = name, .err = err };
	char dup_path[256];
	unsigned line, col;
	int r = -EINVAL;

	if (memchr(text, '\0', len)) {
		jpos_offset_to_linecol(text, (size_t)((const char *)memchr(text, '\0', len) - text), &line, &col);
		return policy_err(err, name, line, col, "NUL byte in policy file");
	}
	/* json-c decodes \u0000 into a string that C code then reads truncated ("a.org\u0000.evil" would
	 * become "a.org"): refuse the escape anywhere in the text. */
	for (size_t i = 0; i + 6 <= len; i++) {
		if (text[i] == '\\' && text[i + 1] == 'u' && strncasecmp(text + i + 2, "0000", 4) == 0) {
			jpos_offset_to_linecol(text, i, &line, &col);
			return policy_err(err, name, line, col, "NUL character (\\u0000) in policy file");
		}
	}
	tok = json_tokener_new_ex(32);
	if (!tok)
		return policy_err(err, name, 0, 0, "out of memory");
	root = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	if (!root || jerr != json_tokener_success) {
		jpos_offset_to_linecol(text, end, &line, &col);
		r = policy_err(err, name, line, col, "JSON syntax error: %s",
			       jerr == json_tokener_continue ? "unexpected end of file" : json_tokener_error_desc(jerr));
		goto out;
	}
	for (size_t i = end; i < len; i++) {
		if (!isspace((unsigned char)text[i])) {
			jpos_offset_to_linecol(text, i, &line, &col);
			r = policy_err(err, name, line, col, "unexpected data after the end of the JSON document");
			goto out;
		}
	}
	int sr = jpos_scan(text, len, &c.pos, dup_path, sizeof dup_path, &line, &col);
	if (sr == -EEXIST) {
		r = policy_err(err, name, line, col, "duplicate key \"%s\": each key may appear once", dup_path);
		goto out;
	}
	if (sr < 0) {
		r = policy_err(err, name, 0, 0, "cannot read the JSON structure (%s)", strerror(-sr));
		goto out;
	}
	if (!json_object_is_type(root, json_type_object)) {
		r = policy_jfail(&c, "/", "a policy file is a JSON object such as {\"allow\": [\"pypi.org\"]}");
		goto out;
	}
	json_object *marker;
	if (json_object_object_get_ex(root, "sluice-compiled", &marker)) {
		/* The serialised form carries each rule's "where" verbatim: from a file (a project's
		 * .sluice/policy.json) it would let the file quote /etc/sluice for its own rules. */
		if (!compiled_ok) {
			r = policy_jfail(&c, "/sluice-compiled#key", "a serialised policy (\"sluice-compiled\") is only accepted "
				  "from sluice itself, not from a policy file");
			goto out;
		}
		if (!json_object_is_type(marker, json_type_int) || json_object_get_int(marker) != 1) {
			r = policy_jfail(&c, "/sluice-compiled", "unsupported compiled policy version");
			goto out;
		}
		c.compiled = true;
	}
	/* Options and presets first so that rule order below follows the file. */
	json_object_object_foreach(root, key, val) {
		char path[300];
		snprintf(path, sizeof path, "/%s", key);
		if (c.compiled) {
			if (strcmp(key, "sluice-compiled") == 0)
				r = 0;
			else if (strcmp(key, "rules") == 0) {
				r = 0;
				if (!json_object_is_type(val, json_type_array)) {
					r = policy_jfail(&c, path, "\"rules\" must be a list");
				}
				for (size_t i = 0; r == 0 && i < json_object_array_length(val); i++) {
					char sub[80];
					snprintf(sub, sizeof sub, "/rules/%zu", i);
					r = parse_rule_json(&c, sub, json_object_array_get_idx(val, i), RULE_ALLOW);
				}
			} else if (strcmp(key, "options") == 0)
				r = parse_options_json(&c, val);
			else if (strcmp(key, "inspect") == 0)
				r = policy_inspect_load_json(&c, val);
			else
				r = policy_jfail(&c, key_path(path, sizeof path, "", key), "unknown key \"%s\" in a compiled policy", key);
		} else if (strcmp(key, "presets") == 0) {
			r = parse_presets_json(&c, val);
		} else if (strcmp(key, "allow") == 0) {
			r = parse_list_json(&c, key, val, RULE_ALLOW);
		} else if (strcmp(key, "deny") == 0) {
			r = parse_list_json(&c, key, val, RULE_DENY);
		} else if (strcmp(key, "ceiling") == 0) {
			if (layer != POLICY_LAYER_ORG)
				r = policy_jfail(&c, path, "\"ceiling\" is only allowed in organisation policies (/etc/sluice); "
					  "this file is a %s policy, which can only narrow", policy_layer_name(layer));
			else
				r = parse_list_json(&c, key, val, RULE_CEILING);
		} else if (strcmp(key, "options") == 0) {
			r = parse_options_json(&c, val);
		} else if (strcmp(key, "inspect") == 0) {
			r = policy_inspect_load_json(&c, val);
		} else if (strcmp(key, "sandbox") == 0 || strcmp(key, "comment") == 0 || strcmp(key, "$schema") == 0) {
			r = 0; /* "sandbox" is read by the launcher (sandbox/config.c) */
		} else {
			r = policy_jfail(&c, key_path(path, sizeof path, "", key), "unknown key \"%s\" (expected presets, allow, deny, ceiling, inspect, options, sandbox)", key);
		}
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	jpos_free(c.pos);
	json_object_put(root);
	json_tokener_free(tok);
	return r;
}

/* "name:line:col" in the arena, without printf: a million-rule list formats a million of these. */
static const char *where_str(struct policy_builder *b, const char *name, size_t name_len, unsigned line, unsigned col)
{
	bool cut;
	const char *n = where_name(name, &name_len, &cut);
	char *w = policy_arena_alloc(&b->arena, name_len + 3 + 24);
	char num[12];
	size_t o = 0;

	if (!w)
		return NULL;
	if (cut) {
		memcpy(w, "...", 3);
		o = 3;
	}
	memcpy(w + o, n, name_len);
	o += name_len;
	for (int part = 0; part < 2; part++) {
		unsigned v = part ? col : line;
		int k = 0;
		do {
			num[k++] = (char)('0' + v % 10);
			v /= 10;
		} while (v);
		w[o++] = ':';
		while (k)
			w[o++] = num[--k];
	}
	w[o] = '\0';
	return w;
}

/* ---- plain text: one pattern per line, '#' comments, '!' prefix for deny ---- */

int policy_load_text(struct policy_builder *b, enum policy_layer layer, const char *name, const char *text,
		     size_t len, struct policy_error *err)
{
	unsigned lineno = 0;
	size_t off = 0, name_len = strlen(name), lines = 1;
	char why[POLICY_ERR_MAX];

	/* one rule per line at most: room for them all at once (a million-line list would otherwise grow
	 * the rule table twenty times) */
	for (const char *p = text; (p = memchr(p, '\n', len - (size_t)(p - text))) != NULL; p++)
		lines++;
	if (lines > (4u << 20))
		lines = 4u << 20; /* (blank lines count too: past this, the table grows as needed) */
	if (policy_builder_reserve(b, lines) < 0)
		return policy_err(err, name, 0, 0, "out of memory for %zu rules", lines);
	while (off < len) {
		const char *nl = memchr(text + off, '\n', len - off);
		size_t llen = nl ? (size_t)(nl - (text + off)) : len - off;
		const char *line = text + off;
		lineno++;
		off += llen + (nl ? 1 : 0);

		if (memchr(line, '\0', llen))
			return policy_err(err, name, lineno, 1, "NUL byte in domain list");
		size_t s = 0, e = llen;
		const char *hash = memchr(line, '#', llen);
		if (hash)
			e = (size_t)(hash - line);
		while (s < e && isspace((unsigned char)line[s]))
			s++;
		while (e > s && isspace((unsigned char)line[e - 1]))
			e--;
		if (s == e)
			continue;
		if (e - s > POLICY_HOST_MAX + 128)
			return policy_err(err, name, lineno, (unsigned)s + 1, "line too long for a pattern");
		char pat[POLICY_HOST_MAX + 130];
		struct policy_rule r = { .layer = layer, .kind = RULE_ALLOW };
		size_t ps = s;
		if (line[ps] == '!') {
			r.kind = RULE_DENY;
			ps++;
			while (ps < e && isspace((unsigned char)line[ps]))
				ps++;
		}
		memcpy(pat, line + ps, e - ps);
		pat[e - ps] = '\0';
		for (size_t i = 0; pat[i]; i++)
			if (isspace((unsigned char)pat[i]))
				return policy_err(err, name, lineno, (unsigned)(ps + i + 1),
						  "one pattern per line (found white space inside \"%s\")", pat);
		if (policy_parse_pattern(b, pat, &r, why, sizeof why) < 0)
			return policy_err(err, name, lineno, (unsigned)ps + 1, "%s", why);
		r.where = where_str(b, name, name_len, lineno, (unsigned)ps + 1);
		if (!r.where)
			return policy_err(err, name, 0, 0, "out of memory");
		int rc = policy_builder_push(b, &r);
		if (rc < 0)
			return policy_err(err, name, lineno, 1, "out of memory");
	}
	return 0;
}
