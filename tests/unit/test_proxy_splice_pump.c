/* Unit tests of the splice pump (proxy/splice_pump.c): every byte arrives in order with the byte limit
 * kept, and a pipe whose slots run out before its byte capacity (one small skb a slot: here an AF_UNIX
 * socket written 100 bytes at a time) stops the reading instead of spinning on a readable socket while
 * the destination is full. Framed runs with the HTTP front's chunk framer (http_forward_chunk_run): a
 * chunked body passes whole, its end found and nothing after it taken, at about one splice and one
 * peek per chunk (the pump goes from chunk to chunk without stopping and writes the pipe per batch);
 * framing the framer refuses never moves, and what came before it does. splice(2) and recv(2) are
 * wrapped (-Wl,--wrap=splice,--wrap=recv) to count the calls. */
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

#include "http_conn.h"
#include "splice_pump.h"

ssize_t __real_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags);
ssize_t __wrap_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags);

ssize_t __real_recv(int fd, void *buf, size_t len, int flags);
ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags);

static unsigned splices, recvs;

ssize_t __wrap_splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t len, unsigned int flags)
{
	splices++;
	return __real_splice(in, off_in, out, off_out, len, flags);
}

ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags)
{
	recvs++;
	return __real_recv(fd, buf, len, flags);
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

/* ---- framed runs: a chunked body ---- */

struct framed {
	struct seen seen; /* first: the pump's argument is the struct framed (pump_cb takes it as this) */
	struct event_base *base;
	struct splice_pump *p;
	struct http_chunked ch;
	int src[2], dst[2];
	unsigned char *body; /* owned: what src is sent */
	size_t len, sent, got;
	unsigned char *recvd; /* owned: what dst received */
};

/* A chunked body of n chunks of size bytes (every fourth with an extension, the data a counter), its
 * last chunk and a trailer, then tail (the next response: not the body's). */
static void framed_body(struct framed *f, unsigned n, size_t size, const char *tail)
{
	size_t cap = n * (size + 64) + 256, at = 0;
	unsigned char next = 0;

	f->body = malloc(cap);
	assert_non_null(f->body);
	for (unsigned i = 0; i < n; i++) {
		at += (size_t)snprintf((char *)f->body + at, cap - at, i % 4 == 3 ? "%zx;ext=\"v %u\"\r\n" : "%zx\r\n",
		                       size, i);
		for (size_t k = 0; k < size; k++)
			f->body[at++] = next++;
		memcpy(f->body + at, "\r\n", 2);
		at += 2;
	}
	at += (size_t)snprintf((char *)f->body + at, cap - at, "0\r\nX-Trailer: done\r\n\r\n%s", tail);
	f->len = at;
	f->recvd = malloc(at);
	assert_non_null(f->recvd);
}

static int chunk_more(struct splice_pump *p, int src, uint64_t *limit, bool *last, void *arg)
{
	struct framed *f = arg;
	(void)p;
	return http_forward_chunk_run(&f->ch, src, limit, last);
}

static void framed_open(struct framed *f)
{
	memset(f, 0, sizeof *f);
	f->seen.last = -1;
	f->base = event_base_new();
	assert_non_null(f->base);
	pair(f->src);
	pair(f->dst);
	http_chunked_init(&f->ch);
	f->p = splice_pump_new(f->base, pump_cb, f);
	assert_non_null(f->p);
}

static void framed_close(struct framed *f)
{
	splice_pump_free(f->p);
	close(f->src[0]), close(f->src[1]), close(f->dst[0]), close(f->dst[1]);
	event_base_free(f->base);
	free(f->body);
	free(f->recvd);
}

/* Writes what src takes of the body's first upto bytes (then, with shut, ends it), runs the loop once,
 * reads what dst has; until the pump ended. */
static void framed_run(struct framed *f, size_t upto, bool shut)
{
	for (int rounds = 0; f->seen.last == -1; rounds++) {
		assert_true(rounds < 100000);
		if (f->sent < upto) {
			ssize_t n = write(f->src[1], f->body + f->sent, upto - f->sent);
			if (n > 0)
				f->sent += (size_t)n;
			else
				assert_int_equal(errno, EAGAIN);
			if (f->sent == upto && shut)
				shutdown(f->src[1], SHUT_WR);
		}
		event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		for (;;) {
			ssize_t n = read(f->dst[1], f->recvd + f->got, f->len - f->got);
			if (n <= 0)
				break;
			f->got += (size_t)n;
		}
	}
}

/* 256 chunks of 16 KiB, written as fast as src takes them: every byte of the body arrives, DONE after
 * the trailer, the next response is still in src; at most about one splice and one peek per chunk (the
 * pump stopped and started again at each chunk made at least two splices and a peek). */
static void test_framed_chunked(void **state)
{
	static const char tail[] = "HTTP/1.1 200 OK\r\n";
	struct framed f;
	const unsigned chunks = 256;
	char buf[64];
	(void)state;

	framed_open(&f);
	framed_body(&f, chunks, 16384, tail);
	assert_int_equal(splice_pump_start_framed(f.p, f.src[0], f.dst[0], 0, chunk_more), 0);
	splices = recvs = 0;
	framed_run(&f, f.len, false);
	if (f.seen.last != SPLICE_PUMP_DONE)
		print_message("framer: %s after %zu of %zu\n", f.ch.error, f.got, f.len);
	assert_int_equal(f.seen.last, SPLICE_PUMP_DONE);
	assert_int_equal(f.seen.moved, f.len - strlen(tail));
	assert_int_equal(f.got, f.len - strlen(tail));
	assert_memory_equal(f.recvd, f.body, f.got);
	assert_int_equal(recv(f.src[0], buf, sizeof buf, MSG_DONTWAIT), (ssize_t)strlen(tail));
	assert_memory_equal(buf, tail, strlen(tail));
	/* (recv counts the test's own read of the tail too) */
	print_message("%u chunks: %u splices, %u peeks\n", chunks, splices, recvs - 1);
	assert_true(recvs - 1 >= chunks && recvs - 1 <= chunks + chunks / 4);
	assert_true(splices <= chunks + chunks / 2);
	framed_close(&f);
}

/* Framing the framer refuses (a chunk size that is not hex) after two good chunks: the good chunks reach
 * dst, then BAD_FRAMING; the refused bytes stay in src, with the CRLF that ended the chunk before them
 * (peeked and refused with them). The same body ended by end of file at the bad framing's place: EOF. */
static void test_framed_refused(void **state)
{
	static const char bad[] = "zz\r\n";
	struct framed f;
	char buf[16];
	size_t good;
	(void)state;

	framed_open(&f);
	framed_body(&f, 2, 300000, "");
	good = f.len - strlen("0\r\nX-Trailer: done\r\n\r\n");
	memcpy(f.body + good, bad, sizeof bad);
	f.len = good + strlen(bad);
	assert_int_equal(splice_pump_start_framed(f.p, f.src[0], f.dst[0], 0, chunk_more), 0);
	framed_run(&f, f.len, false);
	assert_int_equal(f.seen.last, SPLICE_PUMP_BAD_FRAMING);
	assert_string_equal(f.ch.error, "malformed chunk size");
	assert_int_equal(f.got, good - 2);
	assert_memory_equal(f.recvd, f.body, good - 2);
	assert_int_equal(recv(f.src[0], buf, sizeof buf, MSG_DONTWAIT), (ssize_t)strlen(bad) + 2);
	assert_memory_equal(buf, "\r\nzz\r\n", strlen(bad) + 2);
	framed_close(&f);

	framed_open(&f);
	framed_body(&f, 2, 300000, "");
	f.len = good;
	assert_int_equal(splice_pump_start_framed(f.p, f.src[0], f.dst[0], 0, chunk_more), 0);
	framed_run(&f, good, true);
	assert_int_equal(f.seen.last, SPLICE_PUMP_EOF);
	assert_int_equal(f.got, good);
	assert_memory_equal(f.recvd, f.body, good);
	framed_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_full_no_spin),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_framed_chunked),
		cmocka_unit_test(test_framed_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
