/* Interactive approval (policy option "ask"): requests the policy would deny only by default (no rule
 * matched; never a deny rule, the organisation ceiling or a forbidden address) are held while an
 * operator decides with `sluicectl approve|deny`. One ask per session and host:port gathers every
 * request waiting for it; the engine's parent (sluiced) is told when an ask starts and ends and sends
 * the verdict back (proxy_engine_ask_decide). A verdict applies to the host:port for the rest of the
 * session (a grant); a timeout denies the waiting requests and is not remembered. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"
#include "proxy_int.h"

#define ASK_GRANTS_MAX 1024 /* verdicts remembered per session; beyond, verdicts apply to the held requests only */

struct proxy_ask {
	TAILQ_ENTRY(proxy_ask) entry;
	struct proxy_session *s; /* borrowed */
	char id[PROXY_ASK_ID_LEN + 1];
	char protocol[16];
	char method[33];
	char host[POLICY_HOST_MAX + 1];
	uint16_t port;
	unsigned timeout_s;
	struct event *timer;                  /* owned */
	TAILQ_HEAD(, proxy_ask_wait) waiters; /* borrowed: the connections waiting */
};

struct proxy_grant {
	char host[POLICY_HOST_MAX + 1];
	uint16_t port;
	bool allow;
	uid_t by;
};

static int notify(struct proxy_ask *a, bool done)
{
	struct proxy_engine *e = a->s->engine;
	struct proxy_ask_event ev = {
	        .ask_id = a->id,
	        .session_id = a->s->id,
	        .uid = a->s->uid,
	        .protocol = a->protocol,
	        .method = a->method,
	        .host = a->host,
	        .port = a->port,
	        .timeout_s = a->timeout_s,
	        .done = done,
	};
	return e->ask_notify ? e->ask_notify(&ev, e->ask_arg) : -ENOTSUP;
}

/* Ends an ask: every waiter is detached first (a callback may free its own connection, or end others),
 * then called with the verdict. */
static void ask_finish(struct proxy_ask *a, bool allow, const char *reason)
{
	struct proxy_session *s = a->s;
	TAILQ_HEAD(, proxy_ask_wait) w;
	struct proxy_ask_wait *x;

	TAILQ_INIT(&w);
	TAILQ_REMOVE(&s->asks, a, entry);
	s->nasks--;
	while ((x = TAILQ_FIRST(&a->waiters)) != NULL) {
		TAILQ_REMOVE(&a->waiters, x, entry);
		x->ask = NULL;
		TAILQ_INSERT_TAIL(&w, x, entry);
	}
	notify(a, true);
	if (a->timer)
		event_free(a->timer);
	free(a);
	/* w's entries are embedded in connections: take each off the local list before its callback */
	while ((x = TAILQ_FIRST(&w)) != NULL) {
		TAILQ_REMOVE(&w, x, entry);
		x->cb(x, allow, reason, x->arg);
	}
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_ask *a = arg;
	char reason[160];
	(void)fd;
	(void)what;
	snprintf(reason, sizeof reason, "not approved within %u s (held as %s; `sluicectl approve %s` decides)",
	         a->timeout_s, a->id, a->id);
	log_info("session %s: ask %s (%s:%u) timed out", a->s->id, a->id, a->host, a->port);
	ask_finish(a, false, reason);
}

static struct proxy_ask *find_ask(struct proxy_engine *e, const char *id)
{
	struct proxy_session *s;
	struct proxy_ask *a;

	TAILQ_FOREACH(s, &e->sessions, entry)
	TAILQ_FOREACH(a, &s->asks, entry)
	if (strcmp(a->id, id) == 0)
		return a;
	return NULL;
}

static int new_id(struct proxy_engine *e, char id[PROXY_ASK_ID_LEN + 1])
{
	for (int tries = 0; tries < 8; tries++) {
		unsigned char rnd[PROXY_ASK_ID_LEN / 2];
		if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
			return -EIO;
		for (size_t i = 0; i < sizeof rnd; i++)
			snprintf(id + 2 * i, 3, "%02x", rnd[i]);
		if (!find_ask(e, id))
			return 0;
	}
	return -EEXIST;
}

int proxy_ask_hold(struct proxy_session *s, struct proxy_ask_wait *w, const char *protocol, const char *method,
                   const char *host, uint16_t port, proxy_ask_cb cb, void *arg, char *why, size_t whylen)
{
	struct proxy_engine *e = s->engine;
	struct proxy_ask *a;
	int r;

	w->ask = NULL;
	if (!e->ask_notify) {
		snprintf(why, whylen, "no rule allows %s:%u, and interactive approval is not available here", host,
		         port);
		return -ENOTSUP;
	}
	TAILQ_FOREACH(a, &s->asks, entry)
	if (a->port == port && strcmp(a->host, host) == 0)
		break;
	if (!a) {
		if (s->nasks >= PROXY_ASK_MAX_PER_SESSION) {
			snprintf(
			        why, whylen,
			        "no rule allows %s:%u, and %d other requests of this session already wait for approval",
			        host, port, PROXY_ASK_MAX_PER_SESSION);
			return -EBUSY;
		}
		a = calloc(1, sizeof *a);
		if (!a || (r = new_id(e, a->id)) < 0 || !(a->timer = evtimer_new(e->base, timeout_cb, a))) {
			free(a);
			snprintf(why, whylen, "cannot hold the request for approval (out of resources)");
			return -ENOMEM;
		}
		a->s = s;
		snprintf(a->protocol, sizeof a->protocol, "%s", protocol);
		snprintf(a->method, sizeof a->method, "%s", method ? method : "");
		snprintf(a->host, sizeof a->host, "%s", host);
		a->port = port;
		a->timeout_s = policy_get_options(s->policy)->ask_timeout_s;
		if (a->timeout_s == 0)
			a->timeout_s = 60;
		TAILQ_INIT(&a->waiters);
		{
			struct timeval tv = {(time_t)a->timeout_s, 0};
			event_add(a->timer, &tv);
		}
		TAILQ_INSERT_TAIL(&s->asks, a, entry);
		s->nasks++;
		if ((r = notify(a, false)) < 0) {
			/* nobody would hear of it, so nobody could approve it: denied now, not at its timeout */
			TAILQ_REMOVE(&s->asks, a, entry);
			s->nasks--;
			event_free(a->timer);
			free(a);
			log_warnx("session %s: %s:%u: the parent cannot be told of a held request; denied", s->id, host,
			          port);
			snprintf(why, whylen,
			         "no rule allows %s:%u, and no operator can be asked now (sluiced does not take the "
			         "engine's reports); try again later", host, port);
			return r;
		}
		log_info("session %s: %s %s:%u held for approval as %s", s->id, a->method, host, port, a->id);
	}
	w->ask = a;
	w->cb = cb;
	w->arg = arg;
	TAILQ_INSERT_TAIL(&a->waiters, w, entry);
	snprintf(why, whylen, "held for approval as %s: `sluicectl approve %s` or `sluicectl deny %s` within %u s",
	         a->id, a->id, a->id, a->timeout_s);
	return 0;
}

void proxy_ask_unhold(struct proxy_ask_wait *w)
{
	struct proxy_ask *a = w->ask;

	if (!a)
		return;
	TAILQ_REMOVE(&a->waiters, w, entry);
	w->ask = NULL;
	if (TAILQ_EMPTY(&a->waiters)) {
		/* nobody waits any more (the client gave up): the ask goes from the operator's list too */
		TAILQ_REMOVE(&a->s->asks, a, entry);
		a->s->nasks--;
		notify(a, true);
		event_free(a->timer);
		free(a);
	}
}

void proxy_ask_grant_add(struct proxy_session *s, const char *host, uint16_t port, bool allow, uid_t by)
{
	struct proxy_grant *g = NULL;

	for (size_t i = 0; i < s->ngrants; i++)
		if (s->grants[i].port == port && strcmp(s->grants[i].host, host) == 0)
			g = &s->grants[i];
	if (!g) {
		struct proxy_grant *n;
		if (s->ngrants >= ASK_GRANTS_MAX)
			return;
		n = realloc(s->grants, (s->ngrants + 1) * sizeof *n);
		if (!n)
			return;
		s->grants = n;
		g = &s->grants[s->ngrants++];
		snprintf(g->host, sizeof g->host, "%s", host);
		g->port = port;
	}
	g->allow = allow;
	g->by = by;
}

bool proxy_ask_granted(struct proxy_session *s, const char *host, uint16_t port, struct policy_decision *d,
                       char *reason, size_t reasonlen)
{
	if (d->verdict != POLICY_ASK)
		return false;
	for (size_t i = 0; i < s->ngrants; i++) {
		const struct proxy_grant *g = &s->grants[i];
		if (strcmp(g->host, host) != 0 || (port ? g->port != port : !g->allow))
			continue;
		d->verdict = g->allow ? POLICY_ALLOW : POLICY_DENY;
		if (reason)
			snprintf(reason, reasonlen, "%s:%u %s in this session by uid %u (sluicectl %s)", host, g->port,
			         g->allow ? "approved" : "denied", (unsigned)g->by, g->allow ? "approve" : "deny");
		return true;
	}
	return false;
}

void proxy_ask_session_free(struct proxy_session *s)
{
	struct proxy_ask *a;

	/* the session's connections are closed before this, and each unhold ended its ask; what is left
	 * (nothing, normally) is dropped with no callback */
	while ((a = TAILQ_FIRST(&s->asks)) != NULL) {
		struct proxy_ask_wait *x;
		while ((x = TAILQ_FIRST(&a->waiters)) != NULL) {
			TAILQ_REMOVE(&a->waiters, x, entry);
			x->ask = NULL;
		}
		TAILQ_REMOVE(&s->asks, a, entry);
		s->nasks--;
		notify(a, true);
		event_free(a->timer);
		free(a);
	}
	free(s->grants);
	s->grants = NULL;
	s->ngrants = 0;
}

int proxy_engine_ask_decide(struct proxy_engine *e, const char *ask_id, bool allow, uid_t by)
{
	struct proxy_ask *a = ask_id ? find_ask(e, ask_id) : NULL;
	char reason[POLICY_HOST_MAX + 128];

	if (!a)
		return -ENOENT;
	proxy_ask_grant_add(a->s, a->host, a->port, allow, by);
	snprintf(reason, sizeof reason, "%s:%u %s by uid %u (sluicectl %s %s)", a->host, a->port,
	         allow ? "approved" : "denied", (unsigned)by, allow ? "approve" : "deny", a->id);
	log_info("session %s: ask %s (%s:%u) %s by uid %u", a->s->id, a->id, a->host, a->port,
	         allow ? "approved" : "denied", (unsigned)by);
	ask_finish(a, allow, reason);
	return 0;
}
