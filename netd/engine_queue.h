/* The engine child's held messages: a session's policy (SESSION_ADD, SESSION_POLICY) is compiled on a
 * worker thread, never on the engine's event loop, so a huge policy handed over does not pause the
 * proxying of every other session; the messages of that session that come after it wait for it, so
 * each session sees its messages in the order sluiced sent them; a SESSION_ADD also waits for an earlier
 * held SESSION_REMOVE of another session that names one of its addresses, so a removal and a later add
 * of the same address are applied in the order sluiced sent them. A text compiled before (sessions of one
 * host mostly share their policy) is not compiled again: its compiled object is kept (policy_cache.h). */
#ifndef SLUICE_NETD_ENGINE_QUEUE_H
#define SLUICE_NETD_ENGINE_QUEUE_H

#include <stdbool.h>

#include "ipc.h"

struct event_base;
struct policy;
struct netd_engine_queue;

/* Called on the loop, in each session's order, once a held message may be handled: m (borrowed; cleared
 * after the call) with, for a compiled one, the policy (takes ownership; NULL when the compile failed, r
 * < 0 and err then say why). */
typedef void (*netd_engine_queue_fn)(void *arg, struct ipc_msg *m, struct policy *policy, int r,
                                     const char *err);

/* NULL when out of memory (or no eventfd). fn and arg are borrowed for the queue's life. */
struct netd_engine_queue *netd_engine_queue_new(struct event_base *base, netd_engine_queue_fn fn, void *arg);

/* Workers still compiling are not waited for (the engine is exiting): their jobs stay allocated, named by
 * the running thread, until the process ends a moment later. NULL is a no-op. */
void netd_engine_queue_free(struct netd_engine_queue *q);

/* Takes message m of session sid (m is then empty; sid must point into m) when it has to wait: always
 * with a policy to compile (the text in attribute attr, or the memfd named by fd_attr, at most max
 * bytes: read and compiled on a worker), else when an earlier message of that session still waits.
 * Returns 1 when taken (fn sees it later), 0 when the caller handles m now, -ENOMEM. */
int netd_engine_queue_submit(struct netd_engine_queue *q, struct ipc_msg *m, const char *sid, bool compile,
                             uint16_t attr, uint16_t fd_attr, size_t max);

/* Messages held (compiling or waiting for their session's compile), for tests and metrics. */
unsigned netd_engine_queue_held(const struct netd_engine_queue *q);

/* Compiles saved: held messages whose policy text was compiled before (its object reused, policy_cache.h). */
unsigned long netd_engine_queue_cache_hits(const struct netd_engine_queue *q);

#endif
