/* Unit tests: netd/compile.c, sluiced's policy compile worker. A client's policy compiles under the
 * organisation layer (which caps it) off the loop and comes back once through the callback; a bad one is
 * rejected with its reason; past the deadline the callback gets -ETIMEDOUT with the error a user sees and
 * the late result is dropped; a cancelled job never calls back; an unprivileged uid may run only
 * NETD_COMPILE_MAX_PER_UID compiles at once; a compile that began before a reload of the organisation
 * layer is compiled again under the reloaded one (refused only after 3 such reloads); an embedded helper
 * refuses "ask". The compile cache: the same input gets the same compiled object again (no thread), any
 * other input (one byte, live rules) never gets it; a change of a file of the organisation layer (the
 * policy, a new policy.d file, a missing --sysconfdir that appears) or a reload (org_gen) is compiled anew;
 * a symbolic link as --sysconfdir turns the cache off; a policy with credentials is never kept. */
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
#include <sys/stat.h>
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
	char err[256], p[128], q[128];
	const char *text = "{ \"allow\": [\"registry.test\"] }";
	FILE *f;

	assert_int_equal(netd_compile_start(&d, strdup(text), 0, done_cb, &o, &job, err, sizeof err), 0);
	/* netd_reload_org: the layer changes (registry.test denied from now on); replaced in one rename, as
	 * the worker may be reading it (a file truncated and written in place could be read half-written) */
	snprintf(p, sizeof p, "%s/policy.json.new", orgdir);
	assert_non_null(f = fopen(p, "w"));
	fputs("{ \"deny\": [\"evil.test\", \"registry.test\"] }\n", f);
	fclose(f);
	snprintf(q, sizeof q, "%s/policy.json", orgdir);
	assert_int_equal(rename(p, q), 0);
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

/* compiles text (and extra) for uid and returns its outcome, run to the end */
static struct outcome compile_as(const char *text, const char *extra, uid_t uid)
{
	struct outcome o = {0};
	struct netd_compile *job;
	char err[256];

	assert_int_equal(netd_compile_start2(&d, strdup(text), extra ? strdup(extra) : NULL, uid, done_cb, &o, &job, err,
	                                     sizeof err), 0);
	assert_int_equal(o.calls, 0); /* never from within start, a cached one neither */
	run_until(&o);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.r, 0);
	assert_non_null(o.res.policy);
	assert_non_null(o.res.json);
	assert_string_equal(o.res.client, text);
	drain();
	return o;
}

static struct outcome compile_now(const char *text, const char *extra) { return compile_as(text, extra, 0); }

static enum policy_verdict verdict(const struct outcome *o, const char *host)
{
	struct policy_decision dec;

	policy_decide(o->res.policy, host, 443, 0, &dec);
	return dec.verdict;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	assert_non_null(f = fopen(p, "w"));
	fputs(text, f);
	fclose(f);
}

static const char *reg = "{ \"allow\": [\"registry.test\"] }";

static void test_cache_same_input_same_object(void **state)
{
	struct outcome a = compile_now(reg, NULL), b = compile_now(reg, NULL);
	struct outcome c = compile_now("{ \"allow\": [\"registry.tesu\"] }", NULL); /* one byte */
	struct outcome e = compile_now(reg, "{ \"allow\": [\"other.test\"] }"); /* live rules beside it */
	struct outcome e2 = compile_now(reg, "{ \"allow\": [\"other.test\"] }");

	assert_ptr_equal(a.res.policy, b.res.policy); /* kept: no compile */
	assert_string_equal(a.res.json, b.res.json);
	assert_ptr_not_equal(a.res.json, b.res.json); /* each caller owns its copy */
	assert_ptr_not_equal(c.res.policy, a.res.policy);
	assert_int_equal(verdict(&c, "registry.test"), POLICY_DENY);
	assert_int_equal(verdict(&c, "registry.tesu"), POLICY_ALLOW);
	assert_ptr_not_equal(e.res.policy, a.res.policy);
	assert_int_equal(verdict(&e, "other.test"), POLICY_ALLOW);
	assert_int_equal(verdict(&a, "other.test"), POLICY_DENY);
	assert_ptr_equal(e2.res.policy, e.res.policy);
	assert_null(a.res.extra);
	assert_string_equal(e2.res.extra, "{ \"allow\": [\"other.test\"] }");
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	netd_compiled_clear(&c.res);
	netd_compiled_clear(&e.res);
	netd_compiled_clear(&e2.res);
}

/* Kept per user: another uid's session of the same text compiles anew (a hit, a faster setup, would tell
 * it that such a session ran recently); the same uid's gets the kept object. */
static void test_cache_per_uid(void **state)
{
	struct outcome a = compile_as(reg, NULL, 1000), b = compile_as(reg, NULL, 1001), c = compile_as(reg, NULL, 1000);

	assert_ptr_not_equal(a.res.policy, b.res.policy);
	assert_ptr_equal(a.res.policy, c.res.policy);
	assert_int_equal(verdict(&b, "registry.test"), POLICY_ALLOW);
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	netd_compiled_clear(&c.res);
}

/* A launcher's text with a credential: the serialised form, with the secret it read as its user (here
 * from this test's environment), as sandbox/net.c sends it. malloced. */
static char *launcher_compiled(const char *text)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy *p;
	char *json;

	assert_non_null(b);
	assert_int_equal(policy_builder_add_json(b, POLICY_LAYER_USER, "launcher", text, strlen(text), &pe), 0);
	assert_non_null(p = policy_builder_compile(b, &pe));
	assert_non_null(json = policy_serialize(p));
	policy_unref(p);
	policy_builder_free(b);
	return json;
}

static const char *cred_env = "{ \"allow\": [\"api.test\"], \"inspect\": [{\"host\": \"api.test\", \"credential\": "
                              "{\"header\": \"Authorization: Bearer {secret}\", \"secret_env\": \"HOME\"}}] }";

/* A policy with HTTPS inspection's credentials is never kept: its secret must not outlive its session. */
static void test_cache_never_keeps_credentials(void **state)
{
	char *cred = launcher_compiled(cred_env);
	struct outcome a = compile_now(cred, NULL), b = compile_now(cred, NULL);

	assert_true(policy_credential_count(a.res.policy) > 0);
	assert_ptr_not_equal(a.res.policy, b.res.policy);
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	free(cred);
}

/* sluiced (root) never reads a credential's secret from its own environment or files for a client: the
 * client's text must carry the secret its launcher read (the fifth review: a local user named root's
 * files and had their first line injected into requests to a host of its own). */
static void test_refuses_secret_reads(void **state)
{
	char file[128], text[512];
	const char *extra = "{ \"inspect\": [{\"host\": \"api.test\", \"credential\": {\"header\": \"X-A: {secret}\", "
	                    "\"secret_env\": \"HOME\"}}] }";
	FILE *f;

	snprintf(file, sizeof file, "%s/root-only-token", orgdir);
	assert_non_null(f = fopen(file, "w"));
	fputs("root-secret\n", f);
	fclose(f);
	chmod(file, 0600);
	snprintf(text, sizeof text, "{ \"allow\": [\"api.test\"], \"inspect\": [{\"host\": \"api.test\", \"credential\": "
	         "{\"header\": \"X-A: {secret}\", \"secret_file\": \"%s\", \"placeholder_env\": \"T\"}}] }", file);
	for (int i = 0; i < 3; i++) {
		struct outcome o = {0};
		struct netd_compile *job;
		char err[256];

		assert_int_equal(netd_compile_start2(&d, strdup(i == 0 ? text : i == 1 ? cred_env : reg),
		                                     i == 2 ? strdup(extra) : NULL, 1000, done_cb, &o, &job, err, sizeof err),
		                 0);
		run_until(&o);
		assert_int_equal(o.calls, 1);
		assert_int_equal(o.r, -EINVAL);
		assert_null(o.res.policy);
		assert_non_null(strstr(o.err, "sluiced does not read"));
	}
	drain();
}

/* The organisation layer is read from files: a change there is never served the old compile. */
static void test_cache_org_files_change(void **state)
{
	struct outcome a = compile_now(reg, NULL), b, c, e;
	char sub[128];

	assert_int_equal(verdict(&a, "registry.test"), POLICY_ALLOW);
	/* no SIGHUP: the file alone changes */
	write_file(orgdir, "policy.json", "{ \"deny\": [\"evil.test\", \"registry.test\"] }\n");
	b = compile_now(reg, NULL);
	assert_ptr_not_equal(b.res.policy, a.res.policy);
	assert_int_equal(verdict(&b, "registry.test"), POLICY_DENY);
	/* a file in policy.d, which did not exist when the cache was filled */
	write_file(orgdir, "policy.json", "{ \"deny\": [\"evil.test\"] }\n");
	c = compile_now(reg, NULL);
	assert_int_equal(verdict(&c, "registry.test"), POLICY_ALLOW);
	snprintf(sub, sizeof sub, "%s/policy.d", orgdir);
	assert_int_equal(mkdir(sub, 0755), 0);
	write_file(sub, "10-deny.json", "{ \"deny\": [\"registry.test\"] }\n");
	e = compile_now(reg, NULL);
	assert_ptr_not_equal(e.res.policy, c.res.policy);
	assert_int_equal(verdict(&e, "registry.test"), POLICY_DENY);
	netd_compiled_clear(&e.res);
	/* and a change inside policy.d, watched from now on */
	write_file(sub, "10-deny.json", "{ \"deny\": [\"other.test\"] }\n");
	e = compile_now(reg, NULL);
	assert_int_equal(verdict(&e, "registry.test"), POLICY_ALLOW);
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	netd_compiled_clear(&c.res);
	netd_compiled_clear(&e.res);
}

/* SIGHUP (netd_reload_org bumps org_gen): compiled anew even though no file changed. */
static void test_cache_reload(void **state)
{
	struct outcome a = compile_now(reg, NULL), b, c;

	d.org_gen++;
	b = compile_now(reg, NULL);
	assert_ptr_not_equal(b.res.policy, a.res.policy);
	c = compile_now(reg, NULL);
	assert_ptr_equal(c.res.policy, b.res.policy); /* and kept again under the new layer */
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	netd_compiled_clear(&c.res);
}

/* A --sysconfdir that does not exist yet: its parent is watched, and the directory's arrival counts. */
static void test_cache_missing_sysconfdir(void **state)
{
	struct outcome a, b, c;
	char dir[128];

	snprintf(dir, sizeof dir, "%s/etc", orgdir);
	snprintf(d.cfg.sysconfdir, sizeof d.cfg.sysconfdir, "%s", dir);
	a = compile_now(reg, NULL);
	b = compile_now(reg, NULL);
	assert_ptr_equal(a.res.policy, b.res.policy);
	assert_int_equal(mkdir(dir, 0755), 0);
	write_file(dir, "policy.json", "{ \"deny\": [\"registry.test\"] }\n");
	c = compile_now(reg, NULL);
	assert_int_equal(verdict(&c, "registry.test"), POLICY_DENY);
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	netd_compiled_clear(&c.res);
}

/* sluiced loads the organisation layer only: a $XDG_CONFIG_HOME or $HOME in its own environment is not a
 * user layer of its clients' sessions (it was: root's ~/.config/sluice/policy.json, or whatever the
 * shell that started sluiced pointed XDG_CONFIG_HOME at, joined every session). The cache still works. */
static void test_org_layer_only(void **state)
{
	char xdg[64], sub[128], cmd[128];
	const char *home = getenv("HOME");
	char *saved_home = home ? strdup(home) : NULL;
	struct outcome a, b, c;

	snprintf(xdg, sizeof xdg, "/tmp/sluice-xdg.XXXXXX");
	assert_non_null(mkdtemp(xdg));
	snprintf(sub, sizeof sub, "%s/sluice", xdg);
	assert_int_equal(mkdir(sub, 0755), 0);
	write_file(sub, "policy.json", "{ \"deny\": [\"registry.test\"] }\n");
	snprintf(sub, sizeof sub, "%s/.config", xdg);
	assert_int_equal(mkdir(sub, 0755), 0);
	snprintf(sub, sizeof sub, "%s/.config/sluice", xdg);
	assert_int_equal(mkdir(sub, 0755), 0);
	write_file(sub, "policy.json", "{ \"deny\": [\"registry.test\"] }\n");
	assert_int_equal(setenv("XDG_CONFIG_HOME", xdg, 1), 0);
	a = compile_now(reg, NULL);
	assert_int_equal(verdict(&a, "registry.test"), POLICY_ALLOW);
	unsetenv("XDG_CONFIG_HOME");
	assert_int_equal(setenv("HOME", xdg, 1), 0);
	b = compile_now(reg, NULL);
	assert_int_equal(verdict(&b, "registry.test"), POLICY_ALLOW);
	c = compile_now(reg, NULL);
	assert_ptr_equal(b.res.policy, c.res.policy);
	if (saved_home)
		assert_int_equal(setenv("HOME", saved_home, 1), 0);
	else
		unsetenv("HOME");
	free(saved_home);
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	netd_compiled_clear(&c.res);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", xdg);
	assert_int_equal(system(cmd), 0);
}

/* The organisation's policy.json as a hard link of a file elsewhere, changed through that other name: no
 * event in --sysconfdir, but one on the file itself. */
static void test_cache_hard_link(void **state)
{
	char other[64], path[128], org[128], cmd[128];
	struct outcome a, b, c;

	snprintf(other, sizeof other, "/tmp/sluice-other.XXXXXX");
	assert_non_null(mkdtemp(other));
	write_file(other, "org.json", "{ \"deny\": [\"evil.test\"] }\n");
	snprintf(path, sizeof path, "%s/org.json", other);
	snprintf(org, sizeof org, "%s/policy.json", orgdir);
	assert_int_equal(unlink(org), 0);
	assert_int_equal(link(path, org), 0);
	a = compile_now(reg, NULL);
	b = compile_now(reg, NULL);
	assert_ptr_equal(a.res.policy, b.res.policy);
	write_file(other, "org.json", "{ \"deny\": [\"registry.test\"] }\n"); /* the same inode */
	c = compile_now(reg, NULL);
	assert_int_equal(verdict(&c, "registry.test"), POLICY_DENY);
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
	netd_compiled_clear(&c.res);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", other);
	assert_int_equal(system(cmd), 0);
}

/* A symbolic link could be pointed elsewhere without an event: no cache through one. */
static void test_cache_off_through_a_link(void **state)
{
	struct outcome a, b;
	char link[128];

	snprintf(link, sizeof link, "%s/link", orgdir);
	assert_int_equal(symlink(orgdir, link), 0);
	snprintf(d.cfg.sysconfdir, sizeof d.cfg.sysconfdir, "%s", link);
	a = compile_now(reg, NULL);
	b = compile_now(reg, NULL);
	assert_ptr_not_equal(a.res.policy, b.res.policy);
	assert_int_equal(verdict(&b, "evil.test"), POLICY_DENY); /* read through the link all the same */
	netd_compiled_clear(&a.res);
	netd_compiled_clear(&b.res);
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
	        cmocka_unit_test_setup_teardown(test_cache_same_input_same_object, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cache_per_uid, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cache_never_keeps_credentials, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cache_org_files_change, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cache_reload, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cache_missing_sysconfdir, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_refuses_secret_reads, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cache_off_through_a_link, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_org_layer_only, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_cache_hard_link, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
