/* Dialing upstream for one request or tunnel: resolve the canonical name (only after the name was
 * allowed), ask the policy about every address (forbidden ranges: loopback, private, metadata...),
 * and connect to exactly an address that was checked, trying the allowed ones in order. */
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "proxy_int.h"

struct proxy_dial {
	struct proxy_session *session; /* borrowed */
	struct proxy_engine *engine;   /* borrowed */
	char host[POLICY_HOST_MAX + 1];
	uint16_t port;
	proxy_dial_cb cb;
	void *arg;
	struct proxy_resolve *resolve; /* owned until it calls back */
	struct event *defer;           /* owned: runs the literal path from the loop */
	struct bufferevent *bev;       /* owned: the connection attempt */
	struct sockaddr_storage cand[PROXY_RESOLVE_MAX];
	size_t ncand, next;
	struct proxy_dial_result res;
	int last_err;
	bool timed_out;
};

static void dial_free(struct proxy_dial *d)
{
	if (d->bev)
		bufferevent_free(d->bev);
	if (d->defer)
		event_free(d->defer);
	free(d);
}

static void done(struct proxy_dial *d)
{
	struct bufferevent *bev = d->res.status == 0 ? d->bev : NULL;
	if (bev)
		d->bev = NULL;
	d->cb(bev, &d->res, d->arg);
	dial_free(d);
}

static void try_next(struct proxy_dial *d);

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct proxy_dial *d = arg;
	(void)bev;
	if (what & BEV_EVENT_CONNECTED) {
		bufferevent_set_timeouts(d->bev, NULL, NULL);
		bufferevent_setcb(d->bev, NULL, NULL, NULL, NULL);
		d->res.status = 0;
		d->res.reason[0] = '\0';
		done(d);
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		d->timed_out = true;
		d->last_err = ETIMEDOUT;
	} else {
		d->last_err = EVUTIL_SOCKET_ERROR();
		if (!d->last_err)
			d->last_err = ECONNREFUSED;
	}
	log_debug("dial %s: %s: %s", d->host, d->res.address, strerror(d->last_err));
	bufferevent_free(d->bev);
	d->bev = NULL;
	try_next(d);
}

static void try_next(struct proxy_dial *d)
{
	while (d->next < d->ncand) {
		struct sockaddr_storage *ss = &d->cand[d->next++];
		socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);

		proxy_addr_str((struct sockaddr *)ss, d->res.address, true);
		d->bev = bufferevent_socket_new(d->engine->base, -1, BEV_OPT_CLOSE_ON_FREE);
		if (!d->bev) {
			d->last_err = ENOMEM;
			continue;
		}
		bufferevent_setcb(d->bev, NULL, NULL, event_cb, d);
		bufferevent_set_timeouts(d->bev, NULL, d->engine->tv_connect);
		if (bufferevent_socket_connect(d->bev, (struct sockaddr *)ss, (int)len) != 0) {
			d->last_err = errno ? errno : ENETUNREACH;
			bufferevent_free(d->bev);
			d->bev = NULL;
			continue;
		}
		evutil_make_socket_closeonexec(bufferevent_getfd(d->bev));
		return;
	}
	if (d->timed_out && d->ncand == 1) {
		d->res.status = 504;
		snprintf(d->res.reason, sizeof d->res.reason, "connecting to %s (%s) timed out after %u ms", d->host,
		         d->res.address, d->engine->connect_timeout_ms);
	} else if (d->timed_out && d->last_err == ETIMEDOUT) {
		d->res.status = 504;
		snprintf(d->res.reason, sizeof d->res.reason, "connecting to %s timed out (%zu addresses tried)",
		         d->host, d->ncand);
	} else {
		d->res.status = 502;
		snprintf(d->res.reason, sizeof d->res.reason, "cannot connect to %s (%s): %s", d->host, d->res.address,
		         strerror(d->last_err));
	}
	done(d);
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

static void resolved(int err, const struct sockaddr_storage *addrs, size_t n, void *arg)
{
	struct proxy_dial *d = arg;
	struct policy_decision dec, first_deny;
	char denied[PROXY_ADDRSTR_MAX] = "";

	d->resolve = NULL;
	if (n == 0) {
		d->res.status = err == PROXY_RESOLVE_TIMEOUT ? 504 : 502;
		snprintf(d->res.reason, sizeof d->res.reason, "cannot resolve %s: %s", d->host,
		         proxy_resolve_strerror(err));
		done(d);
		return;
	}
	memset(&first_deny, 0, sizeof first_deny);
	for (size_t i = 0; i < n; i++) {
		struct sockaddr_storage ss = addrs[i];
		set_port(&ss, d->port);
		policy_decide_addr(d->session->policy, (struct sockaddr *)&ss, d->port, true, &dec);
		if (dec.verdict == POLICY_ALLOW) {
			d->cand[d->ncand++] = ss;
		} else if (!denied[0]) {
			proxy_addr_str((struct sockaddr *)&ss, denied, false);
			first_deny = dec;
		}
	}
	if (d->ncand == 0) {
		d->res.status = 403;
		snprintf(d->res.reason, sizeof d->res.reason,
		         "%s resolves only to addresses the policy forbids (%s): %s", d->host, denied,
		         policy_decision_reason(&first_deny));
		snprintf(d->res.address, sizeof d->res.address, "%s", denied);
		snprintf(d->res.rule, sizeof d->res.rule, "%s", policy_rule_where(first_deny.rule));
		done(d);
		return;
	}
	try_next(d);
}

static void defer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	try_next(arg);
}

struct proxy_dial *proxy_dial_start(struct proxy_session *s, const struct proxy_target *t, proxy_dial_cb cb, void *arg)
{
	struct proxy_dial *d = calloc(1, sizeof *d);

	if (!d)
		return NULL;
	d->session = s;
	d->engine = s->engine;
	d->port = t->port;
	d->cb = cb;
	d->arg = arg;
	snprintf(d->host, sizeof d->host, "%s", t->host);
	if (t->literal) {
		/* an address the caller decided as such: connect to exactly it */
		d->cand[0] = t->addr;
		set_port(&d->cand[0], t->port);
		d->ncand = 1;
		d->defer = evtimer_new(d->engine->base, defer_cb, d);
		if (!d->defer) {
			dial_free(d);
			return NULL;
		}
		event_active(d->defer, EV_TIMEOUT, 1);
		return d;
	}
	d->resolve = proxy_resolve_start(d->engine, d->host, resolved, d);
	if (!d->resolve) {
		dial_free(d);
		return NULL;
	}
	return d;
}

void proxy_dial_cancel(struct proxy_dial *d)
{
	if (!d)
		return;
	if (d->resolve)
		proxy_resolve_cancel(d->resolve);
	dial_free(d);
}
