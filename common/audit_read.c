/* Reading the audit log back: bounded lines, records parsed with json-c, decisions paired with their
 * close records by flow (audit_read.h). */
#include "audit_read.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- one record ---- */

static const char *rec_str(json_object *o, const char *key)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static long long rec_int(json_object *o, const char *key)
{
	json_object *v;
	int64_t n;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return -1;
	n = json_object_get_int64(v);
	return n < 0 ? -1 : (long long)n;
}

/* 16 lower-case hex digits, as the engine writes a flow id; anything else is no flow. */
static uint64_t parse_flow(const char *s)
{
	uint64_t v = 0;

	if (!s || strlen(s) != 16)
		return 0;
	for (int i = 0; i < 16; i++) {
		char c = s[i];
		if (c >= '0' && c <= '9')
			v = v << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (uint64_t)(c - 'a' + 10);
		else
			return 0;
	}
	return v;
}

static enum audit_event parse_event(json_object *o)
{
	json_object *v;
	const char *s;

	if (!json_object_object_get_ex(o, "event", &v) || json_object_is_type(v, json_type_null))
		return AUDIT_EV_COMPLETE; /* a log from before events: every record is whole */
	if (!json_object_is_type(v, json_type_string))
		return AUDIT_EV_OTHER;
	s = json_object_get_string(v);
	if (strcmp(s, "decision") == 0)
		return AUDIT_EV_DECISION;
	if (strcmp(s, "close") == 0)
		return AUDIT_EV_CLOSE;
	if (strcmp(s, "complete") == 0)
		return AUDIT_EV_COMPLETE;
	return AUDIT_EV_OTHER;
}

int audit_entry_parse(const char *line, size_t len, struct audit_entry *e)
{
	json_tokener *tok;
	json_object *o;

	memset(e, 0, sizeof *e);
	e->line = line;
	e->len = len;
	if (len == 0 || len > AUDIT_READ_LINE_MAX || memchr(line, '\0', len))
		return -EBADMSG;
	if (!(tok = json_tokener_new()))
		return -ENOMEM;
	o = json_tokener_parse_ex(tok, line, (int)len);
	/* exactly one object and nothing after it */
	if (o && (json_tokener_get_error(tok) != json_tokener_success || json_tokener_get_parse_end(tok) != len ||
	          !json_object_is_type(o, json_type_object))) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	if (!o)
		return -EBADMSG;
	e->obj = o;
	e->event = parse_event(o);
	e->flow = parse_flow(rec_str(o, "flow"));
	e->time = rec_str(o, "time");
	e->session = rec_str(o, "session");
	e->command = rec_str(o, "command");
	e->protocol = rec_str(o, "protocol");
	e->host = rec_str(o, "host");
	e->method = rec_str(o, "method");
	e->decision = rec_str(o, "decision");
	e->rule = rec_str(o, "rule");
	e->reason = rec_str(o, "reason");
	e->address = rec_str(o, "address");
	e->error = rec_str(o, "error");
	e->uid = rec_int(o, "uid");
	e->port = rec_int(o, "port");
	e->status = rec_int(o, "status");
	e->bytes_out = rec_int(o, "bytes_out");
	e->bytes_in = rec_int(o, "bytes_in");
	e->duration_ms = rec_int(o, "duration_ms");
	return 0;
}

void audit_entry_release(struct audit_entry *e)
{
	json_object_put(e->obj);
	e->obj = NULL;
}

/* ---- open flows: a hash table of flow ids (linear probing, deletion by backward shift) ---- */

struct flow_slot {
	uint64_t flow; /* 0 = empty */
	uint64_t seq;  /* order of the decision, for delivering the unclosed ones in log order */
	char *line;    /* owned: the decision's line (outcomes), or NULL */
};

struct audit_flows {
	struct flow_slot *slot; /* owned */
	size_t cap, n;          /* cap: a power of two */
	uint64_t seq;
	bool overflowed;
};

static size_t flow_hash(uint64_t flow, size_t cap)
{
	flow ^= flow >> 33;
	flow *= 0xff51afd7ed558ccdull;
	flow ^= flow >> 33;
	return (size_t)flow & (cap - 1);
}

struct audit_flows *audit_flows_new(void)
{
	struct audit_flows *f = calloc(1, sizeof *f);

	if (!f)
		return NULL;
	f->cap = 256;
	f->slot = calloc(f->cap, sizeof *f->slot);
	if (!f->slot) {
		free(f);
		return NULL;
	}
	return f;
}

void audit_flows_free(struct audit_flows *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->cap; i++)
		free(f->slot[i].line);
	free(f->slot);
	free(f);
}

static struct flow_slot *flow_find(const struct audit_flows *f, uint64_t flow)
{
	for (size_t i = flow_hash(flow, f->cap);; i = (i + 1) & (f->cap - 1)) {
		if (f->slot[i].flow == flow)
			return &f->slot[i];
		if (!f->slot[i].flow)
			return NULL;
	}
}

static int flow_grow(struct audit_flows *f)
{
	struct flow_slot *old = f->slot;
	size_t oldcap = f->cap;

	f->slot = calloc(oldcap * 2, sizeof *f->slot);
	if (!f->slot) {
		f->slot = old;
		return -ENOMEM;
	}
	f->cap = oldcap * 2;
	for (size_t i = 0; i < oldcap; i++) {
		size_t j;
		if (!old[i].flow)
			continue;
		for (j = flow_hash(old[i].flow, f->cap); f->slot[j].flow; j = (j + 1) & (f->cap - 1))
			;
		f->slot[j] = old[i];
	}
	free(old);
	return 0;
}

/* Opens flow (or, already open, replaces its line: a later decision of the same exchange, such as the
 * verdict on a held request). line: copied when non-NULL. False when it could not be tracked (full,
 * or out of memory). */
static bool flow_open(struct audit_flows *f, uint64_t flow, const char *line, size_t len)
{
	struct flow_slot *s = flow_find(f, flow);
	char *copy = line ? strndup(line, len) : NULL;
	size_t i;

	if (line && !copy)
		return false;
	if (s) {
		if (copy) {
			free(s->line);
			s->line = copy;
		}
		return true;
	}
	if (f->n >= AUDIT_FLOWS_MAX || (f->n + 1 > f->cap / 2 && flow_grow(f) != 0)) {
		f->overflowed = true;
		free(copy);
		return false;
	}
	for (i = flow_hash(flow, f->cap); f->slot[i].flow; i = (i + 1) & (f->cap - 1))
		;
	f->slot[i].flow = flow;
	f->slot[i].seq = f->seq++;
	f->slot[i].line = copy;
	f->n++;
	return true;
}

static bool flow_close(struct audit_flows *f, uint64_t flow)
{
	struct flow_slot *s = flow_find(f, flow);
	size_t i, j;

	if (!s)
		return false;
	free(s->line);
	i = (size_t)(s - f->slot);
	f->slot[i].flow = 0;
	f->slot[i].line = NULL;
	f->n--;
	/* backward shift: move up every later entry of the run that the hole would hide */
	for (j = (i + 1) & (f->cap - 1); f->slot[j].flow; j = (j + 1) & (f->cap - 1)) {
		size_t home = flow_hash(f->slot[j].flow, f->cap);
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			f->slot[i] = f->slot[j];
			f->slot[j].flow = 0;
			f->slot[j].line = NULL;
			i = j;
		}
	}
	return true;
}

bool audit_flows_note(struct audit_flows *f, const struct audit_entry *e)
{
	if (!e->flow)
		return false;
	if (e->event == AUDIT_EV_DECISION) {
		(void)flow_open(f, e->flow, NULL, 0);
		return false;
	}
	if (e->event == AUDIT_EV_CLOSE || e->event == AUDIT_EV_COMPLETE)
		return flow_close(f, e->flow);
	return false;
}

size_t audit_flows_open(const struct audit_flows *f)
{
	return f->n;
}

bool audit_flows_overflowed(const struct audit_flows *f)
{
	return f->overflowed;
}

/* ---- the reader ---- */

#define READ_CAP (2 * AUDIT_READ_LINE_MAX)

struct audit_reader {
	int fd;                  /* owned */
	char *buf;               /* owned: READ_CAP + 1 bytes */
	size_t start, end;       /* unread bytes */
	unsigned long long left; /* bytes still to read (max_bytes), or ULLONG_MAX */
	unsigned long lineno;
	bool skip_first; /* the range starts inside a line */
	bool skipping;   /* inside an over-long line, already reported */
	bool eof_done;   /* a non-following reader reached the end (and reported a torn tail) */
	bool follow, outcomes;
	char *needle;                  /* owned: "\"session\":\"ID\"", or NULL */
	const char *session;           /* borrowed from the options */
	struct audit_flows *flows;     /* borrowed (opts.flows) or own_flows */
	struct audit_flows *own_flows; /* owned */
	struct flow_slot *pending;     /* owned: unclosed decisions still to deliver, in log order */
	size_t npending, next_pending;
	char *pending_line; /* owned: the line of the unclosed decision delivered last */
};

long long audit_reader_mark(const char *path)
{
	struct stat st;

	return path && path[0] && stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : 0;
}

struct audit_reader *audit_reader_open_fd(int fd, const struct audit_reader_opts *o, int *err)
{
	struct audit_reader *r = calloc(1, sizeof *r);
	struct stat st;
	long long from = o->from;

	*err = 0;
	if (!r) {
		*err = -ENOMEM;
		goto fail;
	}
	r->fd = fd;
	if (fstat(fd, &st) < 0) {
		*err = -errno;
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		*err = -EINVAL;
		goto fail;
	}
	r->left = o->max_bytes ? o->max_bytes : ~0ull;
	/* rotated (or truncated) since the offset was taken: the records are at the new file's start */
	if (from < 0 || from > (long long)st.st_size)
		from = 0;
	if (o->max_bytes && (unsigned long long)(st.st_size - from) > o->max_bytes) {
		char c;
		from = st.st_size - (long long)o->max_bytes;
		/* the range starts inside a line unless the byte before it ends one */
		r->skip_first = !(pread(fd, &c, 1, (off_t)from - 1) == 1 && c == '\n');
	}
	if (lseek(fd, (off_t)from, SEEK_SET) < 0) {
		*err = -errno;
		goto fail;
	}
	r->follow = o->follow;
	r->outcomes = o->outcomes;
	r->session = o->session;
	if (o->session) {
		size_t n = strlen(o->session) + 16;
		if (!(r->needle = malloc(n))) {
			*err = -ENOMEM;
			goto fail;
		}
		snprintf(r->needle, n, "\"session\":\"%s\"", o->session);
	}
	r->flows = o->flows;
	if (!r->flows && !(r->flows = r->own_flows = audit_flows_new())) {
		*err = -ENOMEM;
		goto fail;
	}
	if (!(r->buf = malloc(READ_CAP + 1))) {
		*err = -ENOMEM;
		goto fail;
	}
	return r;
fail:
	if (r)
		audit_reader_free(r);
	else
		close(fd);
	return NULL;
}

struct audit_reader *audit_reader_open(const char *path, const struct audit_reader_opts *o, int *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0) {
		*err = -errno;
		return NULL;
	}
	return audit_reader_open_fd(fd, o, err);
}

void audit_reader_free(struct audit_reader *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	for (size_t i = r->next_pending; i < r->npending; i++)
		free(r->pending[i].line);
	free(r->pending);
	free(r->pending_line);
	audit_flows_free(r->own_flows);
	free(r->needle);
	free(r->buf);
	free(r);
}

unsigned long audit_reader_lineno(const struct audit_reader *r)
{
	return r->lineno;
}

bool audit_reader_replaced(const struct audit_reader *r, const char *path)
{
	struct stat now, ours;
	off_t pos = lseek(r->fd, 0, SEEK_CUR);

	if (stat(path, &now) != 0 || fstat(r->fd, &ours) != 0)
		return false; /* gone for the moment (between rename and create): keep reading ours */
	return now.st_ino != ours.st_ino || now.st_dev != ours.st_dev || (pos >= 0 && now.st_size < pos);
}

const struct audit_flows *audit_reader_flows(const struct audit_reader *r)
{
	return r->flows;
}

static int cmp_seq(const void *a, const void *b)
{
	const struct flow_slot *x = a, *y = b;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Outcomes at the end: the decisions no close followed, taken out of the table in log order. */
static int take_pending(struct audit_reader *r)
{
	struct audit_flows *f = r->flows;
	size_t n = 0;

	r->pending = calloc(f->n ? f->n : 1, sizeof *r->pending);
	if (!r->pending)
		return -ENOMEM;
	for (size_t i = 0; i < f->cap; i++)
		if (f->slot[i].flow && f->slot[i].line) {
			r->pending[n++] = f->slot[i];
			f->slot[i].line = NULL; /* the reader owns it now */
		}
	qsort(r->pending, n, sizeof *r->pending, cmp_seq);
	r->npending = n;
	return 0;
}

/* A complete line (NUL-terminated at its newline): RECORD, BAD, or 0 to skip it. */
static int take_line(struct audit_reader *r, char *line, size_t len, struct audit_entry *e)
{
	if (r->needle && !memmem(line, len, r->needle, strlen(r->needle)))
		return 0; /* not this session's (no value can mimic the key: quotes inside values are escaped) */
	if (audit_entry_parse(line, len, e) != 0)
		return AUDIT_READ_BAD;
	if (r->session && (!e->session || strcmp(e->session, r->session) != 0)) {
		audit_entry_release(e);
		return 0;
	}
	if (!r->outcomes) {
		audit_flows_note(r->flows, e);
		return AUDIT_READ_RECORD;
	}
	if (e->event == AUDIT_EV_DECISION && e->flow && flow_open(r->flows, e->flow, line, len)) {
		audit_entry_release(e); /* delivered at the end if no close follows */
		return 0;
	}
	audit_flows_note(r->flows, e);
	return AUDIT_READ_RECORD;
}

/* The next unclosed decision (outcomes, at the end), or END. */
static int next_pending(struct audit_reader *r, struct audit_entry *e)
{
	while (r->next_pending < r->npending) {
		struct flow_slot *s = &r->pending[r->next_pending++];
		free(r->pending_line);
		r->pending_line = s->line;
		s->line = NULL;
		if (audit_entry_parse(r->pending_line, strlen(r->pending_line), e) == 0) {
			e->unclosed = true;
			return AUDIT_READ_RECORD;
		}
	}
	return AUDIT_READ_END;
}

int audit_reader_next(struct audit_reader *r, struct audit_entry *e)
{
	memset(e, 0, sizeof *e);
	if (r->eof_done)
		return r->pending ? next_pending(r, e) : AUDIT_READ_END;
	for (;;) {
		char *p = memchr(r->buf + r->start, '\n', r->end - r->start);
		ssize_t n;
		size_t want;

		if (p) {
			char *line = r->buf + r->start;
			size_t len = (size_t)(p - line);
			int res;

			*p = '\0';
			r->start += len + 1;
			if (r->skip_first) { /* the tail of a line cut by max_bytes */
				r->skip_first = false;
				continue;
			}
			r->lineno++;
			if (r->skipping) { /* the end of an over-long line, reported when it began */
				r->skipping = false;
				r->lineno--;
				continue;
			}
			res = take_line(r, line, len, e);
			if (res)
				return res;
			continue;
		}
		if (r->end - r->start > AUDIT_READ_LINE_MAX) {
			/* no newline within the bound: not a record; report it once, skip to its end */
			bool report = !r->skipping && !r->skip_first;
			if (report) {
				r->buf[r->start + AUDIT_READ_LINE_MAX] = '\0';
				e->line = r->buf + r->start;
				e->len = AUDIT_READ_LINE_MAX;
				r->lineno++;
				r->skipping = true;
			}
			r->start = r->end;
			if (report)
				return AUDIT_READ_BAD; /* e->line stays valid: the buffer is compacted next call */
		}
		if (r->start > 0) {
			memmove(r->buf, r->buf + r->start, r->end - r->start);
			r->end -= r->start;
			r->start = 0;
		}
		want = READ_CAP - r->end;
		if (want > r->left)
			want = (size_t)r->left;
		n = want ? read(r->fd, r->buf + r->end, want) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -errno;
		if (n > 0) {
			r->end += (size_t)n;
			if (r->left != ~0ull)
				r->left -= (unsigned long long)n;
			continue;
		}
		/* the end, for now */
		if (r->follow)
			return AUDIT_READ_END;
		r->eof_done = true;
		if (r->end > r->start && !r->skipping && !r->skip_first) {
			r->buf[r->end] = '\0';
			e->line = r->buf + r->start;
			e->len = r->end - r->start;
			r->lineno++;
			r->start = r->end;
			if (r->outcomes && take_pending(r) < 0)
				return -ENOMEM;
			return AUDIT_READ_TORN;
		}
		if (r->outcomes) {
			if (take_pending(r) < 0)
				return -ENOMEM;
			return next_pending(r, e);
		}
		return AUDIT_READ_END;
	}
}
