/* The engine's reports to sluiced (engine_child.c, RUN state): never waiting, whatever sluiced does. What
 * sluiced's end of the socket does not take joins the ordered queue both ends use (outq_ev.c), within the
 * bounds of engine_bounds.h: once CHILD_OUT_SOFT bytes wait, or the queue has not moved for
 * CHILD_OUT_STALL_MS, a message that asks sluiced to open something (ASK, DIRECT_ADD) is refused and its
 * caller fails closed; every other message queues until CHILD_OUT_MAX bytes wait, when the engine gives
 * up: its loop is stopped (the engine exits, its sessions fail closed, sluiced restarts it) and nothing
 * more is sent. docs/netd.md, "Engine protocol". */
#ifndef SLUICE_NETD_ENGINE_CHILD_OUT_H
#define SLUICE_NETD_ENGINE_CHILD_OUT_H

#include <stdbool.h>
#include <time.h>

#include "ipc.h"
#include "outq_ev.h"

struct event_base;

struct netd_child_out {
	struct netd_outq_ev q;    /* owned: what sluiced's end did not take yet, in order */
	struct event_base *base;  /* borrowed: its loop is stopped when sluiced's end fails or the engine gives up */
	struct timespec moved_at; /* CLOCK_MONOTONIC: when q last became non-empty or sent a message */
	bool behind_logged;       /* "sluiced does not read" was logged for this stall */
	bool gave_up;             /* CHILD_OUT_MAX was reached: the loop was stopped, nothing more is sent */
};

/* 0 or -ENOMEM. sock is borrowed (the caller closes it after netd_child_out_release). */
int netd_child_out_init(struct netd_child_out *o, struct event_base *base, int sock);
/* Drops what sluiced did not take (it is stopping the engine, is gone, or the engine gave up). Sends
 * after it fail with -EPIPE at once: the engine's last reports while it frees its sessions never wait
 * on a sluiced that does not read. o may be zeroed or already released. */
void netd_child_out_release(struct netd_child_out *o);
/* Sends b (not released) now or queues it. refusable: see above. 0: sent or queued; -ENOBUFS: refused
 * (sluiced is behind and b refusable, or the engine gave up: now, or before); -EPIPE after release;
 * else ipc_outq_send()'s errors. */
int netd_child_out_send(struct netd_child_out *o, struct ipc_buf *b, bool refusable);

#endif
