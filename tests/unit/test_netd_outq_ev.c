/* The engine socket's outgoing queue (common/ipc.c's ipc_outq, driven by netd/outq_ev.c) when the kernel
 * refuses a send for want of memory (ENOBUFS, ENOMEM; sendmsg is wrapped to refuse on demand): the
 * message stays queued, in order, and is tried again after a short timer that backs off, not on a
 * socket that polls writable all along (a spin) and not as a failure (which restarted the engine). */
#include <errno.h>
#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc.h"
#include "outq_ev.h"
#include "proto.h"

static int refuse;      /* the next `refuse` sendmsg calls fail with refuse_errno */
static int refuse_errno = ENOBUFS;
static unsigned calls;  /* sendmsg calls */

ssize_t __real_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	calls++;
	if (refuse > 0) {
		refuse--;
		errno = refuse_errno;
		return -1;
	}
	return __real_sendmsg(fd, msg, flags);
}

static int sv[2];

static int setup(void **state)
{
	refuse = 0;
	refuse_errno = ENOBUFS;
	calls = 0;
	return ipc_socketpair(sv, false) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	close(sv[0]);
	close(sv[1]);
	return 0;
}

static void end_msg(struct ipc_buf *b, uint32_t seq)
{
	assert_int_equal(ipc_buf_init(b, NETD_MSG_END, seq), 0);
	ipc_buf_put_str(b, NETD_A_ID, "0123456789");
}

static uint32_t recv_seq(void)
{
	struct ipc_msg m;
	uint32_t seq;

	assert_int_equal(ipc_recv_nowait(sv[1], &m), 0);
	seq = m.seq;
	ipc_msg_clear(&m);
	return seq;
}

/* ipc_outq itself: a refusal queues (first send) or stops the flush with a retry delay that doubles up to
 * its cap, is not an error, and ends as soon as a message goes. */
static void test_outq_refused(void **state)
{
	struct ipc_outq q;
	struct ipc_buf b;
	unsigned want = IPC_OUTQ_RETRY_MIN_MS;

	ipc_outq_init(&q);
	refuse = 12;
	end_msg(&b, 1);
	assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0); /* refused: queued, not lost */
	ipc_buf_release(&b);
	assert_int_equal(q.n, 1);
	assert_int_equal(q.retry_ms, IPC_OUTQ_RETRY_MIN_MS);
	end_msg(&b, 2);
	assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0); /* behind it, without trying the socket */
	ipc_buf_release(&b);
	assert_int_equal(q.n, 2);
	assert_int_equal(calls, 1);
	while (refuse > 0) {
		assert_int_equal(ipc_outq_flush(&q, sv[0]), 0); /* (the old code: -ENOBUFS, and a restart) */
		want = want * 2 > IPC_OUTQ_RETRY_MAX_MS ? IPC_OUTQ_RETRY_MAX_MS : want * 2;
		assert_int_equal(q.retry_ms, want);
		assert_int_equal(q.n, 2);
	}
	assert_int_equal(q.retry_ms, IPC_OUTQ_RETRY_MAX_MS);
	refuse = 1;
	refuse_errno = ENOMEM;
	assert_int_equal(ipc_outq_flush(&q, sv[0]), 0);
	assert_int_equal(ipc_outq_flush(&q, sv[0]), 2);
	assert_int_equal(q.retry_ms, 0);
	assert_int_equal(q.n, 0);
	assert_int_equal(recv_seq(), 1);
	assert_int_equal(recv_seq(), 2);
	/* any other failure is still one */
	end_msg(&b, 3);
	refuse = 1;
	refuse_errno = ENOBUFS;
	assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0);
	ipc_buf_release(&b);
	close(sv[1]);
	sv[1] = -1;
	assert_int_equal(ipc_outq_flush(&q, sv[0]), -EPIPE);
	assert_int_equal(q.n, 1);
	ipc_outq_clear(&q);
}

struct seen {
	unsigned calls, sent, errors;
	struct event_base *base;
};

static void moved(void *arg, int r)
{
	struct seen *s = arg;

	s->calls++;
	if (r < 0)
		s->errors++;
	else
		s->sent += (unsigned)r;
	if (s->sent == 3)
		event_base_loopbreak(s->base);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/* The event loop's side: refused 6 times, the queue is tried again on a backing-off timer (5, 10, 20, 40,
 * 80, 160 ms: about 315 ms) while the socket is writable all along, and then goes, in order. A retry on
 * EV_WRITE would have spun (thousands of attempts), and the old code gave up at the first refusal. */
static void test_outq_ev_retries_later(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s = {.base = base};
	struct netd_outq_ev o;
	struct timeval guard = {3, 0};
	struct ipc_buf b;
	double t0, el;

	assert_non_null(base);
	assert_int_equal(netd_outq_ev_init(&o, base, sv[0], moved, &s), 0);
	refuse = 7; /* the first send and six retries */
	t0 = now_ms();
	for (uint32_t i = 1; i <= 3; i++) {
		end_msg(&b, i);
		assert_int_equal(netd_outq_ev_send(&o, &b), 0);
		ipc_buf_release(&b);
	}
	assert_int_equal(o.q.n, 3);
	event_base_loopexit(base, &guard);
	event_base_dispatch(base);
	el = now_ms() - t0;
	assert_int_equal(s.sent, 3);
	assert_int_equal(s.errors, 0);
	assert_int_equal(s.calls, 7);  /* six refused attempts, then the one that sent all three */
	assert_int_equal(calls, 1 + 6 + 3);
	assert_true(el >= 300 && el < 2500);
	assert_int_equal(o.q.n, 0);
	assert_int_equal(o.q.retry_ms, 0);
	for (uint32_t i = 1; i <= 3; i++)
		assert_int_equal(recv_seq(), i);
	netd_outq_ev_release(&o);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_outq_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outq_ev_retries_later, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
