/* Helpers of the unit tests that run the proxy engine's loop over loopback (test_proxy_engine.c,
 * test_proxy_inspect.c). Include after <cmocka.h>. */
#ifndef SLUICE_TESTS_ENGINE_TEST_H
#define SLUICE_TESTS_ENGINE_TEST_H

#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "policy.h"

static inline void sin4(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in *s = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof *ss);
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
}

static inline struct policy *json_policy(const char *text)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error err;
	struct policy *p;
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "test.json", text, strlen(text), &err), 0);
	p = policy_builder_compile(b, &err);
	assert_non_null(p);
	policy_builder_free(b);
	return p;
}

/* Runs the loop until fd is readable (at most 2 s). */
static inline void loop_until(struct event_base *base, int fd)
{
	for (int i = 0; i < 400; i++) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (poll(&pfd, 1, 5) == 1)
			return;
	}
	fail_msg("nothing to read on fd %d in 2 s", fd);
}

#endif
