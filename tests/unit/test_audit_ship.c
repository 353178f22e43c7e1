/* Unit tests of the syslog form of audit shipping (netd/audit_ship.c): RFC 5424 header (PRI from
 * facility authpriv and the verdict, version 1, the record's time, host, app, pid, msgid), structured
 * data with '"', '\' and ']' escaped, the record's line whole as MSG, and -ENOSPC when it does not fit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "audit_read.h"
#include "audit_ship.h"

static void test_format(void **state)
{
	const char *line = "{\"time\":\"2026-11-27T05:13:49.123Z\",\"event\":\"complete\",\"session\":\"0a1b2c3d4e\","
			   "\"uid\":1000,\"command\":\"x\",\"protocol\":\"http\",\"host\":\"evil.test\",\"port\":80,"
			   "\"decision\":\"deny\",\"rule\":\"a\\\"b]c\\\\d.json:1:2\"}";
	struct audit_entry e;
	char buf[8192];
	int n;

	(void)state;
	assert_int_equal(audit_entry_parse(line, strlen(line), &e), 0);
	n = netd_ship_syslog_format(&e, "node1", 42, buf, sizeof buf);
	assert_true(n > 0);
	assert_int_equal((size_t)n, strlen(buf));
	assert_true(strncmp(buf, "<84>1 2026-11-27T05:13:49.123Z node1 sluiced 42 audit - [sluice@32473 ", 70) == 0);
	assert_non_null(strstr(buf, " event=\"complete\""));
	assert_non_null(strstr(buf, " session=\"0a1b2c3d4e\" uid=\"1000\" protocol=\"http\" host=\"evil.test\" port=\"80\""));
	assert_non_null(strstr(buf, " decision=\"deny\""));
	/* the rule a"b]c\d: each of the three escaped */
	assert_non_null(strstr(buf, " rule=\"a\\\"b\\]c\\\\d.json:1:2\"]"));
	/* MSG: the line as it is */
	assert_string_equal(buf + n - strlen(line), line);
	assert_int_equal(netd_ship_syslog_format(&e, "node1", 42, buf, 60), -ENOSPC);
	audit_entry_release(&e);

	line = "{\"time\":\"2026-11-27T05:13:49.123Z\",\"session\":null,\"protocol\":\"dns\",\"host\":\"a.test\","
	       "\"decision\":\"allow\"}";
	assert_int_equal(audit_entry_parse(line, strlen(line), &e), 0);
	n = netd_ship_syslog_format(&e, "", 1, buf, sizeof buf);
	assert_true(n > 0);
	assert_true(strncmp(buf, "<86>1 2026-11-27T05:13:49.123Z - sluiced 1 audit - [sluice@32473", 64) == 0);
	assert_null(strstr(buf, "session=")); /* absent fields are left out, not empty */
	assert_null(strstr(buf, "port="));
	audit_entry_release(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_format)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
