/* The outgoing queue of an engine socket, driven by libevent (outq_ev.h): EV_WRITE while the socket is
 * full, a backing-off timer while the kernel is short of memory, nothing while the queue is empty. */
#include "outq_ev.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>

/* Watches what the queue needs now: nothing when empty, the timer after a refusal for want of memory,
 * else the socket's room. */
static void outq_watch(struct netd_outq_ev *o)
{
	if (!o->q.n) {
		event_del(o->wev);
		event_del(o->retry_ev);
	} else if (o->q.retry_ms) {
		struct timeval tv = {o->q.retry_ms / 1000, (suseconds_t)(o->q.retry_ms % 1000) * 1000};

		event_del(o->wev);
		event_add(o->retry_ev, &tv);
	} else {
		event_del(o->retry_ev);
		event_add(o->wev, NULL);
	}
}

static void outq_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd_outq_ev *o = arg;
	int r = ipc_outq_flush(&o->q, o->sock);

	(void)fd;
	(void)what;
	if (r < 0) {
		event_del(o->wev);
		event_del(o->retry_ev);
	} else {
		outq_watch(o);
	}
	if (o->fn)
		o->fn(o->arg, r); /* (may free o) */
}

int netd_outq_ev_init(struct netd_outq_ev *o, struct event_base *base, int sock, netd_outq_ev_fn fn, void *arg)
{
	memset(o, 0, sizeof *o);
	ipc_outq_init(&o->q);
	o->sock = sock;
	o->fn = fn;
	o->arg = arg;
	o->wev = event_new(base, sock, EV_WRITE | EV_PERSIST, outq_cb, o);
	o->retry_ev = evtimer_new(base, outq_cb, o);
	if (!o->wev || !o->retry_ev) {
		netd_outq_ev_release(o);
		return -ENOMEM;
	}
	return 0;
}

void netd_outq_ev_release(struct netd_outq_ev *o)
{
	if (o->wev)
		event_free(o->wev);
	if (o->retry_ev)
		event_free(o->retry_ev);
	o->wev = o->retry_ev = NULL;
	o->sock = -1; /* (closed by its owner next) */
	if (o->q.tail) /* (a zeroed struct was never initialised: nothing queued) */
		ipc_outq_clear(&o->q);
}

int netd_outq_ev_send(struct netd_outq_ev *o, struct ipc_buf *b)
{
	size_t queued = o->q.n;
	int r = ipc_outq_send(&o->q, o->sock, b);

	if (r == 0 && o->q.n != queued)
		outq_watch(o);
	return r;
}

int netd_outq_ev_flush(struct netd_outq_ev *o)
{
	int r = ipc_outq_flush(&o->q, o->sock);

	if (r >= 0)
		outq_watch(o);
	return r;
}
