/* Audit log: JSON-line formatting (escaping untrusted strings) and append-only writing with a
 * bounded retry queue. See audit.h. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit_chain.h"
#include "log.h"
#include "util.h"

/* `{"time":"YYYY-MM-DDTHH:MM:SS.` of one second: records come many a second, and gmtime_r and snprintf
 * were a tenth of the cost of a DNS query's record (issue 16). */
struct audit_ts {
	time_t sec;
	bool valid;
	size_t len;
	char prefix[48];
};

struct audit_log {
	char *path;    /* owned; NULL when opened from an fd */
	int fd;        /* owned */
	char *pending; /* owned; lines not yet written, in order */
	size_t npending;
	size_t cap; /* bytes allocated at pending (it grows by doubling, so a record is not a realloc) */
	bool failed; /* the last write failed */
	uint64_t lost;
	struct audit_chain chain; /* hash of the last line handed to the file */
	bool batching;            /* lines wait in `pending` until audit_log_flush() */
	struct audit_ts ts;       /* the last record's second, formatted */
};

static int put(char *buf, size_t len, size_t *pos, const char *s, size_t n)
{
	if (*pos + n >= len)
		return -ENOSPC;
	memcpy(buf + *pos, s, n);
	*pos += n;
	return 0;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t need;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		need = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		need = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		need = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (need == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return need;
}

/* Bytes copied into a JSON string as they are: printable ASCII but the quote and the backslash (a table:
 * host names, rules and reasons are runs of these, and the four comparisons a byte were most of the
 * escaping's cost). */
static const unsigned char json_plain[256] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

int audit_json_string(char *buf, size_t len, size_t *pos, const char *s, size_t slen)
{
	const unsigned char *u = (const unsigned char *)s;

	if (put(buf, len, pos, "\"", 1))
		return -ENOSPC;
	for (size_t i = 0; i < slen;) {
		unsigned char c = u[i];
		char esc[8];
		size_t n;
		if (json_plain[c]) {
			/* a run of printable ASCII that needs no escape: copied at once (host names, rules) */
			n = 1;
			while (i + n < slen && json_plain[u[i + n]])
				n++;
			if (put(buf, len, pos, s + i, n))
				return -ENOSPC;
			i += n;
		} else if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			if (put(buf, len, pos, esc, 2))
				return -ENOSPC;
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof esc, "\\u%04x", c);
			if (put(buf, len, pos, esc, 6))
				return -ENOSPC;
			i++;
		} else if ((n = utf8_seq(u + i, slen - i)) == 0) {
			if (put(buf, len, pos, "\\ufffd", 6))
				return -ENOSPC;
			i++;
		} else {
			if (put(buf, len, pos, s + i, n))
				return -ENOSPC;
			i += n;
		}
	}
	return put(buf, len, pos, "\"", 1);
}

/* A field's key as the line spells it before the value, `,"name":`, and its length: made at compile time
 * (a record has 20 fields: their strlen and three copies each were a good part of its formatting). */
#define FIELD_KEY(name) ",\"" name "\":", sizeof(",\"" name "\":") - 1

/* key: `,"name":` (FIELD_KEY), klen its length */
static int field_str(char *buf, size_t len, size_t *pos, const char *key, size_t klen, const char *v)
{
	if (put(buf, len, pos, key, klen))
		return -ENOSPC;
	if (!v)
		return put(buf, len, pos, "null", 4);
	return audit_json_string(buf, len, pos, v, strlen(v));
}

static int field_num(char *buf, size_t len, size_t *pos, const char *key, size_t klen, uint64_t v)
{
	char num[24], *d = util_u64_dec(num + sizeof num, v);

	if (put(buf, len, pos, key, klen))
		return -ENOSPC;
	return put(buf, len, pos, d, (size_t)(num + sizeof num - d));
}

/* The flow id as a string of 16 hex digits (JSON numbers above 2^53 lose precision in jq). */
static int field_flow(char *buf, size_t len, size_t *pos, uint64_t flow)
{
	static const char hex[] = "0123456789abcdef";
	char s[9 + 16 + 1] = ",\"flow\":\"";

	if (!flow)
		return put(buf, len, pos, ",\"flow\":null", 12);
	for (int i = 0; i < 16; i++)
		s[9 + i] = hex[(flow >> (60 - 4 * i)) & 15];
	s[25] = '"';
	return put(buf, len, pos, s, sizeof s);
}

static int ts_prefix(struct audit_ts *t, time_t sec)
{
	struct tm tm;
	int n;

	if (t->valid && t->sec == sec)
		return 0;
	if (!gmtime_r(&sec, &tm))
		memset(&tm, 0, sizeof tm);
	n = snprintf(t->prefix, sizeof t->prefix, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.", tm.tm_year + 1900,
	             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (n < 0 || (size_t)n >= sizeof t->prefix)
		return -ENOSPC;
	t->len = (size_t)n;
	t->sec = sec;
	t->valid = true;
	return 0;
}

/* The record as a JSON object without its closing brace (the chain seals it). tc: the caller's cache of
 * the timestamp's second (NULL: none). */
static int format_body(const struct audit_record *r, char *buf, size_t len, struct audit_ts *tc)
{
	struct audit_ts own = {0};
	struct audit_ts *t = tc ? tc : &own;
	char ms[5];
	size_t pos = 0;
	long msec = r->start.tv_nsec / 1000000;

	if (ts_prefix(t, r->start.tv_sec) != 0 || put(buf, len, &pos, t->prefix, t->len))
		return -ENOSPC;
	ms[0] = (char)('0' + msec / 100 % 10);
	ms[1] = (char)('0' + msec / 10 % 10);
	ms[2] = (char)('0' + msec % 10);
	ms[3] = 'Z';
	ms[4] = '"';
	if (put(buf, len, &pos, ms, sizeof ms))
		return -ENOSPC;
	if (field_str(buf, len, &pos, FIELD_KEY("event"), r->event ? r->event : AUDIT_EVENT_COMPLETE) ||
	    field_flow(buf, len, &pos, r->flow) || field_str(buf, len, &pos, FIELD_KEY("session"), r->session))
		return -ENOSPC;
	if (r->has_uid) {
		if (field_num(buf, len, &pos, FIELD_KEY("uid"), r->uid))
			return -ENOSPC;
	} else if (put(buf, len, &pos, ",\"uid\":null", 11)) {
		return -ENOSPC;
	}
	if (field_str(buf, len, &pos, FIELD_KEY("command"), r->command))
		return -ENOSPC;
	if (r->policy_version) {
		if (field_num(buf, len, &pos, FIELD_KEY("policy_version"), r->policy_version))
			return -ENOSPC;
	} else if (put(buf, len, &pos, ",\"policy_version\":null", 22)) {
		return -ENOSPC;
	}
	if (field_str(buf, len, &pos, FIELD_KEY("protocol"), r->protocol) ||
	    field_str(buf, len, &pos, FIELD_KEY("host"), r->host) ||
	    field_num(buf, len, &pos, FIELD_KEY("port"), r->port) ||
	    field_str(buf, len, &pos, FIELD_KEY("method"), r->method) ||
	    (r->path && field_str(buf, len, &pos, FIELD_KEY("path"), r->path)) ||
	    field_str(buf, len, &pos, FIELD_KEY("decision"), r->decision) ||
	    field_str(buf, len, &pos, FIELD_KEY("rule"), (r->rule && *r->rule) ? r->rule : NULL) ||
	    field_str(buf, len, &pos, FIELD_KEY("reason"), r->reason) ||
	    field_str(buf, len, &pos, FIELD_KEY("address"), r->address) ||
	    field_num(buf, len, &pos, FIELD_KEY("status"), (uint64_t)(r->status < 0 ? 0 : r->status)) ||
	    field_num(buf, len, &pos, FIELD_KEY("bytes_out"), r->bytes_out) ||
	    field_num(buf, len, &pos, FIELD_KEY("bytes_in"), r->bytes_in) ||
	    field_num(buf, len, &pos, FIELD_KEY("duration_ms"), r->duration_ms) ||
	    field_str(buf, len, &pos, FIELD_KEY("error"), r->error))
		return -ENOSPC;
	buf[pos] = '\0';
	return (int)pos;
}

int audit_format(const struct audit_record *r, char *buf, size_t len)
{
	int n = format_body(r, buf, len, NULL);
	if (n < 0 || (size_t)n + 3 > len)
		return -ENOSPC;
	memcpy(buf + n, "}\n", 3);
	return n + 2;
}

/* The record, sealed into the hash chain, as one line with its newline. */
static int format_line(struct audit_log *a, const struct audit_record *r, char *buf, size_t len)
{
	int n = format_body(r, buf, len - AUDIT_CHAIN_SUFFIX_LEN - 2, &a->ts);
	if (n < 0)
		return n;
	if (audit_chain_seal(&a->chain, buf, (size_t)n, buf + n) != 0)
		return -EIO;
	n += AUDIT_CHAIN_SUFFIX_LEN;
	buf[n++] = '\n';
	buf[n] = '\0';
	return n;
}

static void resume_chain(struct audit_log *a)
{
	int r = audit_chain_resume(&a->chain, a->fd);
	if (r == -EBADMSG)
		log_warnx("audit log: its last line carries no hash; the chain starts afresh here");
	else if (r < 0)
		log_warnx("audit log: cannot read its last line (%s); the chain starts afresh here", strerror(-r));
}

struct audit_log *audit_log_open(const char *path, int fd, char *err, size_t errlen)
{
	struct audit_log *a = calloc(1, sizeof *a);

	if (!a) {
		snprintf(err, errlen, "out of memory");
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	a->fd = -1;
	if (path) {
		a->path = strdup(path);
		a->fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
		if (!a->path || a->fd < 0) {
			snprintf(err, errlen,
			         "cannot open audit log %s: %s (check the directory exists and is writable)", path,
			         strerror(errno));
			if (fd >= 0)
				close(fd);
			audit_log_free(a);
			return NULL;
		}
		if (fd >= 0)
			close(fd);
		resume_chain(a);
	} else if (fd >= 0) {
		a->fd = fd;
		(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
		resume_chain(a);
	} else {
		snprintf(err, errlen, "no audit log given (a path or an fd is required)");
		free(a);
		return NULL;
	}
	return a;
}

void audit_log_free(struct audit_log *a)
{
	if (!a)
		return;
	if (a->fd >= 0) {
		audit_log_flush(a);
		if (a->npending)
			log_warnx("audit log: %zu bytes of records could not be written at exit", a->npending);
		close(a->fd);
	}
	free(a->pending);
	free(a->path);
	free(a);
}

bool audit_log_healthy(const struct audit_log *a)
{
	return !a->failed && (a->batching || a->npending == 0);
}

uint64_t audit_log_lost(const struct audit_log *a)
{
	return a->lost;
}

bool audit_log_flush(struct audit_log *a)
{
	while (a->npending) {
		ssize_t n = write(a->fd, a->pending, a->npending);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (!a->failed)
				log_warn("audit log: write failed; refusing new connections until it works again");
			a->failed = true;
			return false;
		}
		memmove(a->pending, a->pending + n, a->npending - (size_t)n);
		a->npending -= (size_t)n;
	}
	if (a->failed)
		log_info("audit log: writable again");
	a->failed = false;
	return true;
}

static int queue(struct audit_log *a, const char *line, size_t n)
{
	char *p;
	if (a->npending + n > AUDIT_PENDING_MAX) {
		a->lost++;
		log_warnx("audit log: record lost (queue full, %" PRIu64 " lost so far)", a->lost);
		return -ENOSPC;
	}
	if (a->npending + n > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16384;
		while (cap < a->npending + n)
			cap *= 2;
		if (cap > AUDIT_PENDING_MAX)
			cap = AUDIT_PENDING_MAX;
		p = realloc(a->pending, cap);
		if (!p) {
			a->lost++;
			return -ENOMEM;
		}
		a->pending = p;
		a->cap = cap;
	}
	memcpy(a->pending + a->npending, line, n);
	a->npending += n;
	return 0;
}

int audit_log_write(struct audit_log *a, const struct audit_record *r)
{
	char line[AUDIT_LINE_MAX];
	int n = format_line(a, r, line, sizeof line);
	ssize_t w;

	if (n == -ENOSPC) {
		/* An oversized record keeps its decision: drop the free-text fields. */
		struct audit_record shorter = *r;
		shorter.reason = "(truncated)";
		shorter.error = NULL;
		shorter.command = "(truncated)";
		n = format_line(a, &shorter, line, sizeof line);
	}
	if (n < 0) {
		a->lost++;
		return n;
	}
	if (a->batching) {
		/* Written by the caller's audit_log_flush() at the end of the event-loop iteration, in one
		 * write for all lines of that iteration; sooner when the batch is large. */
		if (a->npending + (size_t)n > AUDIT_BATCH_MAX && !a->failed)
			audit_log_flush(a);
		return queue(a, line, (size_t)n) ? -ENOSPC : 0;
	}
	if (a->npending && !audit_log_flush(a))
		return queue(a, line, (size_t)n) ? -ENOSPC : -EIO;
	do
		w = write(a->fd, line, (size_t)n);
	while (w < 0 && errno == EINTR);
	if (w == n) {
		a->failed = false;
		return 0;
	}
	if (!a->failed)
		log_warn("audit log: write failed; refusing new connections until it works again");
	a->failed = true;
	/* Keep the unwritten rest so the line is completed, never torn, once writing works. */
	if (w < 0)
		w = 0;
	queue(a, line + w, (size_t)(n - w));
	return -EIO;
}

void audit_log_set_batching(struct audit_log *a, bool on)
{
	a->batching = on;
	if (!on)
		audit_log_flush(a);
}

size_t audit_log_pending(const struct audit_log *a)
{
	return a->npending;
}

int audit_log_reopen(struct audit_log *a)
{
	int fd;
	if (!a->path)
		return -EBADF;
	fd = open(a->path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
	if (fd < 0) {
		int e = errno;
		log_warn("audit log: cannot reopen %s; still writing to the old file", a->path);
		return -e;
	}
	return audit_log_replace_fd(a, fd);
}

int audit_log_replace_fd(struct audit_log *a, int fd)
{
	if (fd < 0)
		return -EBADF;
	/* Records written so far go to the old file; what is pending goes to the new one. The chain
	 * continues from the old file's last line (rotation keeps one chain across files). */
	close(a->fd);
	a->fd = fd;
	audit_log_flush(a);
	return 0;
}
