/* Compiling a client's policy off the event loop: a session's policy (up to NETD_POLICY_MAX bytes of
 * untrusted JSON) is compiled under the organisation layer on a worker thread, so a huge one cannot
 * stall the other sessions, and within a deadline (cfg.compile_timeout_ms): past it the request fails
 * with a clear error and the worker's late result is thrown away. At most NETD_COMPILE_MAX compiles run
 * at once (NETD_COMPILE_MAX_PER_UID for one unprivileged uid), counting abandoned ones until their
 * thread ends, so a flood of huge policies is refused rather than queued behind each other.
 *
 * The policy library keeps no shared mutable state (its tables are built once under pthread_once), so a
 * builder on a worker thread is safe; the worker touches only its job. */
#include "netd.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "policy.h"
#include "util.h"

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
};

struct netd_compiler {
	pthread_mutex_t lock;
	int efd;                    /* owned: eventfd, a worker ended */
	struct event *ev;           /* owned */
	struct event *retry;        /* owned: joins a worker that had not quite ended */
	struct netd_compile *jobs;  /* owned: every job whose thread was not joined yet */
	unsigned running;
	struct netd *d;             /* borrowed */
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
	 * layer below it (docs/policy.md), so it can narrow but never widen what /etc/sluice allows */
	if (policy_builder_add_standard_layers(b, sysconfdir, NULL, NULL, &pe) < 0 ||
	    policy_builder_add_json(b, POLICY_LAYER_USER, "session policy", json, strlen(json), &pe) < 0 ||
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
			deliver(cc, j, j->r, j->err);
		}
		if (cc->d->compile_slot_freed) /* SIGHUP's reload may wait for a slot */
			cc->d->compile_slot_freed(cc->d);
	}
	pthread_mutex_lock(&cc->lock);
	for (pp = &cc->jobs; (j = *pp);) {
		if (j->delivered && pthread_tryjoin_np(j->thread, NULL) == 0) {
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
	cc->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cc->efd < 0 || !(cc->ev = event_new(d->base, cc->efd, EV_READ | EV_PERSIST, reap_cb, cc)) ||
	    event_add(cc->ev, NULL) < 0 || !(cc->retry = evtimer_new(d->base, reap_cb, cc))) {
		if (cc->ev)
			event_free(cc->ev);
		if (cc->efd >= 0)
			close(cc->efd);
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
		pthread_join(j->thread, NULL);
		job_free(j);
	}
	pthread_mutex_unlock(&cc->lock);
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
