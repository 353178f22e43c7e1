/* Unit tests of the session's idle upstream connections (proxy/up_pool.c): a kept connection comes back
 * for the same host and port of the same session only, while its name still resolves to its address and
 * the policy allows that address; one that has a byte or an end of file waiting, or talks while idle, is
 * never taken; the pool is capped (per session and in the engine); an idle one is closed after
 * PROXY_UP_POOL_IDLE_MS; a policy change empties it (proxy_engine_session_set_policy). */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine.h"
#include "policy.h"
#include "proxy_int.h"

static struct sockaddr_storage v4(const char *ip, uint16_t port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s = (struct sockaddr_in *)&ss;
	memset(&ss, 0, sizeof ss);
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
	return ss;
}

static struct policy *mkpolicy(const char *json)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err;
	struct policy *p;
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_PROJECT, "test.json", json, strlen(json), &err), 0);
	p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_builder_free(b);
	return p;
}

#define ALLOW "{\"allow\": [{\"host\": \"allowed.test\", \"ports\": [80, 8080]}, {\"host\": \"other.test\", \"ports\": [80]}]}"

/* A connected bufferevent on base; *peer: the other end (the "origin"). */
static struct bufferevent *conn(struct event_base *base, int *peer)
{
	int sv[2];
	struct bufferevent *bev;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	bev = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	*peer = sv[1];
	return bev;
}

static struct proxy_target target(const char *host, uint16_t port)
{
	struct proxy_target t;
	memset(&t, 0, sizeof t);
	snprintf(t.host, sizeof t.host, "%s", host);
	t.port = port;
	return t;
}

static void session(struct proxy_session *s, struct policy *p, const char *ip)
{
	struct sockaddr_storage a = v4(ip, 0);
	memset(s, 0, sizeof *s);
	s->policy = p;
	proxy_addr_cache_put(s, "allowed.test", &a, 1, 60);
	proxy_addr_cache_put(s, "other.test", &a, 1, 60);
}

static void done(struct proxy_session *s)
{
	proxy_up_pool_session_free(s);
	proxy_addr_cache_session_free(s);
}

static void test_take(void **state)
{
	struct event_base *base = event_base_new();
	struct policy *p = mkpolicy(ALLOW);
	struct proxy_session s, other;
	struct sockaddr_storage at = v4("198.18.1.11", 80), got;
	struct proxy_target t = target("allowed.test", 80);
	char address[PROXY_ADDRSTR_MAX];
	struct bufferevent *bev, *b;
	int peer;
	(void)state;

	session(&s, p, "198.18.1.11");
	session(&other, p, "198.18.1.11");
	assert_null(proxy_up_pool_take(&s, &t, &got, address)); /* nothing kept yet */
	bev = conn(base, &peer);
	proxy_up_pool_put(&s, bev, "allowed.test", 80, &at, "198.18.1.11:80");
	assert_int_equal(proxy_up_pool_count(&s), 1);
	assert_null(proxy_up_pool_take(&other, &t, &got, address)); /* never another session's */
	t.port = 8080;
	assert_null(proxy_up_pool_take(&s, &t, &got, address)); /* the same port only */
	t = target("other.test", 80);
	assert_null(proxy_up_pool_take(&s, &t, &got, address)); /* the same host only */
	t = target("allowed.test", 80);
	b = proxy_up_pool_take(&s, &t, &got, address);
	assert_ptr_equal(b, bev);
	assert_string_equal(address, "198.18.1.11:80");
	assert_int_equal(((struct sockaddr_in *)&got)->sin_port, htons(80));
	assert_int_equal(proxy_up_pool_count(&s), 0);
	assert_null(proxy_up_pool_take(&s, &t, &got, address)); /* taken once */
	bufferevent_free(b);
	close(peer);

	/* the name no longer resolves to the connection's address for the session: dropped */
	bev = conn(base, &peer);
	proxy_up_pool_put(&s, bev, "allowed.test", 80, &at, "198.18.1.11:80");
	{
		struct sockaddr_storage moved = v4("198.18.1.12", 0);
		proxy_addr_cache_put(&s, "allowed.test", &moved, 1, 60);
	}
	assert_null(proxy_up_pool_take(&s, &t, &got, address));
	assert_int_equal(proxy_up_pool_count(&s), 0);
	close(peer);

	done(&s);
	done(&other);
	policy_unref(p);
	event_base_free(base);
}

/* A policy that allows the name but forbids the connection's address (a CIDR deny rule, or a private
 * address without a CIDR allow rule): never taken. */
static void test_policy(void **state)
{
	struct event_base *base = event_base_new();
	struct policy *p = mkpolicy(ALLOW);
	struct policy *narrow = mkpolicy("{\"allow\": [{\"host\": \"allowed.test\", \"ports\": [80]}], "
	                                 "\"deny\": [{\"cidr\": \"198.18.1.0/24\"}]}");
	struct proxy_session s;
	struct sockaddr_storage at = v4("198.18.1.11", 80), priv = v4("10.0.0.5", 80), got;
	struct proxy_target t = target("allowed.test", 80);
	char address[PROXY_ADDRSTR_MAX];
	int peer;
	(void)state;

	session(&s, p, "198.18.1.11");
	assert_true(proxy_up_pool_allows(&s, &t, &at));
	proxy_up_pool_put(&s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	s.policy = narrow;
	assert_false(proxy_up_pool_allows(&s, &t, &at));
	assert_null(proxy_up_pool_take(&s, &t, &got, address));
	assert_int_equal(proxy_up_pool_count(&s), 0);
	close(peer);

	s.policy = p;
	{
		struct sockaddr_storage a = v4("10.0.0.5", 0);
		proxy_addr_cache_put(&s, "allowed.test", &a, 1, 60);
	}
	assert_false(proxy_up_pool_allows(&s, &t, &priv)); /* a forbidden range */
	proxy_up_pool_put(&s, conn(base, &peer), "allowed.test", 80, &priv, "10.0.0.5:80");
	assert_null(proxy_up_pool_take(&s, &t, &got, address));
	close(peer);

	done(&s);
	policy_unref(p);
	policy_unref(narrow);
	event_base_free(base);
}

/* Bytes or an end of file from an idle connection: it is never taken, whether the loop saw them or not. */
static void test_talks(void **state)
{
	struct event_base *base = event_base_new();
	struct policy *p = mkpolicy(ALLOW);
	struct proxy_session s;
	struct sockaddr_storage at = v4("198.18.1.11", 80), got;
	struct proxy_target t = target("allowed.test", 80);
	char address[PROXY_ADDRSTR_MAX];
	int peer;
	(void)state;

	session(&s, p, "198.18.1.11");
	/* waiting in the socket, not read yet: the take looks (MSG_PEEK) */
	proxy_up_pool_put(&s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	assert_int_equal(write(peer, "H", 1), 1);
	assert_null(proxy_up_pool_take(&s, &t, &got, address));
	assert_int_equal(proxy_up_pool_count(&s), 0);
	close(peer);
	proxy_up_pool_put(&s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	close(peer); /* the origin closed it */
	assert_null(proxy_up_pool_take(&s, &t, &got, address));
	/* seen by the loop while idle: closed there */
	proxy_up_pool_put(&s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	assert_int_equal(write(peer, "HTTP/1.1 200 OK\r\n", 17), 17);
	for (int i = 0; i < 10 && proxy_up_pool_count(&s); i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(proxy_up_pool_count(&s), 0);
	close(peer);
	proxy_up_pool_put(&s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	close(peer);
	for (int i = 0; i < 10 && proxy_up_pool_count(&s); i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(proxy_up_pool_count(&s), 0);

	done(&s);
	policy_unref(p);
	event_base_free(base);
}

/* An idle connection is closed after PROXY_UP_POOL_IDLE_MS, not before. */
static void test_idle_timeout(void **state)
{
	struct event_base *base = event_base_new();
	struct policy *p = mkpolicy(ALLOW);
	struct proxy_session s;
	struct sockaddr_storage at = v4("198.18.1.11", 80);
	struct timespec t0, t1;
	char b;
	int peer;
	uint64_t ms;
	(void)state;

	session(&s, p, "198.18.1.11");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	proxy_up_pool_put(&s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	while (proxy_up_pool_count(&s)) {
		struct timeval tv = {0, 100 * 1000};
		event_base_loopexit(base, &tv);
		event_base_dispatch(base);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ms = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000 + (uint64_t)(t1.tv_nsec / 1000000) - (uint64_t)(t0.tv_nsec / 1000000);
		assert_true(ms < PROXY_UP_POOL_IDLE_MS + 3000);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000 + (uint64_t)(t1.tv_nsec / 1000000) - (uint64_t)(t0.tv_nsec / 1000000);
	assert_true(ms >= PROXY_UP_POOL_IDLE_MS - 50);
	assert_int_equal(read(peer, &b, 1), 0); /* the proxy's side is closed */
	close(peer);
	done(&s);
	policy_unref(p);
	event_base_free(base);
}

static void test_cap(void **state)
{
	struct event_base *base = event_base_new();
	struct policy *p = mkpolicy(ALLOW);
	struct proxy_session s;
	struct sockaddr_storage at = v4("198.18.1.11", 80);
	int peers[PROXY_UP_POOL_MAX + 3];
	(void)state;

	session(&s, p, "198.18.1.11");
	for (int i = 0; i < PROXY_UP_POOL_MAX + 3; i++)
		proxy_up_pool_put(&s, conn(base, &peers[i]), "allowed.test", 80, &at, "198.18.1.11:80");
	assert_int_equal(proxy_up_pool_count(&s), PROXY_UP_POOL_MAX);
	proxy_up_pool_flush(&s);
	assert_int_equal(proxy_up_pool_count(&s), 0);
	for (int i = 0; i < PROXY_UP_POOL_MAX + 3; i++)
		close(peers[i]);
	done(&s);
	policy_unref(p);
	event_base_free(base);
}

/* The engine: replacing a session's policy empties its pool; removing the session frees it. */
static void test_engine(void **state)
{
	char path[] = "/tmp/sluice-up-pool-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = event_base_new();
	struct policy *p = mkpolicy(ALLOW);
	struct proxy_config cfg;
	struct proxy_session_info info;
	struct proxy_engine *e;
	struct proxy_session *s;
	struct sockaddr_storage at = v4("198.18.1.11", 80);
	char err[256];
	int peer;
	(void)state;

	assert_true(fd >= 0);
	unlink(path);
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = fd;
	cfg.upstream_dns = v4("127.0.0.1", 53);
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	e = proxy_engine_new(base, &cfg, err, sizeof err);
	assert_non_null(e);
	memset(&info, 0, sizeof info);
	info.id = "s1";
	info.command = "test";
	info.policy = p;
	info.addr4 = v4("100.64.0.2", 0);
	info.gw4 = v4("100.64.0.1", 0);
	assert_int_equal(proxy_engine_session_add(e, &info), 0);
	s = proxy_session_by_id(e, "s1");
	assert_non_null(s);
	proxy_up_pool_put(s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	assert_int_equal(proxy_up_pool_count(s), 1);
	assert_int_equal(e->up_idle, 1); /* the engine counts every session's */
	assert_int_equal(proxy_engine_session_set_policy(e, "s1", p), 0); /* even the same rules: emptied */
	assert_int_equal(proxy_up_pool_count(s), 0);
	assert_int_equal(e->up_idle, 0);
	close(peer);
	/* the engine's cap: beyond it, a connection is closed rather than kept */
	e->up_idle = PROXY_UP_POOL_ENGINE_MAX;
	proxy_up_pool_put(s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	assert_int_equal(proxy_up_pool_count(s), 0);
	e->up_idle = 0;
	close(peer);
	{
		struct proxy_target t = target("allowed.test", 80);
		struct sockaddr_storage got;
		char address[PROXY_ADDRSTR_MAX];
		struct bufferevent *b;
		struct sockaddr_storage a = v4("198.18.1.11", 0);
		proxy_addr_cache_put(s, "allowed.test", &a, 1, 60);
		proxy_up_pool_put(s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
		b = proxy_up_pool_take(s, &t, &got, address);
		assert_non_null(b);
		assert_int_equal(e->up_idle, 0); /* taken: no longer counted */
		bufferevent_free(b);
		close(peer);
	}
	proxy_up_pool_put(s, conn(base, &peer), "allowed.test", 80, &at, "198.18.1.11:80");
	assert_int_equal(proxy_engine_session_remove(e, "s1"), 0); /* (ASan: nothing leaks) */
	close(peer);
	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_take),  cmocka_unit_test(test_policy), cmocka_unit_test(test_talks),
	        cmocka_unit_test(test_cap),   cmocka_unit_test(test_engine), cmocka_unit_test(test_idle_timeout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
