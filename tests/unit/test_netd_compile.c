/* Unit tests: netd/compile.c, sluiced's policy compile worker. A client's policy compiles under the
 * organisation layer (which caps it) off the loop and comes back once through the callback; a bad one is
 * rejected with its reason; past the deadline the callback gets -ETIMEDOUT with the error a user sees and
 * the late result is dropped; a cancelled job never calls back; an unprivileged uid may run only
 * NETD_COMPILE_MAX_PER_UID compiles at once; a compile that began before a reload of the organisation
 * layer is compiled again under the reloaded one (refused only after 3 such reloads); an embedded helper
 * refuses "ask". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netd.h"
#include "policy.h"

static struct netd d;
static char orgdir[64];

struct outcome {
	int calls;
	int r;
	char err[1024];
	struct netd_compiled res;
};

static void done_cb(struct netd *dd, int r, struct netd_compiled *res, const char *err, void *arg)
{
	struct outcome *o = arg;

	assert_ptr_equal(dd, &d);
	o->calls++;
	o->r = r;
	snprintf(o->err, sizeof o->err, "%s", err ? err : "");
	if (res) {
		o->res = *res; /* take its members */
		memset(res, 0, sizeof *res);
	}
}

/* Runs the loop until o has been called back (or 20 s passed). */
static void run_until(struct outcome *o)
{
	for (int i = 0; i < 2000 && o->calls == 0; i++) {
		struct timeval tv = {0, 10000};
		event_base_loopexit(d.base, &tv);
		event_base_dispatch(d.base);
	}
}

/* Runs the loop until every worker ended (their threads joined). */
static void drain(void)
{
	for (int i = 0; i < 3000 && netd_compile_running(&d) > 0; i++) {
		struct timeval tv = {0, 10000};
		event_base_loopexit(d.base, &tv);
		event_base_dispatch(d.base);
	}
	assert_int_equal(netd_compile_running(&d), 0);
}

static char *huge(unsigned n)
{
	size_t cap = (size_t)n * 32 + 64, len = 0;
	char *s = malloc(cap);

	assert_non_null(s);
	len += (size_t)snprintf(s, cap, "{\"allow\": [");
	for (unsigned i = 0; i < n; i++)
		len += (size_t)snprintf(s + len, cap - len, "%s\"h%u.example.org\"", i ? "," : "", i);
	snprintf(s + len, cap - len, "]}");
	return s;
}

static int setup(void **state)
{
	FILE *f;
	char p[128];

	memset(&d, 0, sizeof d);
	snprintf(orgdir, sizeof orgdir, "/tmp/sluice-compile.XXXXXX");
	assert_non_null(mkdtemp(orgdir));
	snprintf(p, sizeof p, "%s/policy.json", orgdir);
	assert_non_null(f = fopen(p, "w"));
	fputs("{ \"deny\": [\"evil.test\"] }\n", f);
	fclose(f);
	snprintf(d.cfg.sysconfdir, sizeof d.cfg.sysconfdir, "%s", orgdir);
	d.cfg.compile_timeout_ms = 10000;
	assert_non_null(d.base = event_base_new());
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	drain();
	netd_compiler_free(&d);
	event_base_free(d.base);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", orgdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_compiles_under_org(void **state)
{
	struct outcome o = {0};
	struct netd_compile *job;
	struct policy_decision dec;
	char err[256];
	const char *text = "{ \"allow\": [\"registry.test\", \"evil.test\"] }";

	assert_int_equal(netd_compile_start(&d, strdup(text), 1000, done_cb, &o, &job, err, sizeof err), 0);
	assert_non_null(job);
	assert_int_equal(o.calls, 0); /* never from within start */
	run_until(&o);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.r, 0);
	assert_non_null(o.res.json);
	assert_string_equal(o.res.client, text);
	assert_non_null(o.res.policy);
	policy_decide(o.res.policy, "registry.test", 443, 0, &dec);
	assert_int_equal(dec.verdict, POLICY_ALLOW);
	policy_decide(o.res.policy, "evil.test", 443, 0, &dec); /* the organisation's deny beats it */
	assert_int_equal(dec.verdict, POLICY_DENY);
	netd_compiled_clear(&o.res);
}

static void test_rejected(void **state)
{
	struct outcome o = {0};
	struct netd_compile *job;
	char err[256];

	assert_int_equal(netd_compile_start(&d, strdup("{ \"allow\": [\"*.com\"] }"), 0, done_cb, &o, &job, err,
	                                    sizeof err), 0);
	run_until(&o);
	assert_int_equal(o.r, -EINVAL);
	assert_non_null(strstr(o.err, "policy rejected: "));
}

static void test_deadline(void **state)
{
	struct outcome o = {0};
	struct netd_compile *job;
	char err[256];

	d.cfg.compile_timeout_ms = 20;
	assert_int_equal(netd_compile_start(&d, huge(100000), 0, done_cb, &o, &job, err, sizeof err), 0);
	run_until(&o);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.r, -ETIMEDOUT);
	assert_non_null(strstr(o.err, "the session's policy took longer than 20 ms to compile (sluiced "
	                              "--compile-timeout); not started: make the policy smaller"));
	assert_int_equal(netd_compile_running(&d), 1); /* the thread runs on, and counts */
	drain();
	assert_int_equal(o.calls, 1); /* its late result was dropped */
}

static void test_cancel_and_per_uid_limit(void **state)
{
	struct outcome o[4] = {{0}};
	struct netd_compile *job[4];
	char err[256];

	assert_int_equal(netd_compile_start(&d, huge(50000), 1000, done_cb, &o[0], &job[0], err, sizeof err), 0);
	assert_int_equal(netd_compile_start(&d, huge(50000), 1000, done_cb, &o[1], &job[1], err, sizeof err), 0);
	assert_int_equal(netd_compile_start(&d, strdup("{}"), 1000, done_cb, &o[2], &job[2], err, sizeof err),
	                 -EAGAIN);
	assert_string_equal(err, "2 policies are being compiled already for this user; try again when they are done");
	/* another user, and root, are not held up by it */
	assert_int_equal(netd_compile_start(&d, strdup("{}"), 1001, done_cb, &o[3], &job[3], err, sizeof err), 0);
	netd_compile_cancel(job[0]);
	netd_compile_cancel(job[1]);
	run_until(&o[3]);
	assert_int_equal(o[3].r, 0);
	netd_compiled_clear(&o[3].res);
	drain();
	assert_int_equal(o[0].calls + o[1].calls + o[2].calls, 0);
}

/* A compile that began before a reload of the organisation layer is compiled again under the reloaded
 * layer (same input), and the caller gets that result, not "try again". */
static void test_stale_after_reload(void **state)
{
	struct outcome o = {0};
	struct netd_compile *job;
	struct policy_decision dec;
	char err[256], p[128];
	const char *text = "{ \"allow\": [\"registry.test\"] }";
	FILE *f;

	assert_int_equal(netd_compile_start(&d, strdup(text), 0, done_cb, &o, &job, err, sizeof err), 0);
	/* netd_reload_org: the layer changes (registry.test denied from now on) */
	snprintf(p, sizeof p, "%s/policy.json", orgdir);
	assert_non_null(f = fopen(p, "w"));
	fputs("{ \"deny\": [\"evil.test\", \"registry.test\"] }\n", f);
	fclose(f);
	d.org_gen++;
	run_until(&o);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.r, 0);
	assert_string_equal(o.res.client, text);
	assert_non_null(o.res.policy);
	policy_decide(o.res.policy, "registry.test", 443, 0, &dec);
	assert_int_equal(dec.verdict, POLICY_DENY); /* compiled under the reloaded layer */
	netd_compiled_clear(&o.res);
}

/* Reloads that keep coming while it compiles: it is compiled again 3 times, then refused with "try
 * again" (a bound, so a SIGHUP storm cannot keep a compile slot forever). */
static void test_stale_reloads_bounded(void **state)
{
	struct outcome o = {0};
	struct netd_compile *job;
	char err[256];

	assert_int_equal(netd_compile_start(&d, huge(5000), 0, done_cb, &o, &job, err, sizeof err), 0);
	for (int i = 0; i < 20000 && o.calls == 0; i++) {
		struct timeval tv = {0, 1000};
		d.org_gen++; /* a reload before every turn of the loop: each compile ends stale */
		event_base_loopexit(d.base, &tv);
		event_base_dispatch(d.base);
	}
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.r, -EAGAIN);
	assert_string_equal(o.err, "the organisation policy was reloaded while this policy compiled; try again");
}

static void test_embedded_refuses_ask(void **state)
{
	struct outcome o = {0};
	struct netd_compile *job;
	char err[256];

	d.cfg.embedded = true;
	assert_int_equal(netd_compile_start(&d, strdup("{ \"options\": { \"ask\": true } }"), 0, done_cb, &o, &job, err,
	                                    sizeof err), 0);
	run_until(&o);
	assert_int_equal(o.r, -EINVAL);
	assert_non_null(strstr(o.err, "interactive approval (--ask, option \"ask\") needs sluiced"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_compiles_under_org, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_rejected, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cancel_and_per_uid_limit, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stale_after_reload, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_stale_reloads_bounded, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_embedded_refuses_ask, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
