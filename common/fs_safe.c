/* Files in someone else's tree, written on their behalf without following their symlinks and with
 * their credentials, and directories of the caller's own that no other user can have chosen (see fs_safe.h). */
#include "fs_safe.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

/* One component of a path: not empty, not "." or "..", no '/'. */
static bool good_component(const char *s, size_t n)
{
	if (n == 0 || n >= NAME_MAX + 1)
		return false;
	if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return false;
	return memchr(s, '/', n) == NULL;
}

/* Walks REL beneath DFD (borrowed), one component at a time, each opened O_NOFOLLOW|O_DIRECTORY. */
static int walk(int dfd, const char *rel, bool create, mode_t mode)
{
	char name[NAME_MAX + 1];
	int cur = -1;
	const char *p = rel;

	while (*p == '/')
		p++;
	cur = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	if (cur < 0)
		return -errno;
	while (*p) {
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		int next;

		if (!good_component(p, n)) {
			close(cur);
			return -EINVAL;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && create) {
			if (mkdirat(cur, name, mode) < 0 && errno != EEXIST) {
				int r = -errno;
				close(cur);
				return r;
			}
			next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (next < 0) {
			/* a symlink where a directory was expected: O_NOFOLLOW|O_DIRECTORY says ENOTDIR on some
			 * kernels, ELOOP on others; call it what it is */
			int r = -errno;
			struct stat st;
			if (fstatat(cur, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
				r = -ELOOP;
			close(cur);
			return r;
		}
		close(cur);
		cur = next;
		for (p = e; *p == '/'; p++)
			;
	}
	return cur;
}

int fs_safe_open_dir(const char *path)
{
	cleanup_fd int root = -1;

	if (!path || path[0] != '/')
		return -EINVAL;
	root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return -errno;
	return walk(root, path + 1, false, 0);
}

int fs_safe_open_subdir(int dfd, const char *rel, bool create, mode_t mode)
{
	if (!rel || rel[0] == '/' || rel[0] == '\0')
		return -EINVAL;
	return walk(dfd, rel, create, mode);
}

int fs_safe_read(int dfd, const char *name, size_t max, char **text, size_t *len, struct stat *st_out)
{
	cleanup_fd int fd = -1;
	cleanup_free char *buf = NULL;
	struct stat st;
	size_t got = 0;

	*text = NULL;
	*len = 0;
	if (!good_component(name, strlen(name)))
		return -EINVAL;
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uintmax_t)st.st_size > max)
		return -EFBIG;
	if (!(buf = malloc((size_t)st.st_size + 1)))
		return -ENOMEM;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break; /* shrank meanwhile: what is there */
		got += (size_t)n;
	}
	buf[got] = '\0';
	if (st_out)
		*st_out = st;
	*len = got;
	*text = steal_pointer(&buf);
	return 0;
}

static int write_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

int fs_safe_replace(int dfd, const char *name, const char *text, size_t len, mode_t mode)
{
	char tmp[NAME_MAX + 1];
	unsigned char rnd[6];
	int fd, r;

	if (!good_component(name, strlen(name)) || strlen(name) > NAME_MAX - 16)
		return -EINVAL;
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		return -EIO;
	snprintf(tmp, sizeof tmp, ".%s.%02x%02x%02x%02x%02x%02x", name, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
	if (fd < 0)
		return -errno;
	/* the umask may have narrowed it; the mode asked for is the mode kept */
	if (fchmod(fd, mode & 0777) < 0 || (r = write_all(fd, text, len)) < 0 || fsync(fd) < 0) {
		r = -errno;
		goto fail;
	}
	if (close(fd) < 0) {
		fd = -1;
		r = -errno;
		goto fail;
	}
	fd = -1;
	if (renameat(dfd, tmp, dfd, name) < 0) {
		r = -errno;
		goto fail;
	}
	(void)fsync(dfd);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlinkat(dfd, tmp, 0);
	return r ? r : -EIO;
}

/* The child's end: drops to uid:gid for good, runs fn, sends back its result and message. */
static _Noreturn void run_child(int wfd, uid_t uid, gid_t gid, int (*fn)(void *, char *, size_t), void *arg,
                                size_t errlen)
{
	struct {
		int r;
		char err[1024];
	} msg = {.r = -EPERM};
	struct passwd *pw = getpwuid(uid);
	int ok;

	if (pw)
		gid = pw->pw_gid;
	ok = (pw ? initgroups(pw->pw_name, gid) : setgroups(1, &gid)) == 0 && setresgid(gid, gid, gid) == 0 &&
	     setresuid(uid, uid, uid) == 0 && geteuid() == uid && getegid() == gid;
	if (!ok) {
		snprintf(msg.err, sizeof msg.err, "cannot take the credentials of uid %u: %s", (unsigned)uid,
		         strerror(errno));
	} else {
		msg.r = fn(arg, msg.err, errlen < sizeof msg.err ? errlen : sizeof msg.err);
	}
	fflush(stdout);
	fflush(stderr);
	(void)!write(wfd, &msg, sizeof msg);
	_exit(0);
}

int fs_safe_run_as(uid_t uid, gid_t gid, int (*fn)(void *arg, char *err, size_t errlen), void *arg, char *err,
                   size_t errlen)
{
	struct {
		int r;
		char err[1024];
	} msg;
	int pfd[2], status;
	size_t got = 0;
	pid_t pid;

	if (geteuid() != 0 || uid == 0)
		return fn(arg, err, errlen);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(pfd[0]);
		close(pfd[1]);
		return r;
	}
	if (pid == 0) {
		close(pfd[0]);
		run_child(pfd[1], uid, gid, fn, arg, errlen);
	}
	close(pfd[1]);
	memset(&msg, 0, sizeof msg);
	while (got < sizeof msg) {
		ssize_t n = read(pfd[0], (char *)&msg + got, sizeof msg - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (got != sizeof msg) {
		snprintf(err, errlen, "the writer running as uid %u died before it answered", (unsigned)uid);
		return -EIO;
	}
	msg.err[sizeof msg.err - 1] = '\0';
	if (errlen)
		util_strlcpy(err, msg.err, errlen);
	return msg.r > 0 ? 0 : msg.r;
}

/* Whether a directory or file with stat ST may be trusted by UID: UID or root owns it and nobody else
 * can write it (a sticky directory lets others add entries but not replace UID's or root's). */
static int owner_ok(const struct stat *st, uid_t uid, const char *path, char *why, size_t whylen)
{
	if (st->st_uid != uid && st->st_uid != 0) {
		snprintf(why, whylen, "%s is owned by uid %u, not by uid %u or root", path, (unsigned)st->st_uid,
		         (unsigned)uid);
		return -EPERM;
	}
	return 0;
}

static int owned_ok(const struct stat *st, uid_t uid, bool sticky_ok, const char *path, char *why, size_t whylen)
{
	int r = owner_ok(st, uid, path, why, whylen);
	if (r < 0)
		return r;
	if ((st->st_mode & 022) && !(sticky_ok && (st->st_mode & S_ISVTX))) {
		snprintf(why, whylen, "%s is writable by %s (mode %04o)", path,
		         (st->st_mode & 002) ? "others" : "its group", (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

int fs_safe_open_owned_dir(const char *path, uid_t uid, bool create, mode_t mode, char *resolved, size_t rlen,
                           char *why, size_t whylen)
{
	char rest[PATH_MAX], done[PATH_MAX] = "", name[NAME_MAX + 1], target[PATH_MAX];
	cleanup_fd int cur = -1;
	struct stat st;
	int hops = 0, r;
	char *p;

	if (whylen)
		why[0] = '\0';
	if (!path || path[0] != '/' || strlen(path) >= sizeof rest) {
		snprintf(why, whylen, "%s: not an absolute path", path ? path : "(null)");
		return -EINVAL;
	}
	memcpy(rest, path, strlen(path) + 1);
	if ((cur = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fstat(cur, &st) < 0)
		return -errno;
	if ((r = owned_ok(&st, uid, true, "/", why, whylen)) < 0)
		return r;
	for (p = rest;;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		char *e = strchrnul(p, '/'), *after = e;
		size_t n = (size_t)(e - p), dl = strlen(done);
		while (*after == '/')
			after++;
		bool last = !*after;
		if (n > NAME_MAX) {
			snprintf(why, whylen, "%s/%.*s: name too long", done, (int)n, p);
			return -ENAMETOOLONG;
		}
		memcpy(name, p, n);
		name[n] = '\0';
		p = e;
		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0) {
			/* back to the parent, which the walk checked already (or "/") */
			int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (up < 0)
				return -errno;
			close(cur);
			cur = up;
			char *slash = strrchr(done, '/');
			if (slash)
				*slash = '\0';
			continue;
		}
		if (dl + 1 + n >= sizeof done) {
			snprintf(why, whylen, "%s: path too long", path);
			return -ENAMETOOLONG;
		}
		done[dl] = '/';
		memcpy(done + dl + 1, name, n + 1);
		if (fstatat(cur, name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT && create) {
			if (mkdirat(cur, name, mode) < 0 && errno != EEXIST) {
				r = -errno;
				snprintf(why, whylen, "cannot create %s: %s", done, strerror(-r));
				return r;
			}
		}
		if (fstatat(cur, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
			snprintf(why, whylen, "%s: %s", done, strerror(-r));
			return r;
		}
		if (S_ISLNK(st.st_mode)) {
			if (last) {
				snprintf(why, whylen, "%s is a symlink", done);
				return -ELOOP;
			}
			if ((r = owner_ok(&st, uid, done, why, whylen)) < 0) /* a symlink's mode means nothing */
				return r;
			ssize_t tl = readlinkat(cur, name, target, sizeof target - 1);
			if (tl < 0)
				return -errno;
			if (++hops > 40 || (size_t)tl + 1 + strlen(p) >= sizeof rest) {
				snprintf(why, whylen, "%s: too many symlinks", path);
				return -ELOOP;
			}
			target[tl] = '\0';
			/* REST becomes TARGET/what was left after the link */
			memmove(rest + tl + 1, p, strlen(p) + 1);
			memcpy(rest, target, (size_t)tl);
			rest[tl] = '/';
			p = rest;
			done[dl] = '\0';
			if (target[0] == '/') {
				int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				if (root < 0)
					return -errno;
				close(cur);
				cur = root;
				done[0] = '\0';
			}
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			snprintf(why, whylen, "%s is not a directory", done);
			return -ENOTDIR;
		}
		int next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			r = -errno;
			snprintf(why, whylen, "%s: %s", done, strerror(-r));
			return r;
		}
		close(cur);
		cur = next;
		/* what was opened is what is judged (not what fstatat saw a moment before); the last
		 * component is judged after the walk, without the sticky exception */
		if (!last) {
			if (fstat(cur, &st) < 0)
				return -errno;
			if ((r = owned_ok(&st, uid, true, done, why, whylen)) < 0)
				return r;
		}
	}
	if (fstat(cur, &st) < 0)
		return -errno;
	if ((r = owned_ok(&st, uid, false, done[0] ? done : "/", why, whylen)) < 0)
		return r;
	if (resolved && rlen)
		snprintf(resolved, rlen, "%s", done[0] ? done : "/");
	return steal_fd(&cur);
}

int fs_safe_open_owned_file(int dfd, const char *name, uid_t uid, char *why, size_t whylen)
{
	cleanup_fd int fd = -1;
	struct stat st;
	int r;

	if (whylen)
		why[0] = '\0';
	if (!good_component(name, strlen(name)))
		return -EINVAL;
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		if (r == -ELOOP)
			snprintf(why, whylen, "%s is a symlink", name);
		return r;
	}
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s is not a regular file", name);
		return -EINVAL;
	}
	if ((r = owned_ok(&st, uid, false, name, why, whylen)) < 0)
		return r;
	return steal_fd(&fd);
}
