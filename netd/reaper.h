/* Deferred link deletion. Deleting a veth pair costs the kernel RCU grace periods (~20 ms); done inline it
 * would stall sluiced's event loop for every session that ends (1000 sessions ending at once: 20 s without
 * new setups). A session's set elements are removed inline first (from then on its interface only drops:
 * every sl-* interface is filtered), and the link deletion and the lease release, in that order, run on
 * one worker thread with its own netlink socket. */
#pragma once

#include <stdbool.h>

struct netd_reaper;

/* Starts the worker (its netlink socket lives in the current netns). NULL with *err = -errno. */
struct netd_reaper *netd_reaper_new(const char *lease_dir, int *err);
/* Queues: delete link `ifname`, then release lease `slot` (takes ownership of lease_fd). */
int netd_reaper_push(struct netd_reaper *r, const char *ifname, unsigned slot, int lease_fd);
/* Waits until every queued job is done. */
void netd_reaper_drain(struct netd_reaper *r);
/* Drains, stops and frees. NULL no-op. */
void netd_reaper_free(struct netd_reaper *r);
