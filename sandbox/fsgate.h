/* The filesystem gate of `sluice run --fs ask`: what its two halves share, inside the gate process.
 * fsgate.c is the file system (the rules and identities that decide, the audit records, the nodes and the
 * FUSE operations, the gate process and its poll loop); fsgate-ask.c is the ask channel (an open held
 * until `sluicectl approve|deny` or the timeout decides, the prompt on the launcher's terminal, the
 * control socket sluicectl speaks, common/fsask.h). The launcher's interface is in session.h
 * (sb_fsgate_start, sb_fsgate_mount, ...). */
#pragma once

#define FUSE_USE_VERSION 35
#include "session.h"

#include "fsask.h"

#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

#define GATE_TTL          86400.0 /* entry and attribute cache: the host view is read-only to the sandbox */
#define GATE_BUCKETS      4096
#define GATE_ASKS_MAX     64 /* held at once; beyond, opens are refused at once */
#define GATE_RULES_MAX    4096
#define GATE_CLIENTS_MAX  8
#define GATE_DEFAULT_WAIT 60
#define GATE_IDS_MAX      16384 /* identities of files in masked or denied trees */
#define GATE_IDS_SLOTS    32768 /* their hash table (open addressing, at most half full) */
#define GATE_SCAN_DEPTH   8
#define GATE_SCAN_MAX     200000 /* directory entries read for identities, in all */
#define GATE_QUIET_SLOTS  64     /* masked paths whose repeated refusals are counted, not each recorded */
#define GATE_QUIET_S      10

struct gate_node {
	struct gate_node *hnext;  /* hash chain on (parent, name) */
	struct gate_node *parent; /* borrowed; nodes live as long as the gate */
	char *name;               /* owned */
	char *path;               /* owned; the host path, built by the gate */
	int fd;                   /* owned; O_PATH, opened by the gate relative to the parent's */
	dev_t dev;
	ino_t ino;
	mode_t mode;
	uint64_t nlookup;  /* the kernel's references (lookups not yet forgotten) */
	unsigned children; /* nodes whose parent this is */
};

/* A path the sandbox may (allow) or may not read; subtree: everything beneath it too. */
struct gate_rule {
	char *path; /* owned */
	bool subtree, allow;
	bool mount; /* a mount point of the allow-list: its ancestors may be looked up */
};

enum gate_op { OP_OPEN, OP_OPENDIR };

struct gate_wait {
	struct gate_wait *next;
	fuse_req_t req;
	enum gate_op op;
	struct gate_node *node; /* borrowed: the node being opened */
	struct fuse_file_info fi;
};

struct gate_ask {
	struct gate_ask *next;
	char id[FSASK_ID_MAX + 1];
	char *path;             /* owned */
	struct gate_node *node; /* borrowed: the node asked about */
	char cmd[FSASK_COMMAND_MAX + 1];
	bool dir;
	time_t created;
	struct timespec deadline;
	struct gate_wait *waiters; /* owned list */
};

struct gate {
	const struct sb_session *s; /* borrowed (the launcher's copy, forked) */
	struct fuse_session *se;    /* owned */
	struct gate_node root;
	struct gate_node *table[GATE_BUCKETS];
	struct gate_rule rules[GATE_RULES_MAX];
	size_t nrules;
	struct gate_ask *asks; /* owned list */
	unsigned nasks;
	bool setup;   /* until init says ready: its lookups are answered without asking */
	int initfd;   /* owned; socket to init */
	int listenfd; /* owned; the control socket */
	int clients[GATE_CLIENTS_MAX];
	int auditfd; /* owned; O_APPEND, or -1 */
	int procfd;  /* owned; the sandbox's /proc (from init), or -1 */
	/* Files of masked and denied trees by identity: a hard link to one elsewhere is the same file. */
	struct gate_id {
		dev_t dev;
		ino_t ino;
		bool used;
	} ids[GATE_IDS_SLOTS];
	size_t nids;
	size_t scanned; /* entries id_scan visited, in all (bounded) */
	/* The masked paths recorded lately (audit_masked): a refusal repeated within GATE_QUIET_S is
	 * counted, not written again. */
	struct gate_quiet {
		char path[PATH_MAX]; /* "" = free */
		time_t last;         /* CLOCK_MONOTONIC seconds of its last record */
		unsigned long repeated;
	} quiet[GATE_QUIET_SLOTS];
	unsigned wait_s;
};

enum verdict { V_ALLOW, V_DENY, V_MASKED, V_ASK };

/* ---- fsgate.c: the file system ---- */

/* The verdict on PATH (the most specific rule; masked paths first); lookup: the way to an allow-list
 * mount point may be looked up. */
enum verdict sb_gate_decide(const struct gate *g, const char *path, bool lookup);
/* Adds a rule (an approval or denial, or the allow-list's); -ENOSPC when full, -ENOMEM. */
int sb_gate_rule_add(struct gate *g, const char *path, bool subtree, bool allow, bool mount);
/* Refuses the file at FD by identity from now on (and, with subtree, what is beneath it). */
void sb_gate_id_deny(struct gate *g, int fd, bool subtree);
/* Writes one decision record to the audit log; by: the deciding uid, or -1. 0, or -1 when it could
 * not be written. */
int sb_gate_audit(struct gate *g, const char *event, const char *decision, const char *path, const char *cmd,
                  const char *id, long long by);
/* Answers an open (or opendir) of N by reopening its descriptor. */
void sb_gate_open_real(struct gate *g, fuse_req_t req, struct gate_node *n, struct fuse_file_info *fi, bool dir);

/* ---- fsgate-ask.c: the ask channel ---- */

/* Holds the open REQ of NODE (at PATH) until a decision: joins the ask for the same path, or starts one
 * (recorded, prompted, its deadline set); refuses at once when too many are held or it cannot be
 * recorded. */
void sb_gate_ask_wait(struct gate *g, fuse_req_t req, enum gate_op op, struct gate_node *node, const char *path,
                      struct fuse_file_info *fi);
int sb_gate_asks_expire(struct gate *g);
/* The control socket (abstract, per uid and session) and its clients: the session's user and root. */
int sb_gate_listen_control(struct gate *g);
void sb_gate_accept_client(struct gate *g);
void sb_gate_client_msg(struct gate *g, int fd, uid_t by);
