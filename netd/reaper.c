/* The link-deletion worker (see reaper.h). */
#include "reaper.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "lease.h"
#include "link.h"
#include "log.h"
#include "util.h"

#define REAPER_COALESCE_NS 50000000LL   /* 50 ms: what ends meanwhile goes in the same deletions */
#define REAPER_QUIET_NS 20000000LL      /* 20 ms without a setup: sluiced is idle, deleting costs nobody */
#define REAPER_DEFER_MAX_NS 1000000000LL /* 1 s: a link waits no longer for a quiet moment (under a stream
                                          * of setups the links it defers add to the kernel lists a setup
                                          * walks: 1 s of them, not more) */
#define REAPER_CHUNK 8                  /* links per deletion request (see reaper.h) */
#define REAPER_IDLE_NS 1000000000LL     /* 1 s without a setup: sluiced is idle, ... */
#define REAPER_CHUNK_IDLE 64            /* ... and deletes more per request (also when overdue) */

struct job {
	struct job *next;
	char ifname[16];
	unsigned slot;
	int lease_fd; /* owned */
	int netns_fd; /* owned, or -1: the session's namespace, closed after its link is gone */
	dev_t ns_dev; /* that namespace, while its side of the link may still be in it */
	ino_t ns_ino;
	int64_t queued; /* monotonic ns */
};

struct netd_reaper {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t more, idle;
	struct job *head, *tail; /* owned queue, oldest first */
	struct job *doing;       /* the chunk being deleted (owned by the worker; read under lock) */
	bool busy, stop, draining;
	unsigned setups;         /* setups between netd_reaper_setup_begin and _end (under lock) */
	int64_t last_setup;      /* monotonic ns when the last one ended (under lock) */
	struct nl_sock *nl;      /* owned; used by the worker only */
	char lease_dir[PATH_MAX];
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* When (monotonic ns) the queue's head may be deleted; 0 = now. Under lock. */
static int64_t due(const struct netd_reaper *r, int64_t now)
{
	int64_t coalesced, quiet, forced;

	if (r->stop || r->draining)
		return 0;
	coalesced = r->head->queued + REAPER_COALESCE_NS;
	forced = r->head->queued + REAPER_DEFER_MAX_NS;
	quiet = r->setups ? forced : r->last_setup + REAPER_QUIET_NS;
	if (quiet < coalesced)
		quiet = coalesced;
	if (quiet > forced)
		quiet = forced;
	return quiet <= now ? 0 : quiet;
}

/* Takes up to REAPER_CHUNK queued jobs once sluiced is quiet (or the oldest waited too long): moves their
 * links into the doomed group, deletes the group in one request, then releases the leases. A link that
 * cannot be moved is deleted on its own. A setup is not made to wait for a chunk under way (it waits only
 * where the kernel makes it, for the RTNL lock, not for the RCU barrier the deletion waits for after). */
static void *worker(void *arg)
{
	struct netd_reaper *r = arg;

	pthread_mutex_lock(&r->lock);
	for (;;) {
		struct job *batch, *j, **pp;
		int64_t when, now;
		int rc, n, most;

		while (!r->head && !r->stop)
			pthread_cond_wait(&r->more, &r->lock);
		if (!r->head)
			break;
		now = now_ns();
		if ((when = due(r, now)) != 0) {
			/* re-checked at least every 10 ms: a setup's end does not signal */
			int64_t wake = now_ns() + 10000000LL;
			struct timespec ts;

			if (when < wake)
				wake = when;
			ts.tv_sec = (time_t)(wake / 1000000000LL);
			ts.tv_nsec = (long)(wake % 1000000000LL);
			pthread_cond_timedwait(&r->more, &r->lock, &ts);
			continue;
		}
		/* each request costs the kernel its grace periods however many links it deletes: when no setup
		 * came for a second (a mass teardown), for a drain, and when links waited their 1 s (setups come
		 * without a pause: the fewer requests, the fewer of them a setup lands on), larger requests;
		 * otherwise small ones, so that a setup arriving meanwhile waits for little */
		most = r->stop || r->draining || now - r->head->queued >= REAPER_DEFER_MAX_NS ||
		       (!r->setups && now - r->last_setup >= REAPER_IDLE_NS) ? REAPER_CHUNK_IDLE : REAPER_CHUNK;
		batch = r->head;
		for (n = 1, pp = &batch->next; *pp && n < most; n++)
			pp = &(*pp)->next;
		r->head = *pp;
		*pp = NULL;
		if (!r->head)
			r->tail = NULL;
		r->busy = true;
		r->doing = batch;
		pthread_mutex_unlock(&r->lock);
		for (j = batch; j; j = j->next) {
			rc = netd_link_set_group(r->nl, j->ifname, NETD_DOOMED_GROUP);
			if (rc < 0 && rc != -ENODEV && (rc = netd_link_delete(r->nl, j->ifname)) < 0 && rc != -ENODEV)
				log_warnx("deleting link %s: %s", j->ifname, strerror(-rc));
		}
		rc = netd_link_delete_group(r->nl, NETD_DOOMED_GROUP);
		if (rc < 0 && rc != -ENODEV)
			log_warnx("deleting ended sessions' links: %s", strerror(-rc));
		pthread_mutex_lock(&r->lock);
		r->doing = NULL;
		pthread_mutex_unlock(&r->lock);
		while (batch) {
			j = batch;
			batch = j->next;
			/* only now may the slot (and its addresses and routes) be reused */
			netd_lease_release(r->lease_dir, j->slot, j->lease_fd);
			/* the namespace's own teardown (the kernel's, once its last reference goes, under the
			 * same RTNL lock and with grace periods of its own) happens here too, not on sluiced's
			 * loop when the session ends, just before the next setup */
			if (j->netns_fd >= 0)
				close(j->netns_fd);
			free(j);
		}
		pthread_mutex_lock(&r->lock);
		r->busy = false;
		if (!r->head)
			pthread_cond_broadcast(&r->idle);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

struct netd_reaper *netd_reaper_new(const char *lease_dir, int *err)
{
	struct netd_reaper *r = calloc(1, sizeof *r);
	pthread_condattr_t ca;

	if (!r) {
		*err = -ENOMEM;
		return NULL;
	}
	util_strlcpy(r->lease_dir, lease_dir, sizeof r->lease_dir);
	r->nl = netd_rtnl_open(err);
	if (!r->nl) {
		free(r);
		return NULL;
	}
	pthread_mutex_init(&r->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the deadlines above are monotonic */
	pthread_cond_init(&r->more, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&r->idle, NULL);
	if ((*err = -pthread_create(&r->thread, NULL, worker, r)) < 0) {
		pthread_mutex_destroy(&r->lock);
		pthread_cond_destroy(&r->more);
		pthread_cond_destroy(&r->idle);
		netd_rtnl_close(r->nl);
		free(r);
		return NULL;
	}
	return r;
}

int netd_reaper_push(struct netd_reaper *r, const char *ifname, unsigned slot, int lease_fd, int netns_fd,
		     dev_t ns_dev, ino_t ns_ino)
{
	struct job *j = calloc(1, sizeof *j);

	if (!j)
		return -ENOMEM;
	util_strlcpy(j->ifname, ifname, sizeof j->ifname);
	j->slot = slot;
	j->lease_fd = lease_fd;
	j->netns_fd = netns_fd;
	j->ns_dev = ns_dev;
	j->ns_ino = ns_ino;
	j->queued = now_ns();
	pthread_mutex_lock(&r->lock);
	if (r->tail)
		r->tail->next = j;
	else
		r->head = j;
	r->tail = j;
	pthread_cond_signal(&r->more);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

void netd_reaper_setup_begin(struct netd_reaper *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->setups++; /* the worker starts no deletion until it is over */
	pthread_mutex_unlock(&r->lock);
}

void netd_reaper_setup_end(struct netd_reaper *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->setups--;
	r->last_setup = now_ns();
	pthread_mutex_unlock(&r->lock);
}

void netd_reaper_wait_ns(struct netd_reaper *r, dev_t ns_dev, ino_t ns_ino)
{
	bool pending = false;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	for (struct job *j = r->head; j && !pending; j = j->next)
		pending = j->ns_dev == ns_dev && j->ns_ino == ns_ino;
	for (struct job *j = r->doing; j && !pending; j = j->next)
		pending = j->ns_dev == ns_dev && j->ns_ino == ns_ino;
	pthread_mutex_unlock(&r->lock);
	if (pending) /* rare: the same namespace attached again right after its session ended */
		netd_reaper_drain(r);
}

void netd_reaper_drain(struct netd_reaper *r)
{
	pthread_mutex_lock(&r->lock);
	r->draining = true;
	pthread_cond_signal(&r->more);
	while (r->head || r->busy)
		pthread_cond_wait(&r->idle, &r->lock);
	r->draining = false;
	pthread_mutex_unlock(&r->lock);
}

void netd_reaper_free(struct netd_reaper *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_signal(&r->more);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL); /* the worker empties the queue before it stops */
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->more);
	pthread_cond_destroy(&r->idle);
	netd_rtnl_close(r->nl);
	free(r);
}
