/* Compiling a client's policy off the event loop: a session's policy (up to NETD_POLICY_MAX bytes of
 * untrusted JSON) is compiled under the organisation layer on a worker thread, so a huge one cannot
 * stall the other sessions, and within a deadline (cfg.compile_timeout_ms): past it the request fails
 * with a clear error and the worker's late result is thrown away. At most NETD_COMPILE_MAX compiles run
 * at once (NETD_COMPILE_MAX_PER_UID for one unprivileged uid), counting abandoned ones until their
 * thread ends, so a flood of huge policies is refused rather than queued behind each other.
 *
 * The policy library keeps no shared mutable state (its tables are built once under pthread_once), so a
 * builder on a worker thread is safe; the worker touches only its job.
 *
 * What compiled is kept (policy_cache.h): a compile whose input was compiled before gets that compiled
 * object again (shared: a compiled policy is immutable), delivered from the loop with no thread and no
 * compile. The key is the client's text and live rules byte for byte (with the sysconfdir and the
 * embedded flag); the organisation layer is read from files, so the cache is emptied whenever anything
 * changes in --sysconfdir, its policy.d or the preset directory, or in one of their *.json files
 * (inotify, on the directories and on each file's inode; what cannot be watched turns the cache off, a
 * missing --sysconfdir is watched for in its parent), and on SIGHUP (org_gen); a compile during which a
 * file changed is not kept. sluiced reads the organisation layer only (policy_builder_add_org_layers):
 * nothing in its own environment ($XDG_CONFIG_HOME, $HOME) is a layer of its clients' sessions. */
#include "netd.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "log.h"
#include "policy.h"
#include "policy_cache.h"
#include "util.h"

#define COMPILE_CACHE_ENTRIES 16
#define COMPILE_CACHE_BYTES (1u << 20)
#define COMPILE_CACHE_KEY_MAX (64u << 10) /* a longer policy is compiled every time */

struct netd_compile {
	struct netd_compile *next;      /* in the compiler's list */
	struct netd_compiler *cc;       /* borrowed */
	pthread_t thread;
	struct event *deadline;         /* owned */
	netd_compile_fn fn;             /* NULL once delivered, cancelled or timed out */
	void *arg;                      /* borrowed */
	uid_t uid;
	unsigned org_gen; /* d->org_gen when it (last) began */
	unsigned restarts; /* times begun again after a SIGHUP (restart_stale) */
	/* input, owned, read by the worker only */
	char *json;
	char *extra; /* or NULL */
	char sysconfdir[PATH_MAX];
	bool embedded;
	/* output, written by the worker before done is set */
	struct netd_compiled out;
	int r;
	char err[NETD_ERRMSG_MAX + 1];
	bool done; /* under cc->lock */
	bool delivered; /* under cc->lock: its outcome was handed on; only the thread is left to join */
	bool cached;    /* out came from the cache: there is no thread */
	char *key;      /* owned: its cache key (NULL: not to be kept) */
	size_t keylen;
	unsigned files_gen; /* cc->files_gen when it began */
};

struct netd_compiler {
	pthread_mutex_t lock;
	int efd;                    /* owned: eventfd, a worker ended */
	struct event *ev;           /* owned */
	struct event *retry;        /* owned: joins a worker that had not quite ended */
	struct netd_compile *jobs;  /* owned: every job whose thread was not joined yet */
	unsigned running;
	struct netd *d;             /* borrowed */
	/* compiled policies kept (loop only) and what empties them */
	struct netd_policy_cache *cache; /* owned; NULL: none */
	unsigned cache_org_gen;     /* d->org_gen the entries were compiled under */
	int ino;                    /* owned: inotify on the organisation layer's directories, or -1 */
	bool watch_ok;              /* every directory watched: the cache may be used */
	bool rearm;                 /* watches to be (re)added before the next use */
	unsigned files_gen;         /* bumped by every change seen in those directories */
};

char *netd_compile_policy(const char *sysconfdir, bool embedded, const char *json, const char *extra,
			  bool *transparent, struct policy **compiled, char *err, size_t errlen)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy *p = NULL;
	char *out = NULL, buf[POLICY_ERR_MAX + 300];

	if (!b) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	/* the organisation layer is read by sluiced itself; the client's policy is loaded at the user
	 * layer below it (docs/policy.md), so it can narrow but never widen what /etc/sluice allows. A
	 * credential in the client's texts carries the secret its launcher read as the user (the serialised
	 * form): one that names a file or a variable would be read here, as root, for that user. */
	if (policy_builder_add_org_layers(b, sysconfdir, &pe) < 0) {
		snprintf(err, errlen, "policy rejected: %s", policy_error_format(&pe, buf, sizeof buf));
		goto out;
	}
	policy_builder_forbid_secret_reads(b);
	if (policy_builder_add_json(b, POLICY_LAYER_USER, "session policy", json, strlen(json), &pe) < 0 ||
	    (extra && policy_builder_add_json(b, POLICY_LAYER_USER, "sluicectl session policy", extra, strlen(extra),
					      &pe) < 0) ||
	    !(p = policy_builder_compile(b, &pe))) {
		snprintf(err, errlen, "policy rejected: %s", policy_error_format(&pe, buf, sizeof buf));
		goto out;
	}
	*transparent = policy_get_options(p)->transparent;
	if (policy_get_options(p)->ask && embedded) {
		/* nobody could reach an embedded helper to decide: fail closed and say what works */
		snprintf(err, errlen, "interactive approval (--ask, option \"ask\") needs sluiced, which decides "
			 "through `sluicectl approve`: start it with `sudo systemctl start sluiced`");
		goto out;
	}
	out = policy_serialize(p);
	if (!out)
		snprintf(err, errlen, "out of memory serialising the policy");
	else
		*compiled = policy_ref(p);
out:
	policy_unref(p);
	policy_builder_free(b);
	return out;
}

void netd_compiled_clear(struct netd_compiled *c)
{
	free(c->json);
	free(c->client);
	free(c->extra);
	policy_unref(c->policy);
	memset(c, 0, sizeof *c);
}

/* ---- the cache's validity: the directories the organisation layer is read from ---- */

#define WATCH_MASK                                                                                            \
	(IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE |      \
	 IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)

#define FILE_WATCH_MASK (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF)

/* Watches dir; when it does not exist and parent_ok, its parent instead (its creation is an event there).
 * A symbolic link is not followed (IN_DONT_FOLLOW with IN_ONLYDIR fails on it): a link could be pointed
 * elsewhere without an event, so it turns the cache off. */
static bool watch_dir(int ino, const char *dir, bool parent_ok)
{
	char parent[PATH_MAX];
	char *slash;

	if (inotify_add_watch(ino, dir, WATCH_MASK) >= 0)
		return true;
	if (errno != ENOENT || !parent_ok || util_strlcpy(parent, dir, sizeof parent) >= sizeof parent ||
	    !(slash = strrchr(parent, '/')))
		return false;
	if (slash == parent)
		slash[1] = '\0';
	else
		*slash = '\0';
	return inotify_add_watch(ino, parent, WATCH_MASK) >= 0;
}

/* Also every *.json file in dir, by its inode (a symbolic link's target, followed): a file also linked
 * elsewhere (a hard link, a preset installed as a link) changes without an event in dir. false when one
 * cannot be watched; a directory that does not exist has none. */
static bool watch_files(int ino, const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	bool ok = true;

	if (!dp)
		return errno == ENOENT || errno == ENOTDIR;
	while (ok && (de = readdir(dp))) {
		size_t n = strlen(de->d_name);
		char path[PATH_MAX];

		if (n < 5 || strcmp(de->d_name + n - 5, ".json") != 0)
			continue;
		if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= sizeof path ||
		    (inotify_add_watch(ino, path, FILE_WATCH_MASK) < 0 && errno != ENOENT))
			ok = false;
	}
	closedir(dp);
	return ok;
}

static void watch_arm(struct netd_compiler *cc)
{
	struct policy_builder *b = policy_builder_new();
	const char *sysconfdir = cc->d->cfg.sysconfdir;
	char sub[PATH_MAX];

	cc->rearm = false;
	cc->watch_ok = false;
	if (!b)
		goto out;
	if ((size_t)snprintf(sub, sizeof sub, "%s/policy.d", sysconfdir) >= sizeof sub)
		goto out;
	if (!watch_dir(cc->ino, sysconfdir, true) || !watch_files(cc->ino, sysconfdir))
		goto out;
	/* policy.d missing: its creation is an event of sysconfdir's */
	if ((!watch_dir(cc->ino, sub, false) && errno != ENOENT) || !watch_files(cc->ino, sub))
		goto out;
	if (!watch_dir(cc->ino, policy_builder_preset_dir(b), false) ||
	    !watch_files(cc->ino, policy_builder_preset_dir(b)))
		goto out;
	cc->watch_ok = true;
out:
	policy_builder_free(b);
	if (!cc->watch_ok)
		cc->rearm = true; /* tried again at the next compile; meanwhile nothing is looked up or kept */
}

/* Reads what happened in the watched directories since the last call: anything empties the cache. Then
 * says whether the cache may be used. Called before every lookup and before keeping a result. */
static bool cache_usable(struct netd_compiler *cc)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool changed = false;
	ssize_t n;

	if (!cc->cache)
		return false;
	if (cc->ino < 0) {
		if ((cc->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
			return false;
		cc->rearm = true;
	}
	while ((n = read(cc->ino, buf, sizeof buf)) > 0)
		changed = true;
	if (n < 0 && errno != EAGAIN && errno != EINTR)
		changed = true; /* cannot tell: assume a change */
	if (changed || cc->cache_org_gen != cc->d->org_gen) {
		/* a file of the organisation layer (or a preset) changed, or SIGHUP reloaded it */
		cc->files_gen++;
		cc->cache_org_gen = cc->d->org_gen;
		if (netd_policy_cache_size(cc->cache))
			log_debug("policy compiler: the organisation layer changed: %u compiled policies forgotten",
				  netd_policy_cache_size(cc->cache));
		netd_policy_cache_clear(cc->cache);
		cc->rearm = true; /* a directory may have been made, replaced or removed */
	}
	if (cc->rearm)
		watch_arm(cc);
	return cc->watch_ok;
}

/* The cache key of a compile: everything it depends on but the organisation layer's files (watched), and
 * the client's uid, so that one user's setup is never faster for another user's session of the same
 * policy (a hit would tell that such a session ran recently); or NULL (too long, out of memory). The parts
 * are separated by NUL, which none of them can contain. */
static char *cache_key(const struct netd *d, uid_t uid, const char *json, const char *extra, size_t *len)
{
	char u[16];
	size_t lu = (size_t)snprintf(u, sizeof u, "%u", (unsigned)uid);
	size_t ls = strlen(d->cfg.sysconfdir), lj = strlen(json), le = extra ? strlen(extra) : 0;
	size_t n = lu + 1 + ls + 1 + 2 + lj + 1 + 1 + le;
	char *k, *p;

	if (n > COMPILE_CACHE_KEY_MAX || !(k = malloc(n)))
		return NULL;
	p = k;
	memcpy(p, u, lu + 1);
	p += lu + 1;
	memcpy(p, d->cfg.sysconfdir, ls + 1);
	p += ls + 1;
	*p++ = d->cfg.embedded ? '1' : '0';
	*p++ = '\0';
	memcpy(p, json, lj + 1);
	p += lj + 1;
	*p++ = extra ? '1' : '0';
	memcpy(p, extra ? extra : "", le);
	*len = n;
	return k;
}

/* Keeps a compile's result when nothing it read can have changed since it began. */
static void cache_keep(struct netd_compiler *cc, struct netd_compile *j)
{
	if (!j->key || j->cached || j->r != 0 || !j->out.policy || !j->out.json || j->org_gen != cc->d->org_gen)
		return;
	if (!cache_usable(cc) || j->files_gen != cc->files_gen)
		return; /* a file changed while it compiled: what it read may be either */
	netd_policy_cache_put(cc->cache, j->key, j->keylen, j->out.policy, j->out.json);
}

static void *worker(void *arg)
{
	struct netd_compile *j = arg;
	struct netd_compiler *cc = j->cc;
	uint64_t one = 1;

	j->out.json = netd_compile_policy(j->sysconfdir, j->embedded, j->json, j->extra, &j->out.transparent,
					  &j->out.policy, j->err, sizeof j->err);
	j->out.extra = steal_pointer(&j->extra);
	j->r = j->out.json ? 0 : -EINVAL;
	j->out.client = steal_pointer(&j->json); /* the text as sent, kept for SIGHUP's recompile */
	pthread_mutex_lock(&cc->lock);
	j->done = true;
	pthread_mutex_unlock(&cc->lock);
	(void)!write(cc->efd, &one, sizeof one);
	return NULL;
}

/* Delivers a job's outcome once (fn cleared first: fn may start or cancel other jobs). */
static void deliver(struct netd_compiler *cc, struct netd_compile *j, int r, const char *err)
{
	netd_compile_fn fn = j->fn;

	j->fn = NULL;
	if (j->deadline)
		event_del(j->deadline);
	if (fn && r == 0 && j->org_gen != cc->d->org_gen) {
		/* compiled under an organisation layer that SIGHUP replaced meanwhile: never let it in */
		r = -EAGAIN;
		err = "the organisation policy was reloaded while this policy compiled; try again";
	}
	if (fn)
		fn(cc->d, r, r == 0 ? &j->out : NULL, err, j->arg);
}

static void job_free(struct netd_compile *j)
{
	if (j->deadline)
		event_free(j->deadline);
	free(j->key);
	free(j->json);
	free(j->extra);
	netd_compiled_clear(&j->out);
	free(j);
}

/* A compile that finished under an organisation layer that SIGHUP replaced meanwhile is begun again
 * under the new one, with the same input and within the same deadline, at most COMPILE_RESTARTS times:
 * the client (a setup, a POLICY change, SIGHUP's own recompile) sees a slower answer, not a "try
 * again" for a reload it knows nothing of. 0 when begun again (the job is back in the list and keeps
 * its slot); -EAGAIN when not to (deliver refuses a stale result); another -errno if the thread could
 * not be started. */
#define COMPILE_RESTARTS 3
static int restart_stale(struct netd_compiler *cc, struct netd_compile *j)
{
	int r;

	if (!j->fn || j->r != 0 || j->org_gen == cc->d->org_gen || j->restarts >= COMPILE_RESTARTS)
		return -EAGAIN;
	j->json = steal_pointer(&j->out.client);
	j->extra = steal_pointer(&j->out.extra);
	netd_compiled_clear(&j->out);
	j->org_gen = cc->d->org_gen;
	j->restarts++;
	j->err[0] = '\0';
	log_info("uid %u: the organisation policy was reloaded while a session policy compiled: compiling it again "
		 "under the reloaded one", (unsigned)j->uid);
	pthread_mutex_lock(&cc->lock);
	j->done = j->delivered = false;
	j->cached = false; /* it has a thread from here on */
	if ((r = pthread_create(&j->thread, NULL, worker, j)) == 0) {
		j->next = cc->jobs;
		cc->jobs = j;
		cc->running++;
	}
	pthread_mutex_unlock(&cc->lock);
	return -r;
}

/* A worker ended: begin it again if its result is stale, else deliver its result unless it was abandoned;
 * join it; free the job. A worker signals just before its thread returns, and on a busy machine it may
 * wait for a CPU in between: a plain join here blocked the loop, and every setup behind it, for as long
 * (10 ms seen under load). A thread that has not ended yet is joined a millisecond later instead; only a
 * stale compile (a SIGHUP while it ran: rare), begun again in the same job, is joined at once. */
static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
	static const struct timeval ms = {0, 1000};
	struct netd_compiler *cc = arg;
	struct netd_compile *j, **pp, *ended = NULL;
	bool waiting = false;
	uint64_t n;

	if (what & EV_READ)
		(void)!read(cc->efd, &n, sizeof n);
	for (;;) {
		pthread_mutex_lock(&cc->lock);
		for (pp = &cc->jobs; (j = *pp) && !(j->done && !j->delivered); pp = &j->next)
			;
		if (j) {
			j->delivered = true;
			cc->running--;
		}
		pthread_mutex_unlock(&cc->lock);
		if (!j)
			break;
		if (j->fn && j->r == 0 && j->org_gen != cc->d->org_gen) {
			int rr;

			pthread_mutex_lock(&cc->lock);
			for (pp = &cc->jobs; *pp != j; pp = &(*pp)->next)
				;
			*pp = j->next;
			pthread_mutex_unlock(&cc->lock);
			if (!j->cached)
				pthread_join(j->thread, NULL);
			rr = restart_stale(cc, j);
			if (rr == 0)
				continue; /* its result comes when the new compile ends */
			if (rr != -EAGAIN)
				deliver(cc, j, rr,
					"compiling the policy again after the organisation policy was reloaded failed (no "
					"thread); try again");
			else
				deliver(cc, j, j->r, j->err);
			job_free(j);
		} else {
			cache_keep(cc, j); /* before fn takes the result's members */
			deliver(cc, j, j->r, j->err);
		}
		if (cc->d->compile_slot_freed) /* SIGHUP's reload may wait for a slot */
			cc->d->compile_slot_freed(cc->d);
	}
	pthread_mutex_lock(&cc->lock);
	for (pp = &cc->jobs; (j = *pp);) {
		if (j->delivered && (j->cached || pthread_tryjoin_np(j->thread, NULL) == 0)) {
			*pp = j->next;
			j->next = ended;
			ended = j;
			continue;
		}
		waiting |= j->delivered;
		pp = &j->next;
	}
	pthread_mutex_unlock(&cc->lock);
	while ((j = ended)) {
		ended = j->next;
		job_free(j);
	}
	if (waiting && evtimer_add(cc->retry, &ms) < 0)
		log_warnx("policy compiler: cannot schedule joining a worker; it is joined when the next one ends");
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd_compile *j = arg;
	struct netd_compiler *cc = j->cc;
	char err[NETD_ERRMSG_MAX + 1];
	bool done;

	pthread_mutex_lock(&cc->lock);
	done = j->done;
	pthread_mutex_unlock(&cc->lock);
	if (done)
		return; /* its result is on the way (reap_cb) */
	/* the thread cannot be stopped; it runs on (bounded by NETD_POLICY_MAX), its result is dropped and
	 * it still counts against the limits until it ends */
	snprintf(err, sizeof err,
		 "the session's policy took longer than %u ms to compile (sluiced --compile-timeout); not started: "
		 "make the policy smaller (fewer rules, wildcards instead of long host lists)",
		 cc->d->cfg.compile_timeout_ms);
	log_warnx("uid %u: %s", (unsigned)j->uid, err);
	deliver(cc, j, -ETIMEDOUT, err);
}

static struct netd_compiler *compiler_of(struct netd *d)
{
	struct netd_compiler *cc = d->compiler;

	if (cc)
		return cc;
	if (!(cc = calloc(1, sizeof *cc)))
		return NULL;
	cc->d = d;
	cc->ino = -1;
	/* an embedded helper serves one session: nothing to keep, and no directories to watch */
	cc->cache = d->cfg.embedded ? NULL : netd_policy_cache_new(COMPILE_CACHE_ENTRIES, COMPILE_CACHE_BYTES);
	cc->cache_org_gen = d->org_gen;
	cc->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cc->efd < 0 || !(cc->ev = event_new(d->base, cc->efd, EV_READ | EV_PERSIST, reap_cb, cc)) ||
	    event_add(cc->ev, NULL) < 0 || !(cc->retry = evtimer_new(d->base, reap_cb, cc))) {
		if (cc->ev)
			event_free(cc->ev);
		if (cc->efd >= 0)
			close(cc->efd);
		netd_policy_cache_free(cc->cache);
		free(cc);
		return NULL;
	}
	pthread_mutex_init(&cc->lock, NULL);
	d->compiler = cc;
	return cc;
}

int netd_compile_start(struct netd *d, char *json, uid_t uid, netd_compile_fn fn, void *arg,
		       struct netd_compile **out, char *err, size_t errlen)
{
	return netd_compile_start2(d, json, NULL, uid, fn, arg, out, err, errlen);
}

int netd_compile_start2(struct netd *d, char *json, char *extra, uid_t uid, netd_compile_fn fn, void *arg,
			struct netd_compile **out, char *err, size_t errlen)
{
	struct netd_compiler *cc = compiler_of(d);
	struct netd_compile *j = NULL;
	struct timeval tv;
	unsigned mine = 0;
	size_t len = json ? strlen(json) : 0;
	int r;

	*out = NULL;
	if (!cc) {
		free(json);
		free(extra);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_lock(&cc->lock);
	for (struct netd_compile *o = cc->jobs; o; o = o->next)
		mine += o->uid == uid;
	pthread_mutex_unlock(&cc->lock);
	if (cc->running >= NETD_COMPILE_MAX || (uid != 0 && mine >= NETD_COMPILE_MAX_PER_UID)) {
		free(json);
		free(extra);
		snprintf(err, errlen, "%u policies are being compiled already%s; try again when they are done",
			 uid != 0 && mine >= NETD_COMPILE_MAX_PER_UID ? mine : cc->running,
			 uid != 0 && mine >= NETD_COMPILE_MAX_PER_UID ? " for this user" : "");
		return -EAGAIN;
	}
	if (!(j = calloc(1, sizeof *j))) {
		free(json);
		free(extra);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	j->cc = cc;
	j->fn = fn;
	j->arg = arg;
	j->uid = uid;
	j->org_gen = d->org_gen;
	j->json = json;
	j->extra = extra;
	j->embedded = d->cfg.embedded;
	util_strlcpy(j->sysconfdir, d->cfg.sysconfdir, sizeof j->sysconfdir);
	if (json && cache_usable(cc) && (j->key = cache_key(d, uid, json, extra, &j->keylen))) {
		const char *cjson;
		struct policy *p = netd_policy_cache_get(cc->cache, j->key, j->keylen, &cjson);

		j->files_gen = cc->files_gen;
		if (p && (j->out.json = strdup(cjson))) {
			/* compiled before from the same input under the same organisation layer: delivered from
			 * the loop (the caller expects its callback later), with no thread */
			j->out.policy = p;
			j->out.transparent = policy_get_options(p)->transparent;
			j->out.client = steal_pointer(&j->json);
			j->out.extra = steal_pointer(&j->extra);
			j->cached = j->done = true;
			pthread_mutex_lock(&cc->lock);
			j->next = cc->jobs;
			cc->jobs = j;
			cc->running++;
			pthread_mutex_unlock(&cc->lock);
			event_active(cc->ev, EV_TIMEOUT, 0);
			log_debug("uid %u: a session policy of %zu bytes compiled before: its compiled policy reused",
				  (unsigned)uid, len);
			*out = j;
			return 0;
		}
		policy_unref(p);
	}
	tv.tv_sec = d->cfg.compile_timeout_ms / 1000;
	tv.tv_usec = (d->cfg.compile_timeout_ms % 1000) * 1000;
	if (!(j->deadline = evtimer_new(d->base, deadline_cb, j)) || evtimer_add(j->deadline, &tv) < 0) {
		job_free(j);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_lock(&cc->lock);
	if ((r = pthread_create(&j->thread, NULL, worker, j)) != 0) {
		pthread_mutex_unlock(&cc->lock);
		job_free(j);
		snprintf(err, errlen, "starting a policy compiler thread: %s", strerror(r));
		return -r;
	}
	j->next = cc->jobs;
	cc->jobs = j;
	cc->running++;
	pthread_mutex_unlock(&cc->lock);
	log_debug("uid %u: compiling a session policy of %zu bytes on a worker", (unsigned)uid, len);
	*out = j;
	return 0;
}

unsigned netd_compile_running(const struct netd *d)
{
	return d->compiler ? d->compiler->running : 0;
}

void netd_compile_cancel(struct netd_compile *j)
{
	if (!j)
		return;
	j->fn = NULL;
	if (j->deadline)
		event_del(j->deadline);
}

void netd_compiler_free(struct netd *d)
{
	struct netd_compiler *cc = d->compiler;

	if (!cc)
		return;
	/* finished workers are joined; a compile still running is not waited for (a stop must not take as
	 * long as the largest policy): its job and the compiler stay allocated, still named by the running
	 * thread, until the process exits a moment later */
	pthread_mutex_lock(&cc->lock);
	for (struct netd_compile **pp = &cc->jobs, *j; (j = *pp);) {
		if (!j->done) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		if (!j->cached)
			pthread_join(j->thread, NULL);
		job_free(j);
	}
	pthread_mutex_unlock(&cc->lock);
	netd_policy_cache_free(cc->cache);
	cc->cache = NULL;
	if (cc->ino >= 0)
		close(cc->ino);
	cc->ino = -1;
	event_free(cc->ev);
	cc->ev = NULL;
	event_free(cc->retry);
	cc->retry = NULL;
	d->compiler = NULL;
	if (cc->jobs) {
		log_debug("stopping with %u policy compiles still running; not waiting for them", cc->running);
		return;
	}
	close(cc->efd);
	pthread_mutex_destroy(&cc->lock);
	free(cc);
}
