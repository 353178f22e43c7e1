/* The engine's counters for Prometheus (sluiced serves them, netd/metrics.c): every audit record the
 * engine writes is counted once, here, by its protocol, verdict and a bounded reason (no per-host or
 * per-session label), plus bytes each way, DNS queries by verdict, open tunnels and audit write errors.
 * The struct holds only uint64_t, so it crosses the engine protocol as one fixed-size byte string that
 * sluiced checks for its exact length. */
#pragma once

#include <stdint.h>

struct audit_record;

enum proxy_met_proto {
	PROXY_MET_HTTP = 0,
	PROXY_MET_CONNECT,
	PROXY_MET_TLS_SNI,
	PROXY_MET_DNS,
	PROXY_MET_DIRECT,
	PROXY_MET_DROP,
	PROXY_MET_SOCKS5, /* the SOCKS5 front (issue 20) */
	PROXY_MET_OTHER,
	PROXY_MET_NPROTO,
};
enum proxy_met_verdict { PROXY_MET_ALLOW = 0, PROXY_MET_DENY, PROXY_MET_ASK, PROXY_MET_NVERDICT };
/* why: a rule decided (allow rule, deny rule, ceiling: the record names it), or none did (default deny,
 * a limit, a malformed request, an upstream or audit failure) */
enum proxy_met_reason { PROXY_MET_RULE = 0, PROXY_MET_NO_RULE, PROXY_MET_NREASON };

struct proxy_metrics {
	uint64_t decisions[PROXY_MET_NPROTO][PROXY_MET_NVERDICT][PROXY_MET_NREASON];
	uint64_t dns_queries[PROXY_MET_NVERDICT];
	uint64_t bytes_up;           /* session -> internet, counted when an exchange closes */
	uint64_t bytes_down;         /* internet -> session */
	uint64_t tunnels_open;       /* CONNECT, transparent TLS and SOCKS5 exchanges allowed and not closed yet */
	uint64_t audit_write_errors; /* records whose write failed (queued for retry, or lost) */
	uint64_t audit_lost;         /* records lost for good (queue full) */
};

const char *proxy_met_proto_name(enum proxy_met_proto p);
const char *proxy_met_verdict_name(enum proxy_met_verdict v);
const char *proxy_met_reason_name(enum proxy_met_reason r);

/* Counts record r, whose audit_log_write() returned write_rc. */
void proxy_metrics_note(struct proxy_metrics *m, const struct audit_record *r, int write_rc);
