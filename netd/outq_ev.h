/* An ipc_outq (common/ipc.h) driven by libevent: the one ordered, non-blocking outgoing queue both ends of
 * the engine socket use (sluiced towards its engine, netd/engine.c; the engine towards sluiced,
 * engine_child.c). What the socket does not take at once is queued and sent, oldest first, when the
 * socket is writable again; when the kernel refused a message for want of memory (ENOBUFS, ENOMEM) the
 * socket may poll writable all along, so the queue is tried again after a short timer that backs off
 * (ipc_outq.retry_ms) instead. The owner bounds how long it waits (it is told of every attempt). */
#ifndef SLUICE_NETD_OUTQ_EV_H
#define SLUICE_NETD_OUTQ_EV_H

#include "ipc.h"

struct event;
struct event_base;

/* Called after each attempt to send the queue that an event started (never from netd_outq_ev_send): r is
 * ipc_outq_flush()'s result, how many messages went (0: none yet; the queue waits again) or -errno of a
 * failure other than a full socket or want of memory (the queue is then left as it is and no longer
 * watched: the owner ends the connection). The callback may free the netd_outq_ev. */
typedef void (*netd_outq_ev_fn)(void *arg, int r);

struct netd_outq_ev {
	struct ipc_outq q;       /* owned: what the socket did not take yet, in order */
	int sock;                /* borrowed */
	struct event *wev;       /* owned: the socket is writable (pending while q is not empty and not refused) */
	struct event *retry_ev;  /* owned: q.retry_ms passed (pending after a refusal for want of memory) */
	netd_outq_ev_fn fn;      /* borrowed, may be NULL */
	void *arg;               /* borrowed */
};

/* 0 or -ENOMEM. The queue starts empty and unwatched. */
int netd_outq_ev_init(struct netd_outq_ev *o, struct event_base *base, int sock, netd_outq_ev_fn fn, void *arg);
/* Drops what is queued (closing its fds) and frees the events; o may be zeroed or already released. */
void netd_outq_ev_release(struct netd_outq_ev *o);
/* ipc_outq_send(), then the queue watched as it needs. Same results. */
int netd_outq_ev_send(struct netd_outq_ev *o, struct ipc_buf *b);
/* Sends what the socket takes now, without waiting (as an event would), and watches the rest; returns
 * ipc_outq_flush()'s result. Does not call fn. */
int netd_outq_ev_flush(struct netd_outq_ev *o);

#endif
