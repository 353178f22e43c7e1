/* The bounds of the engine socket's two queues (netd/engine_bounds.h), each at its boundary, and the
 * engine's reports to sluiced (netd/engine_child_out.c) driven through a real socketpair whose other end
 * (sluiced's) does not read: from 1 MiB queued a message that opens something (ASK, DIRECT_ADD) is refused
 * and the others still queue; at 16 MiB the engine gives up (its loop is stopped) and sends nothing more,
 * never waiting; sluiced reading again ends the refusal. sluiced's side: more than 4 MiB queued towards
 * the engine refuses new sessions. The figures are written out, not taken from the macros, so a bound
 * raised or lowered, a check removed or a `>=` turned into `>` fails here (docs/netd.md, "Engine
 * protocol"). A 16 MiB queue in memory costs milliseconds: no hook shrinks the bounds. */
#include <errno.h>
#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_bounds.h"
#include "engine_child_out.h"
#include "ipc.h"
#include "proto.h"

#define MIB (1024u * 1024u)

static int sv[2]; /* sv[0] the engine's end, sv[1] sluiced's (read only when a test says sluiced reads) */
static struct event_base *base;

static int setup(void **state)
{
	(void)state;
	base = event_base_new();
	return base && ipc_socketpair(sv, false) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	close(sv[0]);
	close(sv[1]);
	event_base_free(base);
	return 0;
}

/* A report of exactly len record bytes (at least 20, a multiple of 4: header, one attribute) */
static void report(struct ipc_buf *b, size_t len)
{
	static const char pad[40000];

	assert_true(len >= 20 && len % 4 == 0 && len - 20 <= sizeof pad);
	assert_int_equal(ipc_buf_init(b, NETD_ENG_RESULT, 7), 0);
	ipc_buf_put_bytes(b, NETD_A_METRICS, pad, len - 20);
	assert_int_equal(ipc_buf_len(b), len);
}

static int send_len(struct netd_child_out *o, size_t len, bool refusable)
{
	struct ipc_buf b;
	int r;

	report(&b, len);
	r = netd_child_out_send(o, &b, refusable);
	ipc_buf_release(&b);
	return r;
}

/* Reports that always queue until sluiced's end is full and one waits in the queue. */
static void fill_socket(struct netd_child_out *o)
{
	for (int i = 0; i < 10000 && o->q.q.n == 0; i++)
		assert_int_equal(send_len(o, 32768, false), 0);
	assert_int_equal(o->q.q.n, 1);
}

/* Reports that always queue until exactly target record bytes wait. */
static void queue_to(struct netd_child_out *o, size_t target)
{
	while (o->q.q.bytes < target) {
		size_t left = target - o->q.q.bytes;

		assert_int_equal(send_len(o, left > 32768 + 20 ? 32768 : left, false), 0);
	}
	assert_int_equal(o->q.q.bytes, target);
}

/* sluiced reads everything: its end is emptied and the engine's loop sends the queue, until none waits */
static void sluiced_reads(struct netd_child_out *o)
{
	for (int i = 0; i < 100000 && o->q.q.n; i++) {
		struct ipc_msg m;

		while (ipc_recv_nowait(sv[1], &m) == 0)
			ipc_msg_clear(&m);
		ipc_msg_clear(&m);
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	}
	assert_int_equal(o->q.q.n, 0);
	assert_int_equal(o->q.q.bytes, 0); /* every byte counted in was counted out */
}

static void set_idle(struct netd_child_out *o, long ms)
{
	clock_gettime(CLOCK_MONOTONIC, &o->moved_at);
	o->moved_at.tv_sec -= ms / 1000;
	o->moved_at.tv_nsec -= (ms % 1000) * 1000000L;
	if (o->moved_at.tv_nsec < 0) {
		o->moved_at.tv_sec--;
		o->moved_at.tv_nsec += 1000000000L;
	}
}

/* The decisions themselves, at every boundary. */
static void test_bounds(void **state)
{
	(void)state;
	/* the engine towards sluiced: nothing waits, nothing is refused */
	assert_int_equal(netd_child_out_judge(0, 0, 1e9, true), NETD_CHILD_OUT_SEND);
	/* 1 MiB: a message that opens something is refused from there on, the others queue */
	assert_int_equal(netd_child_out_judge(1, MIB - 1, 0, true), NETD_CHILD_OUT_SEND);
	assert_int_equal(netd_child_out_judge(1, MIB, 0, true), NETD_CHILD_OUT_REFUSE);
	assert_int_equal(netd_child_out_judge(1, MIB, 0, false), NETD_CHILD_OUT_BEHIND);
	/* 2 s without progress: the same */
	assert_int_equal(netd_child_out_judge(1, 100, 1999.99, true), NETD_CHILD_OUT_SEND);
	assert_int_equal(netd_child_out_judge(1, 100, 2000, true), NETD_CHILD_OUT_REFUSE);
	assert_int_equal(netd_child_out_judge(1, 100, 2000, false), NETD_CHILD_OUT_BEHIND);
	/* 16 MiB: the engine gives up on the next message it cannot refuse */
	assert_int_equal(netd_child_out_judge(9, 16 * MIB - 1, 0, false), NETD_CHILD_OUT_BEHIND);
	assert_int_equal(netd_child_out_judge(9, 16 * MIB, 0, false), NETD_CHILD_OUT_GIVE_UP);
	assert_int_equal(netd_child_out_judge(9, 16 * MIB, 0, true), NETD_CHILD_OUT_REFUSE);
	/* sluiced towards its engine: new sessions refused over 4 MiB queued */
	assert_false(netd_engine_queue_over(0));
	assert_false(netd_engine_queue_over(4 * MIB));
	assert_true(netd_engine_queue_over(4 * MIB + 1));
	/* the time bounds sluiced's stall timer uses (engine.c; tests/integration/engine_stall.sh) */
	assert_int_equal(ENGINE_STALL_MS, 2000);
	assert_int_equal(ENGINE_STUCK_MS, 10000);
}

/* Runs send_len with stderr (the log) going to a file, whose first 511 bytes land in out. */
static int send_logged(struct netd_child_out *o, size_t len, bool refusable, char out[512])
{
	FILE *f = tmpfile();
	int saved = dup(STDERR_FILENO), r;
	size_t n;

	assert_non_null(f);
	assert_true(saved >= 0);
	fflush(stderr);
	assert_true(dup2(fileno(f), STDERR_FILENO) >= 0);
	r = send_len(o, len, refusable);
	fflush(stderr);
	assert_true(dup2(saved, STDERR_FILENO) >= 0);
	close(saved);
	rewind(f);
	n = fread(out, 1, 511, f);
	out[n] = '\0';
	fclose(f);
	return r;
}

/* From exactly 1 MiB queued, a refusable report is refused (not queued), the others queue; once sluiced
 * reads again, a refusable report goes. The log says the queue is over its bound (it grew in a burst:
 * no "for 0.0 s"). */
static void test_soft(void **state)
{
	struct netd_child_out o;
	char line[512];
	size_t n;

	(void)state;
	assert_int_equal(netd_child_out_init(&o, base, sv[0]), 0);
	fill_socket(&o);
	queue_to(&o, MIB - 64);
	assert_int_equal(send_len(&o, 64, true), 0); /* under 1 MiB waited: queued */
	assert_int_equal(o.q.q.bytes, MIB);
	assert_false(o.behind_logged);
	n = o.q.q.n;
	assert_int_equal(send_logged(&o, 20, true, line), -ENOBUFS); /* at 1 MiB: refused, fails closed */
	assert_non_null(strstr(line, "sluiced is behind: "));
	assert_non_null(strstr(line, " reports wait for it (1024 KiB, the bound is 1024 KiB)"));
	assert_null(strstr(line, "0.0 s"));
	assert_int_equal(o.q.q.n, n);
	assert_int_equal(o.q.q.bytes, MIB);
	assert_true(o.behind_logged);
	assert_int_equal(send_len(&o, 20, false), 0); /* an answer still queues */
	assert_int_equal(o.q.q.n, n + 1);
	assert_false(o.gave_up);
	assert_false(event_base_got_break(base));
	sluiced_reads(&o);
	assert_false(o.behind_logged);
	assert_int_equal(send_len(&o, 20, true), 0); /* sluiced reads: it goes */
	assert_int_equal(o.q.q.n, 0);
	netd_child_out_release(&o);
}

/* A queue that has not moved for 2 s refuses as 1 MiB does; for less, it does not. */
static void test_stall(void **state)
{
	struct netd_child_out o;
	char line[512];

	(void)state;
	assert_int_equal(netd_child_out_init(&o, base, sv[0]), 0);
	fill_socket(&o);
	assert_int_equal(send_len(&o, 20, true), 0); /* the queue started moments ago */
	set_idle(&o, 1500);
	assert_int_equal(send_len(&o, 20, true), 0);
	set_idle(&o, 2000);
	assert_int_equal(send_logged(&o, 20, true, line), -ENOBUFS);
	assert_non_null(strstr(line, "sluiced has taken none of its reports for 2.0 s"));
	assert_int_equal(send_len(&o, 20, false), 0);
	assert_false(event_base_got_break(base));
	netd_child_out_release(&o);
}

/* At exactly 16 MiB queued, the next report that cannot be refused makes the engine give up: not queued,
 * the loop stopped, nothing sent from then on, and after the release no send waits on the full socket
 * (the engine's teardown reports ended asks: a blocking send there held its exit while sluiced did not
 * read; the alarm fails the test if one waits). */
static void test_max(void **state)
{
	struct netd_child_out o;
	size_t n;

	(void)state;
	assert_int_equal(netd_child_out_init(&o, base, sv[0]), 0);
	fill_socket(&o);
	queue_to(&o, 16 * MIB - 64);
	assert_int_equal(send_len(&o, 64, false), 0);
	assert_int_equal(o.q.q.bytes, 16 * MIB);
	assert_false(o.gave_up);
	assert_false(event_base_got_break(base));
	n = o.q.q.n;
	assert_int_equal(send_len(&o, 20, false), -ENOBUFS);
	assert_true(o.gave_up);
	assert_true(event_base_got_break(base));
	assert_int_equal(o.q.q.n, n);
	assert_int_equal(o.q.q.bytes, 16 * MIB);
	assert_int_equal(send_len(&o, 20, false), -ENOBUFS);
	assert_int_equal(send_len(&o, 20, true), -ENOBUFS);
	assert_int_equal(o.q.q.n, n);
	alarm(5);
	netd_child_out_release(&o);
	assert_int_equal(send_len(&o, 20, false), -EPIPE);
	alarm(0);
}

/* sluiced's side, on a real queue: the bytes of queued records are counted in and out exactly, and the
 * queue is over its bound from 4 MiB + 1 byte. */
static void test_engine_queue_max(void **state)
{
	struct ipc_outq q;
	struct ipc_buf b;

	(void)state;
	ipc_outq_init(&q);
	while (q.n == 0) {
		report(&b, 32768);
		assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0);
		ipc_buf_release(&b);
	}
	while (q.bytes < 4 * MIB) {
		size_t left = 4 * MIB - q.bytes;

		report(&b, left > 32768 + 20 ? 32768 : left);
		assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0);
		ipc_buf_release(&b);
	}
	assert_int_equal(q.bytes, 4 * MIB);
	assert_false(netd_engine_queue_over(q.bytes));
	report(&b, 20);
	assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_true(netd_engine_queue_over(q.bytes));
	for (int i = 0; i < 100000 && q.n; i++) {
		struct ipc_msg m;

		while (ipc_recv_nowait(sv[1], &m) == 0)
			ipc_msg_clear(&m);
		ipc_msg_clear(&m);
		assert_true(ipc_outq_flush(&q, sv[0]) >= 0);
	}
	assert_int_equal(q.n, 0);
	assert_int_equal(q.bytes, 0);
	ipc_outq_clear(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bounds),
		cmocka_unit_test_setup_teardown(test_soft, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stall, setup, teardown),
		cmocka_unit_test_setup_teardown(test_max, setup, teardown),
		cmocka_unit_test_setup_teardown(test_engine_queue_max, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
