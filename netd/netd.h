/* sluiced's core, shared by the daemon (sluiced.c) and the embedded helper a root launcher forks
 * when no daemon runs (embedded.c): configuration, the session table, session setup and teardown
 * in a fixed order, reconciliation, and the links to the proxy engine child and NFLOG. Internal to
 * netd/. */
#pragma once

#include <limits.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "nft.h"
#include "proto.h"

struct event_base;
struct event;
struct nl_sock;
struct netd_engine;
struct netd_nflog;
struct netd_reaper;
struct netd_conn;
struct netd_compiler;
struct netd_compile;
struct policy;

#define NETD_DEFAULT_RUN_DIR "/run/sluice"
#define NETD_DEFAULT_AUDIT_LOG "/var/log/sluice/audit.log"
#define NETD_DEFAULT_POOL4 "10.77.0.0/16"
#define NETD_DEFAULT_POOL6 "fd5c:1ce0:5e55::/64"
#define NETD_DEFAULT_NFLOG_GROUP 2110
#define NETD_DEFAULT_PROXY_PORT 3128
#define NETD_DEFAULT_TRANSPARENT_PORT 3129 /* transparent mode: redirected TCP 80/443 */
#define NETD_DEFAULT_SOCKS_PORT 1080       /* SOCKS5 on the gateway (0: none) */
#define NETD_LISTENERS 5 /* kinds of listener on the gateway: HTTP, DNS UDP, DNS TCP, transparent, SOCKS5 */
#define NETD_DEFAULT_MAX_PER_UID 64
#define NETD_DEFAULT_COMPILE_TIMEOUT_MS 30000 /* a session policy compiles within this or is refused */
#define NETD_COMPILE_MAX 8                    /* policy compiles running at once (compile.c) */
#define NETD_COMPILE_MAX_PER_UID 2            /* ... for one unprivileged uid */

struct netd_config {
	char run_dir[PATH_MAX - 64];
	char audit_log[PATH_MAX];
	char upstream_dns[64];   /* "addr" or "addr#port" */
	char sysconfdir[PATH_MAX];
	struct in_addr pool4;
	unsigned len4;
	struct in6_addr pool6;
	unsigned len6;
	bool v6;
	uint16_t proxy_port, dns_port;
	uint16_t transparent_port; /* the engine's transparent listener */
	uint16_t socks_port;       /* the engine's SOCKS5 listener; 0: none */
	uint32_t nflog_group;
	uid_t engine_uid;
	gid_t engine_gid;
	unsigned max_per_uid; /* sessions per non-root uid */
	unsigned compile_timeout_ms; /* deadline of a session policy's compile (compile.c) */
	unsigned dns_cache_entries;  /* the engine's DNS answer cache (docs/proxy.md); 0 = none */
	bool embedded;        /* one-session helper of a root launcher */
};

/* Fills defaults (engine user: "sluice" if it exists, else nobody). */
void netd_config_defaults(struct netd_config *c);
/* Parses "a.b.c.d/len" / "x::/len" into the config; -EINVAL with a message in err. */
int netd_config_pool4(struct netd_config *c, const char *s, char *err, size_t errlen);
int netd_config_pool6(struct netd_config *c, const char *s, char *err, size_t errlen);

#define NETD_NS_BUCKETS 1024
#define NETD_RELOAD_PARALLEL 2 /* SIGHUP: sessions recompiled at once, leaving the other compile slots to clients */

struct netd_sess {
	struct netd_sess *next, *prev; /* list in struct netd */
	struct netd_sess *ns_next;     /* in its bucket of d->by_ns */
	char id[NETD_ID_BUF];
	char ifname[16];
	unsigned slot;
	int lease_fd;        /* owned: the slot lease */
	int netns_fd;        /* owned */
	dev_t ns_dev;
	ino_t ns_ino;
	char *netns_path;    /* owned; set for CREATE sessions (we made and must remove the netns) */
	char *cni_key;       /* owned; set for CNI_ADD sessions: "CONTAINERID/IFNAME", what CNI_DEL names */
	char sess_if[16];    /* the session-side interface name ("eth0" unless a CNI runtime asked another) */
	uid_t uid;
	pid_t pid;
	char *command;       /* owned */
	char sandbox[NETD_SANDBOX_MAX + 1]; /* the launcher's sandbox type, or "" (not given) */
	char *policy_json;   /* owned: re-serialised by sluiced after compiling */
	char *ca_cert_pem;   /* owned: HTTPS inspection's session CA (proxy/mitm_ca.h) when the policy inspects; */
	char *ca_key_pem;    /* owned: its key goes to the engine only (wiped when freed), the certificate also to the client */
	char *client_policy; /* owned: the policy as the client sent it, compiled again under a reloaded
	                      * organisation layer (netd_reload_org) */
	char *client_extra;  /* owned: allow/deny rules added live (`sluicectl session policy --allow`), a
	                      * policy document compiled beside client_policy, or NULL */
	uint32_t policy_version;  /* 1 for the first policy, +1 for every replacement (audit field) */
	struct netd_grant *grants; /* owned: verdicts given on this session's asks, restored to a restarted engine */
	unsigned ngrants;
	struct in_addr addr4;
	struct in6_addr addr6;
	time_t created;
	struct netd_conn *owner;  /* borrowed: the connection whose close ends this session, or NULL */
	uint32_t reply_seq;       /* pending reply to owner/requester (0 = none) */
	struct netd_conn *replier; /* borrowed: who waits for the reply, or NULL */
	bool engine_ok;           /* the engine acknowledged SESSION_ADD */
	bool engine_released;     /* the engine answered RECORDS' SESSION_REMOVE: it has no such session any more */
	uint32_t engine_seq;      /* seq of the SESSION_ADD in flight (0 = none) */
	bool wired;               /* nft + links in place */
	bool transparent;         /* the compiled policy enables transparent mode */
	struct policy *policy;    /* owned: the compiled policy, to re-check what the engine asks (direct mode) */
	uint32_t policy_seq;      /* seq of a SESSION_POLICY in flight to the engine (0 = none) */
	struct netd_compile *policy_job; /* a POLICY's or a reload's compile on a worker (cancelled when the session goes) */
	bool reload_pending;      /* SIGHUP: its policy is still to be compiled under the reloaded organisation layer */
	unsigned reload_gen;      /* d->org_gen its reload compile began under */
	bool reload_running;      /* policy_job is that reload compile (counted in d->reloads_running) */
	struct netd_conn *policy_replier; /* borrowed: who waits for the POLICY reply, or NULL */
	uint32_t policy_reply_seq;
	long long audit_from;     /* size of the audit log when the session opened: its records come after */
	uint32_t records_seq;     /* seq of the SESSION_REMOVE a RECORDS request waits for (0 = none) */
	struct netd_conn *records_replier; /* borrowed: who waits for the RECORDS reply, or NULL */
	uint32_t records_reply_seq;
	double setup_start;       /* netd_metrics_now() when the request arrived (setup latency) */
	double wired_at;          /* netd_metrics_now() when its link was wired (the engine's answer may follow) */
	bool direct_granted;      /* direct mode: elements were put in place for it (since its flows last all ended) */
	bool direct_orphaned;     /* ... by an engine that died since: its flows end at the next policy change */
	uint32_t direct_ended;    /* flows netd_direct_end_orphans ended that the engine has not audited yet (sent
	                           * with the session's next SESSION_POLICY or SESSION_ADD) */
	time_t direct_window;     /* direct mode: grants accepted in the current second, for the rate cap */
	unsigned direct_in_window;
};

/* A verdict an operator gave on one of a session's asks (sluicectl approve|deny): sluiced keeps it so a
 * restarted engine gets it again (NETD_ENG_GRANT). */
#define NETD_GRANTS_MAX 1024 /* per session, as the engine's ASK_GRANTS_MAX */
struct netd_grant {
	char host[NETD_HOST_MAX + 1];
	uint16_t port;
	bool allow;
	uid_t by;
};

/* A request the engine holds for an operator's verdict (policy option "ask"). The engine reports
 * it (ENG_ASK, checked in engine.c); sluicectl lists (ASKS) and decides (DECIDE) through control.c. */
#define NETD_ASKS_MAX 4096        /* held requests across all sessions */
#define NETD_ASKS_PER_SESSION 16  /* PROXY_ASK_MAX_PER_SESSION */
struct netd_ask {
	struct netd_ask *next;
	char id[NETD_ASK_ID_MAX + 1];
	char session[NETD_ID_BUF];
	uid_t uid;                  /* the session's (from sluiced's table, not from the engine) */
	char protocol[16];
	char method[NETD_METHOD_MAX + 1];
	char host[NETD_HOST_MAX + 1];
	uint16_t port;
	unsigned timeout_s;
	time_t created;
};

struct netd {
	struct netd_config cfg;
	struct event_base *base;      /* owned */
	int host_netns_fd;            /* owned */
	dev_t host_ns_dev;
	ino_t host_ns_ino;
	struct nl_sock *rtnl;         /* owned */
	struct netd_nft *nft;         /* owned */
	char lease_dir[PATH_MAX];
	char netns_dir[PATH_MAX];
	unsigned gw_slot;
	int gw_lease_fd;              /* owned */
	struct in_addr gw4;
	struct in6_addr gw6;
	unsigned slot_first, slot_last, slot_hint;
	int listen_fds[NETD_LISTENERS]; /* owned: HTTP, DNS UDP, DNS TCP, transparent, SOCKS5 on the gateway address(es) */
	int listen_fds6[NETD_LISTENERS];
	unsigned nlisten;
	char upstream_proxy[PATH_MAX]; /* the parent proxy configuration (SYSCONFDIR/upstream-proxy.json), or "" */
	struct netd_sess *sessions; /* owned list */
	unsigned nsessions;
	/* the sessions by their namespace's device and inode (session.c): "is this namespace wired already"
	 * in one probe; a scan of 1000 sessions was sluiced's largest own cost of a setup */
	struct netd_sess *by_ns[NETD_NS_BUCKETS];
	struct netd_engine *engine;    /* owned */
	struct netd_nflog *nflog;      /* owned */
	struct netd_reaper *reaper;    /* owned: deferred link deletion */
	struct netd_ask *asks;         /* owned list: requests held for approval */
	unsigned nasks;
	bool stopping;
	void *control; /* owned by control.c */
	struct netd_compiler *compiler; /* owned by compile.c: policy compiles on worker threads */
	unsigned org_gen;               /* bumped by netd_reload_org: a compile begun before is stale */
	unsigned nreload_pending;       /* sessions whose reload compile has not begun or must begin again */
	unsigned reloads_running;       /* reload compiles on workers now (at most NETD_RELOAD_PARALLEL) */
	unsigned reload_applied, reload_ended, reload_reported; /* the last reload's outcome, logged once */
	void (*compile_slot_freed)(struct netd *d); /* NULL, or called by compile.c when a worker ended */
	struct netd_metrics *metrics; /* owned by metrics.c (netd_metrics.h); NULL = off (embedded mode) */
	struct netd_ship *ship;       /* owned: the audit shipper (audit_ship.h); NULL = not shipping */
};

/* Creates the core: host namespace, netlink sockets, gateway lease, nftables base state, listening
 * sockets, engine child, NFLOG. With reconcile (daemon start), first removes what a crashed
 * instance left. Returns 0 or -errno with a one-line reason in err. */
int netd_new(struct netd **out, const struct netd_config *cfg, bool reconcile, char *err, size_t errlen);
/* Ends every session, stops the engine, removes sluice's nft state if no other instance is live. */
void netd_free(struct netd *d);
/* Stops what writes the audit log (NFLOG, the engine, the shipper): once it returns, every record of
 * the instance's ended sessions is written. An embedded helper lets its launcher go here, before
 * netd_free's slower kernel clean-up (link deletion, the nftables table). */
void netd_audit_close(struct netd *d);

/* A client's policy compiled under the organisation layer (compile.c). */
struct netd_compiled {
	char *json;            /* owned: the compiled policy's serialisation (what the engine gets) */
	char *client;          /* owned: the policy as the client sent it (compiled again on SIGHUP) */
	char *extra;           /* owned: allow/deny rules added live, compiled beside client, or NULL */
	struct policy *policy; /* owned */
	bool transparent;
};
void netd_compiled_clear(struct netd_compiled *c);

/* Compiles json under the standard layers of sysconfdir (synchronously: POLICY and SIGHUP); returns the
 * serialisation (malloced) and *compiled, or NULL with a one-line reason in err. */
char *netd_compile_policy(const char *sysconfdir, bool embedded, const char *json, const char *extra,
			  bool *transparent, struct policy **compiled, char *err, size_t errlen);
/* The outcome of netd_compile_start, on the event loop: r 0 with res (the callee may take its members,
 * setting them NULL), or -errno (-ETIMEDOUT past cfg.compile_timeout_ms, -EINVAL rejected, -EAGAIN the
 * organisation layer was reloaded meanwhile) with err. */
typedef void (*netd_compile_fn)(struct netd *d, int r, struct netd_compiled *res, const char *err, void *arg);
/* Starts compiling json (takes ownership) for uid on a worker thread; fn(arg) is called once, from the
 * loop, unless the job is cancelled first. -EAGAIN when too many compiles run (err says so). */
int netd_compile_start(struct netd *d, char *json, uid_t uid, netd_compile_fn fn, void *arg,
		       struct netd_compile **job, char *err, size_t errlen);
/* The same with extra (allow/deny rules added live, a policy document; takes ownership; NULL = none)
 * compiled beside json at the user layer; the result's extra is it. */
int netd_compile_start2(struct netd *d, char *json, char *extra, uid_t uid, netd_compile_fn fn, void *arg,
			struct netd_compile **job, char *err, size_t errlen);
/* fn will not be called (the requester went away); the worker's result is dropped when it ends. */
void netd_compile_cancel(struct netd_compile *job);
/* Compiles whose thread has not ended yet (cancelled and timed-out ones included). */
unsigned netd_compile_running(const struct netd *d);
/* Frees the compiler, joining finished workers; one still running is left to the process's exit
 * (netd_free). */
void netd_compiler_free(struct netd *d);

/* The request of a session (ATTACH or CREATE), after the control layer checked the message and its
 * policy was compiled. */
struct netd_sess_req {
	int netns_fd;          /* takes ownership (also on error); -1 for CREATE */
	const char *name;      /* CREATE: netns name or NULL */
	const char *cni_key;   /* CNI_ADD: "CONTAINERID/IFNAME" (borrowed), else NULL */
	const char *sess_if;   /* CNI_ADD: session-side interface name (borrowed), NULL = eth0 */
	const char *command;   /* borrowed */
	const char *sandbox;   /* borrowed; NULL: not given */
	struct netd_compiled *policy; /* takes ownership of its members (also on error) */
	double requested;             /* netd_metrics_now() when the request arrived (0: now) */
	uid_t uid;
	pid_t pid;
	struct netd_conn *owner; /* borrowed: ATTACH ties the session to this connection */
};

/* Validates and wires a session. On success *out is the session (replied to once the engine
 * acknowledged it, see netd_conn_session_ready). */
int netd_sess_open(struct netd *d, const struct netd_sess_req *r, struct netd_sess **out, char *err,
		      size_t errlen);
void netd_sess_close(struct netd *d, struct netd_sess *s);
/* SIGHUP: /etc/sluice read again and every session's policy compiled again under it (a deny rule or a
 * narrower ceiling there takes effect in live sessions: their connections and direct flows that it
 * no longer allows end). An organisation layer that does not load changes nothing (logged); a session
 * whose policy no longer compiles under it is ended (fail closed). */
void netd_reload_org(struct netd *d);
/* Starts the reload's next compiles while compile slots are free (NETD_RELOAD_PARALLEL at most); called
 * again whenever a compile or a session's POLICY change ends. Logs the outcome when the last is done. */
void netd_reload_pump(struct netd *d);
/* The same from the loop's next turn (callers that walk the session list: the pump may end sessions). */
void netd_reload_pump_soon(struct netd *d);
struct netd_sess *netd_sess_find(struct netd *d, const char *id);
/* The session CNI_ADD made for key ("CONTAINERID/IFNAME"), or NULL. */
struct netd_sess *netd_sess_find_cni(struct netd *d, const char *key);

/* Replaces a live session's policy with c, compiled already under the organisation layer on a worker
 * (compile.c; POLICY and SIGHUP's reload): the session's direct-mode elements flushed, the engine told
 * (its RESULT completes the reply through netd_conn_policy_done). The transparent option cannot change on
 * a live session. Takes ownership of c's members. */
int netd_sess_apply_policy(struct netd *d, struct netd_sess *s, struct netd_compiled *c, char *err, size_t errlen);
/* Keeps an operator's verdict on host:port for a restarted engine. */
void netd_sess_grant(struct netd_sess *s, const char *host, uint16_t port, bool allow, uid_t by);

/* Direct mode (direct.c): the engine's DIRECT_ADD / DIRECT_REVOKE, checked again here. */
struct ipc_msg;
void netd_direct_add(struct netd *d, const struct ipc_msg *m);
void netd_direct_revoke(struct netd *d, const struct ipc_msg *m);
/* When s->direct_orphaned (the engine that granted its direct flows died, so nobody can revoke them one by
 * one): ends every flow of the session's addresses but those to the gateway and those redirected to the
 * engine (transparent mode; conntrack), logged. Called
 * when its policy changes (not when the same policy is applied again). */
void netd_direct_end_orphans(struct netd *d, struct netd_sess *s);
#define NETD_DIRECT_RATE 256 /* direct-mode grants accepted per session per second */

/* The addresses of a pool slot (core.c): the gateway's and each session's. */
struct in_addr netd_slot_addr4(const struct netd *d, unsigned slot);
struct in6_addr netd_slot_addr6(const struct netd *d, unsigned slot);

/* Reply content for a session. */
void netd_sess_resolv(const struct netd *d, char *buf, size_t len);
void netd_sess_addrs(const struct netd *d, const struct netd_sess *s, char a4[46], char g4[46], char a6[46],
			char g6[46]);

/* Engine (engine.c): parent side. */
int netd_engine_start(struct netd *d, char *err, size_t errlen);
void netd_engine_free(struct netd_engine *e);
void netd_engine_session_add(struct netd *d, struct netd_sess *s);
void netd_engine_session_remove(struct netd *d, const struct netd_sess *s);
/* Before a RECORDS reply: the engine lets go of the session now (closing its connections, which
 * writes their records) and answers once its records are written; s->records_seq tracks the
 * RESULT. -EHOSTDOWN when the engine is not running (nothing of the session is in flight then). */
int netd_engine_session_release(struct netd *d, struct netd_sess *s);
/* Hands one dropped packet to the engine's audit log without waiting: 0, -ENOTCONN when no engine runs,
 * or ipc_send_nowait's -errno (-EAGAIN: its socket full or other messages queued for it, the engine busy
 * or stalled). nflog.c counts what was not handed over; a flood of drops never holds sluiced's loop in a
 * send (each blocking send to a stalled engine waited out the socket's 2 s send timeout), nor queues
 * behind or ahead of the messages that must reach the engine (engine.c). */
int netd_engine_audit_drop(struct netd *d, const char *src, uint16_t sport, const char *dst, uint16_t dport,
			   uint8_t proto);
/* Hands the engine the count of drops not audited one by one (nflog.c), for one "drop-summary" record in
 * the audit log, of session id (NULL: of none): 0, -ENOTCONN when no engine runs, or ipc_send_nowait's
 * -errno (nflog.c keeps the counts and offers them again a second later). */
int netd_engine_drop_summary(struct netd *d, const char *id, uint32_t over_rate, uint32_t lost, uint32_t unsent);
void netd_engine_reopen_log(struct netd *d);
/* Sends the session's new policy (SESSION_POLICY); s->policy_seq tracks the RESULT. */
int netd_engine_session_policy(struct netd *d, struct netd_sess *s);
bool netd_engine_running(const struct netd *d);
/* For the metrics: messages waiting in sluiced's queue for the engine now, and the engines killed so far
 * for taking none for 10 s (engine.c). */
void netd_engine_queue_counts(const struct netd *d, size_t *queued, uint64_t *stuck_restarts);
/* Asks the running engine for its counters (METRICS); its METRICS_DATA goes to netd_metrics_engine_data. */
void netd_engine_request_metrics(struct netd *d);
/* Held requests: the verdict to the engine (-EAGAIN, not sent, while it is stalled); lookup; forgetting
 * one, a session's, or all. */
int netd_engine_verdict(struct netd *d, const char *ask_id, bool allow, uid_t by);
struct netd_ask *netd_ask_find(struct netd *d, const char *id);
void netd_ask_remove(struct netd *d, const char *id);
void netd_asks_drop_session(struct netd *d, const char *session_id);
/* Before an approval: 0 when the organisation layer (read again now) neither denies nor caps
 * host:port; else -EPERM with the rule in err. */
int netd_ask_check_org(struct netd *d, const struct netd_ask *a, char *err, size_t errlen);
/* Announces a newly held request to the connections that WATCH its session (control.c). */
void netd_control_ask_held(struct netd *d, const struct netd_ask *a);
/* NULL while the engine runs (and takes its messages) or starts for the first time; else why no new
 * session can be served: it is down, or stalled (its queue has not moved for 2 s: engine.c). */
const char *netd_engine_down_reason(const struct netd *d);
/* Child side (engine_child.c): runs the engine in a forked child over sock; returns an exit code. */
int netd_engine_child_main(int sock);

/* Control connections (control.c). */
int netd_control_listen(struct netd *d, char *err, size_t errlen);
/* Adopts an already-connected, pre-authenticated socket (embedded mode); when it closes, the
 * event loop is stopped. */
int netd_control_adopt(struct netd *d, int fd, uid_t uid, pid_t pid);
/* The engine acknowledged (or refused: err != 0) a session: sends the deferred reply. */
void netd_conn_session_ready(struct netd *d, struct netd_sess *s, int err, const char *msg);
void netd_control_free(struct netd *d);
/* The engine applied (or refused) a session's new policy: sends the deferred POLICY reply. */
void netd_conn_policy_done(struct netd *d, struct netd_sess *s, int err, const char *msg);
/* A session is about to end without its connection closing (sluiced ended it): the connection that
 * attached it may attach again. */
void netd_conn_session_ending(struct netd *d, struct netd_sess *s);
/* The engine let go of the session: sends the deferred RECORDS reply. */
void netd_conn_records_ready(struct netd *d, struct netd_sess *s);

/* Audit records of one session (records.c): streams the lines of the audit log at log_path from
 * offset from on whose "session" is id to fd as LINES messages, then LIST_END. Reads at most
 * NETD_RECORDS_READ_MAX bytes and sends at most NETD_RECORDS_SEND_MAX. 0 or -errno. */
#define NETD_RECORDS_READ_MAX (64ll << 20)
#define NETD_RECORDS_SEND_MAX (16u << 20)
int netd_records_send(const char *log_path, long long from, const char *id, int fd, uint32_t seq);
/* The audit log's size now (the offset a new session's records start after), or 0. */
long long netd_records_mark(const char *log_path);

/* NFLOG (nflog.c). */
int netd_nflog_start(struct netd *d, char *err, size_t errlen);
void netd_nflog_free(struct netd_nflog *n);

/* Embedded helper entry (embedded.c): serves one launcher over sock; returns an exit code. */
int netd_embedded_main(int sock, const char *audit_log);
