/* Learn mode, launcher side (`sluice run --learn FILE`): before the session, FILE is checked to be
 * new and writable; at exit, the session's allowed requests are read back from the audit log (the
 * same reader as the denial summary, summary.c), turned into the smallest policy that allows them
 * (policy_learn_render, policy/learn.c) and written to FILE atomically: a temporary file in the
 * same directory, linked into place only if FILE still does not exist. The directory is opened when
 * FILE is checked, before the command runs, and written through that descriptor: a command that can
 * write on the path cannot redirect the file (as root, anywhere) by swapping a component for a symlink. The decisions themselves
 * are the engine's: the policy option "learn" (docs/policy.md). */
#include "session.h"

#include "audit_read.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if SB_HAVE_POLICY
#include "policy.h"
#endif

/* Splits path into its directory ("." never: path is absolute) and checks that directory. */
static int learn_dir(const char *path, char *dir, size_t len, char *err, size_t errlen)
{
	const char *slash = strrchr(path, '/');
	struct stat st;
	size_t n = slash && slash != path ? (size_t)(slash - path) : 1;

	if (!slash || !slash[1]) {
		snprintf(err, errlen, "%s: want a file name, not a directory", path);
		return -EINVAL;
	}
	if (n >= len) {
		snprintf(err, errlen, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	memcpy(dir, path, n);
	dir[n] = '\0';
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s: the directory %s does not exist", path, dir);
		return -ENOENT;
	}
	if (access(dir, W_OK) < 0) {
		snprintf(err, errlen, "%s: cannot write in %s: %s", path, dir, strerror(errno));
		return -EACCES;
	}
	return 0;
}

int sb_learn_check(const char *path, int *dirfd, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	struct stat st;
	int r;

	*dirfd = -1;
	if (lstat(path, &st) == 0) {
		snprintf(err, errlen,
		         "%s: the file exists, and learn mode never overwrites one; remove it or name a new file (to "
		         "extend a learned policy, pass it with --policy and learn into a new file: what it allows "
		         "and the run uses is learned again)",
		         path);
		return -EEXIST;
	}
	if (errno != ENOENT) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	if ((r = learn_dir(path, dir, sizeof dir, err, errlen)) < 0)
		return r;
	/* the directory is held from now, before the command runs: what the command may later do to the
	 * path (a component swapped for a symlink) cannot move where the file is written */
	if ((*dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = -errno;
		snprintf(err, errlen, "%s: cannot open %s: %s", path, dir, strerror(errno));
		return r;
	}
	return 0;
}

#if SB_HAVE_POLICY
struct learn_ctx {
	struct policy_learn *l;
	unsigned records; /* allowed requests read */
	unsigned learnt;  /* ... of which learn mode allowed (no rule did) */
	int err;          /* first policy_learn_add error other than -EINVAL */
};

/* One record of the session: an allowed request (HTTP, inspected HTTPS, CONNECT, SOCKS5, a transparent
 * TLS stream), query or direct flow is a destination the policy must allow. A DNS query counts only when it was answered (NOERROR): a name the resolver does not
 * know (a search-domain guess) is no destination. Denials (forbidden addresses, organisation deny
 * rules) and drops are not learned: they were not allowed and stay so. */
static void collect(const struct audit_entry *rec, void *arg)
{
	struct learn_ctx *c = arg;
	const char *dec = rec->decision, *proto = rec->protocol, *host = rec->host, *rule = rec->rule;
	long long port = rec->port;
	int r;

	if (!dec || strcmp(dec, "allow") != 0 || !proto || !host || !*host)
		return;
	if (strcmp(proto, "dns") == 0) {
		if (rec->status != 0)
			return;
		port = 0;
	} else if (strcmp(proto, "http") != 0 && strcmp(proto, "https") != 0 && strcmp(proto, "connect") != 0 &&
	           strcmp(proto, "socks5") != 0 && strcmp(proto, "tls-sni") != 0 && strcmp(proto, "direct") != 0) {
		return;
	} else if (port < 1 || port > 65535) {
		return;
	}
	c->records++;
	if (rule && strcmp(rule, POLICY_LEARN_RULE) == 0)
		c->learnt++;
	r = policy_learn_add(c->l, host, (uint16_t)port);
	if (r < 0 && r != -EINVAL && !c->err)
		c->err = r;
}

/* "Learned by ...", the date, the command (bounded), and what to do with it. */
static void make_header(const struct sb_session *s, const char *id, char *buf, size_t len)
{
	char when[32], cmd[512] = "";
	time_t now = time(NULL);
	struct tm tm;
	size_t o = 0;

	gmtime_r(&now, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	for (size_t i = 0; s->argv[i] && o + 1 < sizeof cmd; i++)
		o += (size_t)snprintf(cmd + o, sizeof cmd - o, "%s%s", i ? " " : "", s->argv[i]);
	if (o >= sizeof cmd - 1)
		memcpy(cmd + sizeof cmd - 5, "...", 4);
	snprintf(buf, len,
	         "Learned by `sluice run --learn` (session %s, %s) from the run of:\n"
	         "  %s\n"
	         "The smallest policy that allows what the run reached: review it, then use it with\n"
	         "`sluice run --allow-network --policy FILE` or copy it to .sluice/policy.json.",
	         id, when, cmd);
}

/* Writes text as name in dirfd (the directory held since the check; path only names it in messages)
 * through a temporary file there; never replaces a file and follows no symlink. */
static int write_new_file(int dirfd, const char *path, const char *text, char *kept, size_t keptlen, char *err,
			  size_t errlen)
{
	const char *name = strrchr(path, '/') + 1;
	char tmp[64];
	size_t len = strlen(text), off = 0;
	mode_t mask = umask(0);
	int fd = -1, r = 0;

	umask(mask);
	kept[0] = '\0';
	for (int tries = 0; fd < 0 && tries < 16; tries++) {
		uint64_t rnd;

		if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
			rnd = (uint64_t)getpid() * 1000003u + (uint64_t)time(NULL) + (uint64_t)tries;
		snprintf(tmp, sizeof tmp, ".sluice-learn.%016llx", (unsigned long long)rnd);
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot create a file beside %s: %s", path, strerror(errno));
		return r;
	}
	while (off < len) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r = w < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)w;
	}
	if (r == 0 && (fchmod(fd, 0666 & ~mask) < 0 || fsync(fd) < 0))
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0) {
		snprintf(err, errlen, "cannot write %s beside %s: %s", tmp, path, strerror(-r));
		unlinkat(dirfd, tmp, 0);
		return r;
	}
	/* linkat() fails with EEXIST rather than replace (a symlink included): a file that appeared during the
	 * run is kept */
	if (linkat(dirfd, tmp, dirfd, name, 0) < 0) {
		r = -errno;
		if (r == -EEXIST) {
			snprintf(kept, keptlen, "%.*s%s", (int)(name - path), path, tmp);
			snprintf(err, errlen, "%s appeared during the run and is left alone; the learned policy is in %s "
				 "(in the directory as it was when the run began)", path, kept);
		} else {
			snprintf(err, errlen, "cannot create %s: %s", path, strerror(-r));
			unlinkat(dirfd, tmp, 0);
		}
		return r;
	}
	unlinkat(dirfd, tmp, 0);
	return 0;
}

/* sluiced tears the session down when the launcher hangs up, and the engine logs a tunnel when it
 * closes: give those last lines a moment (the log unchanged for 150 ms, 2 s at most). A missing line
 * would only leave a destination out of the policy (the enforcing run then says so): never wider. */
static void wait_settled(const char *log_path)
{
	struct stat st;
	off_t last = -1;
	int still = 0;

	for (int i = 0; i < 40 && still < 3; i++) {
		if (stat(log_path, &st) < 0)
			return;
		still = st.st_size == last ? still + 1 : 0;
		last = st.st_size;
		nanosleep(&(struct timespec){.tv_nsec = 50 * 1000 * 1000}, NULL);
	}
}

int sb_learn_write(const struct sb_session *s, const char *id, const char *log_path, long long from, bool settle)
{
	const struct sb_config *cfg = s->cfg;
	struct learn_ctx c = {0};
	struct policy_learn_summary sum;
	struct policy_error pe;
	char header[1024], err[SB_ERR_MAX + PATH_MAX], kept[PATH_MAX], pbuf[POLICY_ERR_MAX + 300];
	char *text = NULL;
	int r;

	if (!(c.l = policy_learn_new())) {
		fprintf(stderr, "sluice: --learn: out of memory; %s was not written\n", cfg->learn_file);
		return -ENOMEM;
	}
	if (settle)
		wait_settled(log_path);
	r = sb_summary_each(id, log_path, from, collect, &c);
	if (r < 0) {
		fprintf(stderr,
		        "sluice: --learn: cannot read the audit log %s: %s; %s was not written (learn mode reads "
		        "the session's records back: sluiced sends them, else the log must be readable by the user, see "
		        "docs/operations.md)\n",
		        log_path, strerror(-r), cfg->learn_file);
		goto out;
	}
	if (c.err) {
		r = c.err;
		fprintf(stderr, "sluice: --learn: %s; %s was not written\n",
		        r == -E2BIG ? "the run reached more than 100000 distinct destinations" : strerror(-r),
		        cfg->learn_file);
		goto out;
	}
	make_header(s, id, header, sizeof header);
	memset(&pe, 0, sizeof pe);
	if (!(text = policy_learn_render(c.l, NULL, header, &sum, &pe))) {
		fprintf(stderr, "sluice: --learn: %s; %s was not written\n", policy_error_format(&pe, pbuf, sizeof pbuf),
		        cfg->learn_file);
		r = -EINVAL;
		goto out;
	}
	if ((r = write_new_file(cfg->learn_dirfd, cfg->learn_file, text, kept, sizeof kept, err, sizeof err)) < 0) {
		fprintf(stderr, "sluice: --learn: %s\n", err);
		goto out;
	}
	if (!cfg->quiet)
		fprintf(stderr,
		        "sluice: learned policy written to %s: %zu destination%s (%u request%s, %u allowed by learn "
		        "mode) -> %zu preset%s%s%s%s, %zu allow entr%s\n",
		        cfg->learn_file, sum.destinations, sum.destinations == 1 ? "" : "s", c.records,
		        c.records == 1 ? "" : "s", c.learnt, sum.presets, sum.presets == 1 ? "" : "s",
		        sum.presets ? " (" : "", sum.preset_names, sum.presets ? ")" : "", sum.hosts,
		        sum.hosts == 1 ? "y" : "ies");
out:
	free(text);
	policy_learn_free(c.l);
	return r;
}
#else
int sb_learn_write(const struct sb_session *s, const char *id, const char *log_path, long long from, bool settle)
{
	(void)id;
	(void)log_path;
	(void)from;
	(void)settle;
	fprintf(stderr, "sluice: --learn: this build has no policy library; %s was not written\n", s->cfg->learn_file);
	return -ENOSYS;
}
#endif
