/* The masks: secrets (credential stores in the home, agent and daemon sockets, the host's own
 * secrets) hidden wherever the sandbox can see them. The list is the defaults below plus the
 * "masks" of every configuration layer, less the "unmask" of the organisation and user layers (never
 * one the organisation added). The launcher resolves it once, before any namespace exists
 * (sb_masks_resolve: each path as written and where it really is, with its identity, which binds.c
 * also checks bind sources against).
 *
 * Two mechanisms, because a mask must also hold for a name that appears during the session (a
 * ~/.aws/credentials the user creates on the host after the session started, under a read-only bind
 * that is live):
 *  - a view (sb_masks_view): a directory on the way to a mask (the home in the unsafe profile, a bind
 *    or plugin path that contains a mask) is shown as a small read-only tmpfs holding a clone of each
 *    entry that existed at start, and an empty read-only placeholder for each masked one; a directory
 *    on the way to a mask is rebuilt the same way. A name created on the host later is not there.
 *  - a cover (sb_masks_apply, last, so that nothing is mounted over it): every mask still visible (in
 *    the project, outside the home: /etc/shadow, sockets) gets an empty read-only tmpfs (a directory)
 *    or an empty read-only file.
 * Masks are mounts, so every spelling of a path reaches them, and the command cannot remove them (no
 * capabilities, umount2 refused by seccomp). */
#include "session.h"

#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* Masked wherever they are visible. "~/" is the user's home, "$R/" is $XDG_RUNTIME_DIR, "$S" is
 * $SSH_AUTH_SOCK. Directories get an empty read-only tmpfs, files and sockets an empty file. */
static const char *const sb_default_masks[] = {
        /* keys, cloud and cluster credentials */
        "~/.ssh",
        "~/.gnupg",
        "~/.aws",
        "~/.config/gcloud",
        "~/.azure",
        "~/.oci",
        "~/.kube",
        "~/.docker",
        "~/.config/containers/auth.json",
        "~/.vault-token",
        "~/.terraform.d/credentials.tfrc.json",
        "~/.terraformrc",
        /* package registries (tokens next to settings in .npmrc: docs/sandbox.md) */
        "~/.npmrc",
        "~/.yarnrc.yml",
        "~/.pypirc",
        "~/.cargo/credentials",
        "~/.cargo/credentials.toml",
        "~/.gem/credentials",
        "~/.m2/settings.xml",
        "~/.m2/settings-security.xml",
        /* git and forges, generic password files */
        "~/.netrc",
        "~/.authinfo",
        "~/.authinfo.gpg",
        "~/.git-credentials",
        "~/.config/git/credentials",
        "~/.gitcookies",
        "~/.config/gh",
        "~/.config/hub",
        "~/.pgpass",
        "~/.my.cnf",
        "~/.s3cfg",
        "~/.boto",
        "~/.config/rclone",
        /* keyrings, password stores, browser profiles (cookies), shell histories (typed tokens) */
        "~/.password-store",
        "~/.local/share/keyrings",
        "~/.pki",
        "~/.mozilla",
        "~/.config/google-chrome",
        "~/.config/chromium",
        "~/.bash_history",
        "~/.zsh_history",
        /* agent and daemon sockets */
        "$S",
        "$R/gnupg",
        "$R/bus",
        "$R/keyring",
        "$R/docker.sock",
        "$R/podman",
        "$R/containers/auth.json",
        "$R/ssh-agent",
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/dbus/system_bus_socket",
        /* the host's own */
        "/etc/shadow",
        "/etc/shadow-",
        "/etc/gshadow",
        "/etc/gshadow-",
        "/etc/sudoers",
        "/etc/ssh/ssh_host_rsa_key",
        "/etc/ssh/ssh_host_ecdsa_key",
        "/etc/ssh/ssh_host_ed25519_key",
};

/* Expands one mask entry; false when it does not apply (variable unset). */
static bool mask_path(const char *m, const struct sb_config *cfg, char *out, size_t len)
{
	const char *rt = getenv("XDG_RUNTIME_DIR"), *ssh = getenv("SSH_AUTH_SOCK");
	int n;
	if (m[0] == '~') {
		if (!cfg->home)
			return false;
		n = snprintf(out, len, "%s%s", cfg->home, m + 1);
	} else if (strncmp(m, "$R/", 3) == 0) {
		if (!rt || rt[0] != '/')
			return false;
		n = snprintf(out, len, "%s/%s", rt, m + 3);
	} else if (strcmp(m, "$S") == 0) {
		if (!ssh || ssh[0] != '/')
			return false;
		n = snprintf(out, len, "%s", ssh);
	} else {
		n = snprintf(out, len, "%s", m);
	}
	return n > 0 && (size_t)n < len;
}

void sb_masks_free(struct sb_session *s)
{
	for (size_t i = 0; i < s->n_masks; i++)
		free(s->masks[i].path);
	free(s->masks);
	s->masks = NULL;
	s->n_masks = 0;
	sb_strv_clear(&s->mask_paths);
}

/* Adds one masked path (as written, and where it really is when it exists). */
static int add_mask(struct sb_session *s, const char *spelled, size_t *cap, char *err, size_t errlen)
{
	char real[PATH_MAX], path[PATH_MAX];
	struct stat st;

	if (sb_normalize_abs(spelled, path, sizeof path) < 0 || strcmp(path, "/") == 0)
		return sb_errc(err, errlen, EINVAL, "mask %s: want an absolute path below /", spelled);

	if (!sb_strv_contains(&s->mask_paths, path) && sb_strv_add(&s->mask_paths, path) < 0)
		return sb_errc(err, errlen, ENOMEM, "out of memory");
	/* The host path is resolved (a ~/.ssh that is a symlink to ~/dotfiles/ssh masks the real
	 * directory as well); a path missing on the host is still hidden by the views. Most masks are
	 * absent: one lstat tells so (realpath would fail on it too) without realpath's readlink of every
	 * component. */
	if ((lstat(path, &st) < 0 && (errno == ENOENT || errno == ENOTDIR)) || !realpath(path, real) ||
	    stat(real, &st) < 0) {
		log_info("masked: %s (absent now)", path);
		return 0;
	}
	log_info("masked: %s (%s%s%s)", path, S_ISDIR(st.st_mode) ? "directory" : "file",
	         strcmp(real, path) ? ", really " : "", strcmp(real, path) ? real : "");
	if (strcmp(real, path) && !sb_strv_contains(&s->mask_paths, real) && sb_strv_add(&s->mask_paths, real) < 0)
		return sb_errc(err, errlen, ENOMEM, "out of memory");
	for (size_t i = 0; i < s->n_masks; i++)
		if (s->masks[i].dev == st.st_dev && s->masks[i].ino == st.st_ino)
			return 0;
	if (s->n_masks == *cap) {
		size_t ncap = *cap ? 2 * *cap : 64;
		struct sb_mask *nm = realloc(s->masks, ncap * sizeof *nm);
		if (!nm)
			return sb_errc(err, errlen, ENOMEM, "out of memory");
		s->masks = nm;
		*cap = ncap;
	}
	struct sb_mask *m = &s->masks[s->n_masks];
	if (!(m->path = strdup(real)))
		return sb_errc(err, errlen, ENOMEM, "out of memory");
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->dir = S_ISDIR(st.st_mode);
	s->n_masks++;
	return 0;
}

int sb_masks_resolve(struct sb_session *s, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	char path[PATH_MAX];
	size_t cap = 0;
	int r;

	for (size_t i = 0; i < sizeof sb_default_masks / sizeof sb_default_masks[0]; i++) {
		if (!mask_path(sb_default_masks[i], c, path, sizeof path))
			continue;
		if (sb_strv_contains(&c->unmask, path) && !sb_strv_contains(&c->org_masks, path)) {
			log_info("not masked (\"unmask\"): %s", path);
			continue;
		}
		if ((r = add_mask(s, path, &cap, err, errlen)) < 0)
			return r;
	}
	for (size_t i = 0; i < c->masks.n; i++) {
		if (sb_strv_contains(&c->unmask, c->masks.v[i]) && !sb_strv_contains(&c->org_masks, c->masks.v[i]))
			continue;
		if ((r = add_mask(s, c->masks.v[i], &cap, err, errlen)) < 0)
			return r;
	}
	return 0;
}

/* Whether path is a masked path as written or resolved. */
static bool is_mask_path(const struct sb_session *s, const char *path)
{
	return sb_strv_contains(&s->mask_paths, path);
}

bool sb_masks_below(const struct sb_session *s, const char *dir)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	for (size_t i = 0; i < s->mask_paths.n; i++) {
		const char *m = s->mask_paths.v[i];
		if (n == 1 && dir[0] == '/' ? m[1] != '\0' : strncmp(m, dir, n) == 0 && m[n] == '/' && m[n + 1])
			return true;
	}
	return false;
}

/* The most entries a view may clone (each is a mount). */
#define SB_VIEW_MAX 8192

/* Fills the view directory viewfd (on the view's tmpfs) from the host directory srcdir (host path
 * hpath): masked entries are left out, symlinks are copied (they resolve inside the sandbox, where the
 * masks hold too), directories on the way to a mask are rebuilt recursively, and every other entry is
 * a recursive clone of itself (with the mount flags and id mapping of the tree it comes from). */
static int view_fill(const struct sb_session *s, int srcdir, const char *hpath, int viewfd, size_t *count,
                     char *err, size_t errlen)
{
	cleanup_fd int rd = openat(srcdir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = rd >= 0 ? sb_opendir_dup(rd) : NULL;
	struct dirent *de;
	int r = 0;

	if (!d)
		return sb_err(err, errlen, "cannot list %s to mask what it holds: %s", hpath, strerror(errno));
	while (r == 0 && (de = readdir(d))) {
		const char *n = de->d_name;
		char path[PATH_MAX];
		struct stat st;
		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		if ((size_t)snprintf(path, sizeof path, "%s/%s", strcmp(hpath, "/") ? hpath : "", n) >= sizeof path ||
		    fstatat(srcdir, n, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone, or a name no path can spell: not shown */
		bool masked = is_mask_path(s, path);
		for (size_t i = 0; !masked && i < s->n_masks; i++)
			masked = s->masks[i].dev == st.st_dev && s->masks[i].ino == st.st_ino;
		if (++*count > SB_VIEW_MAX) {
			r = sb_errc(err, errlen, E2BIG,
			            "more than %d entries around the masked paths under %s; unmask or move some", SB_VIEW_MAX,
			            hpath);
			break;
		}
		if (masked && !S_ISLNK(st.st_mode)) {
			/* an empty, read-only placeholder of the same kind (the view is read-only) */
			log_debug("masked (empty in the view): %s", path);
			int f = S_ISDIR(st.st_mode) ? mkdirat(viewfd, n, 0555)
			                            : openat(viewfd, n, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC,
			                                     0444);
			if (f < 0)
				r = sb_err(err, errlen, "cannot mask %s: %s", path, strerror(errno));
			else if (!S_ISDIR(st.st_mode))
				close(f);
			continue;
		}
		if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t len = readlinkat(srcdir, n, target, sizeof target - 1);
			if (len < 0)
				continue;
			target[len] = '\0';
			if (symlinkat(target, viewfd, n) < 0)
				r = sb_err(err, errlen, "cannot copy the symlink %s: %s", path, strerror(errno));
			continue;
		}
		if (S_ISDIR(st.st_mode) && sb_masks_below(s, path)) {
			if (mkdirat(viewfd, n, 0700) < 0) {
				r = sb_err(err, errlen, "cannot rebuild %s: %s", path, strerror(errno));
				break;
			}
			(void)fchownat(viewfd, n, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
			(void)fchmodat(viewfd, n, st.st_mode & 07777, 0);
			cleanup_fd int sub = openat(srcdir, n, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			cleanup_fd int vsub = openat(viewfd, n, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || vsub < 0) {
				r = sb_err(err, errlen, "cannot rebuild %s: %s", path, strerror(errno));
				break;
			}
			r = view_fill(s, sub, path, vsub, count, err, errlen);
			continue;
		}
		/* A mount point of the same kind, then the entry's clone on it. */
		if (S_ISDIR(st.st_mode)) {
			if (mkdirat(viewfd, n, 0755) < 0)
				r = -errno;
		} else {
			int f = openat(viewfd, n, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
			if (f < 0)
				r = -errno;
			else
				close(f);
		}
		if (r < 0) {
			r = sb_errc(err, errlen, -r, "cannot make the mount point for %s: %s", path, strerror(-r));
			break;
		}
		cleanup_fd int tree =
		        open_tree(srcdir, n, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
		if (tree < 0) {
			r = sb_err(err, errlen, "cannot show %s: %s", path, strerror(errno));
			break;
		}
		cleanup_fd int mp = openat(viewfd, n, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (mp < 0) {
			r = sb_err(err, errlen, "cannot open the mount point for %s: %s", path, strerror(errno));
			break;
		}
		r = sb_attach(tree, mp, path, err, errlen);
	}
	closedir(d);
	return r;
}

int sb_masks_view(const struct sb_session *s, int rootfd, const char *hpath, const char *dst, char *err,
                  size_t errlen)
{
	struct stat st;
	char mode[16], id[16], gid[16];
	size_t count = 0;
	int r;

	/* The directory as mounted now (the unsafe root, or a bind): taken before the view covers it. */
	cleanup_fd int srcdir = sb_open_beneath(rootfd, dst, O_PATH | O_DIRECTORY, err, errlen);
	if (srcdir == -ENOENT)
		return 0;
	if (srcdir < 0)
		return srcdir;
	if (fstat(srcdir, &st) < 0)
		return sb_err(err, errlen, "%s: %s", hpath, strerror(errno));
	snprintf(mode, sizeof mode, "%04o", (unsigned)(st.st_mode & 07777));
	snprintf(id, sizeof id, "%u", (unsigned)st.st_uid);
	snprintf(gid, sizeof gid, "%u", (unsigned)st.st_gid);
	/* Owned like the directory it shows (an owner unknown in this namespace: the mounter). */
	const char *opts[] = {"mode", mode, "size", "8m", "uid", id, "gid", gid, NULL};
	cleanup_fd int fs = sb_new_fs("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err, errlen);
	if (fs < 0) {
		opts[4] = NULL;
		fs = sb_new_fs("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err, errlen);
	}
	if (fs < 0)
		return fs;
	cleanup_fd int target = sb_open_beneath(rootfd, dst, O_PATH | O_DIRECTORY, err, errlen);
	if (target < 0)
		return target;
	/* attached first: the clones go onto mount points of a mount in this namespace */
	if ((r = sb_attach(fs, target, dst, err, errlen)) < 0 ||
	    (r = view_fill(s, srcdir, hpath, fs, &count, err, errlen)) < 0)
		return r;
	/* Read-only: nothing new can be named in it (the clones keep their own flags). */
	if ((r = sb_set_attr(fs, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false, dst, err, errlen)) <
	    0)
		return r;
	log_debug("view of %s at %s: %zu entries", hpath, dst, count);
	return 0;
}

/* The small tmpfs holding "empty", the file masks are clones of. It is attached in the scratch space's
 * root (SCRATCH/masks), which the sandbox never shows: closing a mount that was never attached dissolves
 * it, and that waits for an RCU grace period (0.1 to 2 ms of every start, docs/sandbox.md "Start-up
 * profile"); an attached one goes with the mount namespace, at no extra cost. Without a scratch space
 * (it is there in every type that applies masks) it stays detached. Returns the tmpfs, or -errno. */
static int empty_file_fs(const struct sb_session *s, char *err, size_t errlen)
{
	const char *opts[] = {"mode", "0555", "size", "4k", NULL};
	cleanup_fd int fs = sb_new_fs("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err,
	                              errlen);
	int r;

	if (fs < 0)
		return fs;
	int e = openat(fs, "empty", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
	if (e < 0)
		return sb_err(err, errlen, "cannot create the mask file: %s", strerror(errno));
	close(e);
	if (s->scratch_fd < 0)
		return steal_fd(&fs);
	if (mkdirat(s->scratch_fd, "masks", 0500) < 0)
		return sb_err(err, errlen, "cannot create the masks' directory in the scratch space: %s",
		              strerror(errno));
	cleanup_fd int at = openat(s->scratch_fd, "masks", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (at < 0)
		return sb_err(err, errlen, "cannot open the masks' directory in the scratch space: %s",
		              strerror(errno));
	if ((r = sb_attach(fs, at, "the masks' tmpfs", err, errlen)) < 0)
		return r;
	return steal_fd(&fs);
}

int sb_masks_apply(const struct sb_session *s, int rootfd, char *err, size_t errlen)
{
	cleanup_fd int emptyfs = -1;
	int r;

	for (size_t i = 0; i < s->n_masks; i++) {
		const struct sb_mask *m = &s->masks[i];
		/* A file this process can neither read nor write (connect to) is out of the command's
		 * reach too: it holds no more rights than we do here (in a user namespace, files of
		 * unmapped owners such as the host's /etc/shadow). Directories are always masked. */
		if (!m->dir && access(m->path, R_OK) < 0 && access(m->path, W_OK) < 0)
			continue;
		cleanup_fd int target = sb_open_beneath(rootfd, m->path, O_PATH, err, errlen);
		if (target == -ENOENT || target == -EACCES)
			continue; /* not visible in this sandbox */
		if (target < 0)
			return target;
		cleanup_fd int tree = -1;
		if (m->dir) {
			const char *opts[] = {"mode", "0555", "size", "4k", NULL};
			tree = sb_new_fs("tmpfs", opts,
			                 MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
			                 err, errlen);
		} else {
			/* Files are covered by an empty read-only file from a small tmpfs. */
			if (emptyfs < 0) {
				if ((emptyfs = empty_file_fs(s, err, errlen)) < 0)
					return emptyfs;
			}
			tree = open_tree(emptyfs, "empty", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
			if (tree < 0)
				return sb_err(err, errlen, "cannot clone the mask file: %s", strerror(errno));
			if ((r = sb_set_attr(
			             tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
			             false, m->path, err, errlen)) < 0)
				return r;
		}
		if (tree < 0)
			return tree;
		if ((r = sb_attach(tree, target, m->path, err, errlen)) < 0)
			return r;
		log_debug("masked %s", m->path);
	}
	return 0;
}
