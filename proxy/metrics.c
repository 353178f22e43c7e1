/* Counting audit records into the engine's metrics (metrics.h). */
#include "metrics.h"

#include <stdbool.h>
#include <string.h>

#include "audit.h"

static const char *const proto_names[PROXY_MET_NPROTO] = {"http",   "connect", "tls-sni", "dns",
							   "direct", "drop",    "socks5",  "other"};
static const char *const verdict_names[PROXY_MET_NVERDICT] = {"allow", "deny", "ask"};
static const char *const reason_names[PROXY_MET_NREASON] = {"rule", "no_rule"};

const char *proxy_met_proto_name(enum proxy_met_proto p)
{
	return (unsigned)p < PROXY_MET_NPROTO ? proto_names[p] : "other";
}

const char *proxy_met_verdict_name(enum proxy_met_verdict v)
{
	return (unsigned)v < PROXY_MET_NVERDICT ? verdict_names[v] : "deny";
}

const char *proxy_met_reason_name(enum proxy_met_reason r)
{
	return (unsigned)r < PROXY_MET_NREASON ? reason_names[r] : "no_rule";
}

static enum proxy_met_proto proto_of(const char *s)
{
	for (unsigned i = 0; s && i < PROXY_MET_OTHER; i++)
		if (strcmp(s, proto_names[i]) == 0)
			return (enum proxy_met_proto)i;
	return PROXY_MET_OTHER;
}

static enum proxy_met_verdict verdict_of(const char *s)
{
	if (s && strcmp(s, "allow") == 0)
		return PROXY_MET_ALLOW;
	if (s && strcmp(s, "ask") == 0)
		return PROXY_MET_ASK;
	return PROXY_MET_DENY;
}

void proxy_metrics_note(struct proxy_metrics *m, const struct audit_record *r, int write_rc)
{
	bool close = r->event && strcmp(r->event, AUDIT_EVENT_CLOSE) == 0;
	bool decision = r->event && strcmp(r->event, AUDIT_EVENT_DECISION) == 0;
	enum proxy_met_proto p = proto_of(r->protocol);
	enum proxy_met_verdict v = verdict_of(r->decision);
	bool tunnel = p == PROXY_MET_CONNECT || p == PROXY_MET_TLS_SNI || p == PROXY_MET_SOCKS5;

	if (write_rc != 0)
		m->audit_write_errors++;
	/* a close record ends an exchange whose decision was counted already: bytes only */
	if (close || !decision) {
		m->bytes_up += r->bytes_out;
		m->bytes_down += r->bytes_in;
	}
	if (close) {
		if (tunnel && v == PROXY_MET_ALLOW && m->tunnels_open > 0)
			m->tunnels_open--;
		return;
	}
	m->decisions[p][v][r->rule && r->rule[0] ? PROXY_MET_RULE : PROXY_MET_NO_RULE]++;
	if (p == PROXY_MET_DNS)
		m->dns_queries[v]++;
	if (decision && tunnel && v == PROXY_MET_ALLOW)
		m->tunnels_open++;
}
