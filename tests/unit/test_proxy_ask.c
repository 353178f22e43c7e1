/* Unit tests of interactive approval in the engine (proxy/ask.c): requests held for one host:port share
 * one ask and one id, the parent is told when an ask starts and ends, a verdict resumes or refuses
 * every waiter and lasts for the session (DNS sees approvals only), the per-session bound, an ask ends
 * when its last waiter goes, a timeout denies and is not remembered, and each held request gets the
 * reason of its "ask" audit record (the relay writes it). No traffic: the event loop runs only for the
 * timeout. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy_int.h"

struct events {
	unsigned started, ended;
	char last_id[PROXY_ASK_ID_LEN + 1];
	char last_host[POLICY_HOST_MAX + 1];
	unsigned last_timeout;
	int refuse; /* nonzero: the parent cannot be told (notify returns it) */
};

struct waiter {
	struct proxy_ask_wait w;
	int called; /* times the callback ran */
	bool allow;
	char reason[256];
};

static int notify(const struct proxy_ask_event *ev, void *arg)
{
	struct events *n = arg;

	if (ev->done) {
		n->ended++;
		return 0;
	}
	if (n->refuse)
		return n->refuse;
	n->started++;
	snprintf(n->last_id, sizeof n->last_id, "%s", ev->ask_id);
	snprintf(n->last_host, sizeof n->last_host, "%s", ev->host);
	n->last_timeout = ev->timeout_s;
	assert_int_equal(ev->uid, 1000);
	assert_string_equal(ev->session_id, "s1");
	return 0;
}

static void verdict(struct proxy_ask_wait *w, bool allow, const char *reason, void *arg)
{
	struct waiter *x = arg;

	assert_ptr_equal(w, &x->w);
	assert_null(w->ask); /* detached before the callback */
	x->called++;
	x->allow = allow;
	snprintf(x->reason, sizeof x->reason, "%s", reason);
}

static void sin4(struct sockaddr_storage *ss, const char *ip)
{
	struct sockaddr_in *s = (struct sockaddr_in *)ss;
	memset(ss, 0, sizeof *ss);
	s->sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
}

static unsigned held_lines; /* holds whose reason is that of an "ask" audit record */

static int hold(struct proxy_session *s, struct waiter *x, const char *host, uint16_t port)
{
	char why[256];
	int r;

	memset(x, 0, sizeof *x);
	r = proxy_ask_hold(s, &x->w, "http", "GET", host, port, verdict, x, why, sizeof why);
	if (r == 0) {
		/* the relay writes this as the held request's "ask" record: it names the ask's id */
		assert_non_null(x->w.ask);
		assert_non_null(strstr(why, "held for approval as "));
		assert_non_null(strstr(why, "sluicectl approve "));
		held_lines++;
	}
	return r;
}

static void decide(struct proxy_session *s, const char *host, uint16_t port, enum policy_verdict *v, char *reason)
{
	struct policy_decision d;

	policy_decide(s->policy, host, port, POLICY_M_GET, &d);
	reason[0] = '\0';
	proxy_ask_granted(s, host, port, &d, reason, 256);
	*v = d.verdict;
}

static void test_ask(void **state)
{
	char path[] = "/tmp/sluice-ask-test-XXXXXX", reason[256];
	int fd = mkstemp(path);
	struct event_base *base = event_base_new();
	struct policy_builder *b = policy_builder_new();
	struct policy_options o = {.ask = true, .ask_timeout_s = 1};
	struct proxy_session_info info;
	struct proxy_config cfg;
	struct policy_error pe;
	struct events n = {0};
	struct waiter a1, a2, b1, many[PROXY_ASK_MAX_PER_SESSION], late, t1;
	struct proxy_engine *e;
	struct proxy_session *s;
	struct policy *p;
	enum policy_verdict v;
	char err[256], first[PROXY_ASK_ID_LEN + 1];
	(void)state;

	assert_true(fd >= 0);
	assert_int_equal(policy_builder_add_pattern(b, POLICY_LAYER_CLI, "allowed.test", false, "--allow", &pe), 0);
	policy_builder_set_options(b, &o);
	p = policy_builder_compile(b, &pe);
	assert_non_null(p);
	policy_builder_free(b);
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = fd;
	struct sockaddr_storage dns;
	sin4(&dns, "127.0.0.1");
	((struct sockaddr_in *)&dns)->sin_port = htons(53);
	cfg.upstream_dns = dns;
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	cfg.ask_notify = notify;
	cfg.ask_arg = &n;
	e = proxy_engine_new(base, &cfg, err, sizeof err);
	assert_non_null(e);
	memset(&info, 0, sizeof info);
	info.id = "s1";
	info.uid = 1000;
	info.command = "t";
	info.policy = p;
	sin4(&info.addr4, "100.64.0.2");
	assert_int_equal(proxy_engine_session_add(e, &info), 0);
	policy_unref(p);
	s = TAILQ_FIRST(&e->sessions);

	/* unmatched: ask; two requests for one host:port share one ask */
	decide(s, "other.test", 80, &v, reason);
	assert_int_equal(v, POLICY_ASK);
	assert_int_equal(hold(s, &a1, "other.test", 80), 0);
	assert_int_equal(n.started, 1);
	assert_int_equal(strlen(n.last_id), PROXY_ASK_ID_LEN);
	assert_int_equal(n.last_timeout, 1);
	snprintf(first, sizeof first, "%s", n.last_id);
	assert_int_equal(hold(s, &a2, "other.test", 80), 0);
	assert_int_equal(n.started, 1);
	assert_int_equal(hold(s, &b1, "other.test", 8080), 0); /* another port: another ask */
	assert_int_equal(n.started, 2);
	/* the parent cannot be told (sluiced does not drain the engine's channel): denied at once, nothing
	 * held (it would have waited for its timeout, unseen by any operator) */
	n.refuse = -ENOBUFS;
	{
		char why[256];
		unsigned asks = s->nasks;

		memset(&late, 0, sizeof late);
		assert_int_equal(proxy_ask_hold(s, &late.w, "http", "GET", "other.test", 8443, verdict, &late, why,
		                                 sizeof why), -ENOBUFS);
		assert_null(late.w.ask);
		assert_int_equal(s->nasks, asks);
		assert_non_null(strstr(why, "no operator can be asked now"));
		/* a request for a host:port already held still joins its ask (the parent knows of it) */
		assert_int_equal(hold(s, &t1, "other.test", 80), 0);
		proxy_ask_unhold(&t1.w);
	}
	n.refuse = 0;

	/* approve: both waiters resume; the approval lasts for host:port and makes the name resolvable */
	assert_int_equal(proxy_engine_ask_decide(e, "zzzzzzzz", true, 0), -ENOENT);
	assert_int_equal(proxy_engine_ask_decide(e, first, true, 1000), 0);
	assert_int_equal(a1.called, 1);
	assert_int_equal(a2.called, 1);
	assert_true(a1.allow && a2.allow);
	assert_non_null(strstr(a1.reason, "approved by uid 1000"));
	assert_int_equal(b1.called, 0);
	assert_int_equal(n.ended, 1);
	assert_int_equal(proxy_engine_ask_decide(e, first, false, 0), -ENOENT); /* decided already */
	decide(s, "other.test", 80, &v, reason);
	assert_int_equal(v, POLICY_ALLOW);
	assert_non_null(strstr(reason, "approved in this session by uid 1000"));
	decide(s, "other.test", 0, &v, reason); /* DNS */
	assert_int_equal(v, POLICY_ALLOW);
	decide(s, "other.test", 443, &v, reason); /* another port still asks */
	assert_int_equal(v, POLICY_ASK);
	decide(s, "allowed.test", 80, &v, reason); /* a rule decides: no ask */
	assert_int_equal(v, POLICY_ALLOW);

	/* deny: remembered for host:port, but a denial does not make the name unresolvable by itself */
	assert_int_equal(proxy_engine_ask_decide(e, n.last_id, false, 0), 0);
	assert_int_equal(b1.called, 1);
	assert_false(b1.allow);
	assert_non_null(strstr(b1.reason, "denied by uid 0"));
	decide(s, "other.test", 8080, &v, reason);
	assert_int_equal(v, POLICY_DENY);

	/* the per-session bound on held host:port pairs */
	for (int i = 0; i < PROXY_ASK_MAX_PER_SESSION; i++) {
		char h[32];
		snprintf(h, sizeof h, "h%d.test", i);
		assert_int_equal(hold(s, &many[i], h, 80), 0);
	}
	assert_int_equal(s->nasks, PROXY_ASK_MAX_PER_SESSION);
	assert_int_equal(hold(s, &late, "one-more.test", 80), -EBUSY);
	/* a waiter that goes away (its client closed) ends its ask, without a callback */
	for (int i = 0; i < PROXY_ASK_MAX_PER_SESSION; i++)
		proxy_ask_unhold(&many[i].w);
	proxy_ask_unhold(&many[0].w); /* twice: harmless */
	assert_int_equal(s->nasks, 0);
	assert_int_equal(many[3].called, 0);
	assert_int_equal(n.ended, 2 + PROXY_ASK_MAX_PER_SESSION);

	/* the timeout denies, and is not remembered */
	assert_int_equal(hold(s, &t1, "slow.test", 80), 0);
	{
		/* the engine's own events (relay sockets) keep the loop alive: run it for 1.5 s */
		struct timeval tv = {1, 500000};
		event_base_loopexit(base, &tv);
		event_base_dispatch(base);
	}
	assert_int_equal(t1.called, 1);
	assert_false(t1.allow);
	assert_non_null(strstr(t1.reason, "not approved within 1 s"));
	decide(s, "slow.test", 80, &v, reason);
	assert_int_equal(v, POLICY_ASK);

	/* a session that goes with asks pending: they end (told to the parent), nothing is called */
	assert_int_equal(hold(s, &late, "pending.test", 80), 0);
	assert_int_equal(proxy_engine_session_remove(e, "s1"), 0);
	assert_int_equal(late.called, 0);
	assert_null(late.w.ask);
	assert_int_equal(n.started, n.ended);

	proxy_engine_free(e);
	event_base_free(base);

	unlink(path);
	/* one "ask" record per held request: a1, a2, b1, t1 (joined while the parent could not be told), 16,
	 * slow, pending */
	assert_int_equal(held_lines, 4 + PROXY_ASK_MAX_PER_SESSION + 2);
}

static void test_no_notifier(void **state)
{
	struct event_base *base = event_base_new();
	struct policy_builder *b = policy_builder_new();
	struct policy_options o = {.ask = true};
	struct proxy_session_info info;
	struct proxy_config cfg;
	struct policy_error pe;
	struct proxy_engine *e;
	struct waiter x;
	struct policy *p;
	char err[256];
	(void)state;

	policy_builder_set_options(b, &o);
	p = policy_builder_compile(b, &pe);
	assert_non_null(p);
	policy_builder_free(b);
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	sin4(&cfg.upstream_dns, "127.0.0.1");
	((struct sockaddr_in *)&cfg.upstream_dns)->sin_port = htons(53);
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	e = proxy_engine_new(base, &cfg, err, sizeof err);
	assert_non_null(e);
	memset(&info, 0, sizeof info);
	info.id = "s1";
	info.uid = 1000;
	info.policy = p;
	sin4(&info.addr4, "100.64.0.2");
	assert_int_equal(proxy_engine_session_add(e, &info), 0);
	policy_unref(p);
	/* the standalone sluice-proxy: nobody could decide, so an ask is a denial */
	assert_int_equal(hold(TAILQ_FIRST(&e->sessions), &x, "other.test", 80), -ENOTSUP);
	assert_null(x.w.ask);
	proxy_engine_free(e);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_ask),
	        cmocka_unit_test(test_no_notifier),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
