/* Unit tests: policy parsing (errors with file:line:col), unsafe patterns, layering, presets,
 * plain-text lists, org file ownership and serialisation round trips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy.h"

/* Loads JSON text at a layer; returns the compiled policy or NULL with err filled. */
static struct policy *load_json(enum policy_layer layer, const char *text, struct policy_error *err)
{
	struct policy_builder *b = policy_builder_new();
	struct policy *p = NULL;

	assert_non_null(b);
	memset(err, 0, sizeof *err);
	if (policy_builder_add_json(b, layer, "t.json", text, strlen(text), err) == 0)
		p = policy_builder_compile(b, err);
	policy_builder_free(b);
	return p;
}

static void expect_error(const char *text, unsigned line, unsigned col, const char *needle)
{
	struct policy_error err;
	struct policy *p = load_json(POLICY_LAYER_PROJECT, text, &err);

	if (p)
		fail_msg("expected an error for: %s", text);
	if (err.line != line || err.col != col || !strstr(err.msg, needle))
		fail_msg("for %s\n got %s:%u:%u: %s\nwant line %u col %u containing \"%s\"", text, err.file, err.line,
			 err.col, err.msg, line, col, needle);
	assert_string_equal(err.file, "t.json");
}

static void test_parse_errors(void **state)
{
	(void)state;
	expect_error("{\"allow\": [\"pypi.org\",\n  \"*\"]}", 2, 3, "matches every host");
	expect_error("{\"allow\": [\"*.com\"]}", 1, 12, "top-level domain");
	expect_error("{\"allow\": [\"*.co.uk\"]}", 1, 12, "public suffix");
	expect_error("{\"allow\": [\"*.github.io\"]}", 1, 12, "public suffix");
	expect_error("{\"allow\": [\"a.*.example.org\"]}", 1, 12, "leading");
	expect_error("{\"allow\": [\"10.0.0.0/8\"]}", 1, 12, "cidr");
	expect_error("{\"allow\": [\"10.0.0.1\"]}", 1, 12, "IP address");
	expect_error("{\"allow\": [\"https://pypi.org/simple\"]}", 1, 12, "URL");
	expect_error("{\"allow\": [\"pypi.org:0\"]}", 1, 12, "port");
	expect_error("{\"allow\": [\"pypi.org:70000\"]}", 1, 12, "port");
	expect_error("{\"allow\": [\"pypi.org:\"]}", 1, 12, "port");
	expect_error("{\"allow\": [{\"host\": \"pypi.org\", \"ports\": [443, 0]}]}", 1, 48, "out of range");
	expect_error("{\"allow\": [{\"host\": \"pypi.org\", \"methods\": [\"FETCH\"]}]}", 1, 45, "unknown method");
	expect_error("{\"allow\": [{\"host\": \"pypi.org\", \"cidr\": \"10.0.0.0/8\"}]}", 1, 12, "exactly one");
	expect_error("{\"allow\": [{\"cidr\": \"10.0.0.1/8\"}]}", 1, 21, "host bits");
	expect_error("{\"allow\": [{\"cidr\": \"0.0.0.0/0\"}]}", 1, 21, "too broad");
	expect_error("{\"allow\": [{\"hots\": \"pypi.org\"}]}", 1, 13, "unknown key");
	expect_error("{\"alow\": []}", 1, 2, "unknown key \"alow\"");
	expect_error("// comment\n{\"allow\": [\"pypi.org\"], \"allow\": [\"evil.org\"]}", 2, 25, "duplicate key");
	expect_error("{\"allow\": [\"pypi.org\"]", 1, 23, "JSON syntax error");
	expect_error("{\"allow\": [\"pypi.org\"]} x", 1, 25, "after the end");
	expect_error("[\"pypi.org\"]", 1, 1, "JSON object");
	expect_error("{\"allow\": \"pypi.org\"}", 1, 11, "must be a list");
	expect_error("{\"ceiling\": [\"pypi.org\"]}", 1, 13, "only allowed in organisation");
	expect_error("{\"presets\": [\"nosuch\"]}", 1, 14, "unknown preset");
	expect_error("{\"presets\": [\"../etc/passwd\"]}", 1, 14, "not a preset name");
	expect_error("{\"options\": {\"direct\": 1}}", 1, 24, "true or false");
	expect_error("{\"allow\": [\"b\\u00fccher.example\\u0000.evil\"]}", 1, 32, "NUL");
}

static void test_comments_and_positions(void **state)
{
	struct policy_error err;
	struct policy *p;
	struct policy_decision d;
	(void)state;

	p = load_json(POLICY_LAYER_PROJECT,
		      "/* project policy */\n"
		      "{\n"
		      "  // registries\n"
		      "  \"allow\": [\n"
		      "    \"pypi.org\",\n"
		      "    {\"host\": \"*.Example.ORG.\", \"ports\": [8443, \"9000-9001\"], \"methods\": [\"GET\"]},\n"
		      "  ],\n"
		      "  \"deny\": [\"bad.example.org\"]\n"
		      "}\n",
		      &err);
	if (!p)
		fail_msg("%s:%u:%u: %s", err.file, err.line, err.col, err.msg);
	policy_decide(p, "pypi.org", 443, POLICY_M_GET, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_string_equal(policy_rule_where(d.rule), "t.json:5:5");
	policy_decide(p, "a.example.org", 9001, POLICY_M_GET, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_string_equal(policy_rule_where(d.rule), "t.json:6:5");
	assert_string_equal(policy_rule_pattern(d.rule), "*.example.org");
	policy_decide(p, "a.example.org", 9001, POLICY_M_POST, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "a.example.org", 443, POLICY_M_GET, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "bad.example.org", 8443, POLICY_M_GET, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_string_equal(policy_rule_where(d.rule), "t.json:8:12");
	assert_non_null(strstr(policy_decision_reason(&d), "t.json:8:12"));
	policy_unref(p);
}

static char tmpdir[64];

static void write_file(const char *name, const char *text, mode_t mode)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
}

static int setup_tmp(void **state)
{
	(void)state;
	strcpy(tmpdir, "/tmp/sluice-test-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_text_list(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	struct policy *p;
	struct policy_decision d;
	char path[256];
	(void)state;

	write_file("hosts.txt", "# registries\npypi.org\n  *.npmjs.org:443   # npm\n! evil.npmjs.org\n\n", 0644);
	snprintf(path, sizeof path, "%s/hosts.txt", tmpdir);
	assert_int_equal(policy_builder_add_file(b, POLICY_LAYER_USER, path, &err), 0);
	p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_decide(p, "registry.npmjs.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	char want[300];
	snprintf(want, sizeof want, "%s:3:3", path);
	assert_string_equal(policy_rule_where(d.rule), want);
	policy_decide(p, "registry.npmjs.org", 80, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "evil.npmjs.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_true(policy_rule_is_deny(d.rule));
	policy_unref(p);

	write_file("bad.txt", "pypi.org\nfoo bar.org\n", 0644);
	snprintf(path, sizeof path, "%s/bad.txt", tmpdir);
	assert_int_not_equal(policy_builder_add_file(b, POLICY_LAYER_USER, path, &err), 0);
	assert_int_equal(err.line, 2);
	assert_non_null(strstr(err.msg, "one pattern per line"));
	policy_builder_free(b);
}

/* The organisation caps; a project file cannot widen it, and deny wins from any layer. */
static void test_layering(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	struct policy *p;
	struct policy_decision d;
	const char *org = "{\"ceiling\": [\"*.npmjs.org\", \"pypi.org\", {\"cidr\": \"10.9.0.0/16\"}],"
			  " \"deny\": [\"bad.npmjs.org\"], \"options\": {\"direct\": false}}";
	const char *proj = "{\"allow\": [\"registry.npmjs.org\", \"evil.example.com\", \"bad.npmjs.org\"],"
			   " \"options\": {\"direct\": true}}";
	/* private ranges: only the user's own policy (or the command line) may open them */
	const char *user = "{\"allow\": [{\"cidr\": \"10.9.1.0/24\"}, {\"cidr\": \"10.8.0.0/16\"}]}";
	(void)state;

	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "org.json", org, strlen(org), &err), 0);
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_USER, "user.json", user, strlen(user), &err), 0);
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_PROJECT, "proj.json", proj, strlen(proj), &err), 0);
	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_CLI, "other.example.net", false, "--allow", &err), 0);
	p = policy_builder_compile(b, &err);
	assert_non_null(p);

	policy_decide(p, "registry.npmjs.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_int_equal(policy_rule_layer(d.rule), POLICY_LAYER_PROJECT);
	policy_decide(p, "evil.example.com", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_non_null(strstr(policy_decision_reason(&d), "ceiling"));
	policy_decide(p, "other.example.net", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "bad.npmjs.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(policy_rule_layer(d.rule), POLICY_LAYER_ORG);
	/* pypi.org is under the ceiling but nobody allowed it */
	policy_decide(p, "pypi.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	/* addresses: inside both the ceiling and an allow */
	struct sockaddr_storage ss;
	assert_int_equal(policy_parse_ip_literal("10.9.1.5", 8, &ss), 0);
	policy_decide_addr(p, (struct sockaddr *)&ss, 443, false, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_int_equal(policy_parse_ip_literal("10.8.1.5", 8, &ss), 0);
	policy_decide_addr(p, (struct sockaddr *)&ss, 443, false, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	/* the org pinned direct mode off */
	assert_false(policy_get_options(p)->direct);
	policy_unref(p);
	policy_builder_free(b);
}

static void test_org_file_permissions(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	char dir[128];
	(void)state;

	snprintf(dir, sizeof dir, "%s/etc", tmpdir);
	assert_int_equal(mkdir(dir, 0755), 0);
	write_file("etc/policy.json", "{\"ceiling\": [\"pypi.org\"]}", 0666);
	assert_int_not_equal(policy_builder_add_standard_layers(b, dir, NULL, NULL, &err), 0);
	assert_non_null(strstr(err.msg, "owned by root"));
	write_file("etc/policy.json", "{\"ceiling\": [\"pypi.org\"]}", 0644);
	int r = policy_builder_add_standard_layers(b, dir, NULL, NULL, &err);
	if (geteuid() == 0)
		assert_int_equal(r, 0);
	else
		assert_int_not_equal(r, 0);

	/* a symlink is refused even when its target is a good org file */
	char target[256], link[256];
	snprintf(target, sizeof target, "%s/etc/policy.json", tmpdir);
	snprintf(link, sizeof link, "%s/etc/policy.d", tmpdir);
	assert_int_equal(mkdir(link, 0755), 0);
	snprintf(link, sizeof link, "%s/etc/policy.d/10-link.json", tmpdir);
	assert_int_equal(symlink(target, link), 0);
	assert_int_not_equal(policy_builder_add_standard_layers(b, dir, NULL, NULL, &err), 0);
	assert_non_null(strstr(err.msg, "symlinks are refused"));
	assert_int_equal(unlink(link), 0);

	/* whoever can write the directory can delete the org policy and with it the ceiling */
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_not_equal(policy_builder_add_standard_layers(b, dir, NULL, NULL, &err), 0);
	assert_non_null(strstr(err.msg, "directory must be owned by root"));
	assert_int_equal(chmod(dir, 0755), 0);
	snprintf(link, sizeof link, "%s/etc/policy.d", tmpdir);
	assert_int_equal(chmod(link, 0777), 0);
	assert_int_not_equal(policy_builder_add_standard_layers(b, dir, NULL, NULL, &err), 0);
	assert_non_null(strstr(err.msg, "directory must be owned by root"));
	policy_builder_free(b);
}

static void test_presets(void **state)
{
	static const struct {
		const char *preset, *host;
	} cases[] = {
		{ "npm", "registry.npmjs.org" }, { "pypi", "files.pythonhosted.org" }, { "crates", "index.crates.io" },
		{ "go", "proxy.golang.org" }, { "maven", "repo1.maven.org" }, { "rubygems", "rubygems.org" },
		{ "debian", "deb.debian.org" }, { "github", "codeload.github.com" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		for (int which = 0; which < 2; which++) {
			struct policy_builder *b = policy_builder_new();
			struct policy_error err = { 0 };
			struct policy_decision d;
			const char *name = which ? "registries" : cases[i].preset;
			if (policy_builder_add_preset(b, POLICY_LAYER_CLI, name, &err) != 0)
				fail_msg("preset %s: %s:%u: %s", name, err.file, err.line, err.msg);
			struct policy *p = policy_builder_compile(b, &err);
			assert_non_null(p);
			policy_decide(p, cases[i].host, 443, POLICY_M_GET, &d);
			if (d.verdict != POLICY_ALLOW)
				fail_msg("preset %s should allow %s: %s", name, cases[i].host, policy_decision_reason(&d));
			assert_non_null(strstr(policy_rule_where(d.rule), ".json:"));
			policy_decide(p, "example.com", 443, POLICY_M_GET, &d);
			assert_int_equal(d.verdict, POLICY_DENY);
			policy_unref(p);
			policy_builder_free(b);
		}
	}
}

/* A repository's own .sluice/policy.json cannot open loopback, private or metadata ranges. */
static void test_project_cannot_open_forbidden_ranges(void **state)
{
	struct policy_error err;
	struct policy *p;
	static const char *bad[] = { "{\"allow\": [{\"cidr\": \"169.254.169.254/32\"}]}",
				     "{\"allow\": [{\"cidr\": \"127.0.0.0/8\"}]}",
				     "{\"allow\": [{\"cidr\": \"10.0.0.0/8\"}]}",
				     "{\"allow\": [{\"cidr\": \"10.20.0.0/16\"}]}",
				     "{\"allow\": [{\"cidr\": \"fd12:3456::/32\"}]}",
				     "{\"allow\": [{\"cidr\": \"::ffff:0:0/96\"}]}" };
	(void)state;

	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		p = load_json(POLICY_LAYER_PROJECT, bad[i], &err);
		if (p)
			fail_msg("project layer accepted %s", bad[i]);
		assert_non_null(strstr(err.msg, "project policy cannot allow"));
		assert_int_equal(err.line, 1);
		p = load_json(POLICY_LAYER_USER, bad[i], &err); /* the user's own policy may */
		assert_non_null(p);
		policy_unref(p);
	}
	/* public ranges and denies are fine from a project */
	p = load_json(POLICY_LAYER_PROJECT, "{\"allow\": [{\"cidr\": \"198.18.0.0/15\"}], \"deny\": [{\"cidr\": \"10.0.0.0/8\"}]}", &err);
	assert_non_null(p);
	policy_unref(p);
}

static void test_serialize_roundtrip(void **state)
{
	struct policy_error err;
	struct policy *p, *q, *p2;
	struct policy_decision d1, d2;
	const char *text = "{\"presets\": [\"npm\"], \"allow\": [{\"host\": \"x.example.org\", \"ports\": \"*\"},"
			   " {\"host\": \"*.y.example.org\", \"ports\": [8080, \"9000-9100\"], \"methods\": [\"GET\", \"HEAD\"]},"
			   " {\"cidr\": \"10.1.0.0/16\", \"ports\": [5432]}], \"deny\": [\"bad.npmjs.org\"],"
			   " \"options\": {\"transparent\": true}}";
	static const struct {
		const char *host;
		uint16_t port;
		unsigned m;
	} probes[] = {
		{ "registry.npmjs.org", 443, POLICY_M_GET }, { "bad.npmjs.org", 443, POLICY_M_GET },
		{ "x.example.org", 22, 0 }, { "a.y.example.org", 9050, POLICY_M_HEAD },
		{ "a.y.example.org", 9050, POLICY_M_POST }, { "y.example.org", 8080, POLICY_M_GET },
		{ "nothing.example", 443, 0 },
	};
	(void)state;

	p = load_json(POLICY_LAYER_USER, text, &err);
	assert_non_null(p);
	char *ser = policy_serialize(p);
	assert_non_null(ser);
	q = load_json(POLICY_LAYER_USER, ser, &err);
	if (!q)
		fail_msg("reload: %u:%u %s\n%s", err.line, err.col, err.msg, ser);
	assert_int_equal(policy_rule_count(p), policy_rule_count(q));
	assert_true(policy_get_options(q)->transparent);
	for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
		policy_decide(p, probes[i].host, probes[i].port, probes[i].m, &d1);
		policy_decide(q, probes[i].host, probes[i].port, probes[i].m, &d2);
		assert_int_equal(d1.verdict, d2.verdict);
		assert_string_equal(policy_rule_where(d1.rule), policy_rule_where(d2.rule));
	}
	struct sockaddr_storage ss;
	assert_int_equal(policy_parse_ip_literal("10.1.2.3", 8, &ss), 0);
	policy_decide_addr(q, (struct sockaddr *)&ss, 5432, false, &d2);
	assert_int_equal(d2.verdict, POLICY_ALLOW);
	free(ser);
	policy_unref(q);

	/* UDP rules keep their protocol through the serialised form (and TCP-only rules stay TCP-only) */
	p2 = load_json(POLICY_LAYER_USER, "{\"allow\": [\"u.example.org:7/udp\", \"t.example.org:7\", "
				 "{\"host\": \"b.example.org\", \"ports\": [9], \"protocol\": [\"tcp\", \"udp\"]}], "
				 "\"deny\": [{\"host\": \"u.example.org\", \"ports\": [8], \"protocol\": \"udp\"}]}", &err);
	assert_non_null(p2);
	ser = policy_serialize(p2);
	assert_non_null(ser);
	assert_non_null(strstr(ser, "\"protocol\":[\"udp\"]"));
	q = load_json(POLICY_LAYER_USER, ser, &err);
	if (!q)
		fail_msg("reload: %u:%u %s\n%s", err.line, err.col, err.msg, ser);
	for (int pr = 0; pr < 2; pr++)
		for (uint16_t port = 7; port <= 9; port++)
			for (int h = 0; h < 3; h++) {
				const char *host = h == 0 ? "u.example.org" : h == 1 ? "t.example.org" : "b.example.org";
				enum policy_proto proto = pr ? POLICY_PROTO_UDP : POLICY_PROTO_TCP;

				policy_decide_proto(p2, host, proto, port, 0, &d1);
				policy_decide_proto(q, host, proto, port, 0, &d2);
				assert_int_equal(d1.verdict, d2.verdict);
				assert_int_equal(d1.why, d2.why);
			}
	policy_decide_proto(q, "u.example.org", POLICY_PROTO_UDP, 7, 0, &d2);
	assert_int_equal(d2.verdict, POLICY_ALLOW);
	policy_decide_proto(q, "u.example.org", POLICY_PROTO_TCP, 7, 0, &d2);
	assert_int_equal(d2.verdict, POLICY_DENY);
	free(ser);
	policy_unref(q);
	policy_unref(p2);

	/* A serialised policy cannot smuggle organisation rules in from a lower layer. */
	const char *forged = "{\"sluice-compiled\": 1, \"rules\": [{\"host\": \"pypi.org\", \"where\": \"/etc/sluice/policy.json:1:1\","
			     " \"layer\": \"org\", \"kind\": \"ceiling\"}, {\"host\": \"evil.example\", \"where\": \"x:1:1\","
			     " \"layer\": \"org\", \"kind\": \"allow\"}]}";
	q = load_json(POLICY_LAYER_USER, forged, &err);
	assert_non_null(q);
	policy_decide(q, "evil.example", 443, 0, &d2);
	assert_int_equal(d2.verdict, POLICY_ALLOW);
	assert_int_equal(policy_rule_layer(d2.rule), POLICY_LAYER_USER); /* clamped */
	assert_string_equal(policy_rule_where(d2.rule), "x:1:1 (claimed org layer)");
	assert_int_equal(policy_rule_count(q), 1); /* the forged ceiling was dropped */
	policy_unref(q);
	policy_unref(p);
}


/* A policy file (project, user, org, preset) can never use the serialised form: its rules would carry
 * any "where" they like, so a project could make the audit log quote /etc/sluice for its own rules. */
static void test_compiled_form_only_from_sluiced(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	char path[256];
	(void)state;

	write_file("compiled.json", "{\"sluice-compiled\": 1, \"rules\": [{\"host\": \"evil.example\","
		   " \"where\": \"/etc/sluice/policy.json:3:5\", \"layer\": \"project\", \"kind\": \"allow\"}]}", 0644);
	snprintf(path, sizeof path, "%s/compiled.json", tmpdir);
	assert_int_not_equal(policy_builder_add_file(b, POLICY_LAYER_PROJECT, path, &err), 0);
	assert_int_equal(err.line, 1);
	assert_int_equal(err.col, 2);
	assert_non_null(strstr(err.msg, "serialised"));
	policy_builder_free(b);
}

/* Error messages quote what the file says; a hostile file must not reach the terminal with raw
 * control bytes (escape sequences) through `sluicectl policy check` or `sluice run`. */
static void test_error_messages_escape_control_bytes(void **state)
{
	static const char *texts[] = {
		"{\"allow\": [\"https://\\u001b]0;pwned\\u0007x.org\"]}",
		"{\"allow\": [{\"host\": \"a.org\", \"methods\": [\"\\u001b[2J\"]}]}",
		"{\"\\u001b[31mkey\": 1}",
		"{\"allow\": [\"a\\u0085b.org/x\"]}",
	};
	(void)state;

	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		struct policy_error err;
		struct policy *p = load_json(POLICY_LAYER_PROJECT, texts[i], &err);
		assert_null(p);
		for (const unsigned char *c = (const unsigned char *)err.msg; *c; c++) {
			if (*c < 0x20 || *c == 0x7f || (c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f))
				fail_msg("raw control byte 0x%02x in error for %s: %s", *c, texts[i], err.msg);
		}
		assert_non_null(strstr(err.msg, "\\x"));
	}
}

/* json-c decodes escapes in keys, so "\u0064eny" is a second "deny" that would silently replace the
 * first: the duplicate-key check must compare decoded keys. */
static void test_duplicate_escaped_key(void **state)
{
	(void)state;
	expect_error("{\"deny\": [\"evil.example\"], \"\\u0064eny\": []}", 1, 28, "duplicate key");
	expect_error("{\"allow\": [{\"host\": \"a.org\", \"p\\u006frts\": [22], \"ports\": [443]}]}", 1, 50, "duplicate key");
}

/* Many rules on one name would make every lookup of that name walk all of them: refused at load. */
static void test_rules_per_name_bounded(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	char path[256];
	char *text = malloc(70 * 32);
	size_t o = 0;
	(void)state;

	assert_non_null(text);
	for (int i = 0; i < 70; i++)
		o += (size_t)sprintf(text + o, "a.example.org:%d\n", 1000 + i);
	write_file("many.list", text, 0644);
	free(text);
	snprintf(path, sizeof path, "%s/many.list", tmpdir);
	assert_int_equal(policy_builder_add_file(b, POLICY_LAYER_PROJECT, path, &err), 0);
	assert_null(policy_builder_compile(b, &err));
	char msg[2048];
	policy_error_format(&err, msg, sizeof msg);
	assert_non_null(strstr(msg, "too many rules"));
	assert_non_null(strstr(msg, "many.list:65:1: "));
	policy_builder_free(b);
}

/* Under an org ceiling, a narrower lower-layer cidr allow must not hide the org's own allow. */
static void test_org_cidr_allow_not_shadowed(void **state)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	struct policy_decision d;
	struct sockaddr_storage ss;
	const char *org = "{\"ceiling\": [\"pypi.org\"], \"allow\": [{\"cidr\": \"10.20.0.0/16\"}]}";
	const char *proj = "{\"allow\": [{\"cidr\": \"10.20.1.0/24\"}, {\"cidr\": \"203.0.113.0/24\"}]}";
	(void)state;

	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "org.json", org, strlen(org), &err), 0);
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_USER, "p.json", proj, strlen(proj), &err), 0);
	struct policy *p = policy_builder_compile(b, &err);
	assert_non_null(p);
	assert_int_equal(policy_parse_ip_literal("10.20.1.5", 9, &ss), 0);
	policy_decide_addr(p, (struct sockaddr *)&ss, 443, false, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_string_equal(policy_rule_where(d.rule), "org.json:1:37");
	assert_int_equal(policy_parse_ip_literal("203.0.113.5", 11, &ss), 0);
	policy_decide_addr(p, (struct sockaddr *)&ss, 443, false, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(d.why, POLICY_R_ADDR_CEILING);
	policy_unref(p);
	policy_builder_free(b);
}

/* Deeply nested long keys (the "sandbox" section is free-form) must not make the file unreadable:
 * positions are simply not recorded that deep. */
static void test_long_key_paths(void **state)
{
	char text[2048], key[200];
	struct policy_error err;
	(void)state;

	memset(key, 'k', sizeof key - 1);
	key[sizeof key - 1] = '\0';
	snprintf(text, sizeof text, "{\"sandbox\": {\"%s\": {\"%s\": {\"%s\": 1, \"x\": 2}}}, \"allow\": [\"pypi.org\"]}",
		 key, key, key);
	struct policy *p = load_json(POLICY_LAYER_PROJECT, text, &err);
	if (!p)
		fail_msg("%u:%u: %s", err.line, err.col, err.msg);
	policy_unref(p);
	/* errors around them still have their positions */
	snprintf(text, sizeof text, "{\"sandbox\": {\"%s\": {\"%s\": {\"%s\": 1}}},\n \"allow\": [\"*\"]}", key, key, key);
	expect_error(text, 2, 12, "every host");
}

/* Naming a preset again at the same layer adds nothing (its rules are already there): it must not
 * load the files again, nor count against the per-name rule bound. */
static void test_repeated_presets(void **state)
{
	char *text = malloc(100 * 16 + 64);
	size_t o = 0;
	struct policy_error err;
	struct policy_decision d;
	(void)state;

	assert_non_null(text);
	o += (size_t)sprintf(text + o, "{\"presets\": [\"registries\"");
	for (int i = 0; i < 100; i++)
		o += (size_t)sprintf(text + o, ", \"%s\"", i % 2 ? "npm" : "registries");
	sprintf(text + o, "]}");
	struct policy *p = load_json(POLICY_LAYER_PROJECT, text, &err);
	free(text);
	if (!p)
		fail_msg("%s:%u:%u: %s", err.file, err.line, err.col, err.msg);
	policy_decide(p, "registry.npmjs.org", 443, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	struct policy *one = load_json(POLICY_LAYER_PROJECT, "{\"presets\": [\"registries\"]}", &err);
	assert_non_null(one);
	assert_int_equal(policy_rule_count(p), policy_rule_count(one));
	policy_unref(one);
	policy_unref(p);
}

/* A rule from a file with a long path keeps its line:col, and its policy still travels to sluiced
 * (a serialised "where" longer than POLICY_WHERE_MAX is refused on reload). */
static void test_long_path_where(void **state)
{
	char dir[1024], path[1100], name[200];
	struct policy_error err = { 0 };
	struct policy_decision d;
	(void)state;

	memset(name, 'd', sizeof name - 1);
	name[sizeof name - 1] = '\0';
	snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", name);
	assert_int_equal(mkdir(dir, 0755), 0);
	for (int json = 0; json < 2; json++) {
		struct policy_builder *b = policy_builder_new();
		snprintf(path, sizeof path, "%s/%s", dir, json ? "p.json" : "p.list");
		FILE *f = fopen(path, "w");
		assert_non_null(f);
		fputs(json ? "{\"allow\": [\"pypi.org\"]}" : "pypi.org\n", f);
		fclose(f);
		assert_int_equal(policy_builder_add_file(b, POLICY_LAYER_PROJECT, path, &err), 0);
		struct policy *p = policy_builder_compile(b, &err);
		assert_non_null(p);
		policy_decide(p, "pypi.org", 443, 0, &d);
		const char *w = policy_rule_where(d.rule);
		assert_true(strlen(w) < POLICY_WHERE_MAX);
		const char *tail = json ? "/p.json:1:12" : "/p.list:1:1";
		assert_string_equal(w + strlen(w) - strlen(tail), tail);
		char *ser = policy_serialize(p);
		assert_non_null(ser);
		struct policy *q = load_json(POLICY_LAYER_USER, ser, &err);
		if (!q)
			fail_msg("reload: %s", err.msg);
		policy_unref(q);
		free(ser);
		policy_unref(p);
		policy_builder_free(b);
	}
}

/* UDP rules: what they may say, with file:line:col */
static void test_udp_parse_errors(void **state)
{
	(void)state;
	expect_error("{\"allow\": [{\"host\": \"a.example.org\", \"ports\": [7], \"protocol\": \"sctp\"}]}", 1, 64,
		     "unknown protocol \"sctp\"");
	expect_error("{\"allow\": [{\"host\": \"a.example.org\", \"ports\": [7], \"protocol\": [\"udp\", 17]}]}", 1,
		     72, "unknown protocol");
	expect_error("{\"allow\": [{\"host\": \"a.example.org\", \"ports\": [7], \"protocol\": []}]}", 1, 64,
		     "must be \"tcp\", \"udp\"");
	expect_error("{\"allow\": [{\"host\": \"a.example.org\", \"protocol\": \"udp\"}]}", 1, 12,
		     "must list its ports");
	expect_error("{\"allow\": [\n {\"host\": \"a.example.org\", \"ports\": [53], \"protocol\": \"udp\"}]}", 2, 2,
		     "UDP port 53 cannot be allowed");
	expect_error("{\"allow\": [\"a.example.org:53/udp\"]}", 1, 12, "UDP port 53 cannot be allowed");
	expect_error("{\"allow\": [\"a.example.org:443/udp\"]}", 1, 12, "QUIC");
	expect_error("{\"allow\": [\"a.example.org:7000-7100/udp\"]}", 1, 12, "single ports");
	expect_error("{\"allow\": [\"a.example.org:*/udp\"]}", 1, 12, "single ports");
	expect_error("{\"allow\": [\"a.example.org:7/quic\"]}", 1, 12, "unknown protocol \"quic\"");
	expect_error("{\"allow\": [\"a.example.org:7/udp/x\"]}", 1, 12, "has a path where a host name was expected");
	/* a path gets the host alone as its fix, a range the cidr form (not the other way round) */
	expect_error("{\"allow\": [\"github.com/org\"]}", 1, 12, "never a path; write \"github.com\"");
	expect_error("{\"allow\": [\"10.0.0.0/8\"]}", 1, 12, "write ranges as {\"cidr\": \"10.0.0.0/8\"}");
	expect_error("{\"allow\": [{\"host\": \"a.example.org\", \"ports\": [7], \"methods\": [\"GET\"], "
		     "\"protocol\": \"udp\"}]}", 1, 12, "cannot have \"methods\"");
	expect_error("{\"allow\": [{\"host\": \"a.example.org\", \"ports\": [\"7/udp\"]}]}", 1, 48, "bad port list");
	expect_error("{\"allow\": [\"2001:db8::/32\"]}", 1, 12, "IPv6 address");
}

/* The pattern forms and the object form mean the same; the text list and --allow take the pattern. */
static void test_udp_forms(void **state)
{
	struct policy_error err;
	struct policy_builder *b = policy_builder_new();
	struct policy *p;
	struct policy_decision d;
	const char *list = "a.example.org:7/udp\n! a.example.org:9/udp\n";
	(void)state;

	char path[256], want[400];

	assert_non_null(b);
	write_file("udp.txt", list, 0644);
	snprintf(path, sizeof path, "%s/udp.txt", tmpdir);
	assert_int_equal(policy_builder_add_file(b, POLICY_LAYER_USER, path, &err), 0);
	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_CLI, "b.example.org:5000,5001/udp", false, "--allow",
						    &err), 0);
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_USER, "u.json",
						 "{\"allow\": [{\"host\": \"c.example.org\", \"ports\": [7], \"protocol\": [\"tcp\", \"udp\"]},"
						 " \"d.example.org:7/tcp\"], \"deny\": [{\"host\": \"c.example.org\", \"protocol\": \"tcp\"}]}",
						 strlen("{\"allow\": [{\"host\": \"c.example.org\", \"ports\": [7], \"protocol\": [\"tcp\", \"udp\"]},"
							" \"d.example.org:7/tcp\"], \"deny\": [{\"host\": \"c.example.org\", \"protocol\": \"tcp\"}]}"),
						 &err), 0);
	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_CLI, "e.example.org:53/udp", false, "--allow", &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "UDP port 53"));
	p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_builder_free(b);

	policy_decide_proto(p, "a.example.org", POLICY_PROTO_UDP, 7, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	snprintf(want, sizeof want, "a.example.org:7/udp allowed by %s:1:1 (a.example.org, port 7, udp)", path);
	assert_string_equal(policy_decision_reason(&d), want);
	policy_decide_proto(p, "a.example.org", POLICY_PROTO_TCP, 7, 0, &d); /* a UDP rule allows no TCP */
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "a.example.org", 7, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(d.why, POLICY_R_NEAR_MISS);
	policy_decide_proto(p, "a.example.org", POLICY_PROTO_UDP, 9, 0, &d); /* "! host:9/udp" */
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(d.why, POLICY_R_DENY_RULE);
	policy_decide_proto(p, "b.example.org", POLICY_PROTO_UDP, 5001, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	/* "protocol": ["tcp", "udp"], and a TCP-only deny that leaves UDP alone */
	policy_decide_proto(p, "c.example.org", POLICY_PROTO_UDP, 7, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_decide_proto(p, "c.example.org", POLICY_PROTO_TCP, 7, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(d.why, POLICY_R_DENY_RULE);
	policy_decide(p, "c.example.org", 0, 0, &d); /* the name still resolves */
	assert_int_equal(d.verdict, POLICY_ALLOW);
	/* "/tcp" is the default said out loud */
	policy_decide(p, "d.example.org", 7, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	policy_decide_proto(p, "d.example.org", POLICY_PROTO_UDP, 7, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_unref(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_udp_parse_errors),
		cmocka_unit_test(test_udp_forms),
		cmocka_unit_test(test_comments_and_positions),
		cmocka_unit_test(test_text_list),
		cmocka_unit_test(test_layering),
		cmocka_unit_test(test_org_file_permissions),
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_serialize_roundtrip),
		cmocka_unit_test(test_project_cannot_open_forbidden_ranges),
		cmocka_unit_test(test_compiled_form_only_from_sluiced),
		cmocka_unit_test(test_error_messages_escape_control_bytes),
		cmocka_unit_test(test_duplicate_escaped_key),
		cmocka_unit_test(test_rules_per_name_bounded),
		cmocka_unit_test(test_org_cidr_allow_not_shadowed),
		cmocka_unit_test(test_long_key_paths),
		cmocka_unit_test(test_repeated_presets),
		cmocka_unit_test(test_long_path_where),
	};
	return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
