/* Unit tests for the parent proxy's configuration (proxy/parent.c): URL forms, what is refused and why,
 * no_proxy matching, the credentials file's checks and its Basic encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "parent.h"

static struct proxy_parent *parse(const char *json, char *err, size_t errlen)
{
	json_object *o = json_tokener_parse(json);
	struct proxy_parent *p;

	assert_non_null(o);
	p = proxy_parent_parse(o, "upstream_proxy", err, errlen);
	json_object_put(o);
	return p;
}

static void test_urls(void **state)
{
	char err[600];
	struct proxy_parent *p;
	(void)state;

	p = parse("{\"url\": \"http://127.0.0.1:3128\"}", err, sizeof err);
	assert_non_null(p);
	assert_string_equal(p->where, "127.0.0.1:3128");
	assert_true(p->resolve);
	assert_string_equal(p->auth, "");
	free(p);
	p = parse("{\"url\": \"http://[::1]:8080/\", \"resolve\": false}", err, sizeof err);
	assert_non_null(p);
	assert_string_equal(p->where, "::1:8080");
	assert_false(p->resolve);
	free(p);

	static const struct { const char *json, *want; } bad[] = {
	        {"{\"url\": \"https://127.0.0.1:3128\"}", "only http://HOST:PORT"},
	        {"{\"url\": \"http://u:p@127.0.0.1:3128\"}", "credentials in auth_file"},
	        {"{\"url\": \"http://127.0.0.1\"}", "want http://HOST:PORT"},
	        {"{\"url\": \"http://127.0.0.1:0\"}", "want http://HOST:PORT"},
	        {"{\"url\": \"http://127.0.0.1:3128/path\"}", "want http://HOST:PORT"},
	        {"{}", "\"url\""},
	        {"{\"url\": \"http://127.0.0.1:3128\", \"colour\": 1}", "unknown key \"colour\""},
	        {"{\"url\": \"http://127.0.0.1:3128\", \"resolve\": \"yes\"}", "true or false"},
	        {"{\"url\": \"http://127.0.0.1:3128\", \"no_proxy\": \"a.example\"}", "array"},
	        {"{\"url\": \"http://127.0.0.1:3128\", \"no_proxy\": [\"bad name!\"]}", "not a host name"},
	        {"{\"url\": \"http://127.0.0.1:3128\", \"auth_file\": \"relative\"}", "absolute path"},
	        {"[1]", "want an object"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		p = parse(bad[i].json, err, sizeof err);
		if (p || !strstr(err, bad[i].want))
			fail_msg("%s: got \"%s\", want \"%s\"", bad[i].json, err, bad[i].want);
		assert_non_null(strstr(err, "upstream_proxy: ")); /* says where */
	}
}

static void test_no_proxy(void **state)
{
	char err[600];
	struct proxy_parent *p;
	(void)state;

	p = parse("{\"url\": \"http://127.0.0.1:3128\", \"no_proxy\": [\"Corp.Example\", \".intra.test\", \"192.0.2.7\"]}",
	          err, sizeof err);
	assert_non_null(p);
	assert_true(proxy_parent_bypass(p, "corp.example"));
	assert_true(proxy_parent_bypass(p, "git.corp.example"));
	assert_false(proxy_parent_bypass(p, "evilcorp.example")); /* a label boundary, not a suffix of bytes */
	assert_false(proxy_parent_bypass(p, "example"));
	assert_true(proxy_parent_bypass(p, "a.b.intra.test"));
	assert_true(proxy_parent_bypass(p, "192.0.2.7"));
	assert_false(proxy_parent_bypass(p, "192.0.2.70"));
	free(p);
}

static void test_auth_file(void **state)
{
	char path[] = "/tmp/sluice-parent-auth-XXXXXX", json[300], err[600];
	struct proxy_parent *p;
	int fd = mkstemp(path);
	(void)state;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "corp:s3cr3t\n", 12), 12);
	close(fd);
	snprintf(json, sizeof json, "{\"url\": \"http://127.0.0.1:3128\", \"auth_file\": \"%s\"}", path);
	assert_int_equal(chmod(path, 0600), 0);
	p = parse(json, err, sizeof err);
	assert_non_null(p);
	assert_string_equal(p->auth, "Basic Y29ycDpzM2NyM3Q="); /* base64("corp:s3cr3t") */
	free(p);
	assert_int_equal(chmod(path, 0640), 0);
	assert_null(parse(json, err, sizeof err));
	assert_non_null(strstr(err, "chmod 600"));
	assert_int_equal(chmod(path, 0600), 0);
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "no-colon\n", 9), 9);
	close(fd);
	assert_null(parse(json, err, sizeof err));
	assert_non_null(strstr(err, "user:password"));
	unlink(path);
	assert_null(parse(json, err, sizeof err));
	assert_non_null(strstr(err, "No such file"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_urls),
	        cmocka_unit_test(test_no_proxy),
	        cmocka_unit_test(test_auth_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
