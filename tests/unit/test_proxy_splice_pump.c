/* Unit tests of the splice pump (proxy/splice_pump.c): every byte arrives in order with the byte limit
 * kept, and a pipe whose slots run out before its byte capacity (one small skb a slot: here an AF_UNIX
 * socket written 100 bytes at a time) stops the reading instead of spinning on a readable socket while
 * the destination is full. splice(2) is wrapped (-Wl,--wrap=splice) to count the calls. */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "splice_pump.h"

ssize_t __real_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags);
ssize_t __wrap_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags);

static unsigned splices;

ssize_t __wrap_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags)
{
	splices++;
	return __real_splice(in, off_in, out, off_out, len, flags);
}

struct seen {
	uint64_t moved;
	int last; /* the last event other than MOVED, -1 for none */
};

static void pump_cb(struct splice_pump *p, enum splice_pump_event ev, size_t n, void *arg)
{
	struct seen *s = arg;
	(void)p;
	if (ev == SPLICE_PUMP_MOVED)
		s->moved += n;
	else
		s->last = (int)ev;
}

/* Writes 100-byte messages to fd (nonblocking) until it takes no more; returns the bytes written. */
static size_t fill_small(int fd, unsigned char *next)
{
	unsigned char buf[100];
	size_t total = 0;

	for (;;) {
		for (size_t i = 0; i < sizeof buf; i++)
			buf[i] = (*next)++;
		ssize_t n = write(fd, buf, sizeof buf);
		if (n < 0) {
			*next -= sizeof buf;
			assert_int_equal(errno, EAGAIN);
			return total;
		}
		assert_int_equal(n, sizeof buf);
		total += (size_t)n;
	}
}

static void pair(int sv[2])
{
	int sz = 4 << 20;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
}

/* dst full, src holding more small skbs than the pipe has slots: the pump must wait, not spin; once
 * dst is read, every byte arrives in order. */
static void test_slots_full_no_spin(void **state)
{
	struct event_base *base = event_base_new();
	struct seen seen = {.last = -1};
	struct splice_pump *p;
	int src[2], dst[2];
	unsigned char next = 0, want = 0, buf[65536];
	size_t in_src, in_dst, got = 0;
	(void)state;

	assert_non_null(base);
	pair(src);
	pair(dst);
	in_dst = fill_small(dst[0], &next); /* bytes that are not the pump's: read and checked first */
	in_src = fill_small(src[1], &next);
	assert_true(in_src > 300 * 100); /* more skbs than the pipe's 256 slots */
	p = splice_pump_new(base, pump_cb, &seen);
	assert_non_null(p);
	assert_int_equal(splice_pump_start(p, src[0], dst[0], SPLICE_PUMP_ALL), 0);
	splices = 0;
	for (int i = 0; i < 200; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	/* the pipe filled (its slots), then nothing: a few calls, not two per loop */
	assert_true(seen.moved > 0 && seen.moved < in_src);
	assert_true(splices < 20);
	assert_int_equal(seen.last, -1);

	/* now read dst until everything came, running the pump between reads */
	shutdown(src[1], SHUT_WR);
	while (got < in_dst + in_src) {
		ssize_t n = read(dst[1], buf, sizeof buf);
		if (n < 0) {
			assert_int_equal(errno, EAGAIN);
			event_base_loop(base, EVLOOP_ONCE);
			continue;
		}
		assert_true(n > 0);
		for (ssize_t i = 0; i < n; i++)
			assert_int_equal(buf[i], want++);
		got += (size_t)n;
	}
	while (seen.last == -1)
		event_base_loop(base, EVLOOP_ONCE);
	assert_int_equal(seen.last, SPLICE_PUMP_EOF);
	assert_int_equal(seen.moved, in_src);
	splice_pump_free(p);
	close(src[0]), close(src[1]), close(dst[0]), close(dst[1]);
	event_base_free(base);
}

/* A limit: exactly that many bytes move, then DONE; the rest stays in src. */
static void test_limit(void **state)
{
	struct event_base *base = event_base_new();
	struct seen seen = {.last = -1};
	struct splice_pump *p;
	int src[2], dst[2];
	unsigned char next = 0, want = 0, buf[65536];
	size_t in_src, got = 0, limit = 12345;
	(void)state;

	pair(src);
	pair(dst);
	in_src = fill_small(src[1], &next);
	assert_true(in_src > limit);
	p = splice_pump_new(base, pump_cb, &seen);
	assert_non_null(p);
	assert_int_equal(splice_pump_start(p, src[0], dst[0], limit), 0);
	while (seen.last == -1)
		event_base_loop(base, EVLOOP_ONCE);
	assert_int_equal(seen.last, SPLICE_PUMP_DONE);
	assert_int_equal(seen.moved, limit);
	while (got < limit) {
		ssize_t n = read(dst[1], buf, sizeof buf);
		assert_true(n > 0);
		for (ssize_t i = 0; i < n; i++)
			assert_int_equal(buf[i], want++);
		got += (size_t)n;
	}
	assert_int_equal(got, limit);
	assert_int_equal(read(dst[1], buf, sizeof buf), -1); /* nothing past the limit */
	assert_int_equal(read(src[0], buf, 1), 1);
	assert_int_equal(buf[0], want); /* the next byte is still in src */
	splice_pump_free(p);
	close(src[0]), close(src[1]), close(dst[0]), close(dst[1]);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_full_no_spin),
		cmocka_unit_test(test_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
