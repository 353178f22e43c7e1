/* Unit tests: policy parsing (errors with file:line:col), unsafe patterns, layering, presets,
 * plain-text lists, org file ownership and serialisation round trips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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
	const char *proj = "{\"allow\": [\"registry.npmjs.org\", \"evil.example.com\", \"bad.npmjs.org\","
			   " {\"cidr\": \"10.9.1.0/24\"}, {\"cidr\": \"10.8.0.0/16\"}], \"options\": {\"direct\": true}}";
	(void)state;

	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "org.json", org, strlen(org), &err), 0);
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

static void test_serialize_roundtrip(void **state)
{
	struct policy_error err;
	struct policy *p, *q;
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

	/* A serialised policy cannot smuggle organisation rules in from a lower layer. */
	const char *forged = "{\"sluice-compiled\": 1, \"rules\": [{\"host\": \"pypi.org\", \"where\": \"/etc/sluice/policy.json:1:1\","
			     " \"layer\": \"org\", \"kind\": \"ceiling\"}, {\"host\": \"evil.example\", \"where\": \"x:1:1\","
			     " \"layer\": \"org\", \"kind\": \"allow\"}]}";
	q = load_json(POLICY_LAYER_USER, forged, &err);
	assert_non_null(q);
	policy_decide(q, "evil.example", 443, 0, &d2);
	assert_int_equal(d2.verdict, POLICY_ALLOW);
	assert_int_equal(policy_rule_layer(d2.rule), POLICY_LAYER_USER); /* clamped */
	assert_int_equal(policy_rule_count(q), 1); /* the forged ceiling was dropped */
	policy_unref(q);
	policy_unref(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_comments_and_positions),
		cmocka_unit_test(test_text_list),
		cmocka_unit_test(test_layering),
		cmocka_unit_test(test_org_file_permissions),
		cmocka_unit_test(test_presets),
		cmocka_unit_test(test_serialize_roundtrip),
	};
	return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
