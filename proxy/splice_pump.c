/* The splice pump (see splice_pump.h): a pipe and two events, src readable and dst writable. */
#include "splice_pump.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define PIPE_SIZE (1024 * 1024)

struct splice_pump {
	struct event_base *base; /* borrowed */
	struct event *rd, *wr;   /* owned: src readable, dst writable */
	int pipe[2];             /* owned */
	size_t in_pipe, cap;
	uint64_t left; /* bytes still to read from src (in this run, for framed runs) */
	bool eof, running;
	bool last;                /* no run after this one (always, unless framed) */
	bool bad;                 /* framed: more() refused the framing; ends once the pipe is written */
	splice_pump_more_cb more; /* framed runs, or NULL */
	splice_pump_cb cb;
	void *arg;
};

static void rd_cb(evutil_socket_t fd, short what, void *arg);
static void wr_cb(evutil_socket_t fd, short what, void *arg);

struct splice_pump *splice_pump_new(struct event_base *base, splice_pump_cb cb, void *arg)
{
	struct splice_pump *p = calloc(1, sizeof *p);

	if (!p)
		return NULL;
	p->base = base;
	p->cb = cb;
	p->arg = arg;
	p->pipe[0] = p->pipe[1] = -1;
	if (pipe2(p->pipe, O_NONBLOCK | O_CLOEXEC) != 0)
		goto out;
	p->cap = 65536;
	if (fcntl(p->pipe[1], F_SETPIPE_SZ, PIPE_SIZE) >= PIPE_SIZE)
		p->cap = PIPE_SIZE;
	p->rd = event_new(base, -1, 0, rd_cb, p);
	p->wr = event_new(base, -1, 0, wr_cb, p);
	if (p->rd && p->wr)
		return p;
	errno = ENOMEM;
out:
	splice_pump_free(p);
	return NULL;
}

static int start(struct splice_pump *p, int src, int dst, uint64_t limit, splice_pump_more_cb more)
{
	splice_pump_stop(p);
	if (event_assign(p->rd, p->base, src, EV_READ | EV_PERSIST, rd_cb, p) != 0 ||
	    event_assign(p->wr, p->base, dst, EV_WRITE | EV_PERSIST, wr_cb, p) != 0)
		return -EINVAL;
	p->left = limit;
	p->more = more;
	p->last = !more;
	p->eof = p->bad = false;
	p->running = true;
	if ((limit > 0 || more) && event_add(p->rd, NULL) != 0) {
		p->running = false;
		return -ENOMEM;
	}
	return 0;
}

int splice_pump_start(struct splice_pump *p, int src, int dst, uint64_t limit)
{
	return start(p, src, dst, limit, NULL);
}

int splice_pump_start_framed(struct splice_pump *p, int src, int dst, uint64_t limit, splice_pump_more_cb more)
{
	return more ? start(p, src, dst, limit, more) : -EINVAL;
}

void splice_pump_stop(struct splice_pump *p)
{
	if (!p->running)
		return;
	p->running = false;
	event_del(p->rd);
	event_del(p->wr);
	if (p->in_pipe > 0) {
		/* the pipe must be empty for the next body: drop what is left (the caller is closing) */
		char sink[4096];
		while (p->in_pipe > 0) {
			ssize_t n = read(p->pipe[0], sink, p->in_pipe < sizeof sink ? p->in_pipe : sizeof sink);
			if (n <= 0)
				break;
			p->in_pipe -= (size_t)n;
		}
		p->in_pipe = 0;
	}
}

bool splice_pump_running(const struct splice_pump *p)
{
	return p && p->running;
}

/* Ends the run with ev (the pump is stopped before the callback, which may free it). */
static void end(struct splice_pump *p, enum splice_pump_event ev, size_t n)
{
	p->running = false;
	event_del(p->rd);
	event_del(p->wr);
	p->cb(p, ev, n, p->arg);
}

/* Whether src is to be read again once the pipe has room: bytes left in this run, or another run. */
static bool more_to_read(const struct splice_pump *p)
{
	return !p->eof && !p->bad && (p->left > 0 || !p->last);
}

/* Writes the pipe to dst; when it is empty, reads again, or ends the run. */
static void out(struct splice_pump *p)
{
	while (p->in_pipe > 0) {
		ssize_t n = splice(p->pipe[0], NULL, event_get_fd(p->wr), NULL, p->in_pipe,
		                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			p->in_pipe -= (size_t)n;
			if (more_to_read(p) && !event_pending(p->rd, EV_READ, NULL))
				event_add(p->rd, NULL); /* room in the pipe again */
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			event_add(p->wr, NULL);
			return;
		}
		end(p, SPLICE_PUMP_WRITE_ERR, n < 0 ? (size_t)errno : EPIPE);
		return;
	}
	event_del(p->wr);
	if (p->bad)
		end(p, SPLICE_PUMP_BAD_FRAMING, 0);
	else if (p->eof)
		end(p, SPLICE_PUMP_EOF, 0);
	else if (p->left == 0 && p->last)
		end(p, SPLICE_PUMP_DONE, 0);
	else if (!event_pending(p->rd, EV_READ, NULL))
		event_add(p->rd, NULL);
}

static void rd_cb(evutil_socket_t fd, short what, void *arg)
{
	struct splice_pump *p = arg;
	bool moved = false, full = false;
	(void)what;

	while (p->in_pipe < p->cap) {
		size_t want = p->cap - p->in_pipe;
		ssize_t n;
		if (p->left == 0) {
			int rc;
			if (p->last)
				break;
			rc = p->more(p, fd, &p->left, &p->last, p->arg); /* the next run, framing checked */
			if (rc == -EAGAIN)
				break; /* nothing to look at yet: rd stays armed */
			if (rc == -ENODATA || rc == -EPROTO) {
				p->eof = rc == -ENODATA;
				p->bad = rc == -EPROTO;
				break;
			}
			if (rc != 0 || p->left == 0) {
				end(p, SPLICE_PUMP_READ_ERR, rc != 0 ? (size_t)-rc : EPROTO);
				return;
			}
			continue;
		}
		if ((uint64_t)want > p->left)
			want = (size_t)p->left;
		n = splice(fd, NULL, p->pipe[1], NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			p->in_pipe += (size_t)n;
			if (p->left != SPLICE_PUMP_ALL)
				p->left -= (uint64_t)n;
			p->cb(p, SPLICE_PUMP_MOVED, (size_t)n, p->arg);
			moved = true;
			continue;
		}
		if (n == 0) {
			p->eof = true;
			break;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			/* src was readable and nothing moved: the pipe is out of slots (a slot holds a page
			 * or less of an skb, so it can fill before cap bytes) */
			full = !moved && p->in_pipe > 0;
			break;
		}
		end(p, SPLICE_PUMP_READ_ERR, (size_t)errno);
		return;
	}
	if (full || p->in_pipe >= p->cap || !more_to_read(p))
		event_del(p->rd); /* back-pressure, or nothing more to read: dst takes the pipe first */
	if (!event_pending(p->wr, EV_WRITE, NULL))
		out(p); /* (else dst is full: wr_cb writes when it can take more) */
}

static void wr_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	out(arg);
}

void splice_pump_free(struct splice_pump *p)
{
	if (!p)
		return;
	if (p->rd)
		event_free(p->rd);
	if (p->wr)
		event_free(p->wr);
	if (p->pipe[0] >= 0)
		close(p->pipe[0]);
	if (p->pipe[1] >= 0)
		close(p->pipe[1]);
	free(p);
}
