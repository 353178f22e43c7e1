/* sluice proxy engine: the in-process API netd (and the standalone sluice-proxy) drive.
 *
 * One engine per process serves many sessions on a libevent base: an HTTP/1.1 forward proxy
 * (absolute-form requests and CONNECT tunnels) and a DNS proxy (UDP and TCP). A connection's
 * session is found by its source address (never by a token the sandbox could read); every decision
 * is made by the session's policy and written to the audit log (one JSON object per line).
 *
 * Trust boundary: everything that arrives on a listener comes from a sandbox and is hostile.
 * The engine never exits the process; errors are returned as 0 / -errno.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

struct event_base;
struct policy;

struct proxy_engine; /* one per process; serves many sessions */

/* Interactive approval (policy option "ask", docs/proxy.md): a request the policy would deny only by
 * default (no rule matched) is held, and the engine tells its parent, which lets an operator decide
 * (proxy_engine_ask_decide). `done` is false when an ask starts and true when it ends (decided, timed
 * out, or no request waits for it any more). All strings are borrowed for the call. */
struct proxy_ask_event {
	const char *ask_id; /* PROXY_ASK_ID_LEN hex digits, unique in the engine */
	const char *session_id;
	uid_t uid;            /* the session's */
	const char *protocol; /* "http" or "connect" */
	const char *method;
	const char *host; /* canonical */
	uint16_t port;
	unsigned timeout_s;
	bool done;
};
/* Returns 0, or -errno when the parent cannot be told (its channel is full and not drained: netd's
 * engine_child.c): a new ask is then not held but denied at once (nobody could approve it); the return of an
 * ended ask's event (done) is ignored. */
typedef int (*proxy_ask_notify_fn)(const struct proxy_ask_event *ev, void *arg);
#define PROXY_ASK_ID_LEN          8
#define PROXY_ASK_MAX_PER_SESSION 16 /* held host:port pairs per session; more are denied */

/* Direct mode (policy option "direct", docs/proxy.md): the DNS proxy learned that `addr` answers the
 * allowed name `host`, and the policy allows `proto` (TCP or UDP) to that name on `ports` (never 53, never
 * 80/443): the parent may let the session open such flows without the proxy for
 * ttl_s seconds. With `revoke` (the session's policy changed), flows of the session to addr on proto
 * ports[0] must end. All pointers borrowed for the
 * call. The parent must check everything again: the engine is less trusted than it. */
struct proxy_direct_event {
	const char *session_id;
	const char *host;
	const struct sockaddr *addr;
	uint8_t proto; /* enum policy_proto: IPPROTO_TCP or IPPROTO_UDP */
	const uint16_t *ports;
	size_t nports;
	uint32_t ttl_s;
	bool revoke;
	/* Nonzero: the DNS answer that taught the grant waits until the parent calls
	 * proxy_engine_direct_done(e, seq) once for each event with this seq (the grant is in place, or was
	 * refused), or PROXY_DIRECT_HOLD_MS passed, so that the client's first packet finds the flow open. */
	uint32_t seq;
};
/* Returns 0, or -errno when the parent cannot be told (-ENOBUFS: its channel is full and not drained, netd's
 * engine_child.c): the flows stay shut, the engine remembers no grant and its audit records of the grant
 * and of the DNS query say "direct flows not opened"; no proxy_engine_direct_done is awaited for it. A
 * revocation's return is ignored (the parent must always queue those). */
typedef int (*proxy_direct_notify_fn)(const struct proxy_direct_event *ev, void *arg);
#define PROXY_DIRECT_TTL_MIN         5    /* s: a TTL-0 answer still leaves the client time to connect */
#define PROXY_DIRECT_TTL_MAX         3600 /* s */
#define PROXY_DIRECT_HOLD_MS         250  /* longest a DNS answer waits for its direct grants */
#define PROXY_DIRECT_MAX_PER_SESSION 1024 /* (address, protocol, port) grants remembered per session */

struct proxy_config {
	const char *audit_path;               /* borrowed; append-only JSON lines; NULL with audit_fd */
	int audit_fd;                         /* or an already-open fd (-1 = none); engine takes ownership */
	struct sockaddr_storage upstream_dns; /* resolver the engine uses and relays allowed queries to */
	socklen_t upstream_dns_len;
	unsigned max_conns_per_session;                                  /* 0 = default */
	unsigned header_timeout_ms, idle_timeout_ms, connect_timeout_ms; /* 0 = defaults */
	unsigned dns_cache_entries;           /* DNS answers the DNS proxy keeps (docs/proxy.md); 0 = no cache */
	proxy_ask_notify_fn ask_notify;       /* NULL: nobody can approve, so "ask" decisions are denials */
	void *ask_arg;                        /* borrowed, passed to ask_notify */
	proxy_direct_notify_fn direct_notify; /* NULL: no direct flows (nobody can open them) */
	void *direct_arg;                     /* borrowed, passed to direct_notify */
	struct proxy_parent *parent;          /* a parent proxy (parent.h) the engine takes (also on error), or NULL */
};

/* Defaults for the 0 values above (see docs/proxy.md). */
#define PROXY_DEFAULT_MAX_CONNS          512
#define PROXY_DEFAULT_HEADER_TIMEOUT_MS  10000
#define PROXY_DEFAULT_IDLE_TIMEOUT_MS    300000
#define PROXY_DEFAULT_CONNECT_TIMEOUT_MS 10000

enum proxy_listener_kind {
	PROXY_LISTEN_HTTP,
	PROXY_LISTEN_DNS_UDP,
	PROXY_LISTEN_DNS_TCP,
	PROXY_LISTEN_TRANSPARENT,
	PROXY_LISTEN_SOCKS5,
};

/* The event loop the engine (and sluiced) runs on, or NULL. Its timers are measured from the moment they are
 * armed: libevent's cached time (the time its last wait for events returned) is off, because a process
 * stopped in the middle of a loop iteration (a loaded or paused machine, SIGSTOP) would otherwise arm every
 * timer of the rest of that iteration from the time before the stall, and they would fire as soon as it
 * runs again, early by the length of the stall (docs/reliability.md, finding 7). */
struct event_base *proxy_event_base_new(void);

/* Creates an engine on `base` (borrowed; must outlive the engine). Opens (or adopts) the audit log.
 * Returns NULL with a one-line reason in err on failure; cfg->audit_fd is closed in that case too. */
struct proxy_engine *proxy_engine_new(struct event_base *base, const struct proxy_config *cfg, char *err,
                                      size_t errlen);
/* Closes every connection (writing their audit records), listener and the log. NULL is a no-op. */
void proxy_engine_free(struct proxy_engine *e);

/* Takes ownership of fd (already bound; listening for TCP kinds), also on error.
 * PROXY_LISTEN_TRANSPARENT serves connections nftables redirected (transparent mode, docs/proxy.md). */
int proxy_engine_add_listener(struct proxy_engine *e, int fd, enum proxy_listener_kind kind);

struct proxy_session_info {
	const char *id; /* borrowed; copied */
	uid_t uid;
	const char *command;                  /* borrowed; copied */
	struct sockaddr_storage addr4, addr6; /* session's own addresses (ss_family 0 = none) */
	struct sockaddr_storage gw4, gw6;     /* gateway addresses the session must be talking to */
	struct policy *policy;                /* borrowed; the engine takes its own policy_ref */
	uint32_t policy_version;              /* the parent's count of the session's policies (audit field
	                                       * policy_version; 0 = not counted, written as null) */
	/* HTTPS inspection's CA (mitm_ca.h), PEM, borrowed; NULL when the policy inspects nothing. The
	 * session is refused when its policy inspects a host and no CA comes with it. */
	const char *ca_key_pem, *ca_cert_pem;
};

/* Registers a session. -EEXIST if the id or one of its addresses is already registered, -EINVAL
 * for a session with no address or no policy. */
int proxy_engine_session_add(struct proxy_engine *e, const struct proxy_session_info *s);
/* Replaces the session's policy (the parent compiled it again): later decisions use it; tunnels whose
 * destination it no longer allows end; requests held for approval are decided again (still undecided:
 * held; allowed: released as if approved; denied: refused, like an inspected one in any case); direct-mode
 * grants it no longer allows are revoked (direct_notify with revoke), those it still allows are offered
 * again for their remaining time. -ENOENT if unknown. */
int proxy_engine_session_set_policy(struct proxy_engine *e, const char *id, struct policy *p);
/* The same, also naming the policy's version for the audit log (records decided under it carry it). */
int proxy_engine_session_set_policy_version(struct proxy_engine *e, const char *id, struct policy *p,
                                            uint32_t version);
/* Closes the session's connections (writing their audit records) and forgets it; -ENOENT if unknown. */
int proxy_engine_session_remove(struct proxy_engine *e, const char *id);
/* Writes the audit records still batched in memory now (after a removal, say, so that the caller may
 * read the session's records). 0, or -EIO when the log cannot be written. */
int proxy_engine_flush_audit(struct proxy_engine *e);

/* netd reports a packet nftables dropped (NFLOG) so it lands in the same audit log. src and dst
 * carry the ports (0 for protocols without ports); ipproto is IPPROTO_TCP/UDP/ICMP... */
int proxy_engine_audit_drop(struct proxy_engine *e, const struct sockaddr *src, const struct sockaddr *dst,
                            int ipproto);

/* netd's count of the dropped packets it did not report one by one since its last summary (netd/nflog.c):
 * over its rate limit, lost by the kernel, not taken by the engine's socket. One record, protocol
 * "drop-summary" (docs/audit-log.md), of session id (the one whose interface they came in on) or, id NULL
 * or unknown, of none. 0, -EINVAL when all are 0, or audit_log_write's -errno (the record is queued, or
 * lost and counted, as any other). */
/* Direct mode: the parent ended n direct flows of session id itself (the engine that granted them died, and
 * the session's policy changed since): one `direct` deny record says so. 0, -ENOENT, -EINVAL (n 0). */
int proxy_engine_direct_ended(struct proxy_engine *e, const char *id, uint32_t n);
int proxy_engine_audit_drop_summary(struct proxy_engine *e, const char *id, uint32_t over_rate, uint32_t lost,
                                    uint32_t unsent);

/* Reopens audit_path (SIGHUP, logrotate). On failure the old log stays in use and -errno is returned.
 * -EBADF when the log was given as an fd (use proxy_engine_replace_log_fd). */
/* The engine's counters now (metrics.h). */
struct proxy_metrics;
void proxy_engine_metrics(const struct proxy_engine *e, struct proxy_metrics *out);

int proxy_engine_reopen_log(struct proxy_engine *e);
/* Replaces the audit log with fd (takes ownership, also on error): for a privileged parent that
 * reopens the log on the engine's behalf after privileges were dropped. */
int proxy_engine_replace_log_fd(struct proxy_engine *e, int fd);

/* The parent's verdict on a held request (sluicectl approve|deny, by uid `by`): every request of the
 * session held for that host:port resumes (allow) or gets a 403 (deny), and the verdict applies to the
 * host:port for the rest of the session. -ENOENT when no such ask is pending (it timed out, or its
 * requests went away). */
int proxy_engine_ask_decide(struct proxy_engine *e, const char *ask_id, bool allow, uid_t by);
/* Direct mode: the parent has dealt with the direct_notify event(s) of `seq` (put the grant in place, or
 * refused it): the DNS answer held for them goes out once all have been dealt with. Unknown or late
 * seqs (the answer went at PROXY_DIRECT_HOLD_MS, or its session ended) are ignored. */
void proxy_engine_direct_done(struct proxy_engine *e, uint32_t seq);
/* A verdict given earlier (by uid `by`) on host:port of session id, restored after an engine restart:
 * it applies as if it had been given in this engine's life. -ENOENT for an unknown session. */
int proxy_engine_session_grant(struct proxy_engine *e, const char *id, const char *host, uint16_t port, bool allow,
                               uid_t by);
