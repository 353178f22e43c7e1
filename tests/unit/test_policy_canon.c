/* Unit tests: host name canonicalisation, IP literal spellings, forbidden address ranges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <string.h>

#include "policy.h"

static void expect_canon(const char *in, size_t len, enum policy_canon_err want, const char *want_out)
{
	char out[POLICY_HOST_MAX + 1];
	enum policy_canon_err got = policy_canon_host(in, len, out);

	if (got != want)
		fail_msg("canon(\"%.*s\") = %s, want %s", (int)len, in, policy_canon_strerror(got),
			 policy_canon_strerror(want));
	if (want_out)
		assert_string_equal(out, want_out);
}

#define CANON(s, want, out) expect_canon(s, sizeof(s) - 1, want, out)

static void test_case_and_trailing_dot(void **state)
{
	(void)state;
	CANON("PyPI.Org", POLICY_CANON_OK, "pypi.org");
	CANON("pypi.org.", POLICY_CANON_OK, "pypi.org");
	CANON("pypi.org..", POLICY_CANON_EMPTY_LABEL, NULL);
	CANON(".pypi.org", POLICY_CANON_EMPTY_LABEL, NULL);
	CANON("a..b", POLICY_CANON_EMPTY_LABEL, NULL);
	CANON("", POLICY_CANON_EMPTY, NULL);
	CANON("_dmarc.example.org", POLICY_CANON_OK, "_dmarc.example.org");
	CANON("-a.example.org", POLICY_CANON_BAD_HYPHEN, NULL);
	CANON("a-.example.org", POLICY_CANON_BAD_HYPHEN, NULL);
}

static void test_bad_bytes(void **state)
{
	(void)state;
	CANON("evil.com\0.pypi.org", POLICY_CANON_BAD_CHAR, NULL);
	CANON("evil.com\r\nX: y", POLICY_CANON_BAD_CHAR, NULL);
	CANON("a b.org", POLICY_CANON_BAD_CHAR, NULL);
	CANON("a\tb.org", POLICY_CANON_BAD_CHAR, NULL);
	CANON("a/b.org", POLICY_CANON_BAD_CHAR, NULL);
	CANON("user@pypi.org", POLICY_CANON_BAD_CHAR, NULL);
	CANON("pypi.org%00", POLICY_CANON_BAD_CHAR, NULL);
	CANON("a\x7f.org", POLICY_CANON_BAD_CHAR, NULL);
	CANON("*.org", POLICY_CANON_BAD_CHAR, NULL);
}

static void test_lengths(void **state)
{
	char name[600];
	(void)state;

	/* 63-byte label ok, 64 not */
	memset(name, 'a', 63);
	strcpy(name + 63, ".org");
	expect_canon(name, strlen(name), POLICY_CANON_OK, NULL);
	memset(name, 'a', 64);
	strcpy(name + 64, ".org");
	expect_canon(name, strlen(name), POLICY_CANON_LABEL_TOO_LONG, NULL);
	/* 253 bytes ok (plus a trailing dot), 254 not */
	for (int i = 0; i < 253; i++)
		name[i] = (i % 2) ? '.' : 'a';
	name[252] = 'a';
	name[253] = '\0';
	expect_canon(name, 253, POLICY_CANON_OK, NULL);
	name[253] = '.';
	expect_canon(name, 254, POLICY_CANON_OK, NULL);
	name[253] = 'a';
	name[254] = '\0';
	expect_canon(name, 254, POLICY_CANON_TOO_LONG, NULL);
	memset(name, 'a', sizeof name);
	expect_canon(name, sizeof name, POLICY_CANON_TOO_LONG, NULL);
}

static void test_idna(void **state)
{
	(void)state;
	CANON("b\xc3\xbc" "cher.example", POLICY_CANON_OK, "xn--bcher-kva.example");
	CANON("XN--BCHER-KVA.example", POLICY_CANON_OK, "xn--bcher-kva.example");
	CANON("xn--bcher-kva.example", POLICY_CANON_OK, "xn--bcher-kva.example");
	CANON("xn--zz.example", POLICY_CANON_BAD_IDNA, NULL);
	CANON("xn--.example", POLICY_CANON_BAD_HYPHEN, NULL);
	CANON("xn--a.example", POLICY_CANON_BAD_IDNA, NULL);
	CANON("xn--ls8h.example", POLICY_CANON_BAD_IDNA, NULL); /* an emoji: not IDNA2008 */
	CANON("\xff\xfe.example", POLICY_CANON_BAD_IDNA, NULL);
	/* the A-label of an ASCII-only label is not a valid punycode label */
	CANON("xn--abc-.example", POLICY_CANON_BAD_HYPHEN, NULL);
}

static void test_ip_literals(void **state)
{
	struct sockaddr_storage ss;
	char buf[64];
	static const char *v4[] = { "127.0.0.1", "127.1", "0x7f.1", "2130706433", "0177.0.0.1", "0x7f000001", "127.0.0.1." };
	(void)state;

	for (size_t i = 0; i < sizeof v4 / sizeof v4[0]; i++) {
		expect_canon(v4[i], strlen(v4[i]), POLICY_CANON_IP_LITERAL, NULL);
		assert_int_equal(policy_parse_ip_literal(v4[i], strlen(v4[i]), &ss), 0);
		assert_int_equal(ss.ss_family, AF_INET);
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, buf, sizeof buf);
		assert_string_equal(buf, "127.0.0.1");
		assert_true(policy_addr_is_forbidden((struct sockaddr *)&ss));
	}
	CANON("[::ffff:127.0.0.1]", POLICY_CANON_IP_LITERAL, NULL);
	assert_int_equal(policy_parse_ip_literal("[::ffff:127.0.0.1]", 18, &ss), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_true(policy_addr_is_forbidden((struct sockaddr *)&ss));
	CANON("::1", POLICY_CANON_IP_LITERAL, NULL);
	CANON("foo.123", POLICY_CANON_BAD_CHAR, NULL);
	CANON("1.2.3.4.5", POLICY_CANON_BAD_CHAR, NULL);
	assert_int_not_equal(policy_parse_ip_literal("127.0.0.1 x", 11, &ss), 0);
	assert_int_not_equal(policy_parse_ip_literal("[::1", 4, &ss), 0);
}

static bool forbidden(const char *a)
{
	struct sockaddr_storage ss;
	assert_int_equal(policy_parse_ip_literal(a, strlen(a), &ss), 0);
	return policy_addr_is_forbidden((struct sockaddr *)&ss);
}

static void test_forbidden_ranges(void **state)
{
	(void)state;
	static const char *bad[] = { "0.0.0.0", "10.1.2.3", "100.64.0.1", "100.127.255.255", "127.0.0.53",
				     "169.254.169.254", "172.16.0.1", "172.31.255.255", "192.168.1.1", "224.0.0.1",
				     "255.255.255.255", "::", "::1", "::ffff:8.8.8.8", "::8.8.8.8", "64:ff9b::808:808",
				     "2002:808:808::1", "2001:0:4136:e378::1", "fc00::1", "fd12::1", "fe80::1",
				     "ff02::1", "fec0::1", "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe" };
	static const char *good[] = { "8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0", "172.32.0.1",
				      "198.18.1.10", "2001:db8::1", "2606:4700::1111", "2001:4860::8888" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (!forbidden(bad[i]))
			fail_msg("%s should be forbidden", bad[i]);
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		if (forbidden(good[i]))
			fail_msg("%s should be allowed", good[i]);
}

static void test_methods(void **state)
{
	(void)state;
	assert_int_equal(policy_method_from_name("GET", 3), POLICY_M_GET);
	assert_int_equal(policy_method_from_name("CONNECT", 7), POLICY_M_CONNECT);
	assert_int_equal(policy_method_from_name("get", 3), POLICY_M_OTHER); /* case-sensitive */
	assert_int_equal(policy_method_from_name("PROPFIND", 8), POLICY_M_OTHER);
	assert_int_equal(policy_method_from_name("GE T", 4), 0);
	assert_int_equal(policy_method_from_name("", 0), 0);
	assert_int_equal(policy_method_from_name("G\0T", 3), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_case_and_trailing_dot),
		cmocka_unit_test(test_bad_bytes),
		cmocka_unit_test(test_lengths),
		cmocka_unit_test(test_idna),
		cmocka_unit_test(test_ip_literals),
		cmocka_unit_test(test_forbidden_ranges),
		cmocka_unit_test(test_methods),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
