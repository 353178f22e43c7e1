/* Byte tunnels between two connected sockets (CONNECT now, transparent mode later): bufferevents
 * with watermarks (stop reading one side while the other side's output is full, as in libevent's
 * le-proxy), half-close passed on, and, once a direction has carried bulk data, splice(2) through a
 * pipe for that direction so bulk bytes are not copied through user space. Idle timeout over both
 * directions. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "proxy_int.h"

#define SPLICE_AFTER (256 * 1024) /* bytes a direction carries before it switches to splice */
#define PIPE_SIZE    (1024 * 1024)

struct tunnel;

struct direction {
	struct tunnel *t;        /* borrowed: owner */
	struct bufferevent *src; /* borrowed from the tunnel */
	struct bufferevent *dst; /* borrowed from the tunnel */
	uint64_t bytes;
	bool eof;  /* src reached end of file */
	bool shut; /* dst was shut down for writing */
	bool splicing;
	int pipe[2]; /* owned, -1 when not splicing */
	size_t in_pipe;
	size_t pipe_cap;
	struct event *rd, *wr; /* owned: splice readiness on src and dst */
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
	if (t->ab.rd)
		event_del(t->ab.rd);
	if (t->ab.wr)
		event_del(t->ab.wr);
	if (t->ba.rd)
		event_del(t->ba.rd);
	if (t->ba.wr)
		event_del(t->ba.wr);
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

static void splice_out(struct direction *d)
{
	while (d->in_pipe > 0) {
		ssize_t n = splice(d->pipe[0], NULL, bufferevent_getfd(d->dst), NULL, d->in_pipe,
		                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			d->in_pipe -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			event_add(d->wr, NULL);
			return;
		}
		finish(d->t, "write to peer failed");
		return;
	}
	event_del(d->wr);
	if (d->eof)
		shut_dst(d);
	else if (!event_pending(d->rd, EV_READ, NULL))
		event_add(d->rd, NULL);
}

static void splice_rd_cb(evutil_socket_t fd, short what, void *arg)
{
	struct direction *d = arg;
	(void)what;
	while (d->in_pipe < d->pipe_cap) {
		ssize_t n =
		        splice(fd, NULL, d->pipe[1], NULL, d->pipe_cap - d->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			d->in_pipe += (size_t)n;
			d->bytes += (uint64_t)n;
			touch(d->t);
			continue;
		}
		if (n == 0) {
			d->eof = true;
			event_del(d->rd);
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			break;
		finish(d->t, "read from peer failed");
		return;
	}
	if (d->in_pipe >= d->pipe_cap)
		event_del(d->rd); /* back-pressure: the pipe is full until dst takes it */
	splice_out(d);
}

static void splice_wr_cb(evutil_socket_t fd, short what, void *arg)
{
	struct direction *d = arg;
	(void)fd;
	(void)what;
	touch(d->t);
	splice_out(d);
}

/* Switches a direction to splice when it has carried bulk data and nothing is buffered. */
static void maybe_splice(struct direction *d)
{
	struct event_base *base = d->t->e->base;

	if (d->splicing || d->eof || d->bytes < SPLICE_AFTER || evbuffer_get_length(bufferevent_get_input(d->src)) ||
	    evbuffer_get_length(bufferevent_get_output(d->dst)))
		return;
	if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
		d->pipe[0] = d->pipe[1] = -1;
		return; /* stay with bufferevents */
	}
	d->pipe_cap = 65536;
	if (fcntl(d->pipe[1], F_SETPIPE_SZ, PIPE_SIZE) >= PIPE_SIZE)
		d->pipe_cap = PIPE_SIZE;
	d->rd = event_new(base, bufferevent_getfd(d->src), EV_READ | EV_PERSIST, splice_rd_cb, d);
	d->wr = event_new(base, bufferevent_getfd(d->dst), EV_WRITE | EV_PERSIST, splice_wr_cb, d);
	if (!d->rd || !d->wr) {
		if (d->rd)
			event_free(d->rd);
		if (d->wr)
			event_free(d->wr);
		d->rd = d->wr = NULL;
		close(d->pipe[0]);
		close(d->pipe[1]);
		d->pipe[0] = d->pipe[1] = -1;
		return;
	}
	d->splicing = true;
	bufferevent_disable(d->src, EV_READ);
	event_add(d->rd, NULL);
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
	d->pipe[0] = d->pipe[1] = -1;
}

static void dir_free(struct direction *d)
{
	if (d->rd)
		event_free(d->rd);
	if (d->wr)
		event_free(d->wr);
	if (d->pipe[0] >= 0)
		close(d->pipe[0]);
	if (d->pipe[1] >= 0)
		close(d->pipe[1]);
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
