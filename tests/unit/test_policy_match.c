/* Unit tests: the matcher against a naive reference on random rule sets over a small alphabet
 * (a differential test in the style of OpenSSH's match tests), plus wildcard edge cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy.h"

enum kind { K_ALLOW, K_DENY, K_CEILING };

struct ref_rule {
	enum kind kind;
	enum policy_layer layer;
	bool wild;
	char suffix[32];
	int nports; /* 0 default, -1 any */
	uint16_t lo[2], hi[2];
	unsigned methods;
	char where[64];
	unsigned seq;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (unsigned)(rng_state % n);
}

static void rand_name(char *out, int labels)
{
	static const char *alpha[] = { "a", "b", "c" };
	out[0] = '\0';
	for (int i = 0; i < labels; i++) {
		if (i)
			strcat(out, ".");
		strcat(out, alpha[rnd(3)]);
	}
}

static int count_labels(const char *s)
{
	int n = 1;
	for (; *s; s++)
		n += *s == '.';
	return n;
}

static bool ref_name_match(const struct ref_rule *r, const char *host)
{
	size_t hl = strlen(host), sl = strlen(r->suffix);
	if (!r->wild)
		return strcmp(host, r->suffix) == 0;
	return hl > sl + 1 && host[hl - sl - 1] == '.' && strcmp(host + hl - sl, r->suffix) == 0;
}

static bool ref_port_ok(const struct ref_rule *r, uint16_t port)
{
	if (r->nports == -1)
		return true;
	if (r->nports == 0)
		return r->kind == K_DENY || port == 80 || port == 443;
	for (int i = 0; i < r->nports; i++)
		if (port >= r->lo[i] && port <= r->hi[i])
			return true;
	return false;
}

static bool ref_applies(const struct ref_rule *r, uint16_t port, unsigned method)
{
	if (port == 0)
		return r->kind != K_DENY || ((r->nports == 0 || r->nports == -1) && r->methods == 0);
	return ref_port_ok(r, port) && (r->methods == 0 || (r->methods & method) ||
					 (r->kind == K_DENY && (method == 0 || method == POLICY_M_CONNECT)));
}

static bool ref_better(const struct ref_rule *a, const struct ref_rule *b)
{
	if (!b)
		return true;
	int da = count_labels(a->suffix), db = count_labels(b->suffix);
	if (da != db)
		return da > db;
	if (a->wild != b->wild)
		return !a->wild;
	if (a->layer != b->layer)
		return a->layer < b->layer;
	return a->seq < b->seq;
}

static enum policy_verdict ref_decide(const struct ref_rule *rules, int n, const char *host, uint16_t port,
				      unsigned method, const struct ref_rule **which)
{
	const struct ref_rule *deny = NULL, *allow = NULL, *ceil = NULL;
	bool has_ceiling = false;

	for (int i = 0; i < n; i++) {
		const struct ref_rule *r = &rules[i];
		if (r->kind == K_CEILING)
			has_ceiling = true;
		if (!ref_name_match(r, host) || !ref_applies(r, port, method))
			continue;
		const struct ref_rule **slot = r->kind == K_DENY ? &deny : r->kind == K_ALLOW ? &allow : &ceil;
		if (ref_better(r, *slot))
			*slot = r;
	}
	*which = NULL;
	if (deny) {
		*which = deny;
		return POLICY_DENY;
	}
	if (has_ceiling && !ceil)
		return POLICY_DENY;
	if (allow) {
		*which = allow;
		return POLICY_ALLOW;
	}
	return POLICY_DENY;
}

/* Renders one layer's rules as a JSON document, one rule per line, and records where each sits. */
struct doc {
	char *buf;
	size_t len, o;
	unsigned line;
};

__attribute__((format(printf, 2, 3))) static void emit(struct doc *d, const char *fmt, ...)
{
	va_list ap;
	size_t start = d->o;

	va_start(ap, fmt);
	d->o += (size_t)vsnprintf(d->buf + d->o, d->len - d->o, fmt, ap);
	va_end(ap);
	for (size_t i = start; i < d->o; i++)
		d->line += d->buf[i] == '\n';
}

static void render_layer(struct ref_rule *rules, int n, enum policy_layer layer, char *buf, size_t len)
{
	static const char *kname[] = { "allow", "deny", "ceiling" };
	struct doc d = { .buf = buf, .len = len, .line = 1 };
	bool first_list = true;

	emit(&d, "{\n");
	for (int k = 0; k < 3; k++) {
		int idx[32], m = 0;
		for (int i = 0; i < n; i++)
			if (rules[i].layer == layer && rules[i].kind == (enum kind)k)
				idx[m++] = i;
		if (!m)
			continue;
		emit(&d, "%s\"%s\": [\n", first_list ? "" : ",\n", kname[k]);
		first_list = false;
		for (int j = 0; j < m; j++) {
			struct ref_rule *r = &rules[idx[j]];
			char ports[64] = "", methods[64] = "";
			if (r->nports == -1)
				snprintf(ports, sizeof ports, ", \"ports\": \"*\"");
			else if (r->nports == 1)
				snprintf(ports, sizeof ports, ", \"ports\": [\"%u-%u\"]", r->lo[0], r->hi[0]);
			else if (r->nports == 2)
				snprintf(ports, sizeof ports, ", \"ports\": [%u, \"%u-%u\"]", r->lo[0], r->lo[1], r->hi[1]);
			if (r->methods == POLICY_M_GET)
				snprintf(methods, sizeof methods, ", \"methods\": [\"GET\"]");
			else if (r->methods)
				snprintf(methods, sizeof methods, ", \"methods\": [\"POST\", \"PUT\"]");
			snprintf(r->where, sizeof r->where, "%s.json:%u:1", policy_layer_name(layer), d.line);
			emit(&d, "{\"host\": \"%s%s\"%s%s}%s\n", r->wild ? "*." : "", r->suffix, ports, methods,
			     j + 1 < m ? "," : "");
		}
		emit(&d, "]");
	}
	emit(&d, "\n}\n");
}

static void test_differential(void **state)
{
	static const uint16_t probe_ports[] = { 0, 22, 80, 443, 8080 };
	static const unsigned probe_methods[] = { 0, POLICY_M_GET, POLICY_M_POST, POLICY_M_CONNECT };
	unsigned checked = 0, allowed = 0;
	(void)state;

	for (int iter = 0; iter < 3000; iter++) {
		struct ref_rule rules[24];
		int n = 1 + (int)rnd(24);
		struct policy_builder *b = policy_builder_new();
		struct policy_error err = { 0 };

		for (int i = 0; i < n; i++) {
			struct ref_rule *r = &rules[i];
			memset(r, 0, sizeof *r);
			r->seq = (unsigned)i;
			r->layer = (enum policy_layer)rnd(POLICY_LAYER_COUNT);
			r->kind = rnd(4) == 0 ? K_DENY : K_ALLOW;
			if (r->layer == POLICY_LAYER_ORG && iter % 3 == 0 && rnd(2))
				r->kind = K_CEILING;
			r->wild = rnd(2);
			rand_name(r->suffix, 2 + (int)rnd(2));
			switch (rnd(5)) {
			case 0: r->nports = -1; break;
			case 1: r->nports = 1; r->lo[0] = r->hi[0] = 8080; break;
			case 2: r->nports = 1; r->lo[0] = 80; r->hi[0] = 443; break;
			case 3: r->nports = 2; r->lo[0] = r->hi[0] = 22; r->lo[1] = 443; r->hi[1] = 8080; break;
			default: r->nports = 0; break;
			}
			r->methods = rnd(4) == 0 ? POLICY_M_GET : rnd(5) == 0 ? (POLICY_M_POST | POLICY_M_PUT) : 0;
		}
		/* JSON documents emit rules grouped by kind, so seq (the tie-break) follows that order */
		unsigned seq = 0;
		for (int l = 0; l < POLICY_LAYER_COUNT; l++)
			for (int k = 0; k < 3; k++)
				for (int i = 0; i < n; i++)
					if ((int)rules[i].layer == l && (int)rules[i].kind == k)
						rules[i].seq = seq++;
		for (int l = 0; l < POLICY_LAYER_COUNT; l++) {
			char doc[8192], name[32];
			bool any = false;
			for (int i = 0; i < n; i++)
				any |= (int)rules[i].layer == l;
			if (!any)
				continue;
			render_layer(rules, n, (enum policy_layer)l, doc, sizeof doc);
			snprintf(name, sizeof name, "%s.json", policy_layer_name((enum policy_layer)l));
			if (policy_builder_add_json(b, (enum policy_layer)l, name, doc, strlen(doc), &err) != 0)
				fail_msg("generated policy rejected: %s:%u:%u %s\n%s", err.file, err.line, err.col, err.msg, doc);
		}
		struct policy *p = policy_builder_compile(b, &err);
		assert_non_null(p);
		for (int h = 0; h < 12; h++) {
			char host[64];
			rand_name(host, 1 + (int)rnd(4));
			for (size_t pi = 0; pi < sizeof probe_ports / sizeof probe_ports[0]; pi++) {
				for (size_t mi = 0; mi < sizeof probe_methods / sizeof probe_methods[0]; mi++) {
					struct policy_decision d;
					const struct ref_rule *which;
					enum policy_verdict want = ref_decide(rules, n, host, probe_ports[pi], probe_methods[mi], &which);
					policy_decide(p, host, probe_ports[pi], probe_methods[mi], &d);
					if (d.verdict != want)
						fail_msg("iter %d host %s port %u method %u: got %s (%s), want %s", iter, host,
							 probe_ports[pi], probe_methods[mi], policy_verdict_name(d.verdict), policy_decision_reason(&d),
							 policy_verdict_name(want));
					if (which && strcmp(policy_rule_where(d.rule), which->where) != 0)
						fail_msg("iter %d host %s port %u: decided by %s, want %s", iter, host,
							 probe_ports[pi], policy_rule_where(d.rule), which->where);
					checked++;
					allowed += d.verdict == POLICY_ALLOW;
				}
			}
		}
		policy_unref(p);
		policy_builder_free(b);
	}
	/* the generator must exercise both outcomes, or the comparison proves little */
	assert_true(allowed > checked / 20);
	assert_true(allowed < checked - checked / 20);
}

static void test_wildcard_edges(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	struct policy_decision d;
	(void)state;

	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_CLI, "*.pythonhosted.org", false, "--allow", &err), 0);
	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_CLI, "pypi.org:443", false, "--allow", &err), 0);
	struct policy *p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_decide(p, "files.pythonhosted.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_decide(p, "a.b.pythonhosted.org", 80, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_decide(p, "pythonhosted.org", 443, 0, &d); /* the bare suffix is not covered */
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "evilpythonhosted.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "pypi.org.evil.com", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "pypi.org", 80, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_non_null(strstr(policy_decision_reason(&d), "not this port"));
	policy_decide(p, "pypi.org", 0, 0, &d); /* DNS: the name is usable */
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_unref(p);
	policy_builder_free(b);
}

/* The hash of the trie's edge table was fixed and unkeyed (FNV-1a), so a project file could list
 * names that all land in one bucket and make compiling (in sluiced) and lookups quadratic. This
 * test feeds the matcher names that collide under that old hash; with a keyed hash they spread. */
static uint32_t old_edge_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h ^ (h >> 15);
}

/* The thread's CPU time, not the wall clock: the bound is on the work (quadratic or not), and on a loaded
 * machine one preemption during the 1000 lookups (~1 ms of work) can take longer than the 20 ms bound. */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_hash_flooding(void **state)
{
	enum { N = 40000 };
	struct policy_builder *b = policy_builder_new();
	struct policy_error err;
	struct policy_decision d;
	uint64_t x = 88172645463325252ull;
	char name[16], last[16] = "";
	int found = 0;
	(void)state;

	assert_non_null(b);
	while (found < N) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t v = x;
		for (int i = 0; i < 12; i++, v /= 26)
			name[i] = (char)('a' + v % 26);
		name[12] = '\0';
		if ((old_edge_hash(name, 12) & 0x1ff00) != 0)
			continue; /* all in the first 256 slots of a 2^17-slot table */
		assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_PROJECT, name, false, "--allow", &err), 0);
		memcpy(last, name, sizeof name);
		found++;
	}
	double t0 = now_s();
	struct policy *p = policy_builder_compile(b, &err);
	double t1 = now_s();
	assert_non_null(p);
	for (int i = 0; i < 1000; i++)
		policy_decide(p, last, 443, 0, &d);
	double t2 = now_s();
	assert_int_equal(d.verdict, POLICY_ALLOW);
	/* keyed: ~10 ms to compile, ~1 us per lookup even under ASan; unkeyed: seconds, and ~100 us */
	if (t1 - t0 > 1.0 || (t2 - t1) / 1000 > 20e-6)
		fail_msg("colliding names: compile %.3f s, lookup %.1f us", t1 - t0, (t2 - t1) / 1000 * 1e6);
	policy_unref(p);
	policy_builder_free(b);
}

/* A deny limited to some methods cannot be enforced inside a tunnel (CONNECT) or an opaque TLS
 * stream (method 0): there it must deny, not step aside and let an allow open the tunnel. */
static void test_method_deny_covers_tunnels(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	struct policy_decision d;
	const char *org = "{\"deny\": [{\"host\": \"api.example.org\", \"methods\": [\"POST\", \"PUT\"]}]}";
	(void)state;

	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "org.json", org, strlen(org), &err), 0);
	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_PROJECT, "api.example.org", false, "--allow", &err), 0);
	struct policy *p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_decide(p, "api.example.org", 443, POLICY_M_GET, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_decide(p, "api.example.org", 443, POLICY_M_POST, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "api.example.org", 443, POLICY_M_CONNECT, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_string_equal(policy_rule_where(d.rule), "org.json:1:11");
	policy_decide(p, "api.example.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "api.example.org", 0, 0, &d); /* DNS: only unconditional denies refuse the name */
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_unref(p);
	policy_builder_free(b);
}

/* Direct mode ports: single ports named by allow rules for the name (exact or wildcard), not 80/443, not
 * ranges, "*" or method-restricted rules, each still decided (deny rules and the ceiling apply); none
 * without the option. */
static struct policy *compile_json(const char *org, const char *user)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	struct policy *p;

	if (org)
		assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "org.json", org, strlen(org), &err), 0);
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_USER, "user.json", user, strlen(user), &err), 0);
	p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_builder_free(b);
	return p;
}

static size_t dports(const struct policy *p, const char *host, char *out, size_t len)
{
	struct policy_direct_port dp[POLICY_DIRECT_PORTS_MAX];
	size_t n = policy_direct_ports(p, host, dp, POLICY_DIRECT_PORTS_MAX), o = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n && o < len; i++)
		o += (size_t)snprintf(out + o, len - o, "%s%s/%u", i ? " " : "", policy_proto_name(dp[i].proto), dp[i].port);
	return n;
}

static void test_direct_ports(void **state)
{
	const char *user = "{\"options\": {\"direct\": true}, \"allow\": [\"git.example.org:22,443\", "
	                   "\"*.example.org:2222\", \"git.example.org:8000-8100\", \"api.example.org:*\", "
	                   "{\"host\": \"git.example.org\", \"ports\": [9418], \"methods\": [\"GET\"]}, "
	                   "\"git.example.org:7999\"], \"deny\": [\"git.example.org:7999\"]}";
	struct policy_direct_port dp[POLICY_DIRECT_PORTS_MAX];
	char got[256];
	struct policy *p;
	(void)state;

	p = compile_json(NULL, user);
	assert_int_equal(dports(p, "git.example.org", got, sizeof got), 2);
	assert_string_equal(got, "tcp/22 tcp/2222");
	assert_int_equal(dports(p, "api.example.org", got, sizeof got), 1); /* 2222 only */
	assert_string_equal(got, "tcp/2222");
	assert_int_equal(dports(p, "example.org", got, sizeof got), 0);
	assert_int_equal(dports(p, "other.org", got, sizeof got), 0);
	assert_int_equal(policy_direct_ports(p, "git.example.org", dp, 1), 1); /* max respected */
	policy_unref(p);

	/* the organisation ceiling caps it; an org "direct": false pins the option off */
	p = compile_json("{\"ceiling\": [\"git.example.org:22\"]}", user);
	assert_int_equal(dports(p, "git.example.org", got, sizeof got), 1);
	assert_string_equal(got, "tcp/22");
	policy_unref(p);
	p = compile_json("{\"options\": {\"direct\": false}}", user);
	assert_int_equal(dports(p, "git.example.org", got, sizeof got), 0);
	policy_unref(p);
	/* without the option: nothing */
	p = compile_json(NULL, "{\"allow\": [\"git.example.org:22\"]}");
	assert_int_equal(dports(p, "git.example.org", got, sizeof got), 0);
	policy_unref(p);
}

/* UDP direct ports: only where a rule names UDP; deny rules (whatever their protocol says, TCP and UDP
 * when it says nothing) and the organisation ceiling (UDP only where a ceiling rule names it) apply. */
static void test_direct_udp_ports(void **state)
{
	const char *user = "{\"options\": {\"direct\": true}, \"allow\": [\"game.example.org:7777/udp\", "
	                   "\"game.example.org:22\", {\"host\": \"voip.example.org\", \"ports\": [3478, 5060], "
	                   "\"protocol\": [\"tcp\", \"udp\"]}, \"*.example.org:9000/udp\", \"tcp.example.org:5000\"]}";
	char got[256];
	struct policy *p;
	struct policy_decision d;
	struct sockaddr_storage ss;
	(void)state;

	p = compile_json(NULL, user);
	assert_int_equal(dports(p, "game.example.org", got, sizeof got), 3);
	assert_string_equal(got, "tcp/22 udp/7777 udp/9000");
	assert_int_equal(dports(p, "voip.example.org", got, sizeof got), 5);
	assert_string_equal(got, "tcp/3478 tcp/5060 udp/3478 udp/5060 udp/9000");
	assert_int_equal(dports(p, "tcp.example.org", got, sizeof got), 2); /* TCP only, the wildcard's UDP 9000 */
	assert_string_equal(got, "tcp/5000 udp/9000");
	assert_true(policy_direct_port_allowed(p, "game.example.org", POLICY_PROTO_UDP, 7777));
	assert_false(policy_direct_port_allowed(p, "game.example.org", POLICY_PROTO_TCP, 7777));
	assert_false(policy_direct_port_allowed(p, "game.example.org", POLICY_PROTO_UDP, 22));
	assert_false(policy_direct_port_allowed(p, "tcp.example.org", POLICY_PROTO_UDP, 5000));
	/* a UDP rule allows nothing through the proxy (TCP) */
	policy_decide(p, "game.example.org", 7777, POLICY_M_CONNECT, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	/* the address check is per protocol too: a public address of a named host, a private one never */
	assert_int_equal(policy_parse_ip_literal("198.51.100.7", 12, &ss), 0);
	policy_decide_addr_proto(p, (struct sockaddr *)&ss, POLICY_PROTO_UDP, 7777, true, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_int_equal(policy_parse_ip_literal("10.1.2.3", 8, &ss), 0);
	policy_decide_addr_proto(p, (struct sockaddr *)&ss, POLICY_PROTO_UDP, 7777, true, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_unref(p);

	/* deny rules: without a protocol they cover UDP too; with "udp" only UDP */
	p = compile_json("{\"deny\": [\"game.example.org:7777\", {\"host\": \"voip.example.org\", \"ports\": [5060], "
	                 "\"protocol\": \"udp\"}]}", user);
	assert_int_equal(dports(p, "game.example.org", got, sizeof got), 2);
	assert_string_equal(got, "tcp/22 udp/9000");
	assert_int_equal(dports(p, "voip.example.org", got, sizeof got), 4);
	assert_string_equal(got, "tcp/3478 tcp/5060 udp/3478 udp/9000");
	policy_unref(p);

	/* an org ceiling that allows a name for TCP only: no layer below can grant UDP */
	p = compile_json("{\"ceiling\": [\"game.example.org:*\", \"voip.example.org:*\", "
	                 "{\"host\": \"voip.example.org\", \"ports\": [3478], \"protocol\": \"udp\"}]}", user);
	assert_int_equal(dports(p, "game.example.org", got, sizeof got), 1);
	assert_string_equal(got, "tcp/22");
	policy_decide_proto(p, "game.example.org", POLICY_PROTO_UDP, 7777, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(d.why, POLICY_R_CEILING);
	assert_int_equal(dports(p, "voip.example.org", got, sizeof got), 3);
	assert_string_equal(got, "tcp/3478 tcp/5060 udp/3478");
	policy_unref(p);
	/* a ceiling may name UDP with a range or "*" */
	p = compile_json("{\"ceiling\": [\"*.example.org:*\", {\"host\": \"*.example.org\", \"ports\": \"*\", "
	                 "\"protocol\": \"udp\"}]}", user);
	assert_int_equal(dports(p, "game.example.org", got, sizeof got), 3);
	policy_unref(p);
	/* DNS never goes direct, over TCP either (a TCP rule for 53 still serves CONNECT through the proxy) */
	p = compile_json(NULL, "{\"options\": {\"direct\": true}, \"allow\": [\"dns.example.org:53,853\"]}");
	assert_int_equal(dports(p, "dns.example.org", got, sizeof got), 1);
	assert_string_equal(got, "tcp/853");
	policy_decide(p, "dns.example.org", 53, POLICY_M_CONNECT, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_unref(p);
	/* UDP rules need the direct option like TCP ones */
	p = compile_json(NULL, "{\"allow\": [\"game.example.org:7777/udp\"]}");
	assert_int_equal(dports(p, "game.example.org", got, sizeof got), 0);
	policy_unref(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_differential),
		cmocka_unit_test(test_wildcard_edges),
		cmocka_unit_test(test_hash_flooding),
		cmocka_unit_test(test_method_deny_covers_tunnels),
		cmocka_unit_test(test_direct_ports),
		cmocka_unit_test(test_direct_udp_ports),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
