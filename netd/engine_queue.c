/* The engine child's held messages and its policy compile workers (engine_queue.h). sluiced compiled
 * the policy already (netd/compile.c); the engine compiles sluiced's serialised copy again to own an
 * immutable policy object of its own, which for 200,000 hosts takes seconds: on the event loop that
 * paused every session's proxying (and DNS) for as long. Here the text is read and compiled on a
 * worker thread; the loop then applies the result in one step (a request is decided wholly by the old
 * or the new policy).
 *
 * Threads: the engine never forks, so threads of its own are safe there (sluiced forks the first
 * engine before it starts a thread of its own, and execs itself for a restart: netd/engine.c).
 * A worker touches only its job (the held message and the outputs) and the policy library, which keeps
 * no shared mutable state; the job list and the done flags are under the lock. At most
 * ENGINE_COMPILE_MAX workers run at once; more jobs wait for a free one in arrival order. */
#include "engine_queue.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "netd.h"
#include "policy.h"
#include "policy_cache.h"
#include "util.h"

#define ENGINE_COMPILE_MAX 8
/* compiled policies kept for sessions that get the same text (policy_cache.h): sessions of one host
 * mostly share their policy, and a hit needs no thread and no compile */
#define ENGINE_CACHE_ENTRIES 16
#define ENGINE_CACHE_BYTES (1u << 20)

struct held {
	struct held *next;              /* in arrival order */
	struct netd_engine_queue *q;    /* borrowed */
	struct ipc_msg m;               /* owned; read by the worker while it runs */
	const char *sid;                /* into m */
	bool compile;
	bool cached;                    /* its policy came from the cache (no worker) */
	char *key;                      /* owned: its cache key (cache_key_of); NULL: not to be kept */
	size_t keylen;
	uint16_t attr, fd_attr;
	size_t max;
	bool started;                   /* a worker was started (loop only) */
	pthread_t thread;
	/* written by the worker before done is set */
	struct policy *policy;          /* owned */
	int r;
	char err[NETD_ERRMSG_MAX + 1];
	bool done;                      /* under q->lock */
};

struct netd_engine_queue {
	pthread_mutex_t lock;
	int efd;                        /* owned: eventfd, a worker ended */
	struct event *ev;               /* owned */
	struct held *head, **tail;      /* owned: every held message, in arrival order */
	unsigned nheld, running;
	netd_engine_queue_fn fn;        /* borrowed */
	void *arg;                      /* borrowed */
	struct netd_policy_cache *cache; /* owned; NULL: none (out of memory) */
};

/* The cache key of a compile that may be kept and looked up, or NULL: the session's uid and its text.
 * The text must be sent inline (a long policy comes in a memfd and is only read on its worker) and
 * self-contained (sluiced's serialisation names no preset; a text that did would also depend on the
 * preset files). The uid is in the key so that one user's setup is never faster for another user's
 * session of the same policy (a hit tells that such a session ran recently); a message that carries no
 * uid (a live policy change) is not kept. The parts are separated by NUL, which neither contains. */
static char *cache_key_of(const struct ipc_msg *m, uint16_t attr, size_t *len)
{
	const char *t = ipc_get_str(m, attr);
	uint32_t uid = ipc_get_u32(m, NETD_A_UID, UINT32_MAX);
	char head[16];
	int hl;
	size_t tl;
	char *k;

	if (!t || strstr(t, "\"presets\"") || uid == UINT32_MAX)
		return NULL;
	hl = snprintf(head, sizeof head, "%" PRIu32, uid);
	tl = strlen(t);
	if (!(k = malloc((size_t)hl + 1 + tl)))
		return NULL;
	memcpy(k, head, (size_t)hl + 1);
	memcpy(k + hl + 1, t, tl);
	*len = (size_t)hl + 1 + tl;
	return k;
}

static void *worker(void *arg)
{
	struct held *h = arg;
	struct netd_engine_queue *q = h->q;
	struct policy_builder *b = NULL;
	struct policy_error pe = {0};
	char buf[POLICY_ERR_MAX + 300];
	char *json;
	uint64_t one = 1;

	/* below the loop's priority: on a busy machine the loop keeps the CPU it needs to proxy (Linux nice
	 * is per thread; raising it needs no privilege) */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
	if (!(json = ipc_msg_text(&h->m, h->attr, h->fd_attr, h->max, buf, sizeof buf))) {
		h->r = errno ? -errno : -EINVAL;
		snprintf(h->err, sizeof h->err, "policy: %s", buf);
	} else if (!(b = policy_builder_new())) {
		h->r = -ENOMEM;
		snprintf(h->err, sizeof h->err, "out of memory");
	} else if (policy_builder_add_json(b, POLICY_LAYER_ORG, "sluiced", json, strlen(json), &pe) < 0 ||
	           !(h->policy = policy_builder_compile(b, &pe))) {
		/* the parent compiled this text already: only a broken parent gets here */
		h->r = -EINVAL;
		snprintf(h->err, sizeof h->err, "policy: %s", policy_error_format(&pe, buf, sizeof buf));
	}
	policy_builder_free(b);
	free(json);
	pthread_mutex_lock(&q->lock);
	h->done = true;
	pthread_mutex_unlock(&q->lock);
	(void)!write(q->efd, &one, sizeof one);
	return NULL;
}

static void held_free(struct held *h)
{
	ipc_msg_clear(&h->m);
	policy_unref(h->policy);
	free(h->key);
	free(h);
}

/* Starts workers for waiting compiles while fewer than ENGINE_COMPILE_MAX run. A job whose thread
 * cannot be started fails (its session is refused, as an out-of-memory compile would be). */
static void start_workers(struct netd_engine_queue *q)
{
	for (struct held *h = q->head; h && q->running < ENGINE_COMPILE_MAX; h = h->next) {
		int r;

		if (!h->compile || h->started)
			continue;
		h->started = true;
		if ((r = pthread_create(&h->thread, NULL, worker, h)) != 0) {
			h->r = -r;
			snprintf(h->err, sizeof h->err, "starting a policy compiler thread: %s", strerror(r));
			h->compile = false; /* nothing to join; delivered with its error */
			h->done = true;
			continue;
		}
		q->running++;
	}
}

static bool same_attr(const struct ipc_msg *a, const struct ipc_msg *b, uint16_t attr)
{
	const char *x = ipc_get_str(a, attr), *y = ipc_get_str(b, attr);

	return x && y && strcmp(x, y) == 0;
}

/* Must h wait for the earlier held message o of another session? A SESSION_ADD waits for a SESSION_REMOVE
 * that sluiced sent before it for one of its addresses (the removal waiting behind its own session's
 * compile): applied first, the add would find the address still taken (EEXIST) and a quick stop and start
 * on a recycled address would fail. */
static bool frees_address_of(const struct held *o, const struct held *h)
{
	return h->m.type == NETD_ENG_SESSION_ADD && o->m.type == NETD_ENG_SESSION_REMOVE &&
	       (same_attr(&o->m, &h->m, NETD_A_ADDR4) || same_attr(&o->m, &h->m, NETD_A_ADDR6));
}

/* Is h ready to be handled: its own compile ended (or it has none), no earlier held message of its
 * session is still there, nor an earlier held removal of its address? */
static bool ready(struct netd_engine_queue *q, const struct held *h)
{
	bool done;

	for (const struct held *o = q->head; o != h; o = o->next)
		if (strcmp(o->sid, h->sid) == 0 || frees_address_of(o, h))
			return false;
	if (!h->started && h->compile)
		return false;
	pthread_mutex_lock(&q->lock);
	done = h->done || !h->compile;
	pthread_mutex_unlock(&q->lock);
	return done;
}

static void unlink_held(struct netd_engine_queue *q, struct held *h)
{
	struct held **pp = &q->head;

	while (*pp != h)
		pp = &(*pp)->next;
	*pp = h->next;
	if (q->tail == &h->next)
		q->tail = pp;
	q->nheld--;
}

/* Hands over every message that is ready, in each session's order (fn may submit more). */
static void deliver_ready(struct netd_engine_queue *q)
{
	struct held *h;

	for (;;) {
		for (h = q->head; h && !ready(q, h); h = h->next)
			;
		if (!h)
			break;
		unlink_held(q, h);
		if (h->compile && h->started) {
			pthread_join(h->thread, NULL);
			q->running--;
			if (h->r == 0 && h->policy && h->key)
				netd_policy_cache_put(q->cache, h->key, h->keylen, h->policy, NULL);
		}
		q->fn(q->arg, &h->m, steal_pointer(&h->policy), h->r, h->r < 0 ? h->err : NULL);
		held_free(h);
		start_workers(q);
	}
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd_engine_queue *q = arg;
	uint64_t n;

	if (what & EV_READ)
		(void)!read(q->efd, &n, sizeof n);
	deliver_ready(q);
}

struct netd_engine_queue *netd_engine_queue_new(struct event_base *base, netd_engine_queue_fn fn, void *arg)
{
	struct netd_engine_queue *q = calloc(1, sizeof *q);

	if (!q)
		return NULL;
	q->fn = fn;
	q->arg = arg;
	q->tail = &q->head;
	q->cache = netd_policy_cache_new(ENGINE_CACHE_ENTRIES, ENGINE_CACHE_BYTES);
	q->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (q->efd < 0 || !(q->ev = event_new(base, q->efd, EV_READ | EV_PERSIST, wake_cb, q)) ||
	    event_add(q->ev, NULL) < 0) {
		if (q->ev)
			event_free(q->ev);
		if (q->efd >= 0)
			close(q->efd);
		netd_policy_cache_free(q->cache);
		free(q);
		return NULL;
	}
	pthread_mutex_init(&q->lock, NULL);
	return q;
}

void netd_engine_queue_free(struct netd_engine_queue *q)
{
	bool busy = false;

	if (!q)
		return;
	event_free(q->ev);
	q->ev = NULL;
	netd_policy_cache_free(q->cache);
	q->cache = NULL;
	pthread_mutex_lock(&q->lock);
	for (struct held *h = q->head, *next; h; h = next) {
		next = h->next;
		if (h->compile && h->started && !h->done) {
			busy = true; /* its worker still reads h */
			continue;
		}
		if (h->compile && h->started)
			pthread_join(h->thread, NULL);
		held_free(h);
	}
	pthread_mutex_unlock(&q->lock);
	if (busy)
		return; /* q and the running jobs stay until the process exits */
	close(q->efd);
	pthread_mutex_destroy(&q->lock);
	free(q);
}

int netd_engine_queue_submit(struct netd_engine_queue *q, struct ipc_msg *m, const char *sid, bool compile,
                             uint16_t attr, uint16_t fd_attr, size_t max)
{
	struct held *h;
	bool waits = compile;

	for (h = q->head; h && !waits; h = h->next)
		waits = strcmp(h->sid, sid) == 0;
	if (!waits)
		return 0;
	if (!(h = calloc(1, sizeof *h)))
		return -ENOMEM;
	h->q = q;
	h->m = *m; /* the attribute table points into m->buf, which moves with it */
	memset(m, 0, sizeof *m);
	for (size_t i = 0; i < IPC_MAX_FDS; i++)
		m->fds[i] = -1;
	h->sid = sid;
	h->compile = compile;
	h->attr = attr;
	h->fd_attr = fd_attr;
	h->max = max;
	if (compile && (h->key = cache_key_of(&h->m, attr, &h->keylen)) != NULL) {
		if ((h->policy = netd_policy_cache_get(q->cache, h->key, h->keylen, NULL)) != NULL) {
			/* compiled for an earlier session of the same user from the same text: no worker; still held, so that it
			 * keeps its place among its session's messages, and handed over from the loop */
			h->compile = false;
			h->cached = true;
			event_active(q->ev, EV_TIMEOUT, 0);
		}
	}
	*q->tail = h;
	q->tail = &h->next;
	q->nheld++;
	start_workers(q);
	/* a job whose thread could not start (compile cleared) is ready at once; nothing else is here (it
	 * waits for an earlier message of its session, or for its worker, whose end wake_cb hears) */
	if (compile && !h->compile && !h->cached)
		deliver_ready(q);
	return 1;
}

unsigned netd_engine_queue_held(const struct netd_engine_queue *q)
{
	return q ? q->nheld : 0;
}

unsigned long netd_engine_queue_cache_hits(const struct netd_engine_queue *q)
{
	return q ? netd_policy_cache_hits(q->cache) : 0;
}
