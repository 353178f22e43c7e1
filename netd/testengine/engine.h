/* The proxy engine's in-process API as the BRIEF.md contract states it (proxy/engine.h is the real
 * one). netd compiles against this copy only while the engine is not on its branch, and then links
 * the test listener in testengine.c instead of the engine: see netd/meson.build. */
#pragma once

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

struct event_base;
struct policy;
struct proxy_engine;

struct proxy_config {
	const char *audit_path; /* borrowed; NULL with audit_fd */
	int audit_fd;           /* or an already-open fd (-1 = none); engine takes ownership */
	struct sockaddr_storage upstream_dns;
	socklen_t upstream_dns_len;
	unsigned max_conns_per_session;
	unsigned header_timeout_ms, idle_timeout_ms, connect_timeout_ms;
};

enum proxy_listener_kind {
	PROXY_LISTEN_HTTP,
	PROXY_LISTEN_DNS_UDP,
	PROXY_LISTEN_DNS_TCP,
	PROXY_LISTEN_TRANSPARENT,
};

struct proxy_engine *proxy_engine_new(struct event_base *base, const struct proxy_config *cfg, char *err,
				      size_t errlen);
void proxy_engine_free(struct proxy_engine *e);
int proxy_engine_add_listener(struct proxy_engine *e, int fd, enum proxy_listener_kind kind);

struct proxy_session_info {
	const char *id;
	uid_t uid;
	const char *command;
	struct sockaddr_storage addr4, addr6;
	struct sockaddr_storage gw4, gw6;
	struct policy *policy;
};

int proxy_engine_session_add(struct proxy_engine *e, const struct proxy_session_info *s);
int proxy_engine_session_remove(struct proxy_engine *e, const char *id);
int proxy_engine_flush_audit(struct proxy_engine *e); /* nothing is batched here: 0 */
int proxy_engine_audit_drop(struct proxy_engine *e, const struct sockaddr *src, const struct sockaddr *dst,
			    int ipproto);
int proxy_engine_reopen_log(struct proxy_engine *e);
int proxy_engine_replace_log_fd(struct proxy_engine *e, int fd);
struct proxy_metrics;
void proxy_engine_metrics(const struct proxy_engine *e, struct proxy_metrics *out);
