/* Unit tests of the session's address cache (proxy/addr_cache.c): what is kept comes back for the same
 * name only and within its TTL, TTL 0 and empty answers are not kept, the TTL is capped, a second answer
 * for a name replaces the first, a full cache drops the least recently used name, and two sessions never
 * see each other's names. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "proxy_int.h"

static struct sockaddr_storage v4(const char *ip)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s = (struct sockaddr_in *)&ss;
	memset(&ss, 0, sizeof ss);
	s->sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
	return ss;
}

static const char *ip_of(const struct sockaddr_storage *ss, char *buf)
{
	return inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, buf, INET_ADDRSTRLEN);
}

static void test_get_put(void **state)
{
	struct proxy_session s, other;
	struct sockaddr_storage in[2] = {v4("198.18.1.11"), v4("198.18.1.12")}, out[PROXY_RESOLVE_MAX];
	char b[INET_ADDRSTRLEN];
	(void)state;

	memset(&s, 0, sizeof s);
	memset(&other, 0, sizeof other);
	assert_int_equal(proxy_addr_cache_get(&s, "allowed.test", out), 0);
	assert_null(s.addr_cache);                           /* nothing allocated until something is kept */
	proxy_addr_cache_put(&s, "allowed.test", in, 2, 0);  /* TTL 0: not kept */
	proxy_addr_cache_put(&s, "allowed.test", in, 0, 60); /* no address: not kept */
	assert_int_equal(proxy_addr_cache_get(&s, "allowed.test", out), 0);

	proxy_addr_cache_put(&s, "allowed.test", in, 2, 60);
	assert_int_equal(proxy_addr_cache_get(&s, "allowed.test", out), 2);
	assert_string_equal(ip_of(&out[0], b), "198.18.1.11");
	assert_string_equal(ip_of(&out[1], b), "198.18.1.12");
	assert_int_equal(proxy_addr_cache_get(&s, "www.allowed.test", out), 0); /* the name exactly */
	assert_int_equal(proxy_addr_cache_get(&s, "allowed.tes", out), 0);
	assert_int_equal(proxy_addr_cache_get(&other, "allowed.test", out), 0); /* per session */

	/* a newer answer for the same name replaces the older one */
	proxy_addr_cache_put(&s, "allowed.test", &in[1], 1, 60);
	assert_int_equal(proxy_addr_cache_get(&s, "allowed.test", out), 1);
	assert_string_equal(ip_of(&out[0], b), "198.18.1.12");
	proxy_addr_cache_session_free(&s);
	assert_null(s.addr_cache);
	proxy_addr_cache_session_free(&other); /* never allocated: a no-op */
}

static void test_expiry(void **state)
{
	struct proxy_session s;
	struct sockaddr_storage in = v4("198.18.1.11"), out[PROXY_RESOLVE_MAX];
	struct timespec ts = {1, 100 * 1000 * 1000};
	(void)state;

	memset(&s, 0, sizeof s);
	proxy_addr_cache_put(&s, "short.test", &in, 1, 1);
	proxy_addr_cache_put(&s, "long.test", &in, 1, 1000000); /* capped, still kept */
	assert_int_equal(proxy_addr_cache_get(&s, "short.test", out), 1);
	nanosleep(&ts, NULL);
	assert_int_equal(proxy_addr_cache_get(&s, "short.test", out), 0); /* its TTL ran out */
	assert_int_equal(proxy_addr_cache_get(&s, "long.test", out), 1);
	proxy_addr_cache_session_free(&s);
}

static void test_lru(void **state)
{
	struct proxy_session s;
	struct sockaddr_storage in = v4("198.18.1.11"), out[PROXY_RESOLVE_MAX];
	struct timespec ts = {0, 2 * 1000 * 1000};
	char name[32];
	(void)state;

	memset(&s, 0, sizeof s);
	for (int i = 0; i < PROXY_ADDR_CACHE_ENTRIES; i++) {
		snprintf(name, sizeof name, "n%d.test", i);
		proxy_addr_cache_put(&s, name, &in, 1, 60);
		nanosleep(&ts, NULL); /* distinct use times (the clock counts milliseconds) */
	}
	assert_int_equal(proxy_addr_cache_get(&s, "n0.test", out), 1); /* n0 used again: n1 is the oldest */
	nanosleep(&ts, NULL);
	proxy_addr_cache_put(&s, "new.test", &in, 1, 60);
	assert_int_equal(proxy_addr_cache_get(&s, "new.test", out), 1);
	assert_int_equal(proxy_addr_cache_get(&s, "n0.test", out), 1);
	assert_int_equal(proxy_addr_cache_get(&s, "n1.test", out), 0);
	for (int i = 2; i < PROXY_ADDR_CACHE_ENTRIES; i++) {
		snprintf(name, sizeof name, "n%d.test", i);
		assert_int_equal(proxy_addr_cache_get(&s, name, out), 1);
	}
	proxy_addr_cache_session_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_get_put),
	        cmocka_unit_test(test_expiry),
	        cmocka_unit_test(test_lru),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
