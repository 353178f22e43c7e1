/* One session's records from the audit log, for its launcher (RECORDS, control.c): an unprivileged
 * user cannot read the audit log, which is root's, but is owed the denial summary and learn mode of
 * their own sessions. sluiced reads the log from where it ended when the session opened and sends
 * only the lines whose "session" is that session's id, so nothing of another session leaves. The
 * log is the engine's output and is read as untrusted text, through the common reader
 * (common/audit_read.h: bounded lines, a bounded read, each matching line parsed with json-c). */
#include "netd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_read.h"
#include "log.h"

long long netd_records_mark(const char *log_path)
{
	return audit_reader_mark(log_path);
}

static int send_lines(int fd, uint32_t seq, const char *buf, size_t n)
{
	struct ipc_buf b;
	char *s;
	int r;

	/* the attribute is a string: terminated, no NUL inside (the reader refuses lines with one) */
	if (!(s = strndup(buf, n)))
		return -ENOMEM;
	if ((r = ipc_buf_init(&b, NETD_MSG_LINES, seq)) == 0) {
		ipc_buf_put_str(&b, NETD_A_LINES, s);
		r = ipc_send(fd, &b);
		ipc_buf_release(&b);
	}
	free(s);
	return r;
}

int netd_records_send(const char *log_path, long long from, const char *id, int fd, uint32_t seq)
{
	/* one record per exchange (its close, or a decision that never closed): half the lines */
	struct audit_reader_opts o = {
	        .from = from, .max_bytes = NETD_RECORDS_READ_MAX, .session = id, .outcomes = true};
	struct audit_reader *rd = NULL;
	struct audit_entry e;
	char *out = malloc(NETD_LINES_MAX);
	size_t nout = 0, sent = 0;
	int r = 0, k;

	if (!out) {
		r = -ENOMEM;
		goto out;
	}
	rd = audit_reader_open(log_path, &o, &r);
	if (!rd && r == -ENOENT)
		goto done; /* nothing was logged yet */
	if (!rd)
		goto out;
	while ((k = audit_reader_next(rd, &e)) > 0) {
		size_t n = e.len + 1;

		if (k != AUDIT_READ_RECORD)
			continue; /* not a record, or a torn last line */
		if (n > NETD_LINES_MAX - 1) {
			/* longer than one message holds (the engine writes < 5 KiB; this is not its record) */
			audit_entry_release(&e);
			continue;
		}
		if (sent + n > NETD_RECORDS_SEND_MAX) {
			audit_entry_release(&e);
			break; /* the launcher summarises what it got */
		}
		if (nout + n > NETD_LINES_MAX - 1) {
			if ((r = send_lines(fd, seq, out, nout)) < 0) {
				audit_entry_release(&e);
				goto out;
			}
			nout = 0;
		}
		memcpy(out + nout, e.line, e.len);
		out[nout + e.len] = '\n';
		nout += n;
		sent += n;
		audit_entry_release(&e);
	}
	if (k < 0) {
		r = k;
		goto out;
	}
	if (nout && (r = send_lines(fd, seq, out, nout)) < 0)
		goto out;
done:
	r = ipc_send_empty(fd, NETD_MSG_LIST_END, seq);
out:
	audit_reader_free(rd);
	free(out);
	return r;
}
