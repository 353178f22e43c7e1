/* Unit tests of the audit-line format (proxy/audit.c): every field, RFC 3339 UTC time with
 * milliseconds, JSON escaping of hostile strings (quotes, backslashes, control bytes, invalid UTF-8),
 * nulls, the hash-chain seal on written lines, oversized records, and failing writes kept (never
 * torn) until the log works again. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "audit.h"
#include "audit_chain.h"

static struct audit_record sample(void)
{
	struct audit_record r;
	memset(&r, 0, sizeof r);
	r.start.tv_sec = 1700000000; /* 2023-11-14T22:13:20Z */
	r.start.tv_nsec = 123456789;
	r.duration_ms = 42;
	r.session = "s1";
	r.uid = 1000;
	r.has_uid = true;
	r.command = "npm ci";
	r.protocol = "http";
	r.host = "registry.npmjs.org";
	r.port = 443;
	r.method = "GET";
	r.decision = "allow";
	r.rule = "/etc/sluice/policy.json:3:5";
	r.reason = "allowed by ...";
	r.address = "104.16.0.1:443";
	r.status = 200;
	r.bytes_out = 120;
	r.bytes_in = 34567;
	return r;
}

static json_object *parse_line(const char *line)
{
	json_object *o = json_tokener_parse(line);
	assert_non_null(o);
	return o;
}

static const char *jstr(json_object *o, const char *k)
{
	json_object *v;
	if (!json_object_object_get_ex(o, k, &v) || json_object_is_type(v, json_type_null))
		return NULL;
	return json_object_get_string(v);
}

static void test_fields(void **state)
{
	char buf[AUDIT_LINE_MAX];
	struct audit_record r = sample();
	json_object *o;
	int n = audit_format(&r, buf, sizeof buf);
	(void)state;
	assert_true(n > 0);
	assert_int_equal(buf[n - 1], '\n');
	assert_int_equal((size_t)n, strlen(buf));
	o = parse_line(buf);
	assert_string_equal(jstr(o, "time"), "2023-11-14T22:13:20.123Z");
	assert_string_equal(jstr(o, "session"), "s1");
	assert_string_equal(jstr(o, "uid"), "1000");
	assert_string_equal(jstr(o, "command"), "npm ci");
	assert_string_equal(jstr(o, "protocol"), "http");
	assert_string_equal(jstr(o, "host"), "registry.npmjs.org");
	assert_string_equal(jstr(o, "port"), "443");
	assert_string_equal(jstr(o, "method"), "GET");
	assert_string_equal(jstr(o, "decision"), "allow");
	assert_string_equal(jstr(o, "rule"), "/etc/sluice/policy.json:3:5");
	assert_string_equal(jstr(o, "address"), "104.16.0.1:443");
	assert_string_equal(jstr(o, "status"), "200");
	assert_string_equal(jstr(o, "bytes_out"), "120");
	assert_string_equal(jstr(o, "bytes_in"), "34567");
	assert_string_equal(jstr(o, "duration_ms"), "42");
	assert_null(jstr(o, "error"));
	json_object_put(o);
}

static void test_escaping(void **state)
{
	char buf[AUDIT_LINE_MAX];
	struct audit_record r = sample();
	json_object *o;
	(void)state;
	r.command = "a\"b\\c\n\r\t\x01\x7f end";
	r.host = "bad\xff\xc3(utf8\xe2\x82";
	r.method = "caf\xc3\xa9";
	r.rule = "";
	r.session = NULL;
	r.has_uid = false;
	assert_true(audit_format(&r, buf, sizeof buf) > 0);
	for (const char *p = buf; *p && *p != '\n'; p++)
		assert_true((unsigned char)*p >= 0x20);
	o = parse_line(buf);
	assert_string_equal(jstr(o, "command"), "a\"b\\c\n\r\t\x01\x7f end");
	assert_string_equal(jstr(o, "host"), "bad\xef\xbf\xbd\xef\xbf\xbd(utf8\xef\xbf\xbd\xef\xbf\xbd");
	assert_string_equal(jstr(o, "method"), "caf\xc3\xa9");
	assert_null(jstr(o, "rule"));
	assert_null(jstr(o, "session"));
	assert_null(jstr(o, "uid"));
	json_object_put(o);
	/* too small a buffer is an error, never a cut line */
	assert_int_equal(audit_format(&r, buf, 40), -ENOSPC);
}

static void test_log_chain_and_oversize(void **state)
{
	char path[] = "/tmp/sluice-audit-test-XXXXXX";
	char err[256], line[8192];
	int fd = mkstemp(path);
	struct audit_log *a;
	struct audit_record r = sample();
	struct audit_chain chain;
	char *huge = malloc(10000);
	FILE *f;
	unsigned n = 0;
	(void)state;
	assert_true(fd >= 0);
	close(fd);
	a = audit_log_open(path, -1, err, sizeof err);
	assert_non_null(a);
	assert_int_equal(audit_log_write(a, &r), 0);
	memset(huge, 'x', 9999);
	huge[9999] = '\0';
	r.reason = huge;
	assert_int_equal(audit_log_write(a, &r), 0); /* reason truncated, record kept */
	assert_true(audit_log_healthy(a));
	audit_log_free(a);
	/* reopened: the chain continues; the log keeps the formatted second of the last record's time, and a
	 * record of another second (earlier too) gets its own */
	a = audit_log_open(path, -1, err, sizeof err);
	r.reason = "third";
	assert_int_equal(audit_log_write(a, &r), 0);
	r.start.tv_sec += 3661;
	r.start.tv_nsec = 7000000;
	assert_int_equal(audit_log_write(a, &r), 0);
	r.start.tv_sec -= 3662;
	assert_int_equal(audit_log_write(a, &r), 0);
	audit_log_free(a);
	f = fopen(path, "r");
	assert_non_null(f);
	audit_chain_init(&chain);
	while (fgets(line, sizeof line, f)) {
		bool cont;
		size_t len = strlen(line);
		json_object *o;
		assert_int_equal(line[len - 1], '\n');
		line[--len] = '\0';
		assert_int_equal(audit_chain_verify_line(&chain, line, len, n == 0, &cont), AUDIT_VERIFY_OK);
		o = parse_line(line);
		if (n == 1)
			assert_string_equal(jstr(o, "reason"), "(truncated)");
		if (n == 2)
			assert_string_equal(jstr(o, "time"), "2023-11-14T22:13:20.123Z");
		if (n == 3)
			assert_string_equal(jstr(o, "time"), "2023-11-14T23:14:21.007Z");
		if (n == 4)
			assert_string_equal(jstr(o, "time"), "2023-11-14T22:13:19.007Z");
		assert_string_equal(jstr(o, "decision"), "allow");
		json_object_put(o);
		n++;
	}
	assert_int_equal(n, 5);
	fclose(f);
	unlink(path);
	free(huge);
}

static void test_failing_log(void **state)
{
	char err[256];
	struct audit_record r = sample();
	int fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
	struct audit_log *a;
	(void)state;
	if (fd < 0)
		fail_msg("cannot open /dev/full (the test needs it): %s", strerror(errno));
	a = audit_log_open(NULL, fd, err, sizeof err);
	assert_non_null(a);
	assert_true(audit_log_healthy(a));
	assert_int_equal(audit_log_write(a, &r), -EIO);
	assert_false(audit_log_healthy(a)); /* the engine refuses new connections now */
	assert_false(audit_log_flush(a));
	assert_int_equal(audit_log_lost(a), 0); /* kept, not lost */
	/* a working file: the kept line is written first, whole */
	{
		char path[] = "/tmp/sluice-audit-test-XXXXXX";
		int nfd = mkstemp(path);
		char buf[8192];
		ssize_t n;
		assert_true(nfd >= 0);
		assert_int_equal(audit_log_replace_fd(a, nfd), 0);
		assert_true(audit_log_healthy(a));
		n = pread(nfd, buf, sizeof buf - 1, 0);
		assert_true(n > 0);
		buf[n] = '\0';
		assert_int_equal(buf[n - 1], '\n');
		assert_non_null(strstr(buf, "\"hash\":"));
		unlink(path);
	}
	audit_log_free(a);
	assert_null(audit_log_open("/nonexistent-dir/x/audit.log", -1, err, sizeof err));
	assert_non_null(strstr(err, "/nonexistent-dir/x/audit.log"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_fields),
	        cmocka_unit_test(test_escaping),
	        cmocka_unit_test(test_log_chain_and_oversize),
	        cmocka_unit_test(test_failing_log),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
