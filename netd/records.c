/* One session's records from the audit log, for its launcher (RECORDS, control.c): an unprivileged
 * user cannot read the audit log, which is root's, but is owed the denial summary and learn mode of
 * their own sessions. sluiced reads the log from where it ended when the session opened and sends
 * only the lines whose "session" is that session's id, so nothing of another session leaves. The
 * log is the engine's output and is read as untrusted text: bounded lines, a bounded read, and each
 * matching line parsed with json-c before it is sent. */
#include "netd.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define RECORD_LINE_MAX (64u * 1024) /* longer lines are skipped (the engine writes far shorter ones) */

long long netd_records_mark(const char *log_path)
{
	struct stat st;

	return log_path && log_path[0] && stat(log_path, &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : 0;
}

/* Whether line is a JSON object whose "session" is id. The byte test first: the engine writes the key
 * once, unescaped, as ,"session":"ID" (a quote inside any value is escaped, so no value can mimic it). */
static bool line_is_session(const char *line, const char *needle, const char *id)
{
	json_object *o, *v;
	bool yes = false;

	if (!strstr(line, needle))
		return false;
	o = json_tokener_parse(line);
	if (o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "session", &v) &&
	    json_object_is_type(v, json_type_string))
		yes = strcmp(json_object_get_string(v), id) == 0;
	json_object_put(o);
	return yes;
}

static int send_lines(int fd, uint32_t seq, const char *buf, size_t n)
{
	struct ipc_buf b;
	char *s;
	int r;

	/* the attribute is a string: terminated, no NUL inside (lines with one were never matched) */
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
	char needle[NETD_ID_BUF + 16];
	char *line = malloc(RECORD_LINE_MAX), *out = malloc(NETD_LINES_MAX);
	size_t nout = 0, sent = 0;
	cleanup_fd int lfd = -1;
	FILE *in = NULL;
	struct stat st;
	long long left;
	int r = 0;

	if (!line || !out) {
		r = -ENOMEM;
		goto out;
	}
	snprintf(needle, sizeof needle, ",\"session\":\"%s\"", id);
	lfd = open(log_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (lfd < 0 && errno == ENOENT)
		goto done; /* nothing was logged yet */
	if (lfd < 0 || fstat(lfd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EINVAL;
		goto out;
	}
	/* rotated (or truncated) since the session opened: its records are at the new file's start */
	if (from < 0 || from > (long long)st.st_size)
		from = 0;
	left = (long long)st.st_size - from;
	if (left > NETD_RECORDS_READ_MAX) {
		from = (long long)st.st_size - NETD_RECORDS_READ_MAX;
		left = NETD_RECORDS_READ_MAX;
	}
	if (lseek(lfd, (off_t)from, SEEK_SET) < 0 || !(in = fdopen(lfd, "r"))) {
		r = -errno;
		goto out;
	}
	lfd = -1; /* owned by in */
	while (left > 0 && fgets(line, (int)RECORD_LINE_MAX, in)) {
		size_t n = strlen(line);

		left -= (long long)n;
		if (n == 0 || line[n - 1] != '\n') {
			/* over-long (or cut off at the end of the file): skip the rest of it */
			int ch;
			while ((ch = getc(in)) != EOF && ch != '\n')
				left--;
			continue;
		}
		if (!line_is_session(line, needle, id))
			continue;
		if (sent + n > NETD_RECORDS_SEND_MAX)
			break; /* the launcher summarises what it got */
		if (nout + n > NETD_LINES_MAX - 1) {
			if ((r = send_lines(fd, seq, out, nout)) < 0)
				goto out;
			nout = 0;
		}
		memcpy(out + nout, line, n);
		nout += n;
		sent += n;
	}
	if (nout && (r = send_lines(fd, seq, out, nout)) < 0)
		goto out;
done:
	r = ipc_send_empty(fd, NETD_MSG_LIST_END, seq);
out:
	if (in)
		fclose(in);
	free(line);
	free(out);
	return r;
}
