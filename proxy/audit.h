/* The audit log: one JSON object per line for every egress decision (schema in docs/proxy.md).
 * Lines are formatted here and appended with one write(2) each; a line that cannot be written is
 * kept (bounded) and retried, and while any is pending the log reports itself unhealthy so the
 * engine refuses new connections rather than let them through unlogged. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define AUDIT_LINE_MAX    4608 /* record (4 KiB) plus the hash-chain suffix */
#define AUDIT_PENDING_MAX (1u << 20)
#define AUDIT_BATCH_MAX   (64u * 1024)

/* Values of a record's "event" (docs/audit-log.md): a decision whose exchange goes on (a close record
 * with the same flow follows), that exchange's end, or a record that is both (denied at once, a DNS
 * query, a drop, a direct grant). */
#define AUDIT_EVENT_DECISION "decision"
#define AUDIT_EVENT_CLOSE    "close"
#define AUDIT_EVENT_COMPLETE "complete"

struct audit_record {
	struct timespec start; /* CLOCK_REALTIME when the request/query arrived */
	const char *event;     /* AUDIT_EVENT_*; NULL = complete */
	uint64_t flow;         /* links a decision to its close (16 hex digits in the line); 0 = null */
	uint64_t duration_ms;
	const char *session; /* all strings borrowed; NULL = field written as null */
	uid_t uid;
	bool has_uid;
	const char *command;
	uint32_t policy_version; /* the session's policy version; 0 = null */
	const char *protocol; /* http, connect, dns, tls-sni, direct, drop */
	const char *host;
	uint16_t port;
	const char *method;   /* HTTP method, DNS qtype, or IP protocol for drops */
	const char *path;     /* inspected HTTPS requests: the normalised path; NULL = no field */
	const char *decision; /* allow, deny, ask */
	const char *rule;     /* "file:line:col" of the deciding rule; NULL/"" = none */
	const char *reason;   /* why, for humans */
	const char *address;  /* resolved/connected address "ip:port" */
	int status;           /* HTTP status, DNS rcode, 0 = none */
	uint64_t bytes_out;   /* session -> internet */
	uint64_t bytes_in;    /* internet -> session */
	const char *error;    /* upstream failure, NULL = none */
};

/* Formats r as one JSON line (with '\n', without the hash chain fields) into buf. Returns the length
 * or -ENOSPC. The log itself writes each line sealed into the hash chain of common/audit_chain.h
 * ("prev" and "hash" as the last fields). */
int audit_format(const struct audit_record *r, char *buf, size_t len);

/* Writes `s` (len bytes) as a JSON string (quotes included) into buf at *pos, escaping quotes,
 * backslashes, control bytes and invalid UTF-8 (as U+FFFD). Returns -ENOSPC when it does not fit. */
int audit_json_string(char *buf, size_t len, size_t *pos, const char *s, size_t slen);

struct audit_log;

/* Opens `path` (append, create 0640) or adopts `fd` (takes ownership; path NULL), continuing the hash
 * chain from the log's last line when it can read it. */
struct audit_log *audit_log_open(const char *path, int fd, char *err, size_t errlen);
void audit_log_free(struct audit_log *a); /* flushes what it can; NULL is a no-op */

/* Appends one record (or, batching, queues it). Never drops silently: a line that cannot be written
 * now is queued; only when the queue is full is it lost, counted and reported. Returns 0 or -errno. */
int audit_log_write(struct audit_log *a, const struct audit_record *r);
/* Retries queued lines; true when nothing is pending and the last write worked. */
bool audit_log_flush(struct audit_log *a);
bool audit_log_healthy(const struct audit_log *a);
uint64_t audit_log_lost(const struct audit_log *a);

/* Batching (the engine turns it on): lines are kept until audit_log_flush(), which the engine calls
 * once per event-loop iteration, so a burst of records costs one write(2). */
void audit_log_set_batching(struct audit_log *a, bool on);
size_t audit_log_pending(const struct audit_log *a);

int audit_log_reopen(struct audit_log *a);             /* -EBADF when opened from an fd */
int audit_log_replace_fd(struct audit_log *a, int fd); /* takes ownership */
