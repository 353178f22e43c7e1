/* Unit tests of the splice pump (proxy/splice_pump.c): every byte arrives in order with the byte limit
 * kept, and a pipe whose slots run out before its byte capacity (one small skb a slot: here an AF_UNIX
 * socket written 100 bytes at a time) stops the reading instead of spinning on a readable socket while
 * the destination is full. Framed runs with the HTTP front's chunk framer (http_forward_chunk_run): a
 * chunked body passes whole, its end found and nothing after it taken, at about one splice and one
 * peek per chunk (the pump goes from chunk to chunk without stopping and writes the pipe per batch);
 * framing the framer refuses never moves, and what came before it does. And through the engine's HTTP
 * front (test_forward_chunked: a GET to an origin on the loopback answered with 320 chunks of 16 KiB): the
 * response byte for byte at about one splice per chunk, where main's pump, restarted at every chunk, made
 * 632. splice(2) and recv(2) are wrapped (-Wl,--wrap=splice,--wrap=recv) to count the calls. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine.h"
#include "http_conn.h"
#include "policy.h"
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

/* ---- through the HTTP front: a chunked response from an origin on the loopback ---- */

static int tcp_listen_on(const char *ip, uint16_t *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static void sin4_at(struct sockaddr_storage *ss, const char *ip)
{
	struct sockaddr_in *a = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof *ss);
	a->sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, ip, &a->sin_addr), 1);
}

/* A GET through the engine's HTTP front to an origin on 127.0.0.5 that answers with 320 chunks of 16 KiB:
 * the client gets the response with its framing byte for byte, and the body past the first 256 KiB (read
 * through user space) is spliced at about one splice per chunk. The pump that stopped at every chunk
 * (main before framed runs) made at least two per chunk (one into the pipe, one out of it). */
static void test_forward_chunked(void **state)
{
	static const char head[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
	const unsigned chunks = 320;
	struct event_base *base = event_base_new();
	struct proxy_config cfg = {.audit_fd = open("/dev/null", O_WRONLY | O_CLOEXEC)};
	struct proxy_session_info info = {.id = "s1", .command = "test"};
	struct policy_builder *b = policy_builder_new();
	struct policy_error perr;
	struct proxy_engine *e;
	struct framed f = {.seen.last = -1};
	char text[256], err[256], req[4096];
	uint16_t oport, pport;
	int ol = tcp_listen_on("127.0.0.5", &oport), pl = tcp_listen_on("127.0.0.3", &pport), client, origin = -1;
	size_t reqlen = 0, sent = 0, got = 0, rlen;
	unsigned char *resp, *all;
	const unsigned char *end = NULL;
	struct sockaddr_storage ss;
	int sz = 4 << 20;
	(void)state;

	/* the engine, session s1 (127.0.0.2) allowed to 127.0.0.5:oport */
	snprintf(text, sizeof text, "{\"allow\": [{\"cidr\": \"127.0.0.5/32\", \"ports\": [%u]}]}", oport);
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_ORG, "t.json", text, strlen(text), &perr), 0);
	info.policy = policy_builder_compile(b, &perr);
	assert_non_null(info.policy);
	policy_builder_free(b);
	sin4_at(&cfg.upstream_dns, "127.0.0.4");
	((struct sockaddr_in *)&cfg.upstream_dns)->sin_port = htons(53); /* (never asked: a literal address) */
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	e = proxy_engine_new(base, &cfg, err, sizeof err);
	if (!e)
		fail_msg("%s", err);
	sin4_at(&info.addr4, "127.0.0.2");
	sin4_at(&info.gw4, "127.0.0.3");
	assert_int_equal(proxy_engine_session_add(e, &info), 0);
	policy_unref(info.policy);
	assert_int_equal(proxy_engine_add_listener(e, pl, PROXY_LISTEN_HTTP), 0);

	/* the response the origin sends: head, then the body */
	framed_body(&f, chunks, 16384, "");
	rlen = strlen(head) + f.len;
	resp = malloc(rlen);
	assert_non_null(resp);
	memcpy(resp, head, strlen(head));
	memcpy(resp + strlen(head), f.body, f.len);
	all = malloc(rlen + 4096);
	assert_non_null(all);

	client = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(client >= 0);
	setsockopt(client, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	sin4_at(&ss, "127.0.0.2");
	assert_int_equal(bind(client, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)), 0);
	sin4_at(&ss, "127.0.0.3");
	((struct sockaddr_in *)&ss)->sin_port = htons(pport);
	assert_true(connect(client, (struct sockaddr *)&ss, sizeof(struct sockaddr_in)) == 0 || errno == EINPROGRESS);
	snprintf(req, sizeof req, "GET http://127.0.0.5:%u/big HTTP/1.1\r\nHost: 127.0.0.5:%u\r\n\r\n", oport, oport);

	splices = 0;
	for (int rounds = 0;; rounds++) {
		ssize_t n;
		assert_true(rounds < 200000);
		if (reqlen < strlen(req) && (n = write(client, req + reqlen, strlen(req) - reqlen)) > 0)
			reqlen += (size_t)n;
		if (origin < 0 && (origin = accept4(ol, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
			setsockopt(origin, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
		if (origin >= 0 && sent < rlen && (n = write(origin, resp + sent, rlen - sent)) > 0)
			sent += (size_t)n;
		if (origin >= 0)
			(void)read(origin, req + sizeof req / 2, sizeof req / 2); /* the request head: not checked here */
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		if ((n = read(client, all + got, rlen + 4096 - got)) > 0) {
			got += (size_t)n;
			end = memmem(all, got, "\r\n\r\n", 4);
			if (end && got - (size_t)(end + 4 - all) >= f.len)
				break;
		}
	}
	/* the head as the proxy rewrote it, then the body byte for byte, and nothing after it */
	assert_non_null(end);
	assert_non_null(memmem(all, (size_t)(end - all), "Via: 1.1 sluice", 15));
	assert_int_equal(got - (size_t)(end + 4 - all), f.len);
	assert_memory_equal(end + 4, f.body, f.len);
	print_message("%u chunks through the HTTP front: %u splices\n", chunks, splices);
	assert_true(splices > 0);
	assert_true(splices <= chunks + chunks / 2);
	close(client);
	if (origin >= 0)
		close(origin);
	close(ol);
	proxy_engine_free(e);
	event_base_free(base);
	free(resp);
	free(all);
	free(f.body);
	free(f.recvd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_full_no_spin),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_framed_chunked),
		cmocka_unit_test(test_framed_refused),
		cmocka_unit_test(test_forward_chunked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
