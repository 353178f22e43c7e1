/* Unit tests of sluice-cni's parsing (cni/cni_conf.c) and result (cni/cni_result.c), per the CNI spec
 * 1.0.0: required fields, versions, the three policy forms, named policies, runtimeConfig and CNI_ARGS
 * narrowing (only names and deny rules), malformed input with the spec's error codes, the error object,
 * the result chained on a prevResult, CHECK's comparison, and the container id / interface name rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cni_conf.h"
#include "cni_key.h"
#include "cni_result.h"

static int parse(const char *s, struct cni_conf *c, struct cni_err *e)
{
	memset(e, 0, sizeof *e);
	return cni_conf_parse(s, strlen(s), c, e);
}

#define HEAD "\"cniVersion\": \"1.0.0\", \"name\": \"net\", \"type\": \"sluice-cni\""

static void test_conf_minimal(void **state)
{
	struct cni_conf c;
	struct cni_err e;

	(void)state;
	assert_int_equal(parse("{" HEAD ", \"policy\": \"registries\"}", &c, &e), 0);
	assert_string_equal(c.cni_version, "1.0.0");
	assert_string_equal(c.name, "net");
	assert_int_equal(c.policy.kind, CNI_POLICY_PRESET);
	assert_string_equal(c.policy.text, "registries");
	assert_true(c.transparent);
	assert_null(c.prev_result);
	assert_null(c.run_dir);
	cni_conf_clear(&c);

	assert_int_equal(parse("{" HEAD ", \"policy\": \"/etc/sluice/cni/web.json\", \"transparent\": false, "
			       "\"runDir\": \"/run/x\", \"ipam\": {}, \"capabilities\": {\"sluice\": true}}", &c, &e), 0);
	assert_int_equal(c.policy.kind, CNI_POLICY_FILE);
	assert_false(c.transparent);
	assert_string_equal(c.run_dir, "/run/x");
	cni_conf_clear(&c);

	assert_int_equal(parse("{" HEAD ", \"policy\": {\"allow\": [\"a.example\"]}}", &c, &e), 0);
	assert_int_equal(c.policy.kind, CNI_POLICY_INLINE);
	assert_non_null(strstr(c.policy.text, "\"allow\""));
	assert_non_null(strstr(c.policy.text, "a.example"));
	cni_conf_clear(&c);
}

static void expect_code(const char *json, enum cni_code code, const char *needle)
{
	struct cni_conf c;
	struct cni_err e;

	assert_int_equal(parse(json, &c, &e), -1);
	if (e.code != code)
		fail_msg("%s: code %d (%s), wanted %d", json, e.code, e.msg, code);
	if (needle && !strstr(e.msg, needle))
		fail_msg("%s: message \"%s\" lacks \"%s\"", json, e.msg, needle);
	cni_conf_clear(&c);
}

static void test_conf_errors(void **state)
{
	struct cni_conf c;
	struct cni_err e;

	(void)state;
	expect_code("", CNI_E_DECODE, "no network configuration");
	expect_code("{", CNI_E_DECODE, "unexpected end");
	expect_code("[1]", CNI_E_DECODE, "object");
	expect_code("{" HEAD "} {}", CNI_E_DECODE, NULL); /* trailing bytes */
	/* trailing whitespace is fine */
	assert_int_equal(parse("{" HEAD "}\n\t ", &c, &e), 0);
	cni_conf_clear(&c);
	expect_code("{\"cniVersion\": \"0.4.0\", \"name\": \"n\", \"type\": \"t\"}", CNI_E_VERSION, "0.4.0");
	expect_code("{\"name\": \"n\", \"type\": \"t\"}", CNI_E_CONFIG, "cniVersion");
	expect_code("{\"cniVersion\": \"1.0.0\", \"type\": \"t\"}", CNI_E_CONFIG, "\"name\"");
	expect_code("{\"cniVersion\": \"1.0.0\", \"name\": 5, \"type\": \"t\"}", CNI_E_CONFIG, "string");
	expect_code("{\"cniVersion\": \"1.0.0\", \"name\": \"a\\u0000b\", \"type\": \"t\"}", CNI_E_CONFIG, "printable");
	expect_code("{\"cniVersion\": \"1.0.0\", \"name\": \"a\\nb\", \"type\": \"t\"}", CNI_E_CONFIG, "printable");
	expect_code("{" HEAD ", \"runDir\": \"relative\"}", CNI_E_CONFIG, "absolute");
	expect_code("{" HEAD ", \"transparent\": \"yes\"}", CNI_E_CONFIG, "true or false");
	expect_code("{" HEAD ", \"policy\": \"Not A Preset\"}", CNI_E_CONFIG, "neither a preset");
	expect_code("{" HEAD ", \"policy\": 42}", CNI_E_CONFIG, "preset name");
	expect_code("{" HEAD ", \"policies\": []}", CNI_E_CONFIG, "map names");
	expect_code("{" HEAD ", \"policies\": {\"Bad Name\": \"npm\"}}", CNI_E_CONFIG, "[a-z0-9_-]");
	expect_code("{" HEAD ", \"policies\": {\"x\": 1}}", CNI_E_CONFIG, "policies\".x");
	expect_code("{" HEAD ", \"prevResult\": []}", CNI_E_CONFIG, "prevResult");
	expect_code("{" HEAD ", \"namespaces\": {\"ci\": \"build\"}}", CNI_E_CONFIG, "namespaces\".ci");
	expect_code("{" HEAD ", \"policies\": {\"build\": \"npm\"}, \"namespaces\": {\"ci\": 1}}", CNI_E_CONFIG, "must name");
	expect_code("{" HEAD ", \"namespaces\": []}", CNI_E_CONFIG, "map pod namespaces");
	expect_code("{" HEAD ", \"runtimeConfig\": {\"sluice\": {\"allow\": [\"x\"]}}}", CNI_E_FIELD, "unknown field");
	expect_code("{" HEAD ", \"runtimeConfig\": {\"sluice\": {\"policy\": \"nosuch\"}}}", CNI_E_CONFIG, "not one of");
	expect_code("{" HEAD ", \"runtimeConfig\": {\"sluice\": {\"deny\": \"x\"}}}", CNI_E_CONFIG, "array");
	expect_code("{" HEAD ", \"runtimeConfig\": {\"sluice\": {\"deny\": [\"a b\"]}}}", CNI_E_CONFIG, "deny[0]");
	/* nesting beyond the depth bound is a decode error, not a crash */
	{
		char deep[4096];
		size_t n = 0;

		n += (size_t)snprintf(deep + n, sizeof deep - n, "{" HEAD ", \"x\": ");
		for (int i = 0; i < 200; i++)
			deep[n++] = '[';
		for (int i = 0; i < 200; i++)
			deep[n++] = ']';
		deep[n++] = '}';
		deep[n] = '\0';
		expect_code(deep, CNI_E_DECODE, NULL);
	}
	/* a NUL inside the bytes */
	assert_int_equal(cni_conf_parse("{}\0{}", 5, &c, &e), -1);
	assert_int_equal(e.code, CNI_E_DECODE);
	cni_conf_clear(&c);
}

static void test_conf_runtime(void **state)
{
	struct cni_conf c;
	struct cni_err e;

	(void)state;
	assert_int_equal(parse("{" HEAD ", \"policy\": \"npm\", \"policies\": {\"web\": {\"allow\": [\"a.example\"]}},"
			       " \"runtimeConfig\": {\"sluice\": {\"policy\": \"web\", \"deny\": [\"b.example\", \"*.c.example:22\"]}},"
			       " \"prevResult\": {\"interfaces\": []}}", &c, &e), 0);
	assert_string_equal(c.rt_policy, "web");
	assert_int_equal(c.rt_ndeny, 2);
	assert_string_equal(c.rt_deny[1], "*.c.example:22");
	assert_non_null(c.prev_result);
	assert_non_null(c.policies);
	cni_conf_clear(&c);
	assert_int_equal(parse("{" HEAD ", \"policies\": {\"build\": \"npm\"}, \"namespaces\": {\"ci\": \"build\"}}", &c, &e), 0);
	assert_non_null(c.namespaces);
	cni_conf_clear(&c);
}

static void test_args(void **state)
{
	struct cni_args a;
	struct cni_err e;

	(void)state;
	assert_int_equal(cni_args_parse(NULL, &a, &e), 0);
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1;"
					"K8S_POD_INFRA_CONTAINER_ID=abc;SLUICE_POLICY=web;SLUICE_DENY=a.example,b.example:22",
					&a, &e), 0);
	assert_string_equal(a.pod_namespace, "shop");
	assert_string_equal(a.pod_name, "web-1");
	assert_string_equal(a.policy, "web");
	assert_int_equal(a.ndeny, 2);
	assert_string_equal(a.deny[1], "b.example:22");
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse(";;K8S_POD_NAME=x;", &a, &e), 0);
	assert_string_equal(a.pod_name, "x");
	cni_args_clear(&a);

	assert_int_equal(cni_args_parse("novalue", &a, &e), -1);
	assert_int_equal(e.code, CNI_E_ENV);
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("=x", &a, &e), -1);
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("K8S_POD_NAME=Web_1", &a, &e), 0); /* a Podman container name */
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("K8S_POD_NAME=web/1", &a, &e), -1);
	assert_non_null(strstr(e.msg, "Kubernetes name"));
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("K8S_POD_NAME=a\nb", &a, &e), -1);
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("K8S_POD_NAMESPACE=-x", &a, &e), -1);
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("SLUICE_DENY=a.example,,b", &a, &e), -1);
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("SLUICE_DENY=a\"b", &a, &e), -1);
	cni_args_clear(&a);
	assert_int_equal(cni_args_parse("SLUICE_POLICY=", &a, &e), -1);
	cni_args_clear(&a);
	{
		char many[8192] = "SLUICE_DENY=";

		for (int i = 0; i <= CNI_DENY_MAX; i++)
			snprintf(many + strlen(many), sizeof many - strlen(many), "%sh%d.example", i ? "," : "", i);
		assert_int_equal(cni_args_parse(many, &a, &e), -1);
		assert_non_null(strstr(e.msg, "at most"));
		cni_args_clear(&a);
	}
}

/* The policy a container gets: its namespace's when "namespaces" lists it (a pick of another name is
 * refused: the pick is the pod's, the mapping the administrator's), else its pick, else "policy". */
static void test_pick(void **state)
{
	struct cni_conf c;
	struct cni_args a;
	struct cni_err e;
	struct cni_policy_src src;

	(void)state;
	assert_int_equal(parse("{" HEAD ", \"policy\": \"registries\", \"policies\": {\"build\": \"npm\", \"docs\": "
			       "{\"allow\": [\"docs.example\"]}}, \"namespaces\": {\"agents\": \"docs\"}}", &c, &e), 0);
	/* no namespace, no pick: the network's policy */
	assert_int_equal(cni_args_parse("", &a, &e), 0);
	assert_int_equal(cni_pick_policy(&c, &a, &src, &e), 0);
	assert_int_equal(src.kind, CNI_POLICY_PRESET);
	assert_string_equal(src.text, "registries");
	free(src.text);
	cni_args_clear(&a);
	/* an unlisted namespace may pick a named policy */
	assert_int_equal(cni_args_parse("K8S_POD_NAMESPACE=ci;SLUICE_POLICY=build", &a, &e), 0);
	assert_int_equal(cni_pick_policy(&c, &a, &src, &e), 0);
	assert_string_equal(src.text, "npm");
	free(src.text);
	cni_args_clear(&a);
	/* a listed namespace gets its policy */
	assert_int_equal(cni_args_parse("K8S_POD_NAMESPACE=agents", &a, &e), 0);
	assert_int_equal(cni_pick_policy(&c, &a, &src, &e), 0);
	assert_int_equal(src.kind, CNI_POLICY_INLINE);
	assert_non_null(strstr(src.text, "docs.example"));
	free(src.text);
	cni_args_clear(&a);
	/* ... and may name it itself */
	assert_int_equal(cni_args_parse("K8S_POD_NAMESPACE=agents;SLUICE_POLICY=docs", &a, &e), 0);
	assert_int_equal(cni_pick_policy(&c, &a, &src, &e), 0);
	assert_non_null(strstr(src.text, "docs.example"));
	free(src.text);
	cni_args_clear(&a);
	/* ... but not pick a wider one, through CNI_ARGS or runtimeConfig */
	assert_int_equal(cni_args_parse("K8S_POD_NAMESPACE=agents;SLUICE_POLICY=build", &a, &e), 0);
	src.text = NULL;
	assert_int_equal(cni_pick_policy(&c, &a, &src, &e), -1);
	assert_int_equal(e.code, CNI_E_CONFIG);
	assert_non_null(strstr(e.msg, "held to policy \"docs\""));
	assert_null(src.text);
	cni_args_clear(&a);
	/* a pick of an unknown name is refused */
	assert_int_equal(cni_args_parse("K8S_POD_NAMESPACE=ci;SLUICE_POLICY=nope", &a, &e), 0);
	assert_int_equal(cni_pick_policy(&c, &a, &src, &e), -1);
	assert_non_null(strstr(e.msg, "no policy named \"nope\""));
	cni_args_clear(&a);
	cni_conf_clear(&c);
	assert_int_equal(parse("{" HEAD ", \"policy\": \"registries\", \"policies\": {\"build\": \"npm\", \"docs\": "
			       "\"pypi\"}, \"namespaces\": {\"agents\": \"docs\"}, \"runtimeConfig\": {\"sluice\": "
			       "{\"policy\": \"build\"}}}", &c, &e), 0);
	assert_int_equal(cni_args_parse("K8S_POD_NAMESPACE=agents", &a, &e), 0);
	assert_int_equal(cni_pick_policy(&c, &a, &src, &e), -1);
	assert_non_null(strstr(e.msg, "cannot pick \"build\""));
	cni_args_clear(&a);
	cni_conf_clear(&c);
}

static void test_key(void **state)
{
	char longid[300];

	(void)state;
	assert_true(netd_cni_id_valid("abc"));
	assert_true(netd_cni_id_valid("0f1e.2_d-3"));
	assert_false(netd_cni_id_valid(""));
	assert_false(netd_cni_id_valid("-abc"));
	assert_false(netd_cni_id_valid("_abc"));
	assert_false(netd_cni_id_valid("a/b"));
	assert_false(netd_cni_id_valid("a b"));
	assert_false(netd_cni_id_valid(NULL));
	memset(longid, 'a', 257);
	longid[257] = '\0';
	assert_false(netd_cni_id_valid(longid));
	longid[256] = '\0';
	assert_true(netd_cni_id_valid(longid));
	assert_true(netd_cni_ifname_valid("eth0"));
	assert_true(netd_cni_ifname_valid("net1"));
	assert_false(netd_cni_ifname_valid(""));
	assert_false(netd_cni_ifname_valid("."));
	assert_false(netd_cni_ifname_valid(".."));
	assert_false(netd_cni_ifname_valid("a/b"));
	assert_false(netd_cni_ifname_valid("a:b"));
	assert_false(netd_cni_ifname_valid("a b"));
	assert_false(netd_cni_ifname_valid("0123456789abcdef"));
	assert_true(netd_cni_key_valid("ctr1/eth0"));
	assert_false(netd_cni_key_valid("ctr1"));
	assert_false(netd_cni_key_valid("ctr1/"));
	assert_false(netd_cni_key_valid("/eth0"));
	assert_false(netd_cni_key_valid("c/t/eth0"));
}

static void test_err_json(void **state)
{
	struct cni_err e;
	struct json_object *o, *v;
	char *s;

	(void)state;
	cni_fail(&e, CNI_E_CONFIG, "bad \"thing\"\n");
	s = cni_err_json("1.0.0", &e);
	o = json_tokener_parse(s);
	assert_non_null(o);
	assert_true(json_object_object_get_ex(o, "code", &v));
	assert_int_equal(json_object_get_int(v), 7);
	assert_true(json_object_object_get_ex(o, "msg", &v));
	assert_string_equal(json_object_get_string(v), "bad \"thing\"\n");
	assert_true(json_object_object_get_ex(o, "cniVersion", &v));
	json_object_put(o);
	free(s);
}

static void test_result(void **state)
{
	struct netd_session_reply r = {.id = "0123456789", .addr4 = "10.77.0.5", .gw4 = "10.77.0.1",
				       .addr6 = "fd5c::5", .gw6 = "fd5c::1"};
	struct json_object *prev = json_tokener_parse(
		"{\"cniVersion\": \"1.0.0\", \"interfaces\": [{\"name\": \"lo\", \"sandbox\": \"/run/netns/x\"}],"
		" \"ips\": [{\"address\": \"127.0.0.1/8\", \"interface\": 0}], \"dns\": {\"nameservers\": [\"9.9.9.9\"]}}");
	struct json_object *res, *ips, *ifs, *o, *v;
	struct cni_err e;

	(void)state;
	res = cni_result_build("1.0.0", prev, &r, "eth0", "/run/netns/x", "02:00:00:00:00:01", "", &e);
	assert_non_null(res);
	assert_true(json_object_object_get_ex(res, "interfaces", &ifs));
	assert_int_equal(json_object_array_length(ifs), 3); /* prev's lo, sl-ID, eth0 */
	o = json_object_array_get_idx(ifs, 1);
	assert_true(json_object_object_get_ex(o, "name", &v));
	assert_string_equal(json_object_get_string(v), "sl-0123456789");
	assert_true(json_object_object_get_ex(o, "mac", &v));
	assert_string_equal(json_object_get_string(v), "02:00:00:00:00:01");
	/* an unknown MAC is left out, not sent empty (runtimes parse it) */
	assert_false(json_object_object_get_ex(json_object_array_get_idx(ifs, 2), "mac", NULL));
	assert_true(json_object_object_get_ex(res, "ips", &ips));
	assert_int_equal(json_object_array_length(ips), 3);
	o = json_object_array_get_idx(ips, 1);
	assert_true(json_object_object_get_ex(o, "address", &v));
	assert_string_equal(json_object_get_string(v), "10.77.0.5/32");
	assert_true(json_object_object_get_ex(o, "interface", &v));
	assert_int_equal(json_object_get_int(v), 2);
	/* the only resolver is the gateway's DNS proxy: prev's nameserver is not kept */
	assert_true(json_object_object_get_ex(res, "dns", &o));
	assert_non_null(strstr(json_object_to_json_string(o), "10.77.0.1"));
	assert_null(strstr(json_object_to_json_string(o), "9.9.9.9"));
	/* prev is not modified */
	assert_true(json_object_object_get_ex(prev, "ips", &v));
	assert_int_equal(json_object_array_length(v), 1);

	/* CHECK against that result: passes; fails for another namespace, interface or address */
	assert_int_equal(cni_result_check(res, &r, "eth0", "/run/netns/x", &e), 0);
	assert_int_equal(cni_result_check(res, &r, "eth0", "/run/netns/y", &e), -1);
	assert_int_equal(e.code, CNI_E_CHECK);
	assert_int_equal(cni_result_check(res, &r, "eth1", "/run/netns/x", &e), -1);
	strcpy(r.addr4, "10.77.0.6");
	assert_int_equal(cni_result_check(res, &r, "eth0", "/run/netns/x", &e), -1);
	assert_non_null(strstr(e.msg, "10.77.0.6/32"));
	json_object_put(res);
	json_object_put(prev);

	/* a prevResult whose lists are not arrays is refused */
	prev = json_tokener_parse("{\"ips\": {}}");
	assert_null(cni_result_build("1.0.0", prev, &r, "eth0", "/run/netns/x", "02:00:00:00:00:01", "", &e));
	assert_int_equal(e.code, CNI_E_DECODE);
	json_object_put(prev);
	/* no prevResult, no IPv6 */
	r.addr6[0] = '\0';
	res = cni_result_build("1.0.0", NULL, &r, "eth0", "/run/netns/x", "02:00:00:00:00:01", "", &e);
	assert_true(json_object_object_get_ex(res, "routes", &v));
	assert_int_equal(json_object_array_length(v), 1);
	json_object_put(res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conf_minimal), cmocka_unit_test(test_conf_errors), cmocka_unit_test(test_conf_runtime),
		cmocka_unit_test(test_args),         cmocka_unit_test(test_key),         cmocka_unit_test(test_err_json),
		cmocka_unit_test(test_result),         cmocka_unit_test(test_pick),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
