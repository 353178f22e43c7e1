/* The engine's reports to sluiced, sent without waiting and bounded (engine_child_out.h, engine_bounds.h). */
#include "engine_child_out.h"

#include <errno.h>
#include <event2/event.h>
#include <string.h>

#include "engine_bounds.h"
#include "log.h"

static double ms_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t->tv_sec) * 1000 + (double)(now.tv_nsec - t->tv_nsec) / 1e6;
}

/* sluiced took r queued messages (outq_ev.c), or the socket failed (r < 0: sluiced is gone; the read side
 * sees the end of file too) */
static void child_out_moved(void *arg, int r)
{
	struct netd_child_out *o = arg;

	if (r > 0) {
		clock_gettime(CLOCK_MONOTONIC, &o->moved_at);
		if (o->behind_logged && o->q.q.n == 0) {
			log_info("engine: sluiced reads its reports again");
			o->behind_logged = false;
		}
	} else if (r < 0) {
		event_base_loopbreak(o->base);
	}
}

int netd_child_out_init(struct netd_child_out *o, struct event_base *base, int sock)
{
	memset(o, 0, sizeof *o);
	o->base = base;
	return netd_outq_ev_init(&o->q, base, sock, child_out_moved, o);
}

void netd_child_out_release(struct netd_child_out *o)
{
	netd_outq_ev_release(&o->q);
}

int netd_child_out_send(struct netd_child_out *o, struct ipc_buf *b, bool refusable)
{
	size_t queued = o->q.q.n;
	double idle_ms = queued ? ms_since(&o->moved_at) : 0;
	enum netd_child_out_verdict v;
	int r;

	if (!o->q.wev) /* released: the engine is exiting */
		return -EPIPE;
	if (o->gave_up)
		return -ENOBUFS;
	v = netd_child_out_judge(queued, o->q.q.bytes, idle_ms, refusable);
	if (v != NETD_CHILD_OUT_SEND && !o->behind_logged) {
		/* said as it is: a queue that stopped moving, or one that grew past its bound in a burst (a time
		 * of "0.0 s" would say nothing) */
		if (idle_ms >= CHILD_OUT_STALL_MS)
			log_warnx("engine: sluiced has taken none of its reports for %.1f s (%zu waiting, %zu KiB): held "
			          "requests are denied and direct flows not opened until it does",
			          idle_ms / 1000, queued, o->q.q.bytes / 1024);
		else
			log_warnx("engine: sluiced is behind: %zu reports wait for it (%zu KiB, the bound is %u KiB): "
			          "held requests are denied and direct flows not opened until it takes them",
			          queued, o->q.q.bytes / 1024, CHILD_OUT_SOFT / 1024);
		o->behind_logged = true;
	}
	if (v == NETD_CHILD_OUT_REFUSE)
		return -ENOBUFS;
	if (v == NETD_CHILD_OUT_GIVE_UP) {
		log_warnx("engine: %zu KiB of reports wait for sluiced: giving up (the engine exits; its sessions "
		          "fail closed until sluiced restarts it)",
		          o->q.q.bytes / 1024);
		o->gave_up = true;
		event_base_loopbreak(o->base);
		return -ENOBUFS;
	}
	r = netd_outq_ev_send(&o->q, b);
	if (r == 0 && !queued && o->q.q.n)
		clock_gettime(CLOCK_MONOTONIC, &o->moved_at);
	return r;
}
