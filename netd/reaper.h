/* Deferred link deletion. Deleting a veth pair costs the kernel RCU grace periods (~20 ms); done inline it
 * would stall sluiced's event loop for every session that ends (1000 sessions ending at once: 20 s without
 * new setups). A session's set elements are removed inline first (from then on its interface only drops:
 * every sl-* interface is filtered), and the link deletion and the lease release, in that order, run on
 * one worker thread with its own netlink socket.
 *
 * A deletion holds the kernel's RTNL lock, which every step of a setup's link work needs too, so the
 * worker gives way to setups: it starts a deletion only when no setup is under way and none ran for 20 ms
 * (or a link waited 1 s), at most 8 links per request (64 when no setup came for a second, or links
 * waited their 1 s), so that a setup arriving meanwhile waits for one small deletion at most, never for
 * one that slipped between the requests of its own link work. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

struct netd_reaper;

/* Starts the worker (its netlink socket lives in the current netns). NULL with *err = -errno. */
struct netd_reaper *netd_reaper_new(const char *lease_dir, int *err);
/* Queues: delete link `ifname`, then release lease `slot`, then close the session's namespace (takes
 * ownership of lease_fd and of netns_fd, -1 for none; ns_dev/ns_ino name that namespace). On failure
 * (-ENOMEM) nothing is taken. */
int netd_reaper_push(struct netd_reaper *r, const char *ifname, unsigned slot, int lease_fd, int netns_fd,
		     dev_t ns_dev, ino_t ns_ino);
/* Returns once no queued link has its session side in namespace ns_dev/ns_ino (a namespace attached again
 * right after its session ended still holds the old eth0 until then). NULL no-op. */
void netd_reaper_wait_ns(struct netd_reaper *r, dev_t ns_dev, ino_t ns_ino);
/* Around a setup's link work (creation to the session side up), on sluiced's loop: no deletion starts
 * inside it; neither call blocks. NULL no-op. */
void netd_reaper_setup_begin(struct netd_reaper *r);
void netd_reaper_setup_end(struct netd_reaper *r);
/* Waits until every queued job is done (not deferred: at the pool's limit a slot is wanted now). */
void netd_reaper_drain(struct netd_reaper *r);
/* Drains, stops and frees. NULL no-op. */
void netd_reaper_free(struct netd_reaper *r);
