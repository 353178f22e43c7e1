/* Unit tests for the SOCKS5 greeting and request parser (proxy/socks5_parse.c): every field, every
 * prefix of a valid message is "more", and each refusal carries the reply code the client gets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "socks5_parse.h"

static void test_greeting(void **state)
{
	const uint8_t g[] = {5, 2, 2, 0, 0xaa};
	const char *why = NULL;
	size_t used;
	bool noauth;
	(void)state;

	for (size_t n = 0; n < 4; n++)
		assert_int_equal(socks5_parse_greeting(g, n, &used, &noauth, &why), SOCKS5_MORE);
	assert_int_equal(socks5_parse_greeting(g, sizeof g, &used, &noauth, &why), SOCKS5_OK);
	assert_int_equal(used, 4); /* the byte after it is not the greeting's */
	assert_true(noauth);

	const uint8_t only_userpass[] = {5, 1, 2};
	assert_int_equal(socks5_parse_greeting(only_userpass, 3, &used, &noauth, &why), SOCKS5_OK);
	assert_false(noauth);

	const uint8_t v4[] = {4, 1, 0, 80, 1, 2, 3, 4, 0};
	assert_int_equal(socks5_parse_greeting(v4, sizeof v4, &used, &noauth, &why), SOCKS5_ERROR);
	assert_non_null(strstr(why, "SOCKS4"));
	const uint8_t none[] = {5, 0};
	assert_int_equal(socks5_parse_greeting(none, 2, &used, &noauth, &why), SOCKS5_ERROR);
	const uint8_t http[] = "GET / HTTP/1.1\r\n";
	assert_int_equal(socks5_parse_greeting(http, sizeof http - 1, &used, &noauth, &why), SOCKS5_ERROR);
}

static void test_request_domain(void **state)
{
	const uint8_t q[] = {5, 1, 0, 3, 12, 'a', 'l', 'l', 'o', 'w', 'e', 'd', '.', 't', 'e', 's', 't', 0x01, 0xbb, 'x'};
	struct socks5_request req;
	const char *why = NULL;
	size_t used;
	(void)state;

	for (size_t n = 0; n < sizeof q - 1; n++)
		assert_int_equal(socks5_parse_request(q, n, &used, &req, &why), SOCKS5_MORE);
	assert_int_equal(socks5_parse_request(q, sizeof q, &used, &req, &why), SOCKS5_OK);
	assert_int_equal(used, sizeof q - 1);
	assert_string_equal(req.host, "allowed.test");
	assert_int_equal(req.port, 443);
	assert_int_equal(req.atyp, SOCKS5_ATYP_DOMAIN);
}

static void test_request_addresses(void **state)
{
	const uint8_t q4[] = {5, 1, 0, 1, 198, 18, 1, 11, 0, 80};
	const uint8_t q6[] = {5, 1, 0, 4, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11, 0, 80};
	struct socks5_request req;
	const char *why = NULL;
	size_t used;
	(void)state;

	assert_int_equal(socks5_parse_request(q4, sizeof q4, &used, &req, &why), SOCKS5_OK);
	assert_string_equal(req.host, "198.18.1.11");
	assert_int_equal(req.port, 80);
	assert_int_equal(socks5_parse_request(q6, sizeof q6, &used, &req, &why), SOCKS5_OK);
	assert_string_equal(req.host, "2001:db8:1::11");
	assert_int_equal(req.atyp, SOCKS5_ATYP_IPV6);
	assert_int_equal(socks5_parse_request(q6, sizeof q6 - 1, &used, &req, &why), SOCKS5_MORE);
}

static void test_request_refusals(void **state)
{
	struct socks5_request req;
	const char *why = NULL;
	size_t used;
	(void)state;

	const uint8_t bind[] = {5, 2, 0, 1, 1, 2, 3, 4, 0, 80};
	assert_int_equal(socks5_parse_request(bind, sizeof bind, &used, &req, &why), SOCKS5_ERROR);
	assert_int_equal(req.rep, SOCKS5_REP_CMD_UNSUP);
	assert_non_null(strstr(why, "BIND"));
	const uint8_t udp[] = {5, 3, 0, 1, 0, 0, 0, 0, 0, 0};
	assert_int_equal(socks5_parse_request(udp, sizeof udp, &used, &req, &why), SOCKS5_ERROR);
	assert_int_equal(req.rep, SOCKS5_REP_CMD_UNSUP);
	assert_non_null(strstr(why, "UDP"));
	const uint8_t cmd9[] = {5, 9, 0, 1, 1, 2, 3, 4, 0, 80};
	assert_int_equal(socks5_parse_request(cmd9, sizeof cmd9, &used, &req, &why), SOCKS5_ERROR);
	assert_int_equal(req.rep, SOCKS5_REP_CMD_UNSUP);
	const uint8_t atyp[] = {5, 1, 0, 7, 1, 2, 3, 4, 0, 80};
	assert_int_equal(socks5_parse_request(atyp, sizeof atyp, &used, &req, &why), SOCKS5_ERROR);
	assert_int_equal(req.rep, SOCKS5_REP_ATYP_UNSUP);
	const uint8_t rsv[] = {5, 1, 1, 1, 1, 2, 3, 4, 0, 80};
	assert_int_equal(socks5_parse_request(rsv, sizeof rsv, &used, &req, &why), SOCKS5_ERROR);
	assert_int_equal(req.rep, SOCKS5_REP_FAILURE);
	const uint8_t nul[] = {5, 1, 0, 3, 3, 'a', 0, 'b', 0, 80};
	assert_int_equal(socks5_parse_request(nul, sizeof nul, &used, &req, &why), SOCKS5_ERROR);
	const uint8_t empty[] = {5, 1, 0, 3, 0, 0, 80};
	assert_int_equal(socks5_parse_request(empty, sizeof empty, &used, &req, &why), SOCKS5_ERROR);
	const uint8_t port0[] = {5, 1, 0, 1, 1, 2, 3, 4, 0, 0};
	assert_int_equal(socks5_parse_request(port0, sizeof port0, &used, &req, &why), SOCKS5_ERROR);
	assert_int_equal(req.rep, SOCKS5_REP_NOT_ALLOWED);
	const uint8_t ver[] = {4, 1, 0, 1};
	assert_int_equal(socks5_parse_request(ver, sizeof ver, &used, &req, &why), SOCKS5_ERROR);
}

static void test_request_longest_name(void **state)
{
	uint8_t q[4 + 1 + 255 + 2];
	struct socks5_request req;
	const char *why = NULL;
	size_t used;
	(void)state;

	q[0] = 5, q[1] = 1, q[2] = 0, q[3] = 3, q[4] = 255;
	memset(q + 5, 'a', 255);
	q[260] = 0, q[261] = 80;
	assert_int_equal(socks5_parse_request(q, sizeof q, &used, &req, &why), SOCKS5_OK);
	assert_int_equal(strlen(req.host), 255);
	assert_int_equal(used, sizeof q);
	assert_int_equal(sizeof q, SOCKS5_REQUEST_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_greeting),
	        cmocka_unit_test(test_request_domain),
	        cmocka_unit_test(test_request_addresses),
	        cmocka_unit_test(test_request_refusals),
	        cmocka_unit_test(test_request_longest_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
