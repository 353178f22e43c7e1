/* Byte tunnels between two connected sockets (CONNECT now, transparent mode later): bufferevents
 * with watermarks (stop reading one side while the other side's output is full, as in libevent's
 * le-proxy), half-close passed on, and, once a direction has carried bulk data, splice(2) through a
 * pipe for that direction (splice_pump.c) so bulk bytes are not copied through user space. Idle timeout over both
 * directions. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "proxy_int.h"
#include "splice_pump.h"

#define SPLICE_AFTER (256 * 1024) /* bytes a direction carries before it switches to splice */

struct tunnel;

struct direction {
	struct tunnel *t;        /* borrowed: owner */
	struct bufferevent *src; /* borrowed from the tunnel */
	struct bufferevent *dst; /* borrowed from the tunnel */
	uint64_t bytes;
	bool eof;  /* src reached end of file */
	bool shut; /* dst was shut down for writing */
	bool splicing;
	struct splice_pump *pump; /* owned: made when the direction first switches to splice */
};

struct tunnel {
	struct proxy_engine *e;    /* borrowed */
	struct bufferevent *a, *b; /* owned */
	struct direction ab, ba;
	struct event *idle; /* owned */
	uint64_t last_active;
	tunnel_done_cb cb;
	void *arg;
	bool done;
};

static void finish(struct tunnel *t, const char *err)
{
	if (t->done)
		return;
	t->done = true;
	bufferevent_disable(t->a, EV_READ | EV_WRITE);
	bufferevent_disable(t->b, EV_READ | EV_WRITE);
	if (t->ab.pump)
		splice_pump_stop(t->ab.pump);
	if (t->ba.pump)
		splice_pump_stop(t->ba.pump);
	event_del(t->idle);
	t->cb(t, err, t->arg); /* the owner frees the tunnel */
}

static void check_done(struct tunnel *t)
{
	if (t->ab.shut && t->ba.shut)
		finish(t, NULL);
}

static void touch(struct tunnel *t)
{
	t->last_active = proxy_mono_ms();
}

static void shut_dst(struct direction *d)
{
	if (d->shut)
		return;
	d->shut = true;
	shutdown(bufferevent_getfd(d->dst), SHUT_WR);
	check_done(d->t);
}

/* ---- splice mode ---- */

static void pump_cb(struct splice_pump *p, enum splice_pump_event ev, size_t n, void *arg)
{
	struct direction *d = arg;
	(void)p;
	switch (ev) {
	case SPLICE_PUMP_MOVED:
		d->bytes += n;
		touch(d->t);
		break;
	case SPLICE_PUMP_DONE: /* no limit, no framing: neither happens */
	case SPLICE_PUMP_BAD_FRAMING:
	case SPLICE_PUMP_EOF:
		d->eof = true;
		shut_dst(d);
		break;
	case SPLICE_PUMP_READ_ERR: finish(d->t, "read from peer failed"); break;
	case SPLICE_PUMP_WRITE_ERR: finish(d->t, "write to peer failed"); break;
	}
}

/* Switches a direction to splice when it has carried bulk data and nothing is buffered. */
static void maybe_splice(struct direction *d)
{
	if (d->splicing || d->eof || d->bytes < SPLICE_AFTER || evbuffer_get_length(bufferevent_get_input(d->src)) ||
	    evbuffer_get_length(bufferevent_get_output(d->dst)))
		return;
	if (!d->pump)
		d->pump = splice_pump_new(d->t->e->base, pump_cb, d);
	if (!d->pump ||
	    splice_pump_start(d->pump, bufferevent_getfd(d->src), bufferevent_getfd(d->dst), SPLICE_PUMP_ALL) != 0)
		return; /* stay with bufferevents */
	d->splicing = true;
	bufferevent_disable(d->src, EV_READ);
}

/* ---- bufferevent mode ---- */

static struct direction *dir_from_src(struct tunnel *t, struct bufferevent *bev)
{
	return bev == t->a ? &t->ab : &t->ba;
}

static struct direction *dir_from_dst(struct tunnel *t, struct bufferevent *bev)
{
	return bev == t->b ? &t->ab : &t->ba;
}

static void move(struct direction *d)
{
	struct evbuffer *in = bufferevent_get_input(d->src);
	struct evbuffer *out = bufferevent_get_output(d->dst);
	size_t n = evbuffer_get_length(in);

	if (n == 0)
		return;
	d->bytes += n;
	evbuffer_add_buffer(out, in);
	touch(d->t);
	if (evbuffer_get_length(out) >= PROXY_BUF_HIGH) {
		/* le-proxy: stop reading src until dst's output drains to half. */
		bufferevent_disable(d->src, EV_READ);
		bufferevent_setwatermark(d->dst, EV_WRITE, PROXY_BUF_HIGH / 2, PROXY_BUF_HIGH);
	}
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;
	struct direction *d = dir_from_src(t, bev);
	move(d);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	struct tunnel *t = arg;
	struct direction *d = dir_from_dst(t, bev);
	struct evbuffer *out = bufferevent_get_output(bev);

	if (d->splicing)
		return;
	if (!d->eof && !(bufferevent_get_enabled(d->src) & EV_READ)) {
		bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
		bufferevent_enable(d->src, EV_READ);
	}
	if (evbuffer_get_length(out) == 0) {
		if (d->eof)
			shut_dst(d);
		else
			maybe_splice(d);
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct tunnel *t = arg;
	struct direction *d = dir_from_src(t, bev);

	if (what & BEV_EVENT_EOF) {
		move(d);
		d->eof = true;
		if (evbuffer_get_length(bufferevent_get_output(d->dst)) == 0)
			shut_dst(d);
		else
			bufferevent_setwatermark(d->dst, EV_WRITE, 0, 0); /* write_cb fires when it drained */
		return;
	}
	if (what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
		finish(t, (what & BEV_EVENT_WRITING) ? "write to peer failed" : "read from peer failed");
}

static void idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tunnel *t = arg;
	uint64_t idle = proxy_mono_ms() - t->last_active;
	(void)fd;
	(void)what;
	if (idle >= t->e->idle_timeout_ms) {
		finish(t, "idle timeout");
		return;
	}
	event_add(t->idle, t->e->tv_idle);
}

static void dir_init(struct tunnel *t, struct direction *d, struct bufferevent *src, struct bufferevent *dst)
{
	d->t = t;
	d->src = src;
	d->dst = dst;
}

static void dir_free(struct direction *d)
{
	splice_pump_free(d->pump);
}

struct tunnel *tunnel_new(struct proxy_engine *e, struct bufferevent *a, struct bufferevent *b, tunnel_done_cb cb,
                          void *arg)
{
	struct tunnel *t = calloc(1, sizeof *t);

	if (!t) {
		bufferevent_free(a);
		bufferevent_free(b);
		return NULL;
	}
	t->e = e;
	t->a = a;
	t->b = b;
	t->cb = cb;
	t->arg = arg;
	dir_init(t, &t->ab, a, b);
	dir_init(t, &t->ba, b, a);
	t->idle = evtimer_new(e->base, idle_cb, t);
	if (!t->idle) {
		tunnel_free(t);
		return NULL;
	}
	touch(t);
	event_add(t->idle, e->tv_idle);
	bufferevent_set_timeouts(a, NULL, NULL);
	bufferevent_set_timeouts(b, NULL, NULL);
	/* libevent reads at most 16 KiB per call by default: far too little for bulk data. */
	bufferevent_set_max_single_read(a, PROXY_BUF_HIGH);
	bufferevent_set_max_single_read(b, PROXY_BUF_HIGH);
	bufferevent_set_max_single_write(a, PROXY_BUF_HIGH);
	bufferevent_set_max_single_write(b, PROXY_BUF_HIGH);
	bufferevent_setwatermark(a, EV_READ, 0, PROXY_BUF_HIGH);
	bufferevent_setwatermark(b, EV_READ, 0, PROXY_BUF_HIGH);
	bufferevent_setwatermark(a, EV_WRITE, 0, 0);
	bufferevent_setwatermark(b, EV_WRITE, 0, 0);
	bufferevent_setcb(a, read_cb, write_cb, event_cb, t);
	bufferevent_setcb(b, read_cb, write_cb, event_cb, t);
	bufferevent_enable(a, EV_READ | EV_WRITE);
	bufferevent_enable(b, EV_READ | EV_WRITE);
	move(&t->ab); /* bytes the client sent right behind its CONNECT head */
	return t;
}

void tunnel_free(struct tunnel *t)
{
	if (!t)
		return;
	dir_free(&t->ab);
	dir_free(&t->ba);
	if (t->idle)
		event_free(t->idle);
	if (t->a)
		bufferevent_free(t->a);
	if (t->b)
		bufferevent_free(t->b);
	free(t);
}

void tunnel_bytes(const struct tunnel *t, uint64_t *a_to_b, uint64_t *b_to_a)
{
	*a_to_b = t->ab.bytes;
	*b_to_a = t->ba.bytes;
}
