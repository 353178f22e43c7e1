/* Asynchronous upstream name resolution for HTTP and CONNECT destinations: A and AAAA queries in
 * parallel through the engine's DNS relay (dns_relay.c: the configured upstream resolver only, fresh
 * ids and source ports), answers checked and read with the DNS proxy's message code (dns_msg.c, dns_answer.c).
 *
 * Each answer, whatever its rcode, is the answer to its own question and to nothing else: a resolver
 * that refuses AAAA (REFUSED, NOTIMP), as some corporate resolvers do, costs the AAAA addresses of that
 * one name, never the resolver as a whole. (libevent's evdns, used before, took REFUSED and NOTIMP as
 * "this nameserver is broken" and marked its only nameserver failed, thousands of times under load.)
 * No search list, no hosts file, no cache (the dial keeps what this answers per session: addr_cache.c);
 * the names are canonical (lower case) already. */
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_int.h"

#define RESOLVE_RETRY_MS    2000 /* no answer yet: ask once more (a UDP datagram may be lost) */
#define RESOLVE_DEADLINE_MS 4000 /* then give up on what has not been answered */

struct resolve_family {
	struct proxy_resolve *r; /* borrowed: the lookup this belongs to */
	struct dns_query q;
	struct dns_relay_query *rq; /* owned while asked */
	bool done, via_tcp;
	int err;
	size_t n;
	uint32_t ttl; /* the smallest of addrs' */
	struct sockaddr_storage addrs[PROXY_RESOLVE_MAX / 2];
};

struct proxy_resolve {
	struct proxy_engine *e; /* borrowed */
	proxy_resolve_cb cb;
	void *arg;
	struct event *timer; /* owned: the retry, then the deadline */
	bool retried;
	bool reading;              /* in the deadline's read of the relay: maybe_finish waits for timer_cb */
	struct proxy_deadline due; /* the deadline, from the retry (a grace after a stall: timer_cb) */
	struct resolve_family fam[2]; /* A, AAAA */
};

const char *proxy_resolve_strerror(int err)
{
	switch (err) {
	case PROXY_RESOLVE_NXDOMAIN: return "no such name (NXDOMAIN)";
	case PROXY_RESOLVE_NODATA: return "the name has no addresses";
	case PROXY_RESOLVE_TIMEOUT: return "the resolver did not answer in time";
	case PROXY_RESOLVE_SERVFAIL: return "the resolver failed (SERVFAIL)";
	case PROXY_RESOLVE_REFUSED: return "the resolver refused the query";
	case PROXY_RESOLVE_NOTIMP: return "the resolver does not implement the query (NOTIMP)";
	case PROXY_RESOLVE_BADANSWER: return "the resolver's answer was malformed";
	default: return "the query could not be sent to the resolver";
	}
}

static int rcode_err(int rcode)
{
	switch (rcode) {
	case DNS_RC_NOERROR: return PROXY_RESOLVE_NODATA;
	case DNS_RC_NXDOMAIN: return PROXY_RESOLVE_NXDOMAIN;
	case DNS_RC_SERVFAIL: return PROXY_RESOLVE_SERVFAIL;
	case DNS_RC_REFUSED: return PROXY_RESOLVE_REFUSED;
	case DNS_RC_NOTIMP: return PROXY_RESOLVE_NOTIMP;
	default: return PROXY_RESOLVE_BADANSWER;
	}
}

static void resolve_free(struct proxy_resolve *r)
{
	for (int i = 0; i < 2; i++)
		dns_relay_cancel(r->fam[i].rq);
	if (r->timer)
		event_free(r->timer);
	free(r);
}

/* Calls back once both families are done, IPv4 addresses first (the order they are tried in). */
static void maybe_finish(struct proxy_resolve *r)
{
	struct sockaddr_storage addrs[PROXY_RESOLVE_MAX];
	struct resolve_family *f4 = &r->fam[0], *f6 = &r->fam[1];
	size_t n = 0;
	int err = 0;
	uint32_t ttl = UINT32_MAX;

	if (!f4->done || !f6->done || r->reading)
		return;
	for (int i = 0; i < 2; i++) {
		for (size_t k = 0; k < r->fam[i].n; k++)
			addrs[n++] = r->fam[i].addrs[k];
		if (r->fam[i].n && r->fam[i].ttl < ttl)
			ttl = r->fam[i].ttl;
	}
	if (n == 0) {
		/* The more telling error: a failure or refusal over "no data". */
		err = f4->err;
		if (f4->err == PROXY_RESOLVE_NODATA && f6->err != PROXY_RESOLVE_NODATA)
			err = f6->err;
	}
	r->cb(err, addrs, n, n ? ttl : 0, r->arg);
	resolve_free(r);
}

static bool keep_all(const struct sockaddr *sa, void *arg)
{
	(void)sa;
	(void)arg;
	return true;
}

static bool ask(struct resolve_family *f, bool tcp);

static bool answered(const uint8_t *ans, size_t len, void *arg)
{
	struct resolve_family *f = arg;
	struct dns_filter_result fr;
	uint8_t *out = NULL;
	size_t outlen = 0;
	int want = f->q.qtype == DNS_TYPE_A ? AF_INET : AF_INET6;
	int r;

	if (!ans) {
		f->rq = NULL;
		f->done = true;
		f->err = PROXY_RESOLVE_TIMEOUT;
		maybe_finish(f->r);
		return true;
	}
	if (len >= 12 && (ans[2] & 0x02) && !f->via_tcp && dns_msg_answer_matches(ans, len, &f->q)) {
		/* truncated over UDP: the whole answer over TCP */
		f->rq = NULL;
		if (!ask(f, true)) {
			f->done = true;
			f->err = PROXY_RESOLVE_SENDFAIL;
			maybe_finish(f->r);
		}
		return true;
	}
	r = dns_msg_filter_answer(ans, len, &f->q, keep_all, NULL, DNS_MSG_MAX, &out, &outlen, &fr);
	if (r == -EBADMSG) {
		/* the answer to this question, but malformed (dns_msg.h): none of its addresses is used */
		f->rq = NULL;
		f->done = true;
		f->err = PROXY_RESOLVE_BADANSWER;
		maybe_finish(f->r);
		return true;
	}
	if (r != 0)
		return false; /* not the answer to this question: keep waiting */
	free(out);
	f->rq = NULL;
	f->done = true;
	f->ttl = UINT32_MAX;
	for (unsigned i = 0; i < fr.naddrs && f->n < PROXY_RESOLVE_MAX / 2; i++) {
		if (fr.addrs[i].addr.ss_family != want)
			continue;
		f->addrs[f->n++] = fr.addrs[i].addr;
		if (fr.addrs[i].ttl < f->ttl)
			f->ttl = fr.addrs[i].ttl;
	}
	f->err = f->n ? 0 : rcode_err(fr.rcode);
	maybe_finish(f->r);
	return true;
}

static bool ask(struct resolve_family *f, bool tcp)
{
	struct dns_relay *relay = f->r->e->relay;
	uint8_t *wire = NULL;
	size_t len = 0;

	if (dns_msg_build_upstream(&f->q, &wire, &len) != 0)
		return false;
	f->via_tcp = tcp;
	f->rq = tcp ? dns_relay_send_tcp(relay, wire, len, answered, f) : dns_relay_send(relay, wire, len, answered, f);
	free(wire);
	return f->rq != NULL;
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct proxy_resolve *r = arg;
	struct timeval tv = {(RESOLVE_DEADLINE_MS - RESOLVE_RETRY_MS) / 1000,
	                     (RESOLVE_DEADLINE_MS - RESOLVE_RETRY_MS) % 1000 * 1000};
	bool waiting = false;
	(void)fd;
	(void)what;

	if (r->retried) {
		/* The deadline measures the resolver, not the engine: the answers waiting unread in the relay's
		 * sockets are taken first (they came in time; after a stall the expired timers may run before every
		 * socket was read), and a deadline noticed more than PROXY_STALL_MS late gives the questions still
		 * open their time again, once (on a paused machine the resolver could not answer either). */
		r->reading = true;
		dns_relay_read_now(r->e->relay);
		r->reading = false;
		for (int i = 0; i < 2; i++)
			waiting |= !r->fam[i].done && !r->fam[i].via_tcp;
		if (waiting &&
		    proxy_deadline_stalled(&r->due, RESOLVE_DEADLINE_MS - RESOLVE_RETRY_MS, "-", "an upstream DNS lookup")) {
			event_add(r->timer, &tv);
			return;
		}
	}
	for (int i = 0; i < 2; i++) {
		struct resolve_family *f = &r->fam[i];
		if (f->done || f->via_tcp)
			continue;
		dns_relay_cancel(f->rq);
		f->rq = NULL;
		if (!r->retried && ask(f, false))
			continue;
		f->done = true;
		f->err = r->retried ? PROXY_RESOLVE_TIMEOUT : PROXY_RESOLVE_SENDFAIL;
	}
	if (!r->retried) {
		r->retried = true;
		proxy_deadline_start(&r->due, proxy_mono_ms(), RESOLVE_DEADLINE_MS - RESOLVE_RETRY_MS);
		event_add(r->timer, &tv);
	}
	/* a family still waiting over TCP has the relay's own timeout */
	maybe_finish(r);
}

struct proxy_resolve *proxy_resolve_start(struct proxy_engine *e, const char *name, proxy_resolve_cb cb, void *arg)
{
	static const uint16_t types[2] = {DNS_TYPE_A, DNS_TYPE_AAAA};
	struct proxy_resolve *r = calloc(1, sizeof *r);
	struct timeval tv = {RESOLVE_RETRY_MS / 1000, RESOLVE_RETRY_MS % 1000 * 1000};

	if (!r)
		return NULL;
	r->e = e;
	r->cb = cb;
	r->arg = arg;
	r->timer = evtimer_new(e->base, timer_cb, r);
	if (!r->timer)
		goto fail;
	for (int i = 0; i < 2; i++) {
		struct resolve_family *f = &r->fam[i];
		f->r = r;
		if (dns_msg_query_init(&f->q, name, types[i]) != 0 || !ask(f, false))
			goto fail;
	}
	if (event_add(r->timer, &tv) != 0)
		goto fail;
	return r;
fail:
	resolve_free(r);
	return NULL;
}

void proxy_resolve_cancel(struct proxy_resolve *r)
{
	if (r)
		resolve_free(r);
}
