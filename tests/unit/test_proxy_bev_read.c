/* Unit tests of the engine's own read callback for socket bufferevents (proxy/bev_read.c): it replaces
 * libevent's (which asks FIONREAD before each read) and behaves like it: the bytes arrive in order, at
 * most 4096 a read; the read high watermark bounds what is read and suspends reading until the input
 * drains; end of file and a reset reach the event callback with reading disabled (the reset's errno
 * kept); a read timeout still fires; disabling and enabling reading work as before; a bufferevent that
 * is not a plain socket one keeps libevent's callback. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "proxy_int.h"

struct seen {
	unsigned reads;
	size_t most; /* the largest input seen by a read callback */
	short events;
	int err;
};

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct seen *s = arg;
	size_t n = evbuffer_get_length(bufferevent_get_input(bev));
	s->reads++;
	if (n > s->most)
		s->most = n;
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct seen *s = arg;
	(void)bev;
	s->events = what;
	s->err = EVUTIL_SOCKET_ERROR();
}

/* A socket bufferevent on one end of a socketpair with the engine's read callback; *peer: the other end. */
static struct bufferevent *pair(struct event_base *base, int *peer, struct seen *s)
{
	int sv[2];
	struct bufferevent *bev, *plain;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	bev = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	plain = bufferevent_socket_new(base, -1, 0);
	assert_non_null(bev);
	assert_non_null(plain);
	assert_ptr_equal(event_get_callback(&bev->ev_read), event_get_callback(&plain->ev_read));
	proxy_bev_fast_read(bev);
	/* replaced (else libevent's FIONREAD is back), and only once */
	assert_ptr_not_equal(event_get_callback(&bev->ev_read), event_get_callback(&plain->ev_read));
	{
		event_callback_fn ours = event_get_callback(&bev->ev_read);
		proxy_bev_fast_read(bev);
		assert_ptr_equal(event_get_callback(&bev->ev_read), ours);
	}
	bufferevent_free(plain);
	memset(s, 0, sizeof *s);
	bufferevent_setcb(bev, read_cb, NULL, event_cb, s);
	bufferevent_enable(bev, EV_READ);
	*peer = sv[1];
	return bev;
}

static void put(int fd, size_t n, unsigned char seed)
{
	unsigned char *b = malloc(n);
	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed + i * 7);
	assert_int_equal(write(fd, b, n), (ssize_t)n);
	free(b);
}

static void expect(struct evbuffer *in, size_t n, unsigned char seed)
{
	unsigned char *b = malloc(n);
	assert_non_null(b);
	assert_int_equal(evbuffer_remove(in, b, n), (int)n);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(b[i], (unsigned char)(seed + i * 7));
	free(b);
}

static void test_bytes_in_order(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s;
	int peer;
	struct bufferevent *bev = pair(base, &peer, &s);
	(void)state;

	put(peer, 5, 1);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(s.reads, 1);
	expect(bufferevent_get_input(bev), 5, 1);
	/* more than one read takes: 4096 at most each, all of it in order */
	put(peer, 10000, 3);
	while (evbuffer_get_length(bufferevent_get_input(bev)) < 10000)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_true(s.reads >= 1 + 3);
	assert_true(s.most <= 10000);
	expect(bufferevent_get_input(bev), 10000, 3);
	/* disabled: nothing is read; enabled again: it is */
	bufferevent_disable(bev, EV_READ);
	put(peer, 10, 5);
	(void)event_base_loop(base, EVLOOP_NONBLOCK); /* (1: no event left to wait for) */
	assert_int_equal(evbuffer_get_length(bufferevent_get_input(bev)), 0);
	bufferevent_enable(bev, EV_READ);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	expect(bufferevent_get_input(bev), 10, 5);
	assert_int_equal(s.events, 0);
	bufferevent_free(bev);
	close(peer);
	event_base_free(base);
}

static void test_max_read(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s;
	int peer;
	struct bufferevent *bev = pair(base, &peer, &s);
	(void)state;

	put(peer, 9000, 9);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(s.reads, 1);
	assert_int_equal(evbuffer_get_length(bufferevent_get_input(bev)), 4096); /* libevent's bound */
	bufferevent_set_max_single_read(bev, 1000);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(evbuffer_get_length(bufferevent_get_input(bev)), 5096);
	while (evbuffer_get_length(bufferevent_get_input(bev)) < 9000)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	expect(bufferevent_get_input(bev), 9000, 9);
	bufferevent_free(bev);
	close(peer);
	event_base_free(base);
}

static void test_watermark(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s;
	int peer;
	struct bufferevent *bev = pair(base, &peer, &s);
	struct evbuffer *in = bufferevent_get_input(bev);
	(void)state;

	/* no read callback (one that leaves the input at the watermark is run again and again by libevent) */
	bufferevent_setcb(bev, NULL, NULL, event_cb, &s);
	bufferevent_setwatermark(bev, EV_READ, 0, 100);
	put(peer, 1000, 11);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(evbuffer_get_length(in), 100);
	/* suspended at the watermark: nothing more until the input drains */
	for (int i = 0; i < 3; i++)
		(void)event_base_loop(base, EVLOOP_NONBLOCK); /* (1: no event left to wait for) */
	assert_int_equal(evbuffer_get_length(in), 100);
	expect(in, 60, 11);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(evbuffer_get_length(in), 100);
	expect(in, 100, (unsigned char)(11 + 60 * 7));
	/* a low watermark: the read callback waits for that much */
	bufferevent_setcb(bev, read_cb, NULL, event_cb, &s);
	bufferevent_setwatermark(bev, EV_READ, 500, 0);
	s.reads = 0;
	while (evbuffer_get_length(in) < 840)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(s.reads, 1);
	expect(in, 840, (unsigned char)(11 + 160 * 7));
	bufferevent_free(bev);
	close(peer);
	event_base_free(base);
}

static void test_eof(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s;
	int peer;
	struct bufferevent *bev = pair(base, &peer, &s);
	(void)state;

	put(peer, 7, 13);
	close(peer);
	while (!s.events)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(s.events, BEV_EVENT_READING | BEV_EVENT_EOF);
	assert_int_equal(bufferevent_get_enabled(bev) & EV_READ, 0);
	expect(bufferevent_get_input(bev), 7, 13); /* the bytes before the end came first */
	bufferevent_free(bev);
	event_base_free(base);
}

static void test_reset(void **state)
{
	struct event_base *base = event_base_new();
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	struct linger lg = {1, 0};
	struct seen s = {0};
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), c, peer;
	struct bufferevent *bev;
	(void)state;

	assert_true(l >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &alen), 0);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof a), 0);
	peer = accept(l, NULL, NULL);
	assert_true(peer >= 0);
	assert_int_equal(evutil_make_socket_nonblocking(c), 0);
	bev = bufferevent_socket_new(base, c, BEV_OPT_CLOSE_ON_FREE);
	proxy_bev_fast_read(bev);
	bufferevent_setcb(bev, read_cb, NULL, event_cb, &s);
	bufferevent_enable(bev, EV_READ);
	assert_int_equal(setsockopt(peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
	close(peer); /* a reset */
	while (!s.events)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(s.events, BEV_EVENT_READING | BEV_EVENT_ERROR);
	assert_int_equal(s.err, ECONNRESET);
	assert_int_equal(bufferevent_get_enabled(bev) & EV_READ, 0);
	bufferevent_free(bev);
	close(l);
	event_base_free(base);
}

static void test_timeout(void **state)
{
	struct event_base *base = event_base_new();
	struct timeval tv = {0, 20000};
	struct seen s;
	int peer;
	struct bufferevent *bev = pair(base, &peer, &s);
	(void)state;

	bufferevent_set_timeouts(bev, &tv, NULL);
	while (!s.events)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(s.events, BEV_EVENT_READING | BEV_EVENT_TIMEOUT);
	bufferevent_free(bev);
	close(peer);
	event_base_free(base);
}

/* A bufferevent set up before it reads (enabled already) keeps reading, now with the engine's callback;
 * a filter's read event is not a socket bufferevent's and stays libevent's. */
static void test_enabled_and_others(void **state)
{
	struct event_base *base = event_base_new();
	struct seen s = {0};
	int sv[2];
	struct bufferevent *bev, *filt;
	event_callback_fn before;
	(void)state;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	bev = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(bev, read_cb, NULL, event_cb, &s);
	bufferevent_enable(bev, EV_READ);
	before = event_get_callback(&bev->ev_read);
	proxy_bev_fast_read(bev);
	assert_ptr_not_equal(event_get_callback(&bev->ev_read), before);
	assert_true(bufferevent_get_enabled(bev) & EV_READ);
	put(sv[1], 3, 17);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	expect(bufferevent_get_input(bev), 3, 17);

	filt = bufferevent_filter_new(bev, NULL, NULL, 0, NULL, NULL);
	assert_non_null(filt);
	before = event_get_callback(&filt->ev_read);
	proxy_bev_fast_read(filt);
	assert_ptr_equal(event_get_callback(&filt->ev_read), before);
	bufferevent_free(filt);
	bufferevent_free(bev);
	close(sv[1]);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_bytes_in_order),
	        cmocka_unit_test(test_max_read),
	        cmocka_unit_test(test_watermark),
	        cmocka_unit_test(test_eof),
	        cmocka_unit_test(test_reset),
	        cmocka_unit_test(test_timeout),
	        cmocka_unit_test(test_enabled_and_others),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
