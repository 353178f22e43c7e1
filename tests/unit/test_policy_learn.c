/* Unit tests: learn mode's policy writer (policy/learn.c). What it writes is compared verbatim
 * (sorted, deduplicated, ports only when not 80/443, the smallest covering preset) and then loaded
 * as a policy: it allows exactly what was recorded and not what was not. Also the learn option
 * itself: only the command line turns it on, it survives serialisation, the organisation pins it
 * off, and it never lifts a deny rule, the ceiling or a forbidden address range. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

static char *render(struct policy_learn *l, const char *header, struct policy_learn_summary *sum)
{
	struct policy_error err;
	char buf[2048];
	char *t = policy_learn_render(l, NULL, header, sum, &err);
	if (!t)
		fail_msg("render: %s", policy_error_format(&err, buf, sizeof buf));
	return t;
}

static struct policy *load(const char *text)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err;
	struct policy *p = NULL;
	char buf[2048];

	assert_non_null(b);
	if (policy_builder_add_json(b, POLICY_LAYER_CLI, "learned.json", text, strlen(text), &err) < 0 ||
	    !(p = policy_builder_compile(b, &err)))
		fail_msg("the learned policy does not load: %s\n%s", policy_error_format(&err, buf, sizeof buf), text);
	policy_builder_free(b);
	return p;
}

static enum policy_verdict verdict(const struct policy *p, const char *host, uint16_t port)
{
	struct policy_decision d;
	policy_decide(p, host, port, 0, &d);
	return d.verdict;
}

static void test_exact_hosts_and_ports(void **state)
{
	(void)state;
	struct policy_learn *l = policy_learn_new();
	struct policy_learn_summary sum;

	assert_non_null(l);
	for (int i = 0; i < 500; i++) /* many records of one destination are one destination */
		assert_int_equal(policy_learn_add(l, "Allowed.TEST.", 80), 0);
	assert_int_equal(policy_learn_add(l, "registry.test", 443), 0);
	assert_int_equal(policy_learn_add(l, "registry.test", 80), 0);
	assert_int_equal(policy_learn_add(l, "other.test", 8080), 0);
	assert_int_equal(policy_learn_add(l, "other.test", 443), 0);
	assert_int_equal(policy_learn_add(l, "other.test", 0), 0);
	assert_int_equal(policy_learn_add(l, "dns-only.test", 0), 0);
	assert_int_equal(policy_learn_count(l), 7);
	char *t = render(l, NULL, &sum);
	assert_string_equal(t, "{\n"
	                       "  \"allow\": [\n"
	                       "    \"allowed.test\",\n"
	                       "    \"dns-only.test\",\n"
	                       "    \"other.test:443,8080\",\n"
	                       "    \"registry.test\"\n"
	                       "  ]\n"
	                       "}\n");
	assert_int_equal(sum.destinations, 7);
	assert_int_equal(sum.presets, 0);
	assert_int_equal(sum.hosts, 4);
	struct policy *p = load(t);
	assert_int_equal(verdict(p, "allowed.test", 80), POLICY_ALLOW);
	assert_int_equal(verdict(p, "registry.test", 443), POLICY_ALLOW);
	assert_int_equal(verdict(p, "other.test", 8080), POLICY_ALLOW);
	assert_int_equal(verdict(p, "other.test", 443), POLICY_ALLOW);
	assert_int_equal(verdict(p, "dns-only.test", 0), POLICY_ALLOW);
	/* minimal: not a port or a host the run did not reach, no wildcard */
	assert_int_equal(verdict(p, "other.test", 80), POLICY_DENY);
	assert_int_equal(verdict(p, "allowed.test", 8080), POLICY_DENY);
	assert_int_equal(verdict(p, "evil.test", 80), POLICY_DENY);
	assert_int_equal(verdict(p, "x.allowed.test", 80), POLICY_DENY);
	policy_unref(p);
	free(t);
	policy_learn_free(l);
}

static void test_presets_smallest_cover(void **state)
{
	(void)state;
	struct policy_learn *l = policy_learn_new();
	struct policy_learn_summary sum;

	assert_int_equal(policy_learn_add(l, "registry.npmjs.org", 443), 0);
	assert_int_equal(policy_learn_add(l, "files.pythonhosted.org", 443), 0);
	assert_int_equal(policy_learn_add(l, "registry.npmjs.org", 8443), 0); /* npm does not cover 8443 */
	assert_int_equal(policy_learn_add(l, "allowed.test", 80), 0);
	char *t = render(l, "learned by a test\nsecond line", &sum);
	/* npm and pypi, not their union `registries`; hosts a chosen preset covers are not repeated */
	assert_string_equal(t, "// learned by a test\n"
	                       "// second line\n"
	                       "{\n"
	                       "  \"presets\": [\"npm\", \"pypi\"],\n"
	                       "  \"allow\": [\n"
	                       "    \"allowed.test\",\n"
	                       "    \"registry.npmjs.org:8443\"\n"
	                       "  ]\n"
	                       "}\n");
	assert_int_equal(sum.presets, 2);
	assert_string_equal(sum.preset_names, "npm, pypi");
	assert_int_equal(sum.hosts, 2);
	struct policy *p = load(t);
	assert_int_equal(verdict(p, "registry.npmjs.org", 8443), POLICY_ALLOW);
	assert_int_equal(verdict(p, "pypi.org", 443), POLICY_ALLOW); /* the preset's, as named */
	assert_int_equal(verdict(p, "crates.io", 443), POLICY_DENY);
	policy_unref(p);
	free(t);
	policy_learn_free(l);
}

static void test_no_preset_unless_needed(void **state)
{
	(void)state;
	struct policy_learn *l = policy_learn_new();
	struct policy_learn_summary sum;

	/* a preset that covers nothing reached is never named, even when it names a similar host */
	assert_int_equal(policy_learn_add(l, "npmjs.org", 443), 0); /* *.npmjs.org does not cover the bare name */
	assert_int_equal(policy_learn_add(l, "github.com.evil.test", 443), 0);
	char *t = render(l, NULL, &sum);
	assert_null(strstr(t, "presets"));
	assert_non_null(strstr(t, "\"npmjs.org\""));
	assert_int_equal(sum.presets, 0);
	free(t);
	policy_learn_free(l);
}

static void test_addresses_and_empty(void **state)
{
	(void)state;
	struct policy_learn *l = policy_learn_new();
	struct policy_learn_summary sum;
	struct policy_decision d;

	char *t = render(l, NULL, &sum);
	assert_string_equal(t, "{\n  \"allow\": []\n}\n");
	struct policy *p = load(t);
	assert_int_equal(verdict(p, "allowed.test", 80), POLICY_DENY);
	policy_unref(p);
	free(t);

	assert_int_equal(policy_learn_add(l, "198.18.1.5", 80), 0);
	assert_int_equal(policy_learn_add(l, "[2001:db8:1::7]", 8080), 0);
	assert_int_equal(policy_learn_add(l, "bad host", 80), -EINVAL);
	assert_int_equal(policy_learn_add(l, "", 80), -EINVAL);
	t = render(l, "a command with\na newline {\"allow\": [\"*\"]}", &sum);
	assert_string_equal(t, "// a command with\n"
	                       "// a newline {\"allow\": [\"*\"]}\n"
	                       "{\n"
	                       "  \"allow\": [\n"
	                       "    {\"cidr\": \"198.18.1.5/32\"},\n"
	                       "    {\"cidr\": \"2001:db8:1::7/128\", \"ports\": [8080]}\n"
	                       "  ]\n"
	                       "}\n");
	p = load(t);
	struct sockaddr_in a4 = {.sin_family = AF_INET};
	inet_pton(AF_INET, "198.18.1.5", &a4.sin_addr);
	policy_decide_addr(p, (struct sockaddr *)&a4, 80, false, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	inet_pton(AF_INET, "198.18.1.6", &a4.sin_addr);
	policy_decide_addr(p, (struct sockaddr *)&a4, 80, false, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_unref(p);
	free(t);
	policy_learn_free(l);
}

/* Many records of many destinations, out of order and repeated: the table squeezes duplicates out
 * before it grows, and every destination comes out once. */
static void test_many(void **state)
{
	(void)state;
	struct policy_learn *l = policy_learn_new();
	struct policy_learn_summary sum;
	char host[64];
	enum { HOSTS = 3000 };

	for (int round = 0; round < 3; round++)
		for (int i = HOSTS - 1; i >= 0; i--) {
			snprintf(host, sizeof host, "h%04d.example", i);
			assert_int_equal(policy_learn_add(l, host, 443), 0);
			assert_int_equal(policy_learn_add(l, host, (uint16_t)(i % 2 ? 8443 : 80)), 0);
		}
	assert_int_equal(policy_learn_count(l), 2 * HOSTS);
	char *t = render(l, NULL, &sum);
	assert_int_equal(sum.hosts, HOSTS);
	assert_int_equal(sum.destinations, 2 * HOSTS);
	assert_non_null(strstr(t, "\"h0000.example\",\n    \"h0001.example:443,8443\",\n"));
	struct policy *p = load(t);
	assert_int_equal(verdict(p, "h2999.example", 8443), POLICY_ALLOW);
	assert_int_equal(verdict(p, "h2998.example", 8443), POLICY_DENY);
	policy_unref(p);
	free(t);
	policy_learn_free(l);
}

/* ---- the learn option ---- */

static struct policy *build(const char *org, const char *user, bool learn, struct policy_error *err)
{
	struct policy_builder *b = policy_builder_new();
	struct policy *p = NULL;
	struct policy_options o = {.learn = learn};

	if (org && policy_builder_add_json(b, POLICY_LAYER_ORG, "/etc/sluice/policy.json", org, strlen(org), err) < 0)
		goto out;
	if (user && policy_builder_add_json(b, POLICY_LAYER_USER, "user.json", user, strlen(user), err) < 0)
		goto out;
	policy_builder_set_options(b, &o);
	p = policy_builder_compile(b, err);
out:
	policy_builder_free(b);
	return p;
}

static void test_learn_option(void **state)
{
	(void)state;
	struct policy_error err;
	struct policy_decision d;
	struct policy *p, *q;
	char buf[2048];

	/* a file cannot turn learn mode on (a project's ships with untrusted code) */
	assert_null(build(NULL, "{\"options\": {\"learn\": true}}", false, &err));
	assert_non_null(strstr(err.msg, "sluice run --learn"));
	assert_int_equal(err.line, 1);

	/* the command line does: unmatched requests are allowed, and say so */
	p = build(NULL, "{\"allow\": [\"allowed.test\"], \"deny\": [\"evil.test\"]}", true, &err);
	assert_non_null(p);
	assert_true(policy_get_options(p)->learn);
	policy_decide(p, "other.test", 8080, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_int_equal(d.why, POLICY_R_LEARN);
	assert_string_equal(policy_decision_where(&d), POLICY_LEARN_RULE);
	assert_non_null(strstr(policy_decision_reason(&d), "learn mode"));
	policy_decide(p, "allowed.test", 80, 0, &d);
	assert_int_equal(d.why, POLICY_R_ALLOW_RULE); /* a rule still decides what it covers */
	assert_string_equal(policy_decision_where(&d), "user.json:1:12");
	policy_decide(p, "evil.test", 443, 0, &d); /* deny rules still deny */
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_decide(p, "evil.test", 0, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);

	/* forbidden ranges stay refused, named or literal; a public literal is learnt */
	struct sockaddr_in a4 = {.sin_family = AF_INET};
	inet_pton(AF_INET, "169.254.169.254", &a4.sin_addr);
	policy_decide_addr(p, (struct sockaddr *)&a4, 80, false, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(d.why, POLICY_R_ADDR_FORBIDDEN);
	policy_decide_addr(p, (struct sockaddr *)&a4, 80, true, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	inet_pton(AF_INET, "10.1.2.3", &a4.sin_addr);
	policy_decide_addr(p, (struct sockaddr *)&a4, 80, true, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	inet_pton(AF_INET, "198.18.1.5", &a4.sin_addr);
	policy_decide_addr(p, (struct sockaddr *)&a4, 80, false, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_int_equal(d.why, POLICY_R_LEARN);

	/* it survives the trip to sluiced (user layer under the org layer) and to the engine (org layer) */
	char *ser = policy_serialize(p);
	assert_non_null(ser);
	q = build(NULL, ser, false, &err);
	assert_non_null(q);
	assert_true(policy_get_options(q)->learn);
	policy_unref(q);
	struct policy_builder *b = policy_builder_new();
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "sluiced", ser, strlen(ser), &err), 0);
	q = policy_builder_compile(b, &err);
	assert_non_null(q);
	policy_decide(q, "other.test", 80, 0, &d);
	assert_int_equal(d.why, POLICY_R_LEARN);
	policy_decide(q, "evil.test", 80, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_unref(q);
	policy_builder_free(b);

	/* the organisation forbids it: asking for it is an error naming the org line, also when the
	 * request arrives serialised (sluiced compiling a client's policy) */
	const char *org_off = "{\n  \"options\": {\"learn\": false}\n}";
	assert_null(build(org_off, NULL, true, &err));
	assert_non_null(strstr(err.msg, "forbidden by the organisation"));
	assert_non_null(strstr(policy_error_format(&err, buf, sizeof buf), "/etc/sluice/policy.json:2:"));
	assert_null(build(org_off, ser, false, &err));
	assert_non_null(strstr(err.msg, "forbidden by the organisation"));
	/* without --learn, the pin changes nothing else */
	q = build(org_off, "{\"allow\": [\"allowed.test\"]}", false, &err);
	assert_non_null(q);
	assert_false(policy_get_options(q)->learn);
	policy_unref(q);
	free(ser);

	/* the organisation's ceiling and deny rules bound learn mode */
	q = build("{\"ceiling\": [\"*.corp.test\"], \"deny\": [\"bad.corp.test\"]}", NULL, true, &err);
	assert_non_null(q);
	policy_decide(q, "other.corp.test", 80, 0, &d);
	assert_int_equal(d.verdict, POLICY_ALLOW);
	assert_int_equal(d.why, POLICY_R_LEARN);
	policy_decide(q, "other.test", 80, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	assert_int_equal(d.why, POLICY_R_CEILING);
	policy_decide(q, "bad.corp.test", 80, 0, &d);
	assert_int_equal(d.verdict, POLICY_DENY);
	inet_pton(AF_INET, "198.18.1.5", &a4.sin_addr);
	policy_decide_addr(q, (struct sockaddr *)&a4, 80, false, &d); /* outside the (name-only) ceiling */
	assert_int_equal(d.verdict, POLICY_DENY);
	policy_unref(q);
	policy_unref(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_exact_hosts_and_ports),
	        cmocka_unit_test(test_presets_smallest_cover),
	        cmocka_unit_test(test_no_preset_unless_needed),
	        cmocka_unit_test(test_addresses_and_empty),
	        cmocka_unit_test(test_many),
	        cmocka_unit_test(test_learn_option),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
