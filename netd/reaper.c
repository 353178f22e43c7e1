/* The link-deletion worker (see reaper.h). */
#include "reaper.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lease.h"
#include "link.h"
#include "log.h"
#include "util.h"

#define REAPER_COALESCE_NS 50000000L /* 50 ms */

struct job {
	struct job *next;
	char ifname[16];
	unsigned slot;
	int lease_fd; /* owned */
};

struct netd_reaper {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t more, idle;
	struct job *head, *tail; /* owned queue */
	bool busy, stop, draining;
	struct nl_sock *nl;      /* owned; used by the worker only */
	char lease_dir[PATH_MAX];
};

/* Takes every queued job at once: moves their links into the doomed group, deletes the group in one
 * request, then releases the leases. A link that cannot be moved is deleted on its own. */
static void *worker(void *arg)
{
	struct netd_reaper *r = arg;

	pthread_mutex_lock(&r->lock);
	for (;;) {
		struct job *batch, *j;
		int rc;

		while (!r->head && !r->stop)
			pthread_cond_wait(&r->more, &r->lock);
		if (!r->head)
			break;
		if (!r->stop && !r->draining) {
			/* gather what ends meanwhile: one deletion per batch holds the kernel's RTNL lock once */
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += REAPER_COALESCE_NS;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			while (!r->stop && !r->draining &&
			       pthread_cond_timedwait(&r->more, &r->lock, &until) != ETIMEDOUT)
				;
		}
		batch = r->head;
		r->head = r->tail = NULL;
		r->busy = true;
		pthread_mutex_unlock(&r->lock);
		for (j = batch; j; j = j->next) {
			rc = netd_link_set_group(r->nl, j->ifname, NETD_DOOMED_GROUP);
			if (rc < 0 && rc != -ENODEV && (rc = netd_link_delete(r->nl, j->ifname)) < 0 && rc != -ENODEV)
				log_warnx("deleting link %s: %s", j->ifname, strerror(-rc));
		}
		rc = netd_link_delete_group(r->nl, NETD_DOOMED_GROUP);
		if (rc < 0 && rc != -ENODEV)
			log_warnx("deleting ended sessions' links: %s", strerror(-rc));
		while (batch) {
			j = batch;
			batch = j->next;
			/* only now may the slot (and its addresses and routes) be reused */
			netd_lease_release(r->lease_dir, j->slot, j->lease_fd);
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
	pthread_cond_init(&r->more, NULL);
	pthread_cond_init(&r->idle, NULL);
	if ((*err = -pthread_create(&r->thread, NULL, worker, r)) < 0) {
		netd_rtnl_close(r->nl);
		free(r);
		return NULL;
	}
	return r;
}

int netd_reaper_push(struct netd_reaper *r, const char *ifname, unsigned slot, int lease_fd)
{
	struct job *j = calloc(1, sizeof *j);

	if (!j)
		return -ENOMEM;
	util_strlcpy(j->ifname, ifname, sizeof j->ifname);
	j->slot = slot;
	j->lease_fd = lease_fd;
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
