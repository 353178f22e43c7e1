/* The bounds of the engine socket's two outgoing queues (docs/netd.md, "Engine protocol"): what each end
 * does when the other stops reading. sluiced's queue towards its engine is judged in engine.c, the
 * engine's queue towards sluiced in engine_child_out.c; both judge through the pure functions below, so
 * tests/unit/test_netd_engine_out.c pins every threshold at its boundary without a real flood. A healthy
 * peer empties a queue within milliseconds: these only ever matter for a peer stopped, stuck or far behind. */
#ifndef SLUICE_NETD_ENGINE_BOUNDS_H
#define SLUICE_NETD_ENGINE_BOUNDS_H

#include <stdbool.h>
#include <stddef.h>

/* ---- sluiced towards its engine (engine.c) ---- */
#define ENGINE_STALL_MS  2000       /* no message taken for this long: new sessions are refused */
#define ENGINE_STUCK_MS  10000      /* ... for this long: the engine is killed and restarted */
#define ENGINE_QUEUE_MAX (4u << 20) /* record bytes queued over which new sessions are refused at once */

/* Whether sluiced's queue of `bytes` record bytes (ipc_outq.bytes) is over ENGINE_QUEUE_MAX: new sessions
 * are refused until it is not (the setups under way wait for the engine as usual). */
static inline bool netd_engine_queue_over(size_t bytes)
{
	return bytes > ENGINE_QUEUE_MAX;
}

/* ---- the engine towards sluiced (engine_child_out.c) ---- */
#define CHILD_OUT_SOFT     (1u << 20)  /* record bytes queued from which messages that open something are refused */
#define CHILD_OUT_STALL_MS 2000        /* ... or when the queue has not moved for this long */
#define CHILD_OUT_MAX      (16u << 20) /* record bytes queued from which the engine gives up and exits */

enum netd_child_out_verdict {
	NETD_CHILD_OUT_SEND,    /* sent or queued: sluiced keeps up */
	NETD_CHILD_OUT_BEHIND,  /* queued although sluiced is behind (a message that never fails closed) */
	NETD_CHILD_OUT_REFUSE,  /* refused: a message that opens something, while sluiced is behind */
	NETD_CHILD_OUT_GIVE_UP, /* refused, and the engine exits: CHILD_OUT_MAX bytes wait */
};

/* What becomes of a message for sluiced while n messages of `bytes` record bytes wait, the queue having
 * not moved for idle_ms. refusable: a message that asks sluiced to open something (ASK, DIRECT_ADD),
 * which fails closed when refused; the others (RESULT, ASK_END, DIRECT_REVOKE, METRICS_DATA) are each
 * bounded by what sluiced sent or opened and queue up to CHILD_OUT_MAX. */
static inline enum netd_child_out_verdict netd_child_out_judge(size_t n, size_t bytes, double idle_ms, bool refusable)
{
	if (n == 0 || (bytes < CHILD_OUT_SOFT && idle_ms < CHILD_OUT_STALL_MS))
		return NETD_CHILD_OUT_SEND;
	if (refusable)
		return NETD_CHILD_OUT_REFUSE;
	return bytes >= CHILD_OUT_MAX ? NETD_CHILD_OUT_GIVE_UP : NETD_CHILD_OUT_BEHIND;
}

#endif
