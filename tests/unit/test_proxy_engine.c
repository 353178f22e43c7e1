/* Unit tests of the engine's in-process API (proxy/engine.h) as netd uses it: sessions added and
 * removed (duplicates, missing addresses and policies refused), listener kinds, netd's drop reports
 * landing in the audit log with the session found by source address, and the log handed over as an
 * fd. No traffic: the event loop is never run. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine.h"
#include "policy.h"

static void sin4(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in *s = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof *ss);
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
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
	sin4(&src, "100.64.9.9", 1234);
	assert_int_equal(proxy_engine_audit_drop(e, (struct sockaddr *)&src, (struct sockaddr *)&dst, IPPROTO_UDP), 0);
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
	assert_int_equal(n, 2);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_api),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
