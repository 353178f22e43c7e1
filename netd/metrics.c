/* sluiced's counters and their Prometheus text (netd_metrics.h). Label sets are bounded: protocol, verdict,
 * reason and direction take a handful of fixed values; there is no per-host, per-session or per-user
 * label. */
#include "netd_metrics.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "audit_ship.h"
#include "ipc.h"
#include "metrics.h" /* proxy/metrics.h: struct proxy_metrics */
#include "netd.h"

/* Latency histogram bounds (seconds): setup is milliseconds (compile, nft, veth, engine ack), more under
 * load or with large policies (docs/netd.md); teardown is the synchronous part (the reaper deletes links). */
static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBUCKETS (sizeof buckets / sizeof buckets[0])

struct histogram {
	uint64_t le[NBUCKETS]; /* cumulative at render time; here per bucket */
	uint64_t count;
	double sum;
};

struct netd_metrics {
	uint64_t sessions_created, sessions_failed, sessions_ended;
	struct histogram setup, teardown;
	struct proxy_metrics engine;   /* the engine's last report (counters of the running engine) */
	struct proxy_metrics retired;  /* summed counters of engines that died (so totals never go back) */
	uint64_t engine_reports;
	struct event *poll;            /* owned: asks the engine every second */
	struct netd_metrics_http *http; /* owned */
};

double netd_metrics_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void observe(struct histogram *h, double v)
{
	for (size_t i = 0; i < NBUCKETS; i++)
		if (v <= buckets[i]) {
			h->le[i]++;
			break;
		}
	h->count++;
	h->sum += v;
}

void netd_metrics_session_ready(struct netd *d, double setup_seconds)
{
	if (!d->metrics)
		return;
	d->metrics->sessions_created++;
	observe(&d->metrics->setup, setup_seconds);
}

void netd_metrics_session_failed(struct netd *d)
{
	if (d->metrics)
		d->metrics->sessions_failed++;
}

void netd_metrics_session_closed(struct netd *d, double teardown_seconds)
{
	if (!d->metrics)
		return;
	d->metrics->sessions_ended++;
	observe(&d->metrics->teardown, teardown_seconds);
}

static void add_into(struct proxy_metrics *dst, const struct proxy_metrics *src)
{
	uint64_t *a = (uint64_t *)dst;
	const uint64_t *b = (const uint64_t *)src;

	/* all members are uint64_t (metrics.h); tunnels_open is a gauge and does not carry over */
	for (size_t i = 0; i < sizeof *dst / sizeof(uint64_t); i++)
		a[i] += b[i];
	dst->tunnels_open = 0;
}

/* Trust boundary: the engine is unprivileged and may be subverted; what it reports is only counted
 * and printed as numbers, and a report of any other size is refused. A counter that goes back means a
 * new engine (the old one died): the old one's totals are kept, so the exposed counters only grow. */
void netd_metrics_engine_data(struct netd *d, const struct ipc_msg *m)
{
	struct netd_metrics *mt = d->metrics;
	struct proxy_metrics pm;
	size_t len = 0;
	const void *p = ipc_get_bytes(m, NETD_A_METRICS, &len);

	if (!mt)
		return;
	if (!p || len != sizeof pm) {
		log_warnx("engine: a metrics report of %zu bytes (wanted %zu); ignored", len, sizeof pm);
		return;
	}
	memcpy(&pm, p, sizeof pm);
	{
		const uint64_t *now = (const uint64_t *)&pm, *was = (const uint64_t *)&mt->engine;
		size_t gauge = offsetof(struct proxy_metrics, tunnels_open) / sizeof(uint64_t);

		for (size_t i = 0; i < sizeof pm / sizeof(uint64_t); i++)
			if (i != gauge && now[i] < was[i]) {
				add_into(&mt->retired, &mt->engine);
				break;
			}
	}
	mt->engine = pm;
	mt->engine_reports++;
}

static void poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd *d = arg;

	(void)fd;
	(void)what;
	netd_engine_request_metrics(d);
}

int netd_metrics_start(struct netd *d, const char *tcp, char *err, size_t errlen)
{
	struct netd_metrics *mt = calloc(1, sizeof *mt);
	struct timeval sec = {1, 0};
	int r;

	if (!mt) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	d->metrics = mt;
	mt->poll = event_new(d->base, -1, EV_PERSIST, poll_cb, d);
	if (!mt->poll || event_add(mt->poll, &sec) < 0) {
		snprintf(err, errlen, "metrics: cannot start the engine poll timer");
		netd_metrics_free(d);
		return -ENOMEM;
	}
	if ((r = netd_metrics_http_start(d, &mt->http, tcp, err, errlen)) < 0) {
		netd_metrics_free(d);
		return r;
	}
	netd_engine_request_metrics(d);
	return 0;
}

void netd_metrics_free(struct netd *d)
{
	struct netd_metrics *mt = d->metrics;

	if (!mt)
		return;
	netd_metrics_http_free(mt->http);
	if (mt->poll)
		event_free(mt->poll);
	free(mt);
	d->metrics = NULL;
}

static void help(struct evbuffer *b, const char *name, const char *type, const char *text)
{
	evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

static void histogram(struct evbuffer *b, const char *name, const char *text, const struct histogram *h)
{
	uint64_t cum = 0;

	help(b, name, "histogram", text);
	for (size_t i = 0; i < NBUCKETS; i++) {
		cum += h->le[i];
		evbuffer_add_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, buckets[i], (unsigned long long)cum);
	}
	evbuffer_add_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
			    (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
}

char *netd_metrics_render(struct netd *d)
{
	struct netd_metrics *mt = d->metrics;
	struct evbuffer *b;
	struct proxy_metrics t;
	char *out = NULL;
	size_t n;

	if (!mt || !(b = evbuffer_new()))
		return NULL;
	t = mt->retired;
	add_into(&t, &mt->engine);
	t.tunnels_open = mt->engine.tunnels_open;

	help(b, "sluice_sessions_live", "gauge", "Sessions wired now.");
	evbuffer_add_printf(b, "sluice_sessions_live %u\n", d->nsessions);
	help(b, "sluice_sessions_created_total", "counter", "Sessions wired and served by the engine.");
	evbuffer_add_printf(b, "sluice_sessions_created_total %llu\n", (unsigned long long)mt->sessions_created);
	help(b, "sluice_sessions_failed_total", "counter", "Session requests refused or failed during setup.");
	evbuffer_add_printf(b, "sluice_sessions_failed_total %llu\n", (unsigned long long)mt->sessions_failed);
	help(b, "sluice_sessions_ended_total", "counter", "Sessions torn down.");
	evbuffer_add_printf(b, "sluice_sessions_ended_total %llu\n", (unsigned long long)mt->sessions_ended);
	histogram(b, "sluice_session_setup_seconds", "From the request to the engine serving the session.", &mt->setup);
	histogram(b, "sluice_session_teardown_seconds", "Ending a session (the link is deleted after, by the reaper).",
		  &mt->teardown);
	help(b, "sluice_ask_queue", "gauge", "Requests held for an operator's verdict.");
	evbuffer_add_printf(b, "sluice_ask_queue %u\n", d->nasks);
	help(b, "sluice_engine_up", "gauge", "1 while the proxy engine runs.");
	evbuffer_add_printf(b, "sluice_engine_up %d\n", netd_engine_running(d) ? 1 : 0);
	{
		uint64_t stuck;
		size_t queued;

		netd_engine_queue_counts(d, &queued, &stuck);
		help(b, "sluice_engine_queued_messages", "gauge",
		     "Messages sluiced's queue holds for the engine (its socket was full).");
		evbuffer_add_printf(b, "sluice_engine_queued_messages %zu\n", queued);
		help(b, "sluice_engine_stuck_restarts_total", "counter",
		     "Engines killed and restarted for taking no message from sluiced for 10 s.");
		evbuffer_add_printf(b, "sluice_engine_stuck_restarts_total %llu\n", (unsigned long long)stuck);
	}

	help(b, "sluice_decisions_total", "counter", "Egress decisions by protocol, verdict and whether a rule decided.");
	for (unsigned p = 0; p < PROXY_MET_NPROTO; p++)
		for (unsigned v = 0; v < PROXY_MET_NVERDICT; v++)
			for (unsigned r = 0; r < PROXY_MET_NREASON; r++)
				evbuffer_add_printf(b, "sluice_decisions_total{protocol=\"%s\",verdict=\"%s\",reason=\"%s\"} %llu\n",
						    proxy_met_proto_name(p), proxy_met_verdict_name(v), proxy_met_reason_name(r),
						    (unsigned long long)t.decisions[p][v][r]);
	help(b, "sluice_dns_queries_total", "counter", "DNS queries of sessions by verdict.");
	for (unsigned v = 0; v < PROXY_MET_NVERDICT; v++)
		evbuffer_add_printf(b, "sluice_dns_queries_total{verdict=\"%s\"} %llu\n", proxy_met_verdict_name(v),
				    (unsigned long long)t.dns_queries[v]);
	help(b, "sluice_bytes_total", "counter", "Bytes relayed, up (session to internet) and down.");
	evbuffer_add_printf(b, "sluice_bytes_total{direction=\"up\"} %llu\nsluice_bytes_total{direction=\"down\"} %llu\n",
			    (unsigned long long)t.bytes_up, (unsigned long long)t.bytes_down);
	help(b, "sluice_tunnels_open", "gauge", "CONNECT, transparent TLS and SOCKS5 exchanges open now.");
	evbuffer_add_printf(b, "sluice_tunnels_open %llu\n", (unsigned long long)t.tunnels_open);
	help(b, "sluice_audit_write_errors_total", "counter", "Audit records whose write failed (retried, or lost).");
	evbuffer_add_printf(b, "sluice_audit_write_errors_total %llu\n", (unsigned long long)t.audit_write_errors);
	help(b, "sluice_audit_records_lost_total", "counter", "Audit records lost for good (retry queue full).");
	evbuffer_add_printf(b, "sluice_audit_records_lost_total %llu\n", (unsigned long long)t.audit_lost);

	if (d->ship) {
		uint64_t sent, errors;

		netd_ship_counts(d->ship, &sent, &errors);
		help(b, "sluice_audit_shipped_total", "counter", "Audit records sent to syslog or journald (--audit-ship).");
		evbuffer_add_printf(b, "sluice_audit_shipped_total %llu\n", (unsigned long long)sent);
		help(b, "sluice_audit_ship_errors_total", "counter", "Audit records that could not be shipped (the file has them).");
		evbuffer_add_printf(b, "sluice_audit_ship_errors_total %llu\n", (unsigned long long)errors);
	}
	n = evbuffer_get_length(b);
	if ((out = malloc(n + 1)) != NULL) {
		evbuffer_remove(b, out, n);
		out[n] = '\0';
	}
	evbuffer_free(b);
	return out;
}
