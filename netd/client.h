/* Client side of sluiced, used by the launcher (sandbox/) and tools: open a network session for a
 * namespace, end it by closing. Talks to sluiced over RUN_DIR/control.sock (RUN_DIR is
 * $SLUICE_RUN_DIR or /run/sluice); when no sluiced runs and the caller is root, forks an embedded
 * helper running the same netd + proxy code for this one session. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct netd_session; /* a live session: closing it tears the session down */

struct netd_session_request {
	int netns_fd;            /* borrowed: the session's network namespace */
	const char *command;     /* for the audit log and `sluicectl sessions` */
	const char *sandbox;     /* the sandbox type for `sluicectl sessions` ("local", "vm", ...), or NULL */
	const char *policy_json; /* policy_serialize() output; netd re-validates it */
	const char *audit_log;   /* NULL = default; only honoured in embedded mode */
};

struct netd_session_reply {
	char id[64];
	char addr4[46], gw4[46], addr6[46], gw6[46]; /* addr6/gw6 empty when IPv6 is off */
	uint16_t proxy_port;                         /* 3128 by default */
	uint16_t socks_port;                         /* 1080 by default; 0: sluiced serves no SOCKS5 */
	char resolv_conf[512];                       /* content for the session's /etc/resolv.conf */
	char ca_cert[4097]; /* HTTPS inspection's session CA certificate (PEM) for the sandbox's trust; "" = none */
};

/* Uses sluiced over /run/sluice/control.sock when it runs; else, when the caller is root, an
 * embedded netd+proxy (forked helper) for this one session; else a clear error on how to start
 * sluiced. Returns NULL with a one-line message in err on failure. The returned handle owns a
 * CLOEXEC fd; keep it open for the life of the session (across fork, not across exec). */
struct netd_session *netd_session_open(const struct netd_session_request *req, struct netd_session_reply *reply,
				       char *err, size_t errlen);
/* netd_session_open in two halves, for a caller with work of its own to do while the session is set up:
 * send makes the connection (or takes the prepared one) and sends the request, returning the handle
 * (NULL with err set on failure); wait reads the answer into reply (0, or -errno with err set, the
 * connection then let go: netd_session_close the handle either way). The session is usable only after
 * wait returned 0. */
struct netd_session *netd_session_send(const struct netd_session_request *req, char *err, size_t errlen);
int netd_session_wait(struct netd_session *s, struct netd_session_reply *reply, char *err, size_t errlen);
void netd_session_close(struct netd_session *s); /* NULL no-op; waits for an embedded helper's audit log */
/* Optional, before netd_session_open: makes the connection now (to sluiced, or, root without sluiced,
 * by starting the embedded helper, with audit_log as in the request), so that the helper's start (exec,
 * its netd and engine) overlaps the caller's own set-up. The next netd_session_open of the process uses
 * it; netd_session_unprepare ends one that no session took (the helper exits on its end of file).
 * Failing is not an error: netd_session_open then tries again and says why. */
void netd_session_prepare(const char *audit_log);
void netd_session_unprepare(void);
/* Whether the session is served by an embedded helper (true) or by sluiced (false); only an
 * embedded session honours netd_session_request.audit_log. */
bool netd_session_is_embedded(const struct netd_session *s);
/* Replaces the policy of the session this handle attached (id: its reply's id), e.g. with a narrower
 * one: sluiced compiles it under the organisation layer, flushes the session's direct-mode flows and
 * ends live connections and direct flows the new policy no longer allows; returns once the engine
 * applied it. 0 or -errno with a one-line message in err. */
int netd_session_set_policy(struct netd_session *s, const char *id, const char *policy_json, char *err,
			    size_t errlen);
/* The same over a new connection to sluiced (`sluicectl session policy ID --file`): root for any session,
 * a user for their own sessions from outside them (EPERM from inside the session), else ENOENT. */
int netd_session_set_policy_by_id(const char *id, const char *policy_json, char *err, size_t errlen);
/* Adds the "allow"/"deny" rules of rules_json ({"allow": [...], "deny": [...]}) to the live session id's
 * policy, beside what it has (`sluicectl session policy ID --allow X --deny Y`); who may: as above. */
int netd_session_add_rules_by_id(const char *id, const char *rules_json, char *err, size_t errlen);
/* At the end of a sluiced session (its command has exited): the session's audit records, which sluiced
 * reads from its log for the caller (an unprivileged user cannot read the log), written to out_fd as
 * JSON lines. The engine lets go of the session first, so the session has no proxy service after
 * this. Only for sessions of sluiced: -EOPNOTSUPP for an embedded one (its log is the caller's own).
 * 0 or -errno with a one-line message in err. */
int netd_session_records(struct netd_session *s, int out_fd, char *err, size_t errlen);
/* Optional, before netd_session_records: sends the request now, so that sluiced and its engine gather
 * the records while the caller finishes its own teardown; netd_session_records then only reads them.
 * No error here: one that sending meets comes back from netd_session_records. */
void netd_session_records_ask(struct netd_session *s);

/* ---- sluiced administration (daemon only) ---- */

struct netd_session_entry {
	char id[64], ifname[16];
	char addr4[46], addr6[46];
	char netns_path[4096]; /* empty unless created by netd_netns_create */
	unsigned uid, pid;
	long long created;     /* unix time */
	char command[4097];
	char sandbox[17]; /* "" when the launcher did not say */
};

/* Creates a named network namespace under RUN_DIR/netns wired like any session; it stays until
 * netd_session_end(id) (or sluiced stops). path receives its file name. */
int netd_netns_create(const char *name, const char *command, const char *policy_json,
		      struct netd_session_reply *reply, char *path, size_t pathlen, char *err, size_t errlen);
/* Lists sessions (root: all; others: their own); calls fn for each. */
int netd_sessions_list(void (*fn)(const struct netd_session_entry *e, void *arg), void *arg, char *err,
		       size_t errlen);
/* Ends a session by id (root: any; others: their own). */
int netd_session_end(const char *id, char *err, size_t errlen);

/* ---- held requests (interactive approval, `sluice run --ask`; daemon only) ---- */

struct netd_ask_entry {
	char id[16];        /* the ask id sluicectl approve|deny takes */
	char session[64];
	unsigned uid;       /* the session's owner */
	char protocol[16];  /* "http", "https" (inspected) or "connect" */
	char method[33];
	char host[254];
	unsigned port;
	unsigned timeout_s;
	long long created;  /* unix time */
};

/* Lists held requests the caller may decide (root: all; others: their own sessions'). */
int netd_asks_list(void (*fn)(const struct netd_ask_entry *e, void *arg), void *arg, char *err, size_t errlen);
/* Approves (allow) or denies a held request; *out (may be NULL) receives what was decided. */
int netd_ask_decide(const char *id, bool allow, struct netd_ask_entry *out, char *err, size_t errlen);
/* Watches session `id` (the caller's own, or any for root): returns a connected fd (CLOEXEC, owned by
 * the caller) on which netd_ask_watch_next() blocks until a request of the session is held; -errno
 * with err set on failure. */
int netd_ask_watch(const char *id, char *err, size_t errlen);
/* 0 with *e filled for the next held request; -EPIPE when the daemon or a shutdown() closed it. */
int netd_ask_watch_next(int fd, struct netd_ask_entry *e);
