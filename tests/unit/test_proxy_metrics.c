/* Unit tests of the engine's record counting (proxy/metrics.c): each record counted once by protocol,
 * verdict and reason; bytes only from records that end an exchange; tunnels opened by an allowed CONNECT
 * or TLS decision and closed by its close record (never below zero); DNS by verdict; write errors; unknown
 * protocols and verdicts land in fixed buckets (bounded labels). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "audit.h"
#include "metrics.h"

static struct audit_record rec(const char *event, const char *proto, const char *decision, const char *rule)
{
	struct audit_record r;

	memset(&r, 0, sizeof r);
	r.event = event;
	r.protocol = proto;
	r.decision = decision;
	r.rule = rule;
	return r;
}

static void test_decisions(void **state)
{
	struct proxy_metrics m = {0};
	struct audit_record r = rec(AUDIT_EVENT_DECISION, "http", "allow", "p.json:1:2");

	(void)state;
	proxy_metrics_note(&m, &r, 0);
	r = rec(AUDIT_EVENT_CLOSE, "http", "allow", "p.json:1:2");
	r.bytes_out = 100;
	r.bytes_in = 2000;
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.decisions[PROXY_MET_HTTP][PROXY_MET_ALLOW][PROXY_MET_RULE], 1); /* the close is no decision */
	assert_int_equal(m.bytes_up, 100);
	assert_int_equal(m.bytes_down, 2000);

	r = rec(AUDIT_EVENT_COMPLETE, "http", "deny", NULL);
	r.bytes_out = 7;
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.decisions[PROXY_MET_HTTP][PROXY_MET_DENY][PROXY_MET_NO_RULE], 1);
	assert_int_equal(m.bytes_up, 107);
	r = rec(NULL, "http", "deny", ""); /* an old record without event: complete; empty rule: none */
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.decisions[PROXY_MET_HTTP][PROXY_MET_DENY][PROXY_MET_NO_RULE], 2);

	r = rec(AUDIT_EVENT_COMPLETE, "gopher", "maybe", NULL);
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.decisions[PROXY_MET_OTHER][PROXY_MET_DENY][PROXY_MET_NO_RULE], 1);
	r = rec(AUDIT_EVENT_COMPLETE, NULL, NULL, NULL);
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.decisions[PROXY_MET_OTHER][PROXY_MET_DENY][PROXY_MET_NO_RULE], 2);
	r = rec(AUDIT_EVENT_COMPLETE, "http", "ask", NULL);
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.decisions[PROXY_MET_HTTP][PROXY_MET_ASK][PROXY_MET_NO_RULE], 1);
}

static void test_dns_tunnels_errors(void **state)
{
	struct proxy_metrics m = {0};
	struct audit_record r;

	(void)state;
	r = rec(AUDIT_EVENT_COMPLETE, "dns", "allow", "p:1:1");
	proxy_metrics_note(&m, &r, 0);
	r = rec(AUDIT_EVENT_COMPLETE, "dns", "deny", NULL);
	proxy_metrics_note(&m, &r, -EIO);
	assert_int_equal(m.dns_queries[PROXY_MET_ALLOW], 1);
	assert_int_equal(m.dns_queries[PROXY_MET_DENY], 1);
	assert_int_equal(m.audit_write_errors, 1);

	r = rec(AUDIT_EVENT_DECISION, "connect", "allow", "p:1:1");
	proxy_metrics_note(&m, &r, 0);
	r = rec(AUDIT_EVENT_DECISION, "tls-sni", "allow", "p:1:1");
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.tunnels_open, 2);
	r = rec(AUDIT_EVENT_DECISION, "socks5", "allow", "p:1:1");
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.tunnels_open, 3);
	r = rec(AUDIT_EVENT_CLOSE, "socks5", "allow", "p:1:1");
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.tunnels_open, 2);
	r = rec(AUDIT_EVENT_COMPLETE, "connect", "deny", NULL); /* refused: never opened */
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.tunnels_open, 2);
	r = rec(AUDIT_EVENT_CLOSE, "connect", "allow", "p:1:1");
	proxy_metrics_note(&m, &r, 0);
	r = rec(AUDIT_EVENT_CLOSE, "tls-sni", "allow", "p:1:1");
	proxy_metrics_note(&m, &r, 0);
	assert_int_equal(m.tunnels_open, 0);
	proxy_metrics_note(&m, &r, 0); /* a stray close never goes below zero */
	assert_int_equal(m.tunnels_open, 0);
	assert_int_equal(m.decisions[PROXY_MET_CONNECT][PROXY_MET_ALLOW][PROXY_MET_RULE], 1);
	assert_int_equal(m.decisions[PROXY_MET_TLS_SNI][PROXY_MET_ALLOW][PROXY_MET_RULE], 1);
}

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(proxy_met_proto_name(PROXY_MET_TLS_SNI), "tls-sni");
	assert_string_equal(proxy_met_proto_name(PROXY_MET_SOCKS5), "socks5");
	assert_string_equal(proxy_met_proto_name((enum proxy_met_proto)99), "other");
	assert_string_equal(proxy_met_verdict_name(PROXY_MET_ASK), "ask");
	assert_string_equal(proxy_met_reason_name(PROXY_MET_NO_RULE), "no_rule");
	/* the struct crosses the engine protocol as bytes: only uint64_t members, no padding */
	assert_int_equal(sizeof(struct proxy_metrics) % sizeof(uint64_t), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decisions),
		cmocka_unit_test(test_dns_tunnels_errors),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
