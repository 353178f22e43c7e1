/* The engine child's held messages (netd/engine_queue.c): a session's policy compiles on a worker and its
 * later messages wait for it in order; other sessions' messages do not wait; a compile that fails is
 * delivered with its error; a long compile of one session does not hold up another's short one; a text
 * compiled before gets the same compiled object again, on the loop and in its session's order, and
 * another text never does. */
#include <errno.h>
#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_queue.h"
#include "ipc.h"
#include "netd.h"
#include "policy.h"

#define MAX_SEEN 16

struct seen {
	uint16_t type[MAX_SEEN];
	char sid[MAX_SEEN][16];
	bool policy[MAX_SEEN];
	const struct policy *pol[MAX_SEEN];
	int r[MAX_SEEN];
	char err[MAX_SEEN][256];
	unsigned n;
};

static int sv[2];

static void record(void *arg, struct ipc_msg *m, struct policy *p, int r, const char *err)
{
	struct seen *s = arg;

	assert_true(s->n < MAX_SEEN);
	s->type[s->n] = m->type;
	snprintf(s->sid[s->n], sizeof s->sid[s->n], "%s", ipc_get_str(m, NETD_A_ID));
	s->policy[s->n] = p != NULL;
	s->pol[s->n] = p;
	s->r[s->n] = r;
	snprintf(s->err[s->n], sizeof s->err[s->n], "%s", err ? err : "");
	s->n++;
	policy_unref(p);
}

/* m: one message of the engine protocol as the child receives it (sent, received, checked) */
static void recv_msg(struct ipc_buf *b, struct ipc_msg *m)
{
	char err[256];

	assert_int_equal(ipc_send(sv[0], b), 0);
	ipc_buf_release(b);
	assert_int_equal(ipc_recv(sv[1], m), 0);
	assert_int_equal(ipc_msg_check(&netd_engine_proto, m, NETD_ES_RUN, err, sizeof err), 0);
}

static uint32_t msg_uid = 1000; /* of the sessions session_msg makes */
static const char *msg_addr4 = "10.77.0.2"; /* their address (SESSION_ADD, SESSION_REMOVE) */

static void session_msg(struct ipc_msg *m, uint16_t type, const char *sid, const char *policy)
{
	struct ipc_buf b;

	assert_int_equal(ipc_buf_init(&b, type, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, sid);
	if (type == NETD_ENG_SESSION_POLICY)
		ipc_buf_put_u32(&b, NETD_A_UID, msg_uid);
	if (type == NETD_ENG_SESSION_ADD) {
		ipc_buf_put_u32(&b, NETD_A_UID, msg_uid);
		ipc_buf_put_str(&b, NETD_A_COMMAND, "test");
		ipc_buf_put_str(&b, NETD_A_ADDR4, msg_addr4);
	}
	if (type == NETD_ENG_SESSION_REMOVE)
		ipc_buf_put_str(&b, NETD_A_ADDR4, msg_addr4);
	if (type == NETD_ENG_GRANT) {
		ipc_buf_put_str(&b, NETD_A_HOST, "example.org");
		ipc_buf_put_u16(&b, NETD_A_DPORT, 443);
		ipc_buf_put_u8(&b, NETD_A_VERDICT, 1);
		ipc_buf_put_u32(&b, NETD_A_UID, 0);
	}
	if (policy)
		ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, policy);
	recv_msg(&b, m);
}

/* submits m as the child does; returns netd_engine_queue_submit's result (m cleared either way) */
static int submit(struct netd_engine_queue *q, struct ipc_msg *m)
{
	bool compile = m->type == NETD_ENG_SESSION_ADD || m->type == NETD_ENG_SESSION_POLICY;
	int r = netd_engine_queue_submit(q, m, ipc_get_str(m, NETD_A_ID), compile, NETD_A_POLICY, NETD_A_POLICY_FD,
	                                 NETD_POLICY_MAX);

	ipc_msg_clear(m);
	return r;
}

static void run_until_empty(struct event_base *base, struct netd_engine_queue *q)
{
	for (int i = 0; i < 6000 && netd_engine_queue_held(q); i++) {
		struct timeval tv = {0, 10000};
		event_base_loopexit(base, &tv);
		event_base_dispatch(base);
	}
	assert_int_equal(netd_engine_queue_held(q), 0);
}

static int setup(void **state)
{
	return ipc_socketpair(sv, false) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	close(sv[0]);
	close(sv[1]);
	return 0;
}

static const char *small = "{ \"allow\": [\"example.org\"] }";

static void test_order_within_a_session(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s = {0};
	struct netd_engine_queue *q = netd_engine_queue_new(base, record, &s);
	struct ipc_msg m;

	assert_non_null(q);
	session_msg(&m, NETD_ENG_SESSION_ADD, "aaaaaaaaaa", small);
	assert_int_equal(submit(q, &m), 1); /* always held: it compiles */
	session_msg(&m, NETD_ENG_GRANT, "aaaaaaaaaa", NULL);
	assert_int_equal(submit(q, &m), 1); /* held behind its session's compile */
	session_msg(&m, NETD_ENG_SESSION_REMOVE, "bbbbbbbbbb", NULL);
	assert_int_equal(submit(q, &m), 0); /* another session: handled at once */
	session_msg(&m, NETD_ENG_SESSION_POLICY, "aaaaaaaaaa", "{ \"allow\": [");
	assert_int_equal(submit(q, &m), 1);
	session_msg(&m, NETD_ENG_SESSION_REMOVE, "aaaaaaaaaa", NULL);
	assert_int_equal(submit(q, &m), 1);
	assert_int_equal(s.n, 0); /* nothing before the loop ran */
	run_until_empty(base, q);
	assert_int_equal(s.n, 4);
	assert_int_equal(s.type[0], NETD_ENG_SESSION_ADD);
	assert_true(s.policy[0]);
	assert_int_equal(s.r[0], 0);
	assert_int_equal(s.type[1], NETD_ENG_GRANT);
	assert_false(s.policy[1]);
	/* the broken policy: delivered in its turn, with the compile's error and no policy */
	assert_int_equal(s.type[2], NETD_ENG_SESSION_POLICY);
	assert_false(s.policy[2]);
	assert_int_equal(s.r[2], -EINVAL);
	assert_non_null(strstr(s.err[2], "policy: "));
	assert_int_equal(s.type[3], NETD_ENG_SESSION_REMOVE);
	for (unsigned i = 0; i < s.n; i++)
		assert_string_equal(s.sid[i], "aaaaaaaaaa");
	netd_engine_queue_free(q);
	event_base_free(base);
}

/* a policy of n hosts, which takes long to compile (owned) */
static char *big_policy(int n)
{
	size_t cap = 40 * (size_t)n + 64, len;
	char *big = malloc(cap);

	assert_non_null(big);
	len = (size_t)snprintf(big, cap, "{ \"allow\": [");
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(big + len, cap - len, "%s\"h%d.example.org\"", i ? ", " : "", i);
	snprintf(big + len, cap - len, "] }");
	return big;
}

static void test_long_compile_holds_up_only_its_session(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s = {0};
	struct netd_engine_queue *q = netd_engine_queue_new(base, record, &s);
	char *big = big_policy(100000);
	struct ipc_msg m;

	assert_non_null(q);
	session_msg(&m, NETD_ENG_SESSION_ADD, "aaaaaaaaaa", big); /* long: a memfd, seconds of compiling */
	assert_int_equal(submit(q, &m), 1);
	session_msg(&m, NETD_ENG_SESSION_ADD, "bbbbbbbbbb", small);
	assert_int_equal(submit(q, &m), 1);
	run_until_empty(base, q);
	assert_int_equal(s.n, 2);
	/* the short one was not queued behind the long one */
	assert_string_equal(s.sid[0], "bbbbbbbbbb");
	assert_string_equal(s.sid[1], "aaaaaaaaaa");
	assert_true(s.policy[0] && s.policy[1]);
	free(big);
	netd_engine_queue_free(q);
	event_base_free(base);
}

static void test_cache(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s = {0};
	struct netd_engine_queue *q = netd_engine_queue_new(base, record, &s);
	const char *other = "{ \"allow\": [\"example.com\"] }";
	struct ipc_msg m;

	assert_non_null(q);
	session_msg(&m, NETD_ENG_SESSION_ADD, "aaaaaaaaaa", small);
	assert_int_equal(submit(q, &m), 1);
	run_until_empty(base, q);
	assert_int_equal(netd_engine_queue_cache_hits(q), 0);
	/* the same text for another session: the same object, handed over from the loop */
	session_msg(&m, NETD_ENG_SESSION_ADD, "bbbbbbbbbb", small);
	assert_int_equal(submit(q, &m), 1);
	assert_int_equal(s.n, 1);
	run_until_empty(base, q);
	assert_int_equal(s.n, 2);
	assert_int_equal(netd_engine_queue_cache_hits(q), 1);
	assert_ptr_equal(s.pol[1], s.pol[0]);
	assert_int_equal(s.r[1], 0);
	/* another text: compiled, another object */
	session_msg(&m, NETD_ENG_SESSION_ADD, "cccccccccc", other);
	assert_int_equal(submit(q, &m), 1);
	run_until_empty(base, q);
	assert_int_equal(netd_engine_queue_cache_hits(q), 1);
	assert_non_null(s.pol[2]);
	assert_ptr_not_equal(s.pol[2], s.pol[0]);
	/* a cached policy change waits for its session's earlier compile: order kept */
	session_msg(&m, NETD_ENG_SESSION_ADD, "dddddddddd", "{ \"allow\": [\"example.net\"] }");
	assert_int_equal(submit(q, &m), 1);
	session_msg(&m, NETD_ENG_SESSION_POLICY, "dddddddddd", small);
	assert_int_equal(submit(q, &m), 1);
	run_until_empty(base, q);
	assert_int_equal(s.n, 5);
	assert_int_equal(s.type[3], NETD_ENG_SESSION_ADD);
	assert_int_equal(s.type[4], NETD_ENG_SESSION_POLICY);
	assert_ptr_not_equal(s.pol[3], s.pol[0]);
	assert_ptr_equal(s.pol[4], s.pol[0]);
	assert_int_equal(netd_engine_queue_cache_hits(q), 2);
	/* another user's session of the same text: compiled anew (a hit would tell it such a session ran) */
	msg_uid = 1001;
	session_msg(&m, NETD_ENG_SESSION_ADD, "eeeeeeeeee", small);
	assert_int_equal(submit(q, &m), 1);
	run_until_empty(base, q);
	msg_uid = 1000;
	assert_int_equal(s.n, 6);
	assert_int_equal(netd_engine_queue_cache_hits(q), 2);
	assert_non_null(s.pol[5]);
	assert_ptr_not_equal(s.pol[5], s.pol[0]);
	netd_engine_queue_free(q);
	event_base_free(base);
}

/* A session stops while its policy change compiles (its removal waits behind it) and another session
 * starts at once on the recycled address: the new session's add waits for that removal, as sluiced sent
 * them (before, it went first and found the address taken: EEXIST, a failed setup); a session on another
 * address does not wait. */
static void test_removal_before_add_of_its_address(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s = {0};
	struct netd_engine_queue *q = netd_engine_queue_new(base, record, &s);
	char *big = big_policy(50000);
	struct ipc_msg m;

	assert_non_null(q);
	session_msg(&m, NETD_ENG_SESSION_ADD, "aaaaaaaaaa", small);
	assert_int_equal(submit(q, &m), 1);
	run_until_empty(base, q);
	session_msg(&m, NETD_ENG_SESSION_POLICY, "aaaaaaaaaa", big); /* long */
	assert_int_equal(submit(q, &m), 1);
	session_msg(&m, NETD_ENG_SESSION_REMOVE, "aaaaaaaaaa", NULL);
	assert_int_equal(submit(q, &m), 1); /* behind its session's compile */
	session_msg(&m, NETD_ENG_SESSION_ADD, "bbbbbbbbbb", "{ \"allow\": [\"example.com\"] }"); /* A's address */
	assert_int_equal(submit(q, &m), 1);
	msg_addr4 = "10.77.0.3";
	session_msg(&m, NETD_ENG_SESSION_ADD, "cccccccccc", "{ \"allow\": [\"example.net\"] }");
	assert_int_equal(submit(q, &m), 1);
	msg_addr4 = "10.77.0.2";
	run_until_empty(base, q);
	assert_int_equal(s.n, 5);
	assert_string_equal(s.sid[1], "cccccccccc"); /* another address: not held up */
	assert_int_equal(s.type[2], NETD_ENG_SESSION_POLICY);
	assert_int_equal(s.type[3], NETD_ENG_SESSION_REMOVE);
	assert_string_equal(s.sid[3], "aaaaaaaaaa");
	assert_int_equal(s.type[4], NETD_ENG_SESSION_ADD); /* after A's removal */
	assert_string_equal(s.sid[4], "bbbbbbbbbb");
	assert_true(s.policy[4]);
	free(big);
	netd_engine_queue_free(q);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_order_within_a_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_long_compile_holds_up_only_its_session, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(test_removal_before_add_of_its_address, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
