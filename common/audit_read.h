/* Reading the audit log back (docs/audit-log.md): bounded lines from an offset of a file, each parsed
 * into a record (json-c) with its event, and the pairing of a decision record with the close record
 * of the same flow. The one reader of the log for sluiced's RECORDS (netd/records.c), the launcher's
 * denial summary and learn mode (sandbox/summary.c) and `sluicectl log` (tools/sluicectl/ctl_log.c);
 * the writer is proxy/audit.c with common/audit_chain.h.
 *
 * Trust boundary: the log is the proxy engine's output, and the engine is the part most exposed to
 * hostile bytes; a record's strings come from sandboxes. Every line is read as untrusted: bounded in
 * length, parsed with json-c, NUL bytes refused; callers print strings escaped. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_object;

#define AUDIT_READ_LINE_MAX (64u * 1024) /* longer lines are not records (the engine writes < 5 KiB) */

enum audit_event {
	AUDIT_EV_COMPLETE, /* decided and ended in one record; also every record of a log older than events */
	AUDIT_EV_DECISION, /* decided; the exchange went on, its close record follows */
	AUDIT_EV_CLOSE,    /* the end of the exchange whose decision record has the same flow */
	AUDIT_EV_OTHER,    /* another writer's record (the launcher's "no-sandbox") */
};

/* One record. Strings are borrowed from obj (NULL when absent or not a string); numbers are -1 when
 * absent, negative or not an integer. */
struct audit_entry {
	struct json_object *obj; /* the parsed line */
	const char *line;        /* the line as read, without its newline, NUL-terminated */
	size_t len;
	enum audit_event event;
	uint64_t flow; /* 0 when absent or not 16 hex digits */
	const char *time, *session, *command, *protocol, *host, *method, *decision, *rule, *reason, *address, *error;
	long long uid, port, status, bytes_out, bytes_in, duration_ms;
	bool unclosed; /* a decision whose close record was not read (the engine was killed, or it is still open) */
};

/* Parses one line (len bytes, no newline) into e. 0, or -EBADMSG when it is not a JSON object (a NUL
 * byte inside counts as not). On success e->obj is owned by the caller: audit_entry_release. */
int audit_entry_parse(const char *line, size_t len, struct audit_entry *e);
void audit_entry_release(struct audit_entry *e); /* NULL obj: no-op */

/* The flows whose decision record was read and whose close (or complete) record was not, yet. */
struct audit_flows;
struct audit_flows *audit_flows_new(void);
void audit_flows_free(struct audit_flows *f); /* NULL: no-op */
/* A decision opens its flow, a close or complete record closes it. True when e closed an open flow. */
bool audit_flows_note(struct audit_flows *f, const struct audit_entry *e);
size_t audit_flows_open(const struct audit_flows *f);
/* More flows were open at once than are tracked (AUDIT_FLOWS_MAX): the count is a lower bound. */
bool audit_flows_overflowed(const struct audit_flows *f);
#define AUDIT_FLOWS_MAX (1u << 20)

struct audit_reader_opts {
	long long from; /* offset to start at; beyond the end of the file (rotated or truncated since): 0 */
	unsigned long long
	        max_bytes;   /* read at most this much, the last bytes (0: no bound); a cut first line is skipped */
	const char *session; /* only this session's records (NULL: every line) */
	bool outcomes;       /* one record per exchange, below */
	bool follow;         /* an incomplete last line waits for the rest (tail -f) instead of TORN */
	struct audit_flows *flows; /* borrowed: flow tracking shared across readers (several files of one log);
	                              NULL: the reader's own */
};

/* Outcomes: a decision record is delivered only if no close or complete record of its flow follows in
 * what is read, then at the end and with unclosed set; everything else as it comes. So each exchange
 * counts once, with its final decision (a summary of denials, learn mode). Otherwise every record is
 * delivered as it comes, and audit_reader_flows() says which decisions were not closed. */

enum audit_read_result {
	AUDIT_READ_END = 0, /* nothing more (for now, when following) */
	AUDIT_READ_RECORD,  /* e holds the next record, valid until the next call */
	AUDIT_READ_BAD,     /* a line that is not a record (not JSON, a NUL byte, too long); e->line has it,
	                       cut to AUDIT_READ_LINE_MAX */
	AUDIT_READ_TORN,    /* the file ends inside a line (a torn write); e->line has the fragment */
};

struct audit_reader;
/* The size of the log at path now: the offset after which records written from now on are (a session's,
 * say); 0 when it is not a readable regular file. */
long long audit_reader_mark(const char *path);
/* Opens path for reading (a symlink is followed: the admin may have made one). NULL with *err = -errno
 * when it cannot be opened, or -EINVAL when it is not a regular file. */
struct audit_reader *audit_reader_open(const char *path, const struct audit_reader_opts *o, int *err);
/* The same over an open fd (taken over; closed by audit_reader_free). */
struct audit_reader *audit_reader_open_fd(int fd, const struct audit_reader_opts *o, int *err);
/* The next line: an enum audit_read_result, or -errno when reading failed. Lines of other sessions
 * are skipped silently; e is cleared for every call. */
int audit_reader_next(struct audit_reader *r, struct audit_entry *e);
/* The line number (1-based, counted from where reading started) of the line last returned. */
unsigned long audit_reader_lineno(const struct audit_reader *r);
/* Following a log: true when path now names another file (rotated) or a file shorter than what was
 * read (truncated); read what is left, then open path again from its start. */
bool audit_reader_replaced(const struct audit_reader *r, const char *path);
/* The reader's flow tracking (its own, or opts.flows). */
const struct audit_flows *audit_reader_flows(const struct audit_reader *r);
void audit_reader_free(struct audit_reader *r); /* NULL: no-op */
