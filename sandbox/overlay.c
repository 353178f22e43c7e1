/* The session directory and the project step: creates SESSION (upper/ and work/ in overlay mode),
 * mounts the project at its own path in the sandbox (overlayfs with upper/work in SESSION, or a
 * read-write or read-only bind), and after the session either discards the changes (removes
 * SESSION), writes them as a patch (--save: `diff -ruN` of the project against the merged view,
 * kept with the upper dir in SESSION), or applies the upper dir onto the project (--apply),
 * honouring overlayfs whiteouts (deleted files) and opaque directories (replaced directories).
 * Everything in upper/ was written by the sandboxed command: it is walked by fd, never following
 * a symlink, and no set-id bit is carried over. */
#include "session.h"

#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

static int rm_rf_at(int at, const char *name);

/* A directory we own, not a symlink, not writable by others (it may live in /var/tmp). */
static int ensure_private_dir(const char *path, uid_t uid, char *err, size_t errlen)
{
	struct stat st;
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return sb_err(err, errlen, "cannot create %s: %s", path, strerror(errno));
	if (lstat(path, &st) < 0)
		return sb_err(err, errlen, "%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 022))
		return sb_errc(err, errlen, EPERM,
		               "%s is not a private directory owned by uid %u; remove it or set XDG_RUNTIME_DIR", path,
		               (unsigned)uid);
	return 0;
}

/* Removes the session directories, lock files (a session without a directory, below) and cgroups
 * of launchers that died without tearing down: unlocked, and not kept on purpose (--save). */
static void reap_stale(const char *base)
{
	cleanup_fd int bfd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;

	if (bfd < 0)
		return;
	int dup_fd = fcntl(bfd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0 || !(d = fdopendir(dup_fd))) {
		if (dup_fd >= 0)
			close(dup_fd);
		return;
	}
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || strlen(de->d_name) != SB_ID_LEN - 1)
			continue;
		/* O_NONBLOCK: nothing but our own directories and files should be here (the base is
		 * private), but a fifo must not hang the launcher */
		cleanup_fd int fd = openat(bfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) ||
		    flock(fd, LOCK_EX | LOCK_NB) < 0)
			continue; /* a live session (or not ours to judge) */
		if (S_ISDIR(st.st_mode) && faccessat(fd, "kept", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			continue; /* saved by the user */
		/* The cgroups first: while they cannot go, the directory stays to be retried later. */
		if (sb_cgroup_reap(de->d_name) < 0)
			continue;
		log_info("removing the session %s %s/%s left by a launcher that died",
		         S_ISDIR(st.st_mode) ? "directory" : "lock file", base, de->d_name);
		rm_rf_at(bfd, de->d_name);
	}
	closedir(d);
}

/* Whether the session keeps anything in its directory: resolv.conf and the CA bundle (--allow-network),
 * upper/, changes.patch and project (--save, --apply), ctr/ (the container types), the other sandbox
 * types' files. A local session without these records nothing there: it gets no directory, only a
 * lock file of the same name, and pid 1 stacks its mounts on the base directory instead. On a file
 * system that discards freed blocks (ext4 `-o discard`, this project's development VM's /run), removing
 * a directory waits for the device to discard its block, 0.2-4 ms per launch; an empty file has none. */
static bool records_in_dir(const struct sb_config *c)
{
	return c->type != SB_TYPE_LOCAL || c->allow_network || c->save != SB_SAVE_NONE;
}

int sb_session_dir_create(struct sb_session *s, char *err, size_t errlen)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	char base[PATH_MAX], path[PATH_MAX];
	uint8_t rnd[8];
	int r;

	if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
		return sb_err(err, errlen, "getrandom: %s", strerror(errno));
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);

	struct stat st;
	if (rt && rt[0] == '/' && stat(rt, &st) == 0 && st.st_uid == s->cfg->uid) {
		snprintf(base, sizeof base, "%s/sluice", rt);
		if ((r = ensure_private_dir(base, s->cfg->uid, err, errlen)) < 0)
			return r;
	} else if (s->cfg->uid == 0) {
		if ((mkdir("/run/sluice", 0755) < 0 && errno != EEXIST) ||
		    (mkdir("/run/sluice/sessions", 0700) < 0 && errno != EEXIST))
			return sb_err(err, errlen, "cannot create /run/sluice/sessions: %s", strerror(errno));
		util_strlcpy(base, "/run/sluice/sessions", sizeof base);
		if ((r = ensure_private_dir(base, 0, err, errlen)) < 0)
			return r;
	} else {
		snprintf(base, sizeof base, "/var/tmp/sluice-%u", (unsigned)s->cfg->uid);
		if ((r = ensure_private_dir(base, s->cfg->uid, err, errlen)) < 0)
			return r;
	}
	reap_stale(base);
	/* Created under a hidden name and locked before it gets its real name, so a concurrent
	 * launcher's reap_stale never sees it unlocked. The lock lives as long as the launcher (and
	 * pid 1 until it closes its fds): a dead launcher's directory or lock file is reaped by the next
	 * one. */
	char tmp[PATH_MAX];
	bool dir = records_in_dir(s->cfg);
	if ((size_t)snprintf(path, sizeof path, "%s/%s", base, s->id) >= sizeof path - 32 ||
	    (size_t)snprintf(tmp, sizeof tmp, "%s/.new-%s", base, s->id) >= sizeof tmp)
		return sb_errc(err, errlen, ENAMETOOLONG, "session directory path too long");
	if (dir) {
		if (mkdir(tmp, 0700) < 0)
			return sb_err(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
		s->lock_fd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	} else {
		s->lock_fd = open(tmp, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (s->lock_fd < 0)
			return sb_err(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
	}
	if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0 || rename(tmp, path) < 0) {
		int e = errno;
		if (dir)
			rmdir(tmp);
		else
			unlink(tmp);
		errno = e;
		return sb_err(err, errlen, "cannot set up %s: %s", path, strerror(errno));
	}
	if (!(s->anchor = strdup(dir ? path : base)) || (dir && !(s->dir = strdup(path))))
		return -ENOMEM;
	/* The directory itself (else the base) is the mount point of the scratch space and the new root
	 * (in the sandbox's mount namespace only); upper/ receives the overlay's changes at exit for
	 * --save and --apply (scratch.c). Every directory costs a rmdir at the end, which on a file system
	 * mounted with `discard` waits for the device: create only what is used. */
	if (!dir || s->cfg->project_mode != SB_PROJECT_OVERLAY || s->cfg->save == SB_SAVE_NONE)
		return 0;
	cleanup_fd int dfd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || mkdirat(dfd, "upper", 0700) < 0)
		return sb_err(err, errlen, "cannot populate %s: %s", path, strerror(errno));
	return 0;
}

/* Removes NAME under dirfd recursively without following symlinks or leaving the file system. */
static int rm_rf_at(int at, const char *name)
{
	struct stat st;
	if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(at, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EACCES) {
		/* overlayfs leaves work/work with mode 0 */
		fchmodat(at, name, 0700, 0);
		fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		int rr = rm_rf_at(dirfd(d), de->d_name);
		if (rr < 0 && r == 0)
			r = rr;
	}
	closedir(d);
	if (unlinkat(at, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
		r = -errno;
	return r;
}

void sb_session_dir_remove(struct sb_session *s)
{
	if (!s->dir) {
		/* a session without a directory: its lock file (an empty file: nothing to discard) */
		char path[PATH_MAX];
		if (s->anchor && (size_t)snprintf(path, sizeof path, "%s/%s", s->anchor, s->id) < sizeof path &&
		    unlink(path) < 0 && errno != ENOENT)
			log_warn("cannot remove the session's lock file %s", path);
	} else if (s->keep_dir) {
		/* Marks it as kept on purpose, so later launchers do not reap it. */
		int k = open(s->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int f = k >= 0 ? openat(k, "kept", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
		if (f >= 0)
			close(f);
		if (k >= 0)
			close(k);
	} else {
		/* The per-user base (/var/tmp/sluice-UID, $XDG_RUNTIME_DIR/sluice) stays, empty, like
		 * /run/sluice/sessions: removing and recreating it would race with concurrent sessions. */
		int r = rm_rf_at(AT_FDCWD, s->dir);
		if (r < 0)
			log_warnx("cannot remove session directory %s: %s", s->dir, strerror(-r));
	}
	free(s->dir);
	s->dir = NULL;
	free(s->anchor);
	s->anchor = NULL;
}

int sb_overlay_mount_project(const struct sb_session *s, int rootfd, int upperfd, int workfd, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	const struct sb_source *src = s->n_sources && s->sources[0].kind == SB_SRC_PROJECT ? &s->sources[0] : NULL;
	char upper[64], work[64], lower[64];
	cleanup_fd int target = -1, lowerfd = -1;
	int r;

	if (!c->project_dir || !src || src->tree < 0)
		return 0;
	/* The project was resolved with realpath on the host and opened once (binds.c); its mount point
	 * is made in the root tmpfs component by component, never through a symlink. */
	target = sb_mkpath(rootfd, c->project_dir, true, err, errlen);
	if (target < 0)
		return target;
	/* rw and ro: the bind itself (read-only or not, binds.c). overlay: the bind is the lower layer,
	 * named through a descriptor (overlayfs resolves the magic link) so that it is exactly the
	 * directory that was checked, and the overlay is stacked on it. */
	if ((r = sb_attach(src->tree, target, c->project_dir, err, errlen)) < 0)
		return r;
	if (c->project_mode != SB_PROJECT_OVERLAY)
		return sb_protect_mount_rw(s, rootfd, err, errlen);
	lowerfd = sb_open_beneath(rootfd, c->project_dir, O_PATH | O_DIRECTORY, err, errlen);
	if (lowerfd < 0)
		return lowerfd;
	cleanup_fd int fs = fsopen("overlay", FSOPEN_CLOEXEC);
	/* The session directory is covered by the new root by now: name upper/ and work/ through
	 * the fds opened before (overlayfs resolves the magic links). */
	snprintf(upper, sizeof upper, "/proc/self/fd/%d", upperfd);
	snprintf(work, sizeof work, "/proc/self/fd/%d", workfd);
	snprintf(lower, sizeof lower, "/proc/self/fd/%d", lowerfd);
	if (fs < 0)
		return sb_err(err, errlen, "overlayfs is not available: %s (use --project-mode rw or ro)",
		              strerror(errno));
	/* The upper dir must stand alone for --save/--apply: no redirects, metacopy or index. */
	if (fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir", lower, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "workdir", work, 0) < 0 ||
	    (s->userns && fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0) ||
	    (!s->userns && fsconfig(fs, FSCONFIG_SET_STRING, "redirect_dir", "off", 0) < 0) ||
	    (!s->userns && fsconfig(fs, FSCONFIG_SET_STRING, "metacopy", "off", 0) < 0) ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "index", "off", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sb_err(err, errlen, "cannot set up the overlay over %s: %s", c->project_dir, strerror(errno));
	cleanup_fd int tree = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (tree < 0)
		return sb_err(err, errlen, "cannot mount the overlay over %s: %s", c->project_dir, strerror(errno));
	return sb_attach(tree, lowerfd, c->project_dir, err, errlen);
}

/* ---- after the session ---- */

static bool is_opaque(int fd)
{
	char v[4];
	ssize_t n = fgetxattr(fd, "trusted.overlay.opaque", v, sizeof v);
	if (n < 0)
		n = fgetxattr(fd, "user.overlay.opaque", v, sizeof v);
	return n == 1 && v[0] == 'y';
}

int sb_overlay_copy_file(int upfd, int projfd, const char *name, mode_t mode)
{
	cleanup_fd int in = openat(upfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return -errno;
	int r = rm_rf_at(projfd, name);
	if (r < 0)
		return r;
	/* No set-id bits: the sandbox must not mint setuid files in the user's tree. */
	cleanup_fd int out = openat(projfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
	if (out < 0)
		return -errno;
	char buf[65536];
	for (;;) {
		ssize_t n = read(in, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				return -errno;
			off += w;
		}
	}
	return fchmod(out, mode & 0777) < 0 ? -errno : 0;
}

DIR *sb_opendir_dup(int fd)
{
	int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d && dup_fd >= 0) {
		int e = errno;
		close(dup_fd);
		errno = e;
	}
	return d;
}

/* --apply: the configuration, and the protected changes met (applied or not, by apply_protected). */
struct apply_ctx {
	const struct sb_config *c;
	struct sb_strv prot;
};

/* Adds the change at upfd/name (shown as rel) to ctx->prot: a file, a deletion, a directory replaced
 * or made whole, and for a directory every change beneath it. projfd: the project's directory at the
 * same place, or -1 where it has none. */
static int list_change(struct apply_ctx *ctx, int upfd, int projfd, const char *name, const char *rel)
{
	char shown[PATH_MAX + 32];
	struct stat st, pst;
	int r;
	if (fstatat(upfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode)) {
		bool gone = S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
		snprintf(shown, sizeof shown, "%s%s", rel, gone ? " (deleted)" : "");
		return sb_strv_add(&ctx->prot, shown);
	}
	cleanup_fd int sub_up = openat(upfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub_up < 0)
		return -errno;
	bool exists = projfd >= 0 && fstatat(projfd, name, &pst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(pst.st_mode);
	if (!exists || is_opaque(sub_up)) {
		snprintf(shown, sizeof shown, "%s/ (directory %s)", rel, exists ? "replaced" : "created");
		if ((r = sb_strv_add(&ctx->prot, shown)) < 0)
			return r;
	}
	cleanup_fd int sub_proj = exists ? openat(projfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	DIR *d = sb_opendir_dup(sub_up);
	struct dirent *de;
	if (!d)
		return -errno;
	r = 0;
	while (r == 0 && (de = readdir(d))) {
		char sub[PATH_MAX];
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(sub, sizeof sub, "%s/%s", rel, de->d_name);
		r = list_change(ctx, sub_up, sub_proj, de->d_name, sub);
	}
	closedir(d);
	return r;
}

/* Mirrors the overlay upper dir upfd onto the project dir projfd; protected paths (protect.c) only
 * with --apply-protected. */
static int apply_dir(struct apply_ctx *ctx, int upfd, int projfd, const char *relpath)
{
	DIR *d = sb_opendir_dup(upfd);
	struct dirent *de;
	int r = 0;

	if (!d)
		return -errno;
	while (r == 0 && (de = readdir(d))) {
		struct stat st;
		const char *n = de->d_name;
		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		char sub[PATH_MAX];
		snprintf(sub, sizeof sub, "%s/%s", relpath, n);
		if (fstatat(upfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
			break;
		}
		if (sb_protect_match(ctx->c, sub)) {
			if ((r = list_change(ctx, upfd, projfd, n, sub + 2)) < 0 || !ctx->c->apply_protected)
				continue;
		}
		if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
			r = rm_rf_at(projfd, n); /* whiteout: deleted in the sandbox */
		} else if (S_ISDIR(st.st_mode)) {
			cleanup_fd int sub_up = openat(upfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			struct stat pst;
			if (sub_up < 0) {
				r = -errno;
				break;
			}
			bool exists = fstatat(projfd, n, &pst, AT_SYMLINK_NOFOLLOW) == 0;
			if (exists && (!S_ISDIR(pst.st_mode) || is_opaque(sub_up))) {
				if ((r = rm_rf_at(projfd, n)) < 0)
					break;
				exists = false;
			}
			if (!exists && mkdirat(projfd, n, st.st_mode & 0777) < 0) {
				r = -errno;
				break;
			}
			cleanup_fd int sub_proj = openat(projfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub_proj < 0) {
				r = -errno;
				break;
			}
			fchmod(sub_proj, st.st_mode & 0777);
			r = apply_dir(ctx, sub_up, sub_proj, sub);
		} else if (S_ISREG(st.st_mode)) {
			r = sb_overlay_copy_file(upfd, projfd, n, st.st_mode);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t len = readlinkat(upfd, n, target, sizeof target - 1);
			if (len < 0) {
				r = -errno;
				break;
			}
			target[len] = '\0';
			if ((r = rm_rf_at(projfd, n)) == 0 && symlinkat(target, projfd, n) < 0)
				r = -errno;
		} else {
			log_warnx("--apply: skipping %s/%s (not a file, directory or symlink)", relpath, n);
		}
		if (r < 0)
			log_warnx("--apply: %s/%s: %s", relpath, n, strerror(-r));
	}
	closedir(d);
	return r;
}

/* Opens SESSION/name for writing (created, mode 0600). */
static FILE *open_out(const struct sb_session *s, const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", s->dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f && fd >= 0)
		close(fd);
	return f;
}

/* In a throwaway mount namespace (and user namespace when unprivileged): mounts the project at
 * SESSION/a and the merged view (upper over project, read-only) at SESSION/b, then runs
 * `diff -ruN --no-dereference a b`, whose output the launcher splits into SESSION/changes.patch and
 * SESSION/protected.patch (protect.c), adding the protected paths to prot. Applies with `patch -p1`. */
static int write_patch(struct sb_session *s, struct sb_strv *prot, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	char upper[PATH_MAX], bad[PATH_MAX];
	pid_t pid;
	int st, pipefd[2], r;

	if (strpbrk(c->project_dir, ",:\\") || strpbrk(s->dir, ",:\\"))
		return sb_errc(err, errlen, EINVAL, "cannot write a patch: the project path contains ',', ':' or '\\'");
	/* A name with a newline could forge a header of the diff and slip a protected change into the
	 * plain patch: no patch then, the upper dir stays for the user to look at. */
	snprintf(upper, sizeof upper, "%s/upper", s->dir);
	cleanup_fd int upfd = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (upfd < 0)
		return sb_err(err, errlen, "cannot open %s: %s", upper, strerror(errno));
	if ((r = sb_protect_check_names(upfd, ".", bad, sizeof bad)) < 0)
		return sb_errc(err, errlen, r,
		               r == -EILSEQ ? "the session made a file name with a control character (%s); no patch "
		                              "is written, the changes are in %s"
		                            : "cannot read the changes (%s) in %s",
		               r == -EILSEQ ? bad : strerror(-r), upper);
	FILE *plain = open_out(s, "changes.patch"), *pf = open_out(s, "protected.patch");
	if (!plain || !pf || pipe2(pipefd, O_CLOEXEC) < 0) {
		r = sb_err(err, errlen, "cannot write the patches in %s: %s", s->dir, strerror(errno));
		if (plain)
			fclose(plain);
		if (pf)
			fclose(pf);
		return r;
	}
	pid = fork();
	if (pid < 0) {
		close(pipefd[0]);
		close(pipefd[1]);
		fclose(plain);
		fclose(pf);
		return sb_err(err, errlen, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		char opts[3 * PATH_MAX], a[PATH_MAX], b[PATH_MAX], e[256];
		int out = pipefd[1];
		if (out < 0 || unshare(CLONE_NEWNS | (s->userns ? CLONE_NEWUSER : 0)) < 0)
			_exit(2);
		if (s->userns && sb_ns_write_idmaps(getpid(), c->uid, c->uid, c->gid, c->gid, e, sizeof e) < 0)
			_exit(2);
		snprintf(a, sizeof a, "%s/a", s->dir);
		snprintf(b, sizeof b, "%s/b", s->dir);
		snprintf(opts, sizeof opts, "lowerdir=%s/upper:%s%s", s->dir, c->project_dir,
		         s->userns ? ",userxattr" : "");
		if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) < 0 || (mkdir(a, 0700) < 0 && errno != EEXIST) ||
		    (mkdir(b, 0700) < 0 && errno != EEXIST) ||
		    mount(c->project_dir, a, NULL, MS_BIND | MS_REC, NULL) < 0 ||
		    mount("overlay", b, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, opts) < 0) {
			fprintf(stderr, "sluice: --save: cannot mount the merged view: %s\n", strerror(errno));
			_exit(2);
		}
		if (chdir(s->dir) < 0 || dup2(out, 1) < 0)
			_exit(2);
		execlp("diff", "diff", "-ruN", "--no-dereference", "a", "b", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	r = sb_protect_split_patch(c, pipefd[0], plain, pf, prot);
	if (fclose(plain) != 0 && r == 0)
		r = -errno;
	if (fclose(pf) != 0 && r == 0)
		r = -errno;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	char a[PATH_MAX], b[PATH_MAX];
	snprintf(a, sizeof a, "%s/a", s->dir);
	snprintf(b, sizeof b, "%s/b", s->dir);
	rmdir(a);
	rmdir(b);
	if (r < 0)
		return sb_errc(err, errlen, r, "cannot write the patches in %s: %s", s->dir, strerror(-r));
	if (!WIFEXITED(st) || WEXITSTATUS(st) > 1)
		return sb_errc(err, errlen, EIO, "diff failed while writing the patches in %s", s->dir);
	return 0;
}

/* Names the protected changes on stderr, one a line. */
static void list_protected(const struct sb_strv *prot, const char *what)
{
	fprintf(stderr,
	        "sluice: %zu protected change%s %s (they can widen the next session or run code outside "
	        "the sandbox):\n",
	        prot->n, prot->n == 1 ? "" : "s", what);
	/* the names are the sandboxed command's: control bytes are shown as '?' (--apply lists before
	 * write_patch refuses such names) */
	for (size_t i = 0; i < prot->n; i++) {
		fputs("  ", stderr);
		for (const char *p = prot->v[i]; *p; p++)
			fputc((unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p, stderr);
		fputc('\n', stderr);
	}
}

/* SESSION/project: where `sluicectl session save ID` applies changes.patch. */
static int record_project(const struct sb_session *s, char *err, size_t errlen)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/project", s->dir);
	cleanup_fd int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%s\n", s->cfg->project_dir) < 0)
		return sb_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
	return 0;
}

int sb_overlay_save(struct sb_session *s, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	char upper[PATH_MAX];
	struct apply_ctx ctx = {.c = c};
	cleanup_fd int upfd = -1, projfd = -1;
	int r = 0;

	if (c->project_mode != SB_PROJECT_OVERLAY || c->save == SB_SAVE_NONE || !s->dir)
		return 0;
	if (c->save == SB_SAVE_PATCH) {
		s->keep_dir = true;
		if ((r = write_patch(s, &ctx.prot, err, errlen)) < 0 || (r = record_project(s, err, errlen)) < 0)
			goto out;
		if (!c->quiet && ctx.prot.n)
			list_protected(&ctx.prot, "kept apart in protected.patch");
		if (!c->quiet)
			fprintf(stderr,
			        "sluice: session %s saved in %s (changes: %s/changes.patch); apply with `sluicectl "
			        "session save %s`%s, drop with `sluicectl session discard %s`\n",
			        s->id, s->dir, s->dir, s->id,
			        ctx.prot.n ? " (add --protected for the protected ones)" : "", s->id);
		goto out;
	}
	snprintf(upper, sizeof upper, "%s/upper", s->dir);
	upfd = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	projfd = open(c->project_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (upfd < 0 || projfd < 0) {
		r = sb_err(err, errlen, "--apply: cannot open %s: %s", upfd < 0 ? upper : c->project_dir,
		           strerror(errno));
		goto out;
	}
	if ((r = apply_dir(&ctx, upfd, projfd, ".")) < 0) {
		s->keep_dir = true;
		r = sb_errc(err, errlen, r, "--apply failed (%s); the changes are kept in %s/upper", strerror(-r),
		            s->dir);
		goto out;
	}
	if (ctx.prot.n && c->apply_protected) {
		list_protected(&ctx.prot, "applied (--apply-protected)");
	} else if (ctx.prot.n) {
		/* Not applied: kept as a saved session whose protected.patch the user can review and apply. */
		list_protected(&ctx.prot, "not applied");
		sb_strv_clear(&ctx.prot);
		s->keep_dir = true;
		if ((r = write_patch(s, &ctx.prot, err, errlen)) < 0 || (r = record_project(s, err, errlen)) < 0)
			goto out;
		fprintf(stderr,
		        "sluice: they are kept in session %s: review with `sluicectl session save --patch %s`, apply "
		        "with `sluicectl session save --protected %s`, drop with `sluicectl session discard %s`\n",
		        s->id, s->id, s->id, s->id);
	}
out:
	sb_strv_clear(&ctx.prot);
	if (s->keep_dir) {
		/* nothing needs work/ any more; overlayfs left work/work with mode 0 */
		cleanup_fd int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd >= 0)
			(void)rm_rf_at(dfd, "work");
	}
	return r;
}
