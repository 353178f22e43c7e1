/* sluiced's metrics (Prometheus text exposition): its own counters (sessions, setup and teardown
 * latency, held requests) and the proxy engine's (proxy/metrics.h), which it asks for every second over
 * the engine protocol (METRICS -> METRICS_DATA). Served on RUN_DIR/metrics.sock (HTTP, metrics_http.c),
 * optionally on a loopback TCP address, and through the control socket (METRICS, `sluicectl metrics`).
 * Internal to netd/; all functions are no-ops while metrics are off (embedded mode). */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct netd;
struct ipc_msg;

/* Starts counting and serving: the engine poll timer, RUN_DIR/metrics.sock, and tcp ("ADDR:PORT", a
 * loopback address only; NULL = none). 0 or -errno with a one-line message in err. */
int netd_metrics_start(struct netd *d, const char *tcp, char *err, size_t errlen);
void netd_metrics_free(struct netd *d);

/* Monotonic seconds, for latencies. */
double netd_metrics_now(void);
void netd_metrics_session_ready(struct netd *d, double setup_seconds); /* wired and served by the engine */
void netd_metrics_session_failed(struct netd *d);                      /* refused or failed to set up */
void netd_metrics_session_closed(struct netd *d, double teardown_seconds);
/* METRICS_DATA from the engine (checked for its exact size here). */
void netd_metrics_engine_data(struct netd *d, const struct ipc_msg *m);
/* The exposition text now (owned by the caller), or NULL when out of memory or metrics are off. */
char *netd_metrics_render(struct netd *d);
/* Serving over HTTP (metrics_http.c): the Unix socket and an optional TCP address; 0 or -errno. */
struct netd_metrics_http;
int netd_metrics_http_start(struct netd *d, struct netd_metrics_http **out, const char *tcp, char *err,
			    size_t errlen);
void netd_metrics_http_free(struct netd_metrics_http *h);
