/* Unit tests of the engine's in-process API (proxy/engine.h) as netd uses it: sessions added and
 * removed (duplicates, missing addresses and policies refused), listener kinds, netd's drop reports
 * landing in the audit log with the session found by source address, and the log handed over as an
 * fd. test_dns_cache_policy runs the loop: DNS over loopback with a fake upstream, the cache on, and the
 * session's policy replaced while its filtered answer is cached; test_direct_not_opened: a direct grant the
 * parent could not be told of is not kept, and its records say so. test_later: work left for the end of a
 * loop iteration (proxy_later_add, the HTTP front's deferred sends) runs once, after the callbacks already
 * due and after the iteration's audit batch is written, and not when cancelled. HTTPS inspection's: in
 * test_proxy_inspect.c. test_relay_read_bounded wraps recvmmsg(2) to keep the DNS relay's socket full. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <poll.h>
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
#include "engine_test.h"
#include "parent.h"
#include "policy.h"
#include "proxy_int.h"

/* The number of complete lines in the file at path now. */
static int file_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	int n = 0, c;
	assert_non_null(f);
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

static struct policy *mkpolicy(void)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err;
	struct policy *p;
	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_CLI, "example.com:443", false, "--allow", &err), 0);
	p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_builder_free(b);
	return p;
}

static void test_api(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = event_base_new();
	struct proxy_config cfg;
	struct proxy_session_info info;
	struct proxy_engine *e;
	struct policy *p = mkpolicy();
	struct sockaddr_storage src, dst;
	char err[256], line[8192];
	FILE *f;
	int n = 0, udp;
	(void)state;

	assert_true(fd >= 0);
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_path = NULL;
	cfg.audit_fd = fd; /* the engine owns it now */
	sin4(&cfg.upstream_dns, "127.0.0.1", 53);
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	e = proxy_engine_new(base, &cfg, err, sizeof err);
	assert_non_null(e);

	memset(&info, 0, sizeof info);
	info.id = "s1";
	info.uid = 1000;
	info.command = "npm ci";
	info.policy = p;
	assert_int_equal(proxy_engine_session_add(e, &info), -EINVAL); /* no address */
	sin4(&info.addr4, "100.64.0.2", 0);
	sin4(&info.gw4, "100.64.0.1", 0);
	assert_int_equal(proxy_engine_session_add(e, &info), 0);
	assert_int_equal(proxy_engine_session_add(e, &info), -EEXIST); /* same id */
	info.id = "s2";
	assert_int_equal(proxy_engine_session_add(e, &info), -EEXIST); /* same address */
	sin4(&info.addr4, "100.64.0.6", 0);
	info.policy = NULL;
	assert_int_equal(proxy_engine_session_add(e, &info), -EINVAL); /* no policy */
	info.policy = p;
	assert_int_equal(proxy_engine_session_add(e, &info), 0);
	policy_unref(p); /* the engine holds its own references */

	udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_int_equal(proxy_engine_add_listener(e, udp, (enum proxy_listener_kind)99), -EINVAL);
	{ /* transparent mode: a listening TCP socket like the HTTP one */
		struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(t >= 0);
		assert_int_equal(bind(t, (struct sockaddr *)&lo, sizeof lo), 0);
		assert_int_equal(listen(t, 16), 0);
		assert_int_equal(proxy_engine_add_listener(e, t, PROXY_LISTEN_TRANSPARENT), 0);
	}
	assert_int_equal(proxy_engine_add_listener(e, -1, PROXY_LISTEN_HTTP), -EBADF);

	sin4(&src, "100.64.0.2", 40000);
	sin4(&dst, "192.0.2.7", 22);
	assert_int_equal(proxy_engine_audit_drop(e, (struct sockaddr *)&src, (struct sockaddr *)&dst, IPPROTO_TCP), 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(file_lines(path), 1);
	/* each record is in the file at the end of the loop's iteration (batched), not when the engine ends:
	 * also one of no session */
	sin4(&src, "100.64.9.9", 1234);
	assert_int_equal(proxy_engine_audit_drop(e, (struct sockaddr *)&src, (struct sockaddr *)&dst, IPPROTO_UDP), 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(file_lines(path), 2);
	/* netd's count of the drops it did not report one by one: one record; nothing to count, none */
	assert_int_equal(proxy_engine_audit_drop_summary(e, NULL, 0, 0, 0), -EINVAL);
	assert_int_equal(proxy_engine_audit_drop_summary(e, NULL, 2495, 3, 1), 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(file_lines(path), 3);
	assert_int_equal(proxy_engine_audit_drop_summary(e, "s1", 7, 0, 0), 0); /* a session's drops */
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(file_lines(path), 4);
	assert_int_equal(proxy_engine_reopen_log(e), -EBADF); /* given as an fd: netd replaces it instead */
	assert_int_equal(proxy_engine_session_remove(e, "s1"), 0);
	assert_int_equal(proxy_engine_session_remove(e, "s1"), -ENOENT);
	proxy_engine_free(e);
	proxy_engine_free(NULL);
	event_base_free(base);

	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		json_object *o = json_tokener_parse(line), *v;
		assert_non_null(o);
		if (n >= 2) { /* the summaries: of no session, then of s1 */
			assert_true(json_object_object_get_ex(o, "protocol", &v));
			assert_string_equal(json_object_get_string(v), "drop-summary");
			assert_true(json_object_object_get_ex(o, "event", &v));
			assert_string_equal(json_object_get_string(v), "complete");
			assert_true(json_object_object_get_ex(o, "decision", &v));
			assert_string_equal(json_object_get_string(v), "deny");
			assert_true(json_object_object_get_ex(o, "host", &v));
			assert_true(json_object_is_type(v, json_type_null));
			assert_true(json_object_object_get_ex(o, "session", &v));
			if (n == 2)
				assert_true(json_object_is_type(v, json_type_null));
			else
				assert_string_equal(json_object_get_string(v), "s1");
			assert_true(json_object_object_get_ex(o, "reason", &v));
			assert_string_equal(
			        json_object_get_string(v),
			        n == 2 ? "2499 dropped packets not audited one by one: 2495 over the rate limit, 3 "
			                 "lost by the kernel, 1 not taken by the engine"
			               : "7 dropped packets not audited one by one: 7 over the rate limit, 0 lost "
			                 "by the kernel, 0 not taken by the engine");
			json_object_put(o);
			n++;
			continue;
		}
		assert_true(json_object_object_get_ex(o, "protocol", &v));
		assert_string_equal(json_object_get_string(v), "drop");
		assert_true(json_object_object_get_ex(o, "host", &v));
		assert_string_equal(json_object_get_string(v), "192.0.2.7");
		assert_true(json_object_object_get_ex(o, "session", &v));
		if (n == 0) {
			assert_string_equal(json_object_get_string(v), "s1");
			assert_true(json_object_object_get_ex(o, "method", &v));
			assert_string_equal(json_object_get_string(v), "tcp");
			assert_true(json_object_object_get_ex(o, "port", &v));
			assert_int_equal(json_object_get_int(v), 22);
		} else {
			assert_true(json_object_is_type(v, json_type_null)); /* no session has that source */
		}
		json_object_put(o);
		n++;
	}
	assert_int_equal(n, 4);
	fclose(f);
	unlink(path);

	/* a bad configuration is refused with a reason, and the fd is closed */
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = -1;
	cfg.audit_path = "/tmp/sluice-engine-test-unused";
	base = event_base_new();
	assert_null(proxy_engine_new(base, &cfg, err, sizeof err));
	assert_non_null(strstr(err, "upstream DNS"));
	event_base_free(base);
}

static int udp_bound(const char *ip, uint16_t *port)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(fd >= 0);
	sin4(&ss, ip, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

static const uint8_t cached_query[] = {0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 6, 'c', 'a', 'c', 'h', 'e',
                                       'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};

/* The engine's query for cached.test (n bytes in buf, which has room for 1500) becomes the upstream's answer
 * in place: the same question back with two A records, a public and a private address, TTL 300; or, when
 * truncated, none and the TC bit (the whole answer is then asked for over TCP). Returns its length. */
static size_t cached_answer(uint8_t *buf, ssize_t n, bool truncated)
{
	static const uint8_t rrs[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 198, 18, 1, 7,
	                              0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 44, 0, 4, 10, 9, 8, 7};

	assert_true(n >= (ssize_t)sizeof cached_query);
	buf[2] = truncated ? 0x83 : 0x81;
	buf[3] = 0x80;
	buf[6] = 0;
	buf[7] = truncated ? 0 : 2;     /* ancount */
	buf[9] = buf[10] = buf[11] = 0; /* no authority, no additional (the OPT is dropped) */
	if (truncated)
		return sizeof cached_query;
	memcpy(buf + sizeof cached_query, rrs, sizeof rrs);
	return sizeof cached_query + sizeof rrs;
}

/* The upstream takes the engine's query for cached.test A and answers it (cached_answer). */
static void answer_cached_as(int upstream, bool truncated)
{
	uint8_t buf[1500];
	struct sockaddr_storage from;
	socklen_t fl = sizeof from;
	ssize_t n = recvfrom(upstream, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
	size_t len = cached_answer(buf, n, truncated);

	assert_int_equal(sendto(upstream, buf, len, 0, (struct sockaddr *)&from, fl), (ssize_t)len);
}

static void answer_cached(int upstream)
{
	answer_cached_as(upstream, false);
}

/* Asks the engine for cached.test A from the session's address; the upstream (when asked) answers with a
 * public and a private address, TTL 300. Returns the answer's rcode and its number of A records; *asked
 * says whether the upstream was asked. */
static int ask(struct event_base *base, int client, int upstream, const struct sockaddr_storage *gw, unsigned *nrr,
               bool *asked)
{
	uint8_t buf[1500];
	ssize_t n;
	struct pollfd pfd = {.fd = upstream, .events = POLLIN};

	*asked = false;
	assert_int_equal(sendto(client, cached_query, sizeof cached_query, 0, (const struct sockaddr *)gw,
	                        sizeof(struct sockaddr_in)),
	                 (ssize_t)sizeof cached_query);
	for (int i = 0; i < 400; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (poll(&pfd, 1, 0) == 1) {
			answer_cached(upstream);
			*asked = true;
			break;
		}
		pfd.fd = client;
		if (poll(&pfd, 1, 5) == 1)
			break;
		pfd.fd = upstream;
	}
	loop_until(base, client);
	n = recv(client, buf, sizeof buf, 0);
	assert_true(n >= 12);
	assert_int_equal(buf[0] << 8 | buf[1], 0x1234);
	*nrr = (unsigned)(buf[6] << 8 | buf[7]);
	return buf[3] & 0x0f;
}

/* An engine writing its audit log to fd, relaying DNS to 127.0.0.4:up_port, with a DNS cache of `cache`
 * entries, and session s1 (127.0.0.2, gateway 127.0.0.3) under p; its listeners are the caller's. */
static struct proxy_engine *dns_engine(struct event_base *base, int fd, uint16_t up_port, unsigned cache,
                                       struct policy *p)
{
	struct proxy_config cfg;
	struct proxy_session_info info;
	struct proxy_engine *e;
	char err[256];

	assert_true(fd >= 0);
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = fd;
	cfg.dns_cache_entries = cache;
	sin4(&cfg.upstream_dns, "127.0.0.4", up_port);
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	e = proxy_engine_new(base, &cfg, err, sizeof err);
	assert_non_null(e);
	memset(&info, 0, sizeof info);
	info.id = "s1";
	info.command = "test";
	info.policy = p;
	sin4(&info.addr4, "127.0.0.2", 0);
	sin4(&info.gw4, "127.0.0.3", 0);
	assert_int_equal(proxy_engine_session_add(e, &info), 0);
	return e;
}

/* A cached answer is filtered for the asking session's policy, and after the policy is replaced the
 * answer filtered for the old one is never served: the private address the old policy allowed is gone,
 * a name the new one denies is refused, although the answer stays cached (the upstream is not asked). */
static void test_dns_cache_policy(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = event_base_new();
	struct proxy_engine *e;
	struct policy *with_private = json_policy("{\"allow\": [\"cached.test\", {\"cidr\": \"10.0.0.0/8\"}]}");
	struct policy *public_only = json_policy("{\"allow\": [\"cached.test\"]}");
	struct policy *denied = json_policy("{\"allow\": [\"other.test\"]}");
	struct policy *asking = json_policy("{\"allow\": [\"other.test\"], \"options\": {\"ask\": true}}");
	struct sockaddr_storage gw;
	uint16_t up_port, gw_port, client_port;
	int upstream = udp_bound("127.0.0.4", &up_port), listener = udp_bound("127.0.0.3", &gw_port);
	int client = udp_bound("127.0.0.2", &client_port);
	unsigned nrr;
	bool asked;
	(void)state;

	e = dns_engine(base, fd, up_port, 16, with_private);
	assert_int_equal(proxy_engine_add_listener(e, listener, PROXY_LISTEN_DNS_UDP), 0);
	sin4(&gw, "127.0.0.3", gw_port);

	/* fetched, then from the cache (filtered again), then from its filtered view: both addresses */
	assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
	assert_true(asked);
	assert_int_equal(nrr, 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
		assert_false(asked);
		assert_int_equal(nrr, 2);
	}
	/* a new policy without the private range: the cached answer loses that address */
	assert_int_equal(proxy_engine_session_set_policy(e, "s1", public_only), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
		assert_false(asked);
		assert_int_equal(nrr, 1);
	}
	/* the old policy again, as a new version: the address is back (its own filtering, not a stale view) */
	assert_int_equal(proxy_engine_session_set_policy(e, "s1", with_private), 0);
	assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
	assert_int_equal(nrr, 2);
	/* a policy that denies the name: refused, although the answer is cached */
	assert_int_equal(proxy_engine_session_set_policy(e, "s1", denied), 0);
	for (int i = 0; i < 2; i++) { /* the second time from the decisions kept for this policy: the same */
		assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 5);
		assert_false(asked);
		assert_int_equal(nrr, 0);
	}
	/* an "ask" policy: refused while nobody approved it, and allowed once approved, under the same policy
	 * (an ask outcome depends on the session's approvals: never kept as the policy's decision) */
	assert_int_equal(proxy_engine_session_set_policy(e, "s1", asking), 0);
	assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 5);
	assert_int_equal(proxy_engine_session_grant(e, "s1", "cached.test", 443, true, 0), 0);
	assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
	assert_int_equal(nrr, 1); /* (no private range in this policy) */
	/* and a name denied under the last policies is allowed under a new one that allows it */
	assert_int_equal(proxy_engine_session_set_policy(e, "s1", with_private), 0);
	assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
	assert_int_equal(nrr, 2);

	policy_unref(with_private);
	policy_unref(public_only);
	policy_unref(denied);
	policy_unref(asking);
	proxy_engine_free(e);
	event_base_free(base);
	close(upstream);
	close(client);
	{ /* one audit record per query, each a decision; the two denials alike (host, rule, reason) */
		FILE *f = fopen(path, "r");
		char line[8192], denial[2][8192];
		int n = 0, nd = 0;
		assert_non_null(f);
		while (fgets(line, sizeof line, f)) {
			char *d = strstr(line, "\"protocol\":\"dns\"");
			n += d != NULL;
			if (d && strstr(line, "\"decision\":\"deny\"") && strstr(line, "no rule allows") && nd < 2) {
				assert_non_null(strstr(d, "\"host\":\"cached.test\""));
				*strstr(d, ",\"status\"") = '\0'; /* (what follows differs: duration, hash) */
				strcpy(denial[nd++], d);
			}
		}
		assert_int_equal(n, 12);
		assert_int_equal(nd, 2);
		assert_string_equal(denial[0], denial[1]);
		fclose(f);
	}
	unlink(path);
}

/* Direct mode, the parent's side faked: what direct_notify answered, and how often it was called. */
struct direct_fake {
	int rc;
	unsigned calls;
};

static int direct_fake_notify(const struct proxy_direct_event *ev, void *arg)
{
	struct direct_fake *f = arg;

	assert_false(ev->revoke);
	f->calls++;
	return f->rc;
}

/* A direct grant the parent cannot be told of (netd: sluiced does not read the engine's reports) opens
 * nothing: the engine does not remember it, and the audit records of the grant and of the DNS query say the
 * flows were not opened; once the parent is told again, the grant is remembered and its records are plain. */
/* A stall of the whole machine longer than the relay's query timeout (4 s), the resolver stalled too: the
 * engine's sweep, noticed more than 500 ms late, moves the deadlines of the queries in flight, so the answer
 * the resolver sends once it runs again is relayed (before: SERVFAIL the moment the engine ran). The engine
 * runs on the event loop sluice-proxy and sluiced use (proxy_event_base_new). */
static void test_dns_relay_stall(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = proxy_event_base_new();
	struct proxy_engine *e;
	struct policy *p = json_policy("{\"allow\": [\"cached.test\"]}");
	struct sockaddr_storage gw;
	uint16_t up_port, gw_port, client_port;
	int upstream = udp_bound("127.0.0.4", &up_port), listener = udp_bound("127.0.0.3", &gw_port);
	int client = udp_bound("127.0.0.2", &client_port);
	struct timespec stall = {4, 600000000};
	struct pollfd pfd = {.fd = client, .events = POLLIN};
	uint8_t buf[1500];
	ssize_t n;
	(void)state;

	assert_non_null(base);
	e = dns_engine(base, fd, up_port, 0, p);
	assert_int_equal(proxy_engine_add_listener(e, listener, PROXY_LISTEN_DNS_UDP), 0);
	sin4(&gw, "127.0.0.3", gw_port);
	assert_int_equal(sendto(client, cached_query, sizeof cached_query, 0, (struct sockaddr *)&gw,
	                        sizeof(struct sockaddr_in)),
	                 (ssize_t)sizeof cached_query);
	loop_until(base, upstream); /* relayed; the resolver stalls before it answers */
	nanosleep(&stall, NULL);    /* ... and so does the engine */
	for (int i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK); /* the engine runs first: its sweep is late */
	assert_int_equal(poll(&pfd, 1, 0), 0);          /* no SERVFAIL */
	answer_cached(upstream);
	loop_until(base, client);
	n = recv(client, buf, sizeof buf, 0);
	assert_true(n >= 12);
	assert_int_equal(buf[0] << 8 | buf[1], 0x1234);
	assert_int_equal(buf[3] & 0x0f, 0);        /* NOERROR */
	assert_int_equal(buf[6] << 8 | buf[7], 1); /* the public address (the policy allows no private range) */

	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	close(upstream);
	close(client);
	unlink(path);
}

struct resolved {
	bool done;
	int err;
	size_t n;
};

static void resolved_cb(int err, const struct sockaddr_storage *addrs, size_t n, uint32_t ttl, void *arg)
{
	struct resolved *res = arg;
	(void)addrs;
	(void)ttl;

	res->done = true;
	res->err = err;
	res->n = n;
}

/* Runs the loop until the lookup ends (at most 2 s), which must have found an address. */
static void resolved_ok(struct event_base *base, const struct resolved *res)
{
	for (int i = 0; i < 400 && !res->done; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		nanosleep(&(struct timespec){0, 5000000}, NULL);
	}
	assert_true(res->done);
	assert_int_equal(res->err, 0);
	assert_true(res->n >= 1);
}

/* The engine's resolver (an HTTP or CONNECT destination) asks, asks once more at 2 s, and gives up at 4 s;
 * when the whole machine stalls past that deadline (the resolver stalled too), the deadline noticed more than
 * 500 ms late gives the questions their time again, once, and the answer the resolver sends once it runs is
 * used (before: PROXY_RESOLVE_TIMEOUT the moment the engine ran). About 4.7 s. */
static void test_resolve_stall(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = proxy_event_base_new();
	struct proxy_engine *e;
	struct policy *p = json_policy("{\"allow\": [\"cached.test\"]}");
	uint16_t up_port;
	int upstream = udp_bound("127.0.0.4", &up_port);
	struct timeval past_retry = {2, 200000};
	struct timespec stall = {2, 600000000};
	struct pollfd pfd = {.fd = upstream, .events = POLLIN};
	struct resolved res = {0};
	(void)state;

	assert_non_null(base);
	e = dns_engine(base, fd, up_port, 0, p);
	assert_non_null(proxy_resolve_start(e, "cached.test", resolved_cb, &res));
	loop_until(base, upstream); /* asked; the resolver stalls before it answers */
	event_base_loopexit(base, &past_retry);
	event_base_dispatch(base); /* the retry at 2 s asks again */
	assert_false(res.done);
	nanosleep(&stall, NULL); /* past the 4 s deadline by 0.8 s: the engine did not run, nor did the resolver */
	for (int i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK); /* the engine runs first: its deadline is late */
	assert_false(res.done);                         /* no timeout */
	while (poll(&pfd, 1, 0) == 1)
		answer_cached(upstream); /* every question asked (the first ones are no longer waited for) */
	resolved_ok(base, &res);

	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	close(upstream);
	unlink(path);
}

/* An answer too large for UDP is asked for again over TCP (the upstream's UDP answer is truncated), where the
 * relay's query has a 4 s timeout of its own. When the whole machine stalls past it (the upstream stalled
 * too), the timeout noticed more than 500 ms late gives the query its time again, once, and the answer the
 * upstream sends once it runs is used (before: the lookup failed the moment the engine ran). About 4.7 s. */
static void test_resolve_tcp_stall(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = proxy_event_base_new();
	struct proxy_engine *e;
	struct policy *p = json_policy("{\"allow\": [\"cached.test\"]}");
	struct sockaddr_storage up;
	uint16_t up_port;
	int upstream = udp_bound("127.0.0.4", &up_port);
	int tcp_up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), conns[2];
	struct timespec stall = {4, 600000000};
	struct resolved res = {0};
	uint8_t ans[2][1500];
	size_t len[2];
	(void)state;

	assert_non_null(base);
	assert_true(tcp_up >= 0);
	sin4(&up, "127.0.0.4", up_port);
	assert_int_equal(bind(tcp_up, (struct sockaddr *)&up, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(listen(tcp_up, 4), 0);
	e = dns_engine(base, fd, up_port, 0, p);
	assert_non_null(proxy_resolve_start(e, "cached.test", resolved_cb, &res));
	for (int i = 0; i < 2; i++) { /* A and AAAA: each answered truncated, each asked again over TCP */
		loop_until(base, upstream);
		answer_cached_as(upstream, true);
	}
	for (int i = 0; i < 2; i++) {
		loop_until(base, tcp_up);
		conns[i] = accept4(tcp_up, NULL, NULL, SOCK_CLOEXEC);
		assert_true(conns[i] >= 0);
	}
	for (int i = 0; i < 2; i++) { /* each connection's query, read whole, and its answer made ready */
		ssize_t n = 0, r;
		while (n < 2 || n < 2 + (ans[i][0] << 8 | ans[i][1])) {
			loop_until(base, conns[i]);
			r = recv(conns[i], ans[i] + n, sizeof ans[i] - (size_t)n, 0);
			assert_true(r > 0);
			n += r;
		}
		memmove(ans[i], ans[i] + 2, (size_t)n - 2);
		len[i] = cached_answer(ans[i], n - 2, false);
		memmove(ans[i] + 2, ans[i], len[i]);
		ans[i][0] = (uint8_t)(len[i] >> 8);
		ans[i][1] = (uint8_t)len[i];
	}
	nanosleep(&stall, NULL); /* past the 4 s timeout by 0.6 s: the engine did not run, nor did the upstream */
	for (int i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK); /* the engine runs first: its timeouts are late */
	assert_false(res.done);                         /* the lookup did not fail */
	for (int i = 0; i < 2; i++)
		assert_int_equal(send(conns[i], ans[i], len[i] + 2, MSG_NOSIGNAL), (ssize_t)len[i] + 2);
	resolved_ok(base, &res);

	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	for (int i = 0; i < 2; i++)
		close(conns[i]);
	close(tcp_up);
	close(upstream);
	unlink(path);
}

/* recvmmsg(2) wrapped: while flood_calls is set, every call "receives" a full batch of empty datagrams
 * (shorter than a DNS header: ignored), as a resolver flooding the relay's socket would keep it full;
 * after FLOOD_STOP calls it reports the socket empty, so a reader without a bound still returns. */
#define FLOOD_STOP 100000
static unsigned flood_calls;
static bool flooding;
int __real_recvmmsg(int fd, struct mmsghdr *msgs, unsigned vlen, int flags, struct timespec *timeout);
int __wrap_recvmmsg(int fd, struct mmsghdr *msgs, unsigned vlen, int flags, struct timespec *timeout);
int __wrap_recvmmsg(int fd, struct mmsghdr *msgs, unsigned vlen, int flags, struct timespec *timeout)
{
	if (!flooding)
		return __real_recvmmsg(fd, msgs, vlen, flags, timeout);
	if (++flood_calls > FLOOD_STOP) {
		errno = EAGAIN;
		return -1;
	}
	for (unsigned i = 0; i < vlen; i++)
		msgs[i].msg_len = 0;
	return (int)vlen;
}

/* Reading the answers that wait in the relay's sockets before a lookup's deadline decides (the resolver's
 * late timer) is bounded: a resolver that keeps its socket full cannot hold the engine there. At most
 * 65536 / 32 + 1 full batches a socket (every open query's answer), 4 sockets. */
static void test_relay_read_bounded(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = proxy_event_base_new();
	struct policy *p = json_policy("{\"allow\": [\"cached.test\"]}");
	struct proxy_engine *e;
	uint16_t up_port;
	int upstream = udp_bound("127.0.0.4", &up_port);
	struct resolved res = {0};
	(void)state;

	assert_non_null(base);
	e = dns_engine(base, fd, up_port, 0, p);
	assert_non_null(proxy_resolve_start(e, "cached.test", resolved_cb, &res));
	loop_until(base, upstream); /* a relay socket is connected: its query went out */
	flooding = true;
	flood_calls = 0;
	dns_relay_read_now(e->relay);
	flooding = false;
	assert_in_range(flood_calls, 1, 4 * (65536 / 32 + 1) + 4);

	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	close(upstream);
	unlink(path);
}

/* SOCKS5 greetings that came before their handshake deadline but wait unread when it passes: after a stall
 * of the engine, epoll hands the loop 32 ready sockets at first (more once it saw a full batch) and the expired
 * timers run behind them, so
 * most greetings are still in their sockets when their timers fire. The timer reads them first: every
 * client gets its method reply (before: the ones behind the first batch were closed). The stall (400 ms,
 * the header timeout 300 ms) is too short for the grace after a stall: the read alone does it. */
static void test_handshake_read_first(void **state)
{
	enum { N = 100 };
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path), lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), c[N];
	struct event_base *base = proxy_event_base_new();
	struct policy *p = json_policy("{\"allow\": [\"cached.test\"]}");
	struct proxy_engine *e = dns_engine(base, fd, 53, 0, p);
	struct sockaddr_storage gw, src;
	socklen_t len = sizeof gw;
	struct timeval tv = {0, 300000};
	struct timespec stall = {0, 400000000};
	int replied = 0;
	(void)state;

	e->header_timeout_ms = 300;
	e->tv_header = event_base_init_common_timeout(base, &tv);
	sin4(&gw, "127.0.0.3", 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&gw, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(listen(lfd, N), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&gw, &len), 0);
	assert_int_equal(proxy_engine_add_listener(e, lfd, PROXY_LISTEN_SOCKS5), 0);
	sin4(&src, "127.0.0.2", 0);
	for (int i = 0; i < N; i++) {
		/* a few at a time: the loop never sees more than 32 ready sockets before the stall, so its batch
		 * stays at libevent's first size */
		c[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(bind(c[i], (struct sockaddr *)&src, sizeof(struct sockaddr_in)), 0);
		assert_int_equal(connect(c[i], (struct sockaddr *)&gw, sizeof(struct sockaddr_in)), 0);
		if (i % 8 == 7)
			for (int k = 0; k < 3; k++)
				event_base_loop(base, EVLOOP_NONBLOCK);
	}
	for (int i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK); /* all accepted, their deadlines running */
	for (int i = 0; i < N; i++)
		assert_int_equal(send(c[i], "\x05\x01\x00", 3, 0), 3);
	nanosleep(&stall, NULL); /* the greetings came in time; the engine did not run */
	for (int i = 0; i < 20; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	for (int i = 0; i < N; i++) {
		struct pollfd pfd = {.fd = c[i], .events = POLLIN};
		uint8_t m[2];
		if (poll(&pfd, 1, 100) == 1 && recv(c[i], m, 2, MSG_DONTWAIT) == 2 && m[0] == 5 && m[1] == 0)
			replied++;
		close(c[i]);
	}
	assert_int_equal(replied, N);

	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	unlink(path);
}

struct parent_dial_seen {
	int n;
	int status;
	char reason[512];
	struct bufferevent *bev;
};

static void parent_dial_cb(struct bufferevent *bev, const struct proxy_dial_result *res, void *arg)
{
	struct parent_dial_seen *seen = arg;
	seen->n++;
	seen->status = res->status;
	snprintf(seen->reason, sizeof seen->reason, "%s", res->reason);
	seen->bev = bev;
}

/* A parent proxy's answer to CONNECT, after a stall of the whole machine longer than the connect timeout
 * (300 ms here) plus 500 ms, the parent stalled too: the timer the engine notices late gives the parent its
 * time again, so the answer the parent sends once it runs is used (before: 504 the moment the engine ran);
 * a parent that stays silent still fails the dial with 504 after that grace. */
static void test_parent_connect_stall(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path), lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), pc[2];
	struct event_base *base = proxy_event_base_new();
	struct policy *p = json_policy("{\"allow\": [\"cached.test\"]}");
	struct proxy_engine *e = dns_engine(base, fd, 53, 0, p);
	struct proxy_parent *parent = calloc(1, sizeof *parent);
	struct proxy_session *s = proxy_session_by_id(e, "s1");
	struct proxy_target t;
	struct parent_dial_seen seen[2];
	struct timeval tv = {0, 300000};
	struct timespec stall = {0, 900000000};
	char buf[512];
	(void)state;

	assert_non_null(parent);
	assert_non_null(s);
	memset(seen, 0, sizeof seen);
	e->connect_timeout_ms = 300;
	e->tv_connect = event_base_init_common_timeout(base, &tv);
	sin4(&parent->addr, "127.0.0.4", 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&parent->addr, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(listen(lfd, 4), 0);
	parent->addrlen = sizeof(struct sockaddr_in);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&parent->addr, &parent->addrlen), 0);
	snprintf(parent->where, sizeof parent->where, "127.0.0.4:%u",
	         ntohs(((struct sockaddr_in *)&parent->addr)->sin_port));
	e->parent = parent; /* (the engine frees it) */
	memset(&t, 0, sizeof t);
	snprintf(t.host, sizeof t.host, "192.0.2.1");
	t.port = 443;
	t.literal = true;
	sin4(&t.addr, "192.0.2.1", 443);
	for (int i = 0; i < 2; i++) {
		assert_non_null(proxy_dial_start(s, &t, true, parent_dial_cb, &seen[i]));
		loop_until(base, lfd);
		pc[i] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		assert_true(pc[i] >= 0);
		loop_until(base, pc[i]); /* connected: the CONNECT came */
		assert_true(recv(pc[i], buf, sizeof buf, 0) > 0);
		assert_memory_equal(buf, "CONNECT 192.0.2.1:443 ", 22);
	}
	nanosleep(&stall, NULL); /* the parent did not run, nor did the engine */
	for (int i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK); /* the engine runs first: its timers are late */
	assert_int_equal(seen[0].n, 0); /* no 504 */
	assert_int_equal(seen[1].n, 0);
	assert_int_equal(send(pc[0], "HTTP/1.1 200 OK\r\n\r\n", 19, 0), 19);
	for (int i = 0; i < 400 && (!seen[0].n || !seen[1].n); i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		nanosleep(&(struct timespec){0, 5000000}, NULL);
	}
	assert_int_equal(seen[0].n, 1);
	assert_int_equal(seen[0].status, 0);
	assert_non_null(seen[0].bev);
	bufferevent_free(seen[0].bev);
	/* the one that stays silent: once only */
	assert_int_equal(seen[1].n, 1);
	assert_int_equal(seen[1].status, 504);
	assert_non_null(strstr(seen[1].reason, "did not answer CONNECT in time"));

	close(pc[0]);
	close(pc[1]);
	close(lfd);
	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	unlink(path);
}

static void test_direct_not_opened(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = event_base_new();
	struct policy *p = json_policy("{\"allow\": [\"cached.test:22\"], \"options\": {\"direct\": true}}");
	struct direct_fake f = {.rc = -ENOBUFS};
	struct sockaddr_storage gw;
	uint16_t up_port, gw_port, client_port;
	int upstream = udp_bound("127.0.0.4", &up_port), listener = udp_bound("127.0.0.3", &gw_port);
	int client = udp_bound("127.0.0.2", &client_port);
	struct proxy_engine *e;
	struct proxy_session *s;
	unsigned nrr;
	bool asked;
	(void)state;

	e = dns_engine(base, fd, up_port, 16, p);
	e->direct_notify = direct_fake_notify;
	e->direct_arg = &f;
	s = TAILQ_FIRST(&e->sessions);
	assert_int_equal(proxy_engine_add_listener(e, listener, PROXY_LISTEN_DNS_UDP), 0);
	sin4(&gw, "127.0.0.3", gw_port);

	/* refused by the parent: the answer still comes (its public address), no grant is kept */
	assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
	assert_int_equal(nrr, 1);
	assert_int_equal(f.calls, 1);
	assert_int_equal(s->ndirect, 0);
	/* told: the grant is kept */
	f.rc = 0;
	assert_int_equal(ask(base, client, upstream, &gw, &nrr, &asked), 0);
	assert_int_equal(f.calls, 2);
	assert_int_equal(s->ndirect, 1);

	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	close(upstream);
	close(client);
	{ /* the first answer's two records say the flows were not opened, the second's do not */
		FILE *f2 = fopen(path, "r");
		char line[8192];
		const char *err = "\"error\":\"direct flows not opened: sluiced takes none of the engine's reports";
		unsigned dns = 0, direct = 0;
		assert_non_null(f2);
		while (fgets(line, sizeof line, f2)) {
			bool is_dns = strstr(line, "\"protocol\":\"dns\"") != NULL;
			bool is_direct = strstr(line, "\"protocol\":\"direct\"") != NULL;
			unsigned nth = is_dns ? dns++ : is_direct ? direct++ : 99;
			if (!is_dns && !is_direct)
				continue;
			assert_non_null(strstr(line, "\"decision\":\"allow\""));
			if (is_direct)
				assert_non_null(strstr(line, "\"address\":\"198.18.1.7:22\""));
			if (nth == 0)
				assert_non_null(strstr(line, err));
			else
				assert_non_null(strstr(line, "\"error\":null"));
		}
		assert_int_equal(dns, 2);
		assert_int_equal(direct, 2);
		fclose(f2);
	}
	unlink(path);
}

/* The rcode of the answer to a query for denied.test A sent from client to ip:port, or -1 when none comes
 * (the engine's loop run for 100 ms). */
static int refused_from(struct event_base *base, int client, const char *ip, uint16_t port)
{
	static const uint8_t query[] = {0x43, 0x21, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 6, 'd', 'e', 'n', 'i', 'e',
	                                'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};
	struct sockaddr_storage to;
	uint8_t buf[512];
	ssize_t n;

	sin4(&to, ip, port);
	assert_int_equal(sendto(client, query, sizeof query, 0, (const struct sockaddr *)&to, sizeof(struct sockaddr_in)),
	                 (ssize_t)sizeof query);
	for (int i = 0; i < 20; i++) {
		struct pollfd pfd = {.fd = client, .events = POLLIN};
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (poll(&pfd, 1, 5) == 1)
			break;
	}
	n = recv(client, buf, sizeof buf, MSG_DONTWAIT);
	if (n < 0)
		return -1;
	assert_true(n >= 12);
	assert_int_equal(buf[0] << 8 | buf[1], 0x4321);
	return buf[3] & 0x0f;
}

/* A session's queries are answered only when sent to its gateway: on a listener bound to one address
 * (which the kernel is not asked to name with each query: it is every query's destination) and on a
 * wildcard-bound one (the destination read from IP_PKTINFO). */
static void test_dns_listener_gateway(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = event_base_new();
	struct proxy_engine *e;
	struct policy *p = json_policy("{\"allow\": [\"other.test\"]}");
	uint16_t gw_port, other_port, any_port, client_port;
	int gw = udp_bound("127.0.0.3", &gw_port), other = udp_bound("127.0.0.6", &other_port);
	int any = udp_bound("0.0.0.0", &any_port), client = udp_bound("127.0.0.2", &client_port);
	(void)state;

	e = dns_engine(base, fd, 53, 0, p);
	assert_int_equal(proxy_engine_add_listener(e, gw, PROXY_LISTEN_DNS_UDP), 0);
	assert_int_equal(proxy_engine_add_listener(e, other, PROXY_LISTEN_DNS_UDP), 0);
	assert_int_equal(proxy_engine_add_listener(e, any, PROXY_LISTEN_DNS_UDP), 0);

	assert_int_equal(refused_from(base, client, "127.0.0.3", gw_port), 5);     /* bound to its gateway */
	assert_int_equal(refused_from(base, client, "127.0.0.6", other_port), -1); /* bound to another address */
	assert_int_equal(refused_from(base, client, "127.0.0.3", any_port), 5);    /* wildcard, to its gateway */
	assert_int_equal(refused_from(base, client, "127.0.0.7", any_port), -1);   /* wildcard, to another */

	policy_unref(p);
	proxy_engine_free(e);
	event_base_free(base);
	close(client);
	unlink(path);
}

/* A burst of more queries than one read takes (128): every one answered (its own id) and audited, through
 * the listener's reads of several batches per wake-up, each batch's records written before the next. */
static void test_dns_burst(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path);
	struct event_base *base = event_base_new();
	struct proxy_engine *e;
	struct policy *p = json_policy("{\"allow\": [\"other.test\"]}");
	uint16_t gw_port, client_port;
	int gw = udp_bound("127.0.0.3", &gw_port), client = udp_bound("127.0.0.2", &client_port);
	uint8_t query[] = {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 6, 'd', 'e', 'n',
	                   'i', 'e', 'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};
	struct sockaddr_storage to;
	static bool seen[200]; /* (200 queries: the listener's socket buffer holds 256 of them) */
	unsigned got = 0;
	(void)state;

	e = dns_engine(base, fd, 53, 0, p);
	assert_int_equal(proxy_engine_add_listener(e, gw, PROXY_LISTEN_DNS_UDP), 0);
	sin4(&to, "127.0.0.3", gw_port);
	for (unsigned id = 0; id < 200; id++) {
		query[0] = (uint8_t)(id >> 8);
		query[1] = (uint8_t)id;
		assert_int_equal(sendto(client, query, sizeof query, 0, (const struct sockaddr *)&to, sizeof(struct sockaddr_in)),
		                 (ssize_t)sizeof query);
	}
	for (int i = 0; i < 400 && got < 200; i++) {
		uint8_t buf[512];
		ssize_t n;
		event_base_loop(base, EVLOOP_NONBLOCK);
		while ((n = recv(client, buf, sizeof buf, MSG_DONTWAIT)) >= 12) {
			unsigned id = (unsigned)(buf[0] << 8 | buf[1]);
			assert_true(id < 200);
			assert_false(seen[id]);
			assert_int_equal(buf[3] & 0x0f, 5);
			seen[id] = true;
			got++;
		}
		if (got < 200)
			poll(NULL, 0, 5);
	}
	assert_int_equal(got, 200);
	proxy_engine_free(e);
	policy_unref(p);
	event_base_free(base);
	close(client);
	assert_int_equal(file_lines(path), 200);
	unlink(path);
}

/* ---- proxy_later ---- */

struct later_mark {
	struct proxy_later l; /* first */
	int id;
};

static int later_order[8], later_n, later_lines[8];
static const char *later_path;
static struct later_mark later_inner = {.id = 3};

static void later_run(struct proxy_later *l)
{
	assert_true(later_n < 8);
	later_lines[later_n] = file_lines(later_path); /* what the audit log holds when it runs */
	later_order[later_n++] = ((struct later_mark *)l)->id;
}

static void later_due_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_engine *e = arg;
	struct audit_record rec = {.event = "decision", .flow = 1, .protocol = "http", .host = "example.com",
	                           .port = 80, .method = "GET", .decision = "allow", .reason = "test"};
	(void)fd;
	(void)what;
	later_order[later_n++] = 0;
	/* a decision of the iteration, batched: on disk before any send left for the end of it */
	clock_gettime(CLOCK_REALTIME, &rec.start);
	assert_int_equal(audit_log_write(e->audit, &rec), 0);
	proxy_audit_schedule(e);
	assert_int_equal(file_lines(later_path), 0);
	proxy_later_add(arg, &later_inner.l); /* added by a callback of the iteration: the same end */
}

static void test_later(void **state)
{
	char path[] = "/tmp/sluice-engine-test-XXXXXX";
	int fd = mkstemp(path), ran[4] = {0};
	struct event_base *base = event_base_new();
	struct proxy_config cfg;
	struct proxy_engine *e;
	struct later_mark m1 = {.id = 1}, m2 = {.id = 2}, gone = {.id = 9};
	struct event *due;
	char err[256];
	(void)state;

	assert_true(fd >= 0);
	later_path = path;
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = fd;
	sin4(&cfg.upstream_dns, "127.0.0.1", 53);
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	e = proxy_engine_new(base, &cfg, err, sizeof err);
	assert_non_null(e);
	m1.l.run = m2.l.run = gone.l.run = later_inner.l.run = later_run;
	later_n = 0;

	due = event_new(base, -1, 0, later_due_cb, e);
	assert_non_null(due);
	event_active(due, EV_TIMEOUT, 1); /* a callback already due in this iteration */
	proxy_later_add(e, &m1.l);
	proxy_later_add(e, &gone.l);
	proxy_later_add(e, &m2.l);
	proxy_later_add(e, &m1.l); /* queued once */
	proxy_later_cancel(&gone.l);
	proxy_later_cancel(&gone.l); /* (twice: nothing) */
	assert_int_equal(later_n, 0); /* nothing runs when added */
	event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);

	assert_int_equal(later_n, 4);
	assert_int_equal(later_order[0], 0); /* after the callback that was due */
	for (int i = 1; i < 4; i++) {
		assert_true(later_order[i] >= 1 && later_order[i] <= 3);
		ran[later_order[i]]++;
	}
	assert_int_equal(ran[1], 1);
	assert_int_equal(ran[2], 1);
	assert_int_equal(ran[3], 1);
	for (int i = 1; i < 4; i++)
		assert_int_equal(later_lines[i], 1); /* the iteration's batch was written before they ran */
	assert_null(m1.l.pprev); /* out of the list once run */
	assert_null(e->later);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(later_n, 4); /* and not again */

	event_free(due);
	proxy_engine_free(e);
	event_base_free(base);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_api),
	        cmocka_unit_test(test_dns_cache_policy),
	        cmocka_unit_test(test_dns_relay_stall),
	        cmocka_unit_test(test_handshake_read_first),
	        cmocka_unit_test(test_parent_connect_stall),
	        cmocka_unit_test(test_resolve_stall),
	        cmocka_unit_test(test_resolve_tcp_stall),
	        cmocka_unit_test(test_relay_read_bounded),
	        cmocka_unit_test(test_direct_not_opened),
	        cmocka_unit_test(test_dns_listener_gateway),
	        cmocka_unit_test(test_dns_burst),
	        cmocka_unit_test(test_later),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
