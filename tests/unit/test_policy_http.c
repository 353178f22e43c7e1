/* Unit tests: HTTPS inspection in the policy (policy/http_rules.c, http_load.c): the path normaliser, the glob
 * against a naive reference over a small alphabet, HTTP rule decisions (deny wins, layers narrow,
 * query parameters, escapes), load errors with file:line:col, credentials and the serialised form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

static void norm_is(const char *in, const char *want)
{
	char out[POLICY_PATH_MAX];
	size_t q;
	enum policy_path_err e = policy_path_normalize(in, strlen(in), false, out, sizeof out, &q);
	if (e != POLICY_PATH_OK || strcmp(out, want) != 0)
		fail_msg("normalize(%s) = %s (%s), want %s", in, out, policy_path_strerror(e), want);
}

static void test_normalize(void **state)
{
	char out[POLICY_PATH_MAX];
	size_t q;

	(void)state;
	norm_is("/", "/");
	norm_is("/a/b", "/a/b");
	norm_is("/a//b///c", "/a/b/c");
	norm_is("/a/./b/../c", "/a/c");
	norm_is("/a/b/..", "/a/");
	norm_is("/../../x", "/x");
	norm_is("/a/%2e%2E/b", "/b");         /* encoded dots are dots */
	norm_is("/%7euser/%41b", "/~user/Ab"); /* unreserved decoded */
	norm_is("/a%2fb", "/a%2Fb");           /* a slash stays escaped (upper-cased) */
	norm_is("/a/b/?x=1", "/a/b/");
	norm_is("HTTPS://Git.Test:443/a/../b?q", "/b");
	norm_is("http://h", "/");
	norm_is("*", "*");
	assert_int_equal(policy_path_normalize("/a?b=c", 6, false, out, sizeof out, &q), POLICY_PATH_OK);
	assert_int_equal(q, 3);
	assert_int_equal(policy_path_normalize("/a%zz", 5, false, out, sizeof out, &q), POLICY_PATH_BAD_ESCAPE);
	assert_int_equal(policy_path_normalize("/a%2", 4, false, out, sizeof out, &q), POLICY_PATH_BAD_ESCAPE);
	assert_int_equal(policy_path_normalize("/a%00", 5, true, out, sizeof out, &q), POLICY_PATH_BAD_ESCAPE);
	assert_int_equal(policy_path_normalize("/a b", 4, false, out, sizeof out, &q), POLICY_PATH_BAD_CHAR);
	assert_int_equal(policy_path_normalize("/a\\b", 4, false, out, sizeof out, &q), POLICY_PATH_BAD_CHAR);
	assert_int_equal(policy_path_normalize("/a#f", 4, false, out, sizeof out, &q), POLICY_PATH_BAD_CHAR);
	assert_int_equal(policy_path_normalize("a/b", 3, false, out, sizeof out, &q), POLICY_PATH_NOT_ORIGIN);
	assert_int_equal(policy_path_normalize("", 0, false, out, sizeof out, &q), POLICY_PATH_EMPTY);
	/* the lenient form decodes everything and reads '\' as '/' */
	assert_int_equal(policy_path_normalize("/a%2F..%2Fadmin", 15, true, out, sizeof out, &q), POLICY_PATH_OK);
	assert_string_equal(out, "/admin");
	assert_int_equal(policy_path_normalize("/a\\..\\b", 7, true, out, sizeof out, &q), POLICY_PATH_OK);
	assert_string_equal(out, "/b");
}

static bool ref_glob(const char *p, const char *s)
{
	if (!*p)
		return !*s;
	if (p[0] == '*' && p[1] == '*') {
		while (*p == '*')
			p++;
		for (const char *t = s;; t++) {
			if (ref_glob(p, t))
				return true;
			if (!*t)
				return false;
		}
	}
	if (*p == '*') {
		for (const char *t = s;; t++) {
			if (ref_glob(p + 1, t))
				return true;
			if (!*t || *t == '/')
				return false;
		}
	}
	return *s == *p && ref_glob(p + 1, s + 1);
}

static void test_glob_differential(void **state)
{
	static const char alpha[] = "ab/*";
	uint64_t x = 0x2545F4914F6CDD1Dull;
	char pat[9], path[11];

	(void)state;
	assert_true(policy_path_glob("/*/info/refs", "/repo/info/refs"));
	assert_false(policy_path_glob("/*/info/refs", "/org/repo/info/refs"));
	assert_true(policy_path_glob("/**/info/refs", "/org/repo/info/refs"));
	assert_true(policy_path_glob("/myorg/**", "/myorg/a/b"));
	assert_false(policy_path_glob("/myorg/**", "/myorgx/a"));
	for (int iter = 0; iter < 200000; iter++) {
		size_t pl = 0, sl = 0;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t np = 1 + x % 8, ns = x / 8 % 11;
		for (size_t i = 0; i < np; i++)
			pat[pl++] = alpha[(x >> (i * 2 + 10)) % 4];
		for (size_t i = 0; i < ns; i++)
			path[sl++] = alpha[(x >> (i * 2 + 30)) % 3];
		pat[pl] = path[sl] = '\0';
		if (policy_path_glob(pat, path) != ref_glob(pat, path))
			fail_msg("glob(%s, %s) differs from the reference", pat, path);
	}
}

static struct policy *load(const char *user, const char *cli, struct policy_error *err)
{
	struct policy_builder *b = policy_builder_new();
	struct policy *p = NULL;

	assert_non_null(b);
	if (user && policy_builder_add_json(b, POLICY_LAYER_USER, "user.json", user, strlen(user), err) < 0)
		goto out;
	if (cli && policy_builder_add_json(b, POLICY_LAYER_CLI, "cli.json", cli, strlen(cli), err) < 0)
		goto out;
	p = policy_builder_compile(b, err);
out:
	policy_builder_free(b);
	return p;
}

static enum policy_verdict req(const struct policy *p, const char *host, const char *method, const char *target,
			       char *where, size_t wlen)
{
	struct policy_http_decision *d = malloc(sizeof *d);
	assert_non_null(d);
	policy_decide_http(p, host, method, strlen(method), target, strlen(target), d);
	if (where)
		snprintf(where, wlen, "%s", d->where);
	enum policy_verdict v = d->verdict;
	free(d);
	return v;
}

static const char git_policy[] =
	"{\"allow\": [\"git.test\", \"*.api.test\"],\n"
	" \"inspect\": [\n"
	"  {\"host\": \"git.test\",\n"
	"   \"deny\": [{\"path\": \"/**/info/refs\", \"query\": \"service=git-receive-pack\"},\n"
	"            \"POST /**/git-receive-pack\", {\"prefix\": \"/admin\"}]},\n"
	"  {\"host\": \"*.api.test\", \"allow\": [\"GET,HEAD /myorg/**\", {\"methods\": [\"POST\"], \"prefix\": \"/upload/\"}]}\n"
	" ]}";

static void test_decide(void **state)
{
	struct policy_error err;
	char where[POLICY_WHERE_MAX];
	struct policy *p = load(git_policy, NULL, &err);

	(void)state;
	assert_non_null(p);
	assert_true(policy_inspects_any(p));
	assert_true(policy_inspects(p, "git.test"));
	assert_true(policy_inspects(p, "x.api.test"));
	assert_false(policy_inspects(p, "api.test"));
	assert_false(policy_inspects(p, "other.test"));
	/* clone and fetch */
	assert_int_equal(req(p, "git.test", "GET", "/o/r.git/info/refs?service=git-upload-pack", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "git.test", "POST", "/o/r.git/git-upload-pack", NULL, 0), POLICY_ALLOW);
	/* push, in every spelling */
	assert_int_equal(req(p, "git.test", "GET", "/o/r.git/info/refs?service=git-receive-pack", where, sizeof where), POLICY_DENY);
	assert_string_equal(where, "user.json:4:13");
	assert_int_equal(req(p, "git.test", "GET", "/o/r.git/info/refs?a=b&service=git%2dreceive-pack", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/o/r.git/info/./refs?service=git-receive-pack", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "POST", "/o/r.git/git-receive-pack", where, sizeof where), POLICY_DENY);
	assert_string_equal(where, "user.json:5:13");
	assert_int_equal(req(p, "git.test", "POST", "/o//r.git/x/../git-receive-%70ack", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "post", "/o/r.git/git-receive-pack", NULL, 0), POLICY_ALLOW); /* methods are case-sensitive: "post" is another method */
	/* an escaped slash is tried decoded too */
	assert_int_equal(req(p, "git.test", "GET", "/x%2F..%2Fadmin/users", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/admin", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/administrator", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "git.test", "GET", "/a%zz", NULL, 0), POLICY_DENY);
	/* allow lists: only what they name */
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/repo", where, sizeof where), POLICY_ALLOW);
	assert_string_equal(where, "user.json:6:36");
	assert_int_equal(req(p, "x.api.test", "POST", "/myorg/repo", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "GET", "/other/repo", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/../other", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "POST", "/upload/a", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "x.api.test", "POST", "/uploadx", NULL, 0), POLICY_DENY);
	policy_unref(p);
}

/* The sixth review: paths that an origin reads otherwise than the normaliser. A dot segment behind an
 * escaped slash or a ';' parameter, a ';' parameter, and letter case got past rules on the old code (an
 * allow prefix vouched for "/myorg/..%2F..%2Fother" and "/myorg/..;/other", which nginx and Tomcat read as
 * "/other"; a deny prefix "/admin" let "/admin;x", "/pub/..;/admin" and "/Admin" through). */
static void test_path_confusion(void **state)
{
	struct policy_error err;
	char where[POLICY_WHERE_MAX];
	struct policy *p = load(git_policy, NULL, &err);

	(void)state;
	assert_non_null(p);
	/* the allow list of *.api.test: GET under /myorg, POST under /upload */
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/..%2F..%2Fother/x", where, sizeof where), POLICY_DENY);
	assert_string_equal(where, "user.json:6:3");
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/..%2f..%2fother/x", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/..%5C..%5Cother", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/..;/other", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/.;x/r", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "POST", "/upload/%2e%2e%3b/x", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "x.api.test", "POST", "/upload/..%3B/x", NULL, 0), POLICY_DENY);
	/* what clients do send still passes: escaped slashes and parameters without dot segments */
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/%40scope%2Fname", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/r;v=1/x", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/a/../r", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "x.api.test", "GET", "/myorg/..data/r", NULL, 0), POLICY_ALLOW);
	/* git.test denies prefix /admin and POST of git-receive-pack anywhere */
	assert_int_equal(req(p, "git.test", "GET", "/admin;x=1/users", where, sizeof where), POLICY_DENY);
	assert_string_equal(where, "user.json:5:42");
	assert_int_equal(req(p, "git.test", "GET", "/admin;", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/pub/..;/admin", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/Admin", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/ADMIN/x", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/%41dmin", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "POST", "/o/r.git/GIT-Receive-Pack", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "POST", "/o/r.git/git-receive-pack;x", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "git.test", "GET", "/administrator", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "git.test", "GET", "/o/r.git/info/refs?service=git-upload-pack", NULL, 0), POLICY_ALLOW);
	policy_unref(p);
}

static void test_layers_narrow(void **state)
{
	struct policy_error err;
	/* the user allows /myorg; the command line allows all GETs: both must allow */
	struct policy *p = load(
		"{\"allow\": [\"a.test\"], \"inspect\": [{\"host\": \"a.test\", \"allow\": [\"/myorg/**\"]}]}",
		"{\"inspect\": [{\"host\": \"a.test\", \"allow\": [\"GET /**\"], \"deny\": [\"GET /myorg/secret\"]}]}", &err);

	(void)state;
	assert_non_null(p);
	assert_int_equal(req(p, "a.test", "GET", "/myorg/x", NULL, 0), POLICY_ALLOW);
	assert_int_equal(req(p, "a.test", "POST", "/myorg/x", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "a.test", "GET", "/other", NULL, 0), POLICY_DENY);
	assert_int_equal(req(p, "a.test", "GET", "/myorg/secret", NULL, 0), POLICY_DENY);
	policy_unref(p);
}

static void load_fails(enum policy_layer layer, const char *json, const char *want)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err;
	char msg[2048];

	assert_non_null(b);
	assert_true(policy_builder_add_json(b, layer, "p.json", json, strlen(json), &err) < 0);
	policy_error_format(&err, msg, sizeof msg);
	if (!strstr(msg, want))
		fail_msg("error \"%s\" does not say \"%s\"", msg, want);
	policy_builder_free(b);
}

static void test_load_errors(void **state)
{
	(void)state;
	load_fails(POLICY_LAYER_USER, "{\"inspect\": {}}", "p.json:1:13: \"inspect\" must be a list");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"a.test\",\n \"deny\": [\"POST a\"]}]}", "p.json:2:11: a path pattern starts with '/'");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"a.test\", \"deny\": [\"FETCH /a\"]}]}", "unknown method \"FETCH\"");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"a.test\", \"deny\": [\"/a?x=1\"]}]}", "has no query");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"a.test\", \"deny\": [\"/a%zz\"]}]}", "bad percent escape");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"a.test\", \"deny\": [{\"path\": \"/a\", \"prefix\": \"/b\"}]}]}", "exactly one of");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"a.test:443\"}]}", "takes a name only");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"*.com\"}]}", "top-level domain");
	load_fails(POLICY_LAYER_USER, "{\"inspect\": [{\"host\": \"a.test\", \"bogus\": 1}]}", "p.json:1:33: unknown key \"bogus\"");
	load_fails(POLICY_LAYER_PROJECT,
		   "{\"inspect\": [{\"host\": \"a.test\", \"credential\": {\"header\": \"X: {secret}\", \"secret_env\": \"HOME\"}}]}",
		   "a project policy cannot name a credential");
	load_fails(POLICY_LAYER_USER,
		   "{\"inspect\": [{\"host\": \"a.test\", \"credential\": {\"header\": \"X: none\", \"secret_env\": \"HOME\"}}]}",
		   "{secret} once");
	load_fails(POLICY_LAYER_USER,
		   "{\"inspect\": [{\"host\": \"a.test\", \"credential\": {\"header\": \"X: {secret}\", \"secret_env\": \"SLUICE_UNSET_VAR_X\"}}]}",
		   "is not set");
	load_fails(POLICY_LAYER_USER,
		   "{\"inspect\": [{\"host\": \"a.test\", \"credential\": {\"header\": \"Host: {secret}\", \"secret_env\": \"HOME\"}}]}",
		   "frames the request");
}

static void test_credential_roundtrip(void **state)
{
	struct policy_error err;
	struct policy *p, *q;
	char *json, *json2;
	char where[POLICY_WHERE_MAX];

	(void)state;
	setenv("SLUICE_TEST_TOKEN", "s3cr3t-value", 1);
	p = load("{\"allow\": [\"api.test\"], \"inspect\": [{\"host\": \"api.test\", \"deny\": [\"DELETE /**\"],\n"
		 " \"credential\": {\"header\": \"Authorization: Bearer {secret}\", \"secret_env\": \"SLUICE_TEST_TOKEN\"}}]}",
		 NULL, &err);
	assert_non_null(p);
	unsetenv("SLUICE_TEST_TOKEN");
	assert_int_equal(policy_credential_count(p), 1);
	const struct policy_credential *c = policy_credential_for(p, "api.test");
	assert_non_null(c);
	assert_null(policy_credential_for(p, "other.test"));
	assert_string_equal(c->header, "Authorization");
	assert_string_equal(c->value, "Bearer s3cr3t-value");
	assert_string_equal(c->placeholder_env, "SLUICE_TEST_TOKEN");
	assert_int_equal(strlen(c->placeholder), strlen(POLICY_PLACEHOLDER_PREFIX) + 32);
	char body[200];
	snprintf(body, sizeof body, "token=%s&x=1", c->placeholder);
	assert_ptr_equal(policy_credential_find_placeholder(p, NULL, body, strlen(body)), c);
	assert_null(policy_credential_find_placeholder(p, NULL, body, strlen(body) - 8)); /* cut: not the placeholder */
	assert_null(policy_credential_find_placeholder(p, c, body, strlen(body))); /* its own host may get it */
	/* the serialised form (what sluiced and the engine get) keeps rules, places and the credential */
	json = policy_serialize(p);
	assert_non_null(json);
	struct policy_builder *b = policy_builder_new();
	if (policy_builder_add_json(b, POLICY_LAYER_ORG, "sluiced", json, strlen(json), &err) < 0)
		fail_msg("%s: %s", err.msg, json);
	q = policy_builder_compile(b, &err);
	assert_non_null(q);
	assert_int_equal(req(q, "api.test", "DELETE", "/x", where, sizeof where), POLICY_DENY);
	assert_string_equal(where, "user.json:1:67");
	const struct policy_credential *c2 = policy_credential_for(q, "api.test");
	assert_non_null(c2);
	assert_string_equal(c2->value, "Bearer s3cr3t-value");
	assert_string_equal(c2->placeholder, c->placeholder);
	json2 = policy_serialize(q);
	assert_non_null(strstr(json, "\"inspect\""));
	assert_string_equal(strstr(json, "\"inspect\""), strstr(json2, "\"inspect\"")); /* org pins aside, the same */
	/* a policy file cannot carry a compiled secret */
	load_fails(POLICY_LAYER_USER,
		   "{\"inspect\": [{\"host\": \"a.test\", \"credential\": {\"header\": \"X: {secret}\", \"secret\": \"x\"}}]}",
		   "unknown key \"secret\"");
	free(json);
	free(json2);
	policy_builder_free(b);
	policy_unref(q);
	policy_unref(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normalize),
		cmocka_unit_test(test_glob_differential),
		cmocka_unit_test(test_decide),
		cmocka_unit_test(test_path_confusion),
		cmocka_unit_test(test_layers_narrow),
		cmocka_unit_test(test_load_errors),
		cmocka_unit_test(test_credential_roundtrip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
