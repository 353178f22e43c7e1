/* What earlier sessions could write on the host (issue 22, item 1: a policy file changed by a session
 * is never trusted silently by the next one). `.sluice/` and `.git` at the top of an rw project are
 * read-only inside, and the overlay's protected changes wait for the user's word (protect.c); but a
 * session with --project-mode rw or a read-write --bind can still write the policy of *another*
 * project beneath it (`sub/.sluice/policy.json`), which a later `sluice run` in sub/ would load.
 *
 * So the launcher keeps a record of the time windows in which sessions could write host directories:
 * after a session with a writable project or --bind ends (every process of it is gone), one line
 * "START_NS END_NS ID PATH" per such directory is appended to $XDG_STATE_HOME/sluice/writes
 * (~/.local/state/sluice/writes; over 512 KiB it becomes writes.old, one generation kept). Before a
 * session starts, a project policy file (or the user's, which a read-write bind of ~/.config reaches)
 * whose ctime falls inside the window of a directory holding it was changed while a session could
 * write it: the launcher refuses it (125) until the user has
 * looked at it and touched it (the ctime of a file cannot be set, only moved to now). The record is
 * read as untrusted text (a session with the home bound read-write could write it): bounded, parsed
 * line by line, anything malformed skipped (fuzz_writes). */
#include "session.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SB_WRITES_MAX (1 << 20) /* bytes of one generation of the record */

/* coarse: the clock file times come from, which lags the fine one by up to a tick; a window starts by
 * it and ends by the fine one, so it holds every change made in it */
int64_t sb_writes_now(bool coarse)
{
	struct timespec ts;
	clock_gettime(coarse ? CLOCK_REALTIME_COARSE : CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* $XDG_STATE_HOME/sluice or HOME/.local/state/sluice; false when there is neither. */
static bool state_dir(const struct sb_config *c, char *out, size_t len)
{
	const char *xdg = getenv("XDG_STATE_HOME");
	int n;
	if (xdg && xdg[0] == '/')
		n = snprintf(out, len, "%s/sluice", xdg);
	else if (c->home && strcmp(c->home, "/") != 0)
		n = snprintf(out, len, "%s/.local/state/sluice", c->home);
	else
		return false;
	return n > 0 && (size_t)n < len;
}

int sb_writes_match(const char *buf, size_t len, const char *file, int64_t ctime_ns, char *id, size_t idlen)
{
	size_t flen = strlen(file);
	int found = 0;

	for (size_t off = 0; off < len;) {
		const char *line = buf + off, *nl = memchr(line, '\n', len - off);
		size_t ll = nl ? (size_t)(nl - line) : len - off;
		off += ll + 1;
		char tmp[PATH_MAX + 128];
		if (!nl || ll >= sizeof tmp)
			continue; /* the last line unfinished, or too long: not a record */
		memcpy(tmp, line, ll);
		tmp[ll] = '\0';
		if (strlen(tmp) != ll)
			continue; /* a NUL inside */
		char *p = tmp, *end;
		errno = 0;
		long long start = strtoll(p, &end, 10);
		if (errno || end == p || *end != ' ')
			continue;
		p = end + 1;
		long long stop = strtoll(p, &end, 10);
		if (errno || end == p || *end != ' ' || stop < start)
			continue;
		p = end + 1;
		char *sp = strchr(p, ' ');
		if (!sp || sp == p || (size_t)(sp - p) >= SB_ID_LEN)
			continue;
		*sp = '\0';
		const char *sid = p, *dir = sp + 1;
		size_t dl = strlen(dir);
		while (dl > 1 && dir[dl - 1] == '/')
			dl--;
		if (dir[0] != '/' || dl == 0)
			continue;
		/* the file lies beneath the directory the session could write */
		bool under = dl == 1 || (flen > dl && strncmp(file, dir, dl) == 0 && file[dl] == '/');
		if (!under || ctime_ns < start || ctime_ns > stop)
			continue;
		found = 1;
		if (id && idlen)
			util_strlcpy(id, sid, idlen);
	}
	return found;
}

/* Reads one generation of the record (at most SB_WRITES_MAX bytes) into a malloced buffer. */
static char *read_record(const char *path, size_t *len)
{
	cleanup_fd int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	char *buf;
	*len = 0;
	if (fd < 0 || !(buf = malloc(SB_WRITES_MAX)))
		return NULL;
	while (*len < SB_WRITES_MAX) {
		ssize_t n = read(fd, buf + *len, SB_WRITES_MAX - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		*len += (size_t)n;
	}
	return buf;
}

/* -EPERM when the policy file `spelled` (where it really is) changed inside a recorded window. */
static int check_file(const char *dir, const char *spelled, char *err, size_t errlen)
{
	char file[PATH_MAX], rec[PATH_MAX + 16], id[SB_ID_LEN] = "";
	struct stat st;

	if (!realpath(spelled, file) || stat(file, &st) < 0)
		return 0;
	int64_t ct = (int64_t)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec;
	static const char *const gens[] = {"writes", "writes.old"};
	for (size_t g = 0; g < 2; g++) {
		size_t len;
		snprintf(rec, sizeof rec, "%s/%s", dir, gens[g]);
		char *buf = read_record(rec, &len);
		int m = buf ? sb_writes_match(buf, len, file, ct, id, sizeof id) : 0;
		free(buf);
		if (m)
			return sb_errc(err, errlen, EPERM,
			               "%s was changed while session %s could write it (--project-mode rw or --bind); "
			               "review it, then `touch` it to use it (or remove it)",
			               spelled, id);
	}
	return 0;
}

int sb_writes_check(const struct sb_config *c, char *err, size_t errlen)
{
	char dir[PATH_MAX], file[PATH_MAX];
	const char *xdg = getenv("XDG_CONFIG_HOME");
	int r, n;

	if (!state_dir(c, dir, sizeof dir))
		return 0;
	/* the project's policy, and the user's (a read-write bind of ~/.config could reach it) */
	if (c->project_dir &&
	    (size_t)snprintf(file, sizeof file, "%s/.sluice/policy.json", c->project_dir) < sizeof file &&
	    (r = check_file(dir, file, err, errlen)) < 0)
		return r;
	if (xdg && xdg[0] == '/')
		n = snprintf(file, sizeof file, "%s/sluice/policy.json", xdg);
	else if (c->home)
		n = snprintf(file, sizeof file, "%s/.config/sluice/policy.json", c->home);
	else
		return 0;
	return n > 0 && (size_t)n < sizeof file ? check_file(dir, file, err, errlen) : 0;
}

/* Appends one line for the writable host directory path (resolved) of session s. */
static void record_one(FILE *f, const struct sb_session *s, const char *path, int64_t start, int64_t end)
{
	char real[PATH_MAX];
	if (!realpath(path, real) || strpbrk(real, "\n"))
		return;
	fprintf(f, "%" PRId64 " %" PRId64 " %s %s\n", start, end, s->id, real);
}

void sb_writes_record(const struct sb_session *s, int64_t start, int64_t end)
{
	const struct sb_config *c = s->cfg;
	char dir[PATH_MAX], rec[PATH_MAX + 16], old[PATH_MAX + 16];
	bool any = c->project_mode == SB_PROJECT_RW;
	struct stat st;

	for (size_t i = 0; i < c->n_binds; i++)
		any |= c->binds[i].rw;
	if (!any || !state_dir(c, dir, sizeof dir))
		return;
	/* the state directory, made as the user (a root launch: root's) */
	for (char *p = dir + 1;; p++) {
		if (*p != '/' && *p)
			continue;
		char sv = *p;
		*p = '\0';
		if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
			log_warn("cannot create %s to record what the session could write", dir);
			return;
		}
		*p = sv;
		if (!sv)
			break;
	}
	snprintf(rec, sizeof rec, "%s/writes", dir);
	snprintf(old, sizeof old, "%s/writes.old", dir);
	if (lstat(rec, &st) == 0 && st.st_size > SB_WRITES_MAX / 2)
		(void)rename(rec, old);
	int fd = open(rec, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "a") : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		log_warn("cannot record what the session could write in %s", rec);
		return;
	}
	if (c->project_mode == SB_PROJECT_RW)
		record_one(f, s, c->project_dir, start, end);
	for (size_t i = 0; i < c->n_binds; i++)
		if (c->binds[i].rw)
			record_one(f, s, c->binds[i].src, start, end);
	if (fclose(f) != 0)
		log_warn("cannot record what the session could write in %s", rec);
	/* File times come from the coarse clock, up to a tick behind the fine one that ended the window: a
	 * change made right after the launcher returns (a script's `touch` after a refusal) could get a
	 * ctime inside the window and be refused again. Return once the coarse clock has passed the end
	 * (at most a tick: 1-10 ms; bounded at 100 ms should the clock misbehave). */
	for (int i = 0; i < 200 && sb_writes_now(true) <= end; i++) {
		struct timespec pause = {0, 500000};
		nanosleep(&pause, NULL);
	}
}
