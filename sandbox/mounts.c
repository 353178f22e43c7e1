/* The filesystem step: builds the sandbox's view under SESSION/root with the new mount API and
 * pivots into it. Every mount target is opened by fd beneath the new root with openat2
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) and mounts are attached with
 * move_mount onto that fd, so a symlink planted in a writable place (the project, a cache) by an
 * earlier session can never redirect a mount. Order: root, system dirs (or the whole host for
 * `unsafe`), /tmp, /var/tmp, /run, home (in `unsafe` a view without the masked names), project,
 * caches, plugin paths, user binds (a view where they hold a mask), /dev, /proc, then the masks over
 * secrets and daemon sockets (last, so nothing mounts over them), then resolv.conf, pivot_root, and
 * the root made read-only. */
#include "session.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Directories of the host shown read-only in the base and plugin profiles (symlinks such as the
 * merged-/usr /bin -> usr/bin are recreated as symlinks). */
static const char *const sb_system_dirs[] = {"usr",   "bin",    "sbin", "lib", "lib32",
                                             "lib64", "libx32", "etc",  "opt", "nix"};

/* Parts of a fresh /proc that a uid-0 command without capabilities could still write to through
 * the owner permission bits (as root launcher): made read-only, like bubblewrap does. */
static const char *const sb_proc_ro[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};

static const char *rel(const char *path)
{
	while (*path == '/')
		path++;
	return *path ? path : ".";
}

int sb_open_beneath(int dirfd, const char *path, int flags, char *err, size_t errlen)
{
	struct open_how how = {
	        .flags = (uint64_t)(flags | O_CLOEXEC),
	        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, dirfd, rel(path), &how, sizeof how);
	if (fd < 0) {
		int e = errno;
		if (e != ENOENT)
			sb_errc(err, errlen, e, "%s: %s%s", path, strerror(e),
			        e == ELOOP ? " (a symlink on the path; refusing to follow it)" : "");
		return -e;
	}
	return fd;
}

/* Creates PATH beneath rootfd (directories, and the last component as a directory or an empty
 * file) without following symlinks, and returns an O_PATH fd on it. Existing components are
 * used as they are (a read-only bind cannot be written to, but needs no mkdir). */
int sb_mkpath(int rootfd, const char *path, bool dir, char *err, size_t errlen)
{
	char buf[PATH_MAX];
	cleanup_fd int cur = -1;
	char *save = NULL, *comp, *next;

	if (util_strlcpy(buf, rel(path), sizeof buf) >= sizeof buf)
		return sb_errc(err, errlen, ENAMETOOLONG, "%s: path too long", path);
	cur = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
	if (cur < 0)
		return sb_err(err, errlen, "dup: %s", strerror(errno));
	if (strcmp(buf, ".") == 0)
		return steal_fd(&cur);
	for (comp = strtok_r(buf, "/", &save); comp; comp = next) {
		next = strtok_r(NULL, "/", &save);
		bool last = next == NULL;
		if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0)
			return sb_errc(err, errlen, EINVAL, "%s: '.' and '..' are not allowed in sandbox paths", path);
		int fd;
		if (!last || dir) {
			fd = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0 && errno == ENOENT) {
				if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
					return sb_err(err, errlen, "cannot create mount point %s (at '%s'): %s%s", path,
					              comp, strerror(errno),
					              errno == EROFS ? " (it must exist on the host where the view is read-only, "
					                               "as with --fs ask)"
					                             : "");
				fd = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			}
		} else {
			fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0 && errno == ENOENT) {
				int c = openat(cur, comp, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
				if (c < 0 && errno != EEXIST)
					return sb_err(err, errlen, "cannot create mount point %s: %s", path,
					              strerror(errno));
				if (c >= 0)
					close(c);
				fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
			}
		}
		if (fd < 0) {
			int e = errno;
			return sb_errc(err, errlen, e, "mount point %s (at '%s'): %s%s", path, comp, strerror(e),
			               (e == ENOTDIR || e == ELOOP)
			                       ? " (a symlink or file is in the way; not following)"
			                       : "");
		}
		close(cur);
		cur = fd;
	}
	return steal_fd(&cur);
}

int sb_attach(int tree, int target, const char *what, char *err, size_t errlen)
{
	if (move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return sb_err(err, errlen, "cannot mount %s: %s", what, strerror(errno));
	return 0;
}

int sb_set_attr(int tree, uint64_t set, bool recursive, const char *what, char *err, size_t errlen)
{
	struct mount_attr a = {.attr_set = set};
	if (!set)
		return 0;
	if (mount_setattr(tree, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &a, sizeof a) < 0)
		return sb_err(err, errlen, "cannot set mount flags on %s: %s", what, strerror(errno));
	return 0;
}

/* A detached fresh filesystem of `type` with string options (NULL-terminated key, value pairs). */
int sb_new_fs(const char *type, const char *const *opts, uint64_t attrs, char *err, size_t errlen)
{
	cleanup_fd int fs = fsopen(type, FSOPEN_CLOEXEC);
	if (fs < 0)
		return sb_err(err, errlen, "fsopen(%s): %s", type, strerror(errno));
	for (size_t i = 0; opts && opts[i]; i += 2) {
		int r = opts[i + 1] ? fsconfig(fs, FSCONFIG_SET_STRING, opts[i], opts[i + 1], 0)
		                    : fsconfig(fs, FSCONFIG_SET_FLAG, opts[i], NULL, 0);
		if (r < 0)
			return sb_err(err, errlen, "%s option %s: %s", type, opts[i], strerror(errno));
	}
	if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sb_err(err, errlen, "cannot create %s: %s", type, strerror(errno));
	int m = fsmount(fs, FSMOUNT_CLOEXEC, (unsigned)attrs);
	if (m < 0)
		return sb_err(err, errlen, "fsmount(%s): %s", type, strerror(errno));
	return m;
}

/* A detached recursive copy of the host path src with attrs added. */
static int clone_tree(const char *src, uint64_t attrs, char *err, size_t errlen)
{
	cleanup_fd int t = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (t < 0)
		return sb_err(err, errlen, "cannot bind %s: %s", src, strerror(errno));
	int r = sb_set_attr(t, attrs, true, src, err, errlen);
	if (r < 0)
		return r;
	return steal_fd(&t);
}

/* Binds host path src at dst beneath rootfd. */
static int bind_at(int rootfd, const char *src, const char *dst, uint64_t attrs, char *err, size_t errlen)
{
	struct stat st;
	if (stat(src, &st) < 0)
		return sb_err(err, errlen, "cannot bind %s: %s", src, strerror(errno));
	cleanup_fd int tree = clone_tree(src, attrs, err, errlen);
	if (tree < 0)
		return tree;
	cleanup_fd int target = sb_mkpath(rootfd, dst, S_ISDIR(st.st_mode), err, errlen);
	if (target < 0)
		return target;
	return sb_attach(tree, target, dst, err, errlen);
}

/* A fresh tmpfs at dst. owner: the uid (and gid) its root directory belongs to (a root launch's
 * command runs as host_uid, not as the root that mounts it), or -1 for the mounter. */
static int tmpfs_at(int rootfd, const char *dst, const char *mode, long long owner, uint64_t attrs, char *err,
                    size_t errlen)
{
	char id[16];
	snprintf(id, sizeof id, "%lld", owner);
	const char *opts[] = {"mode", mode, owner >= 0 ? "uid" : NULL, id, "gid", id, NULL};
	cleanup_fd int fs = sb_new_fs("tmpfs", opts, attrs, err, errlen);
	if (fs < 0)
		return fs;
	cleanup_fd int target = sb_mkpath(rootfd, dst, true, err, errlen);
	if (target < 0)
		return target;
	return sb_attach(fs, target, dst, err, errlen);
}

static int system_dirs(int rootfd, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof sb_system_dirs / sizeof sb_system_dirs[0]; i++) {
		char host[64], link[PATH_MAX];
		struct stat st;
		snprintf(host, sizeof host, "/%s", sb_system_dirs[i]);
		if (lstat(host, &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(host, link, sizeof link - 1);
			if (n < 0)
				continue;
			link[n] = '\0';
			if (symlinkat(link, rootfd, sb_system_dirs[i]) < 0 && errno != EEXIST)
				return sb_err(err, errlen, "symlink %s: %s", host, strerror(errno));
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			continue;
		int r = bind_at(rootfd, host, host, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err,
		                errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

static int dev_tree(const struct sb_session *s, int rootfd, char *err, size_t errlen)
{
	static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
	static const char *const links[][2] = {{"fd", "/proc/self/fd"},       {"stdin", "/proc/self/fd/0"},
	                                       {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	                                       {"ptmx", "pts/ptmx"},          {"core", "/proc/kcore"}};
	int r;

	if ((r = tmpfs_at(rootfd, "/dev", "0755", -1, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err, errlen)) < 0)
		return r;
	cleanup_fd int dev = sb_open_beneath(rootfd, "dev", O_PATH | O_DIRECTORY, err, errlen);
	if (dev < 0)
		return dev;
	for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
		char host[32];
		snprintf(host, sizeof host, "/dev/%s", nodes[i]);
		if ((r = bind_at(dev, host, nodes[i], MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err, errlen)) < 0)
			return r;
	}
	for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
		if (i == 5)
			break; /* no /dev/core: kcore is not readable anyway */
		if (symlinkat(links[i][1], dev, links[i][0]) < 0)
			return sb_err(err, errlen, "symlink /dev/%s: %s", links[i][0], strerror(errno));
	}
	const char *pts_opts[] = {"newinstance", NULL, "ptmxmode", "0666", "mode", "0620", NULL};
	cleanup_fd int pts = sb_new_fs("devpts", pts_opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err, errlen);
	if (pts < 0)
		return pts;
	cleanup_fd int ptsdir = sb_mkpath(dev, "pts", true, err, errlen);
	if (ptsdir < 0)
		return ptsdir;
	if ((r = sb_attach(pts, ptsdir, "/dev/pts", err, errlen)) < 0)
		return r;
	if (s->cfg->allow_kvm && (r = sb_kvm_node(s, dev, err, errlen)) < 0)
		return r;
	return sb_scratch_at(s, "shm", dev, "shm", 01777, -1, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err, errlen);
}

/* userns: the command runs in a user namespace (also a root launch's remapped uid with
 * --allow-containers, whose nested containers write their own namespaces' /proc/sys). */
static int proc_tree(int rootfd, bool userns, char *err, size_t errlen)
{
	int r;
	cleanup_fd int proc =
	        sb_new_fs("proc", NULL, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err, errlen);
	if (proc < 0)
		return proc;
	cleanup_fd int target = sb_mkpath(rootfd, "/proc", true, err, errlen);
	if (target < 0)
		return target;
	if ((r = sb_attach(proc, target, "/proc", err, errlen)) < 0)
		return r;
	/* In a user namespace these files belong to the host's root, whom the command cannot act as:
	 * the permission bits already refuse its writes. */
	for (size_t i = 0; !userns && i < sizeof sb_proc_ro / sizeof sb_proc_ro[0]; i++) {
		/* Opened from the fresh proc mount itself (not by path), then re-bound read-only. */
		cleanup_fd int t = open_tree(proc, sb_proc_ro[i],
		                             OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
		if (t < 0 && errno == ENOENT)
			continue;
		if (t < 0)
			return sb_err(err, errlen, "/proc/%s: %s", sb_proc_ro[i], strerror(errno));
		if ((r = sb_set_attr(t, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
		                     true, sb_proc_ro[i], err, errlen)) < 0)
			return r;
		if (move_mount(t, "", proc, sb_proc_ro[i], MOVE_MOUNT_F_EMPTY_PATH) < 0)
			return sb_err(err, errlen, "cannot remount /proc/%s read-only: %s", sb_proc_ro[i],
			              strerror(errno));
	}
	return 0;
}

/* Lexically normalises an absolute path, resolving "." and ".." (no symlinks are consulted). */
int sb_normalize_abs(const char *in, char *out, size_t len)
{
	size_t o = 0;
	if (in[0] != '/' || len < 2)
		return -EINVAL;
	for (const char *p = in; *p;) {
		while (*p == '/')
			p++;
		const char *e = p;
		while (*e && *e != '/')
			e++;
		size_t n = (size_t)(e - p);
		if (n == 0 || (n == 1 && p[0] == '.')) {
			/* nothing */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
		} else {
			if (o + 1 + n + 1 > len)
				return -ENAMETOOLONG;
			out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p = e;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return 0;
}

/* resolvfd: SESSION/resolv.conf, opened before the new root covered the session directory. */
static int resolv_conf(int resolvfd, int rootfd, char *err, size_t errlen)
{
	char link[PATH_MAX], joined[2 * PATH_MAX], path[PATH_MAX];
	/* /etc comes from the host (root-owned, read-only): its symlinks are followed, but only
	 * inside the new root. */
	struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	cleanup_fd int target = (int)syscall(SYS_openat2, rootfd, "etc/resolv.conf", &how, sizeof how);
	if (target < 0 && errno == ENOENT) {
		/* A link into /run (systemd-resolved's stub-resolv.conf): /run is our fresh tmpfs, so
		 * create the file it points to there and mount over that. */
		ssize_t n = readlinkat(rootfd, "etc/resolv.conf", link, sizeof link - 1);
		if (n <= 0)
			return sb_errc(err, errlen, ENOENT, "the host has no /etc/resolv.conf to replace");
		link[n] = '\0';
		snprintf(joined, sizeof joined, "%s%s", link[0] == '/' ? "" : "/etc/", link);
		if (sb_normalize_abs(joined, path, sizeof path) < 0)
			return sb_errc(err, errlen, EINVAL, "/etc/resolv.conf points to an unusable path");
		target = sb_mkpath(rootfd, path, false, err, errlen);
		if (target < 0)
			return target;
	}
	if (target < 0)
		return sb_err(err, errlen, "cannot replace /etc/resolv.conf in the sandbox: %s", strerror(errno));
	cleanup_fd int tree = open_tree(resolvfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (tree < 0)
		return sb_err(err, errlen, "cannot clone the session's resolv.conf: %s", strerror(errno));
	int r = sb_set_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false,
	                    "resolv.conf", err, errlen);
	return r < 0 ? r : sb_attach(tree, target, "/etc/resolv.conf", err, errlen);
}

int sb_mounts_attach_sources(const struct sb_session *s, int rootfd, char *err, size_t errlen)
{
	int r;

	for (size_t i = 0; i < s->n_sources; i++) {
		const struct sb_source *src = &s->sources[i];
		if (src->kind == SB_SRC_PROJECT || src->kind == SB_SRC_HOME || src->tree < 0)
			continue;
		cleanup_fd int target = sb_mkpath(rootfd, src->dst, src->dir, err, errlen);
		if (target < 0)
			return target;
		if ((r = sb_attach(src->tree, target, src->dst, err, errlen)) < 0)
			return r;
		/* a directory that holds a mask is shown without it, also when it appears later */
		if (src->dir && src->real && sb_masks_below(s, src->real) &&
		    (r = sb_masks_view(s, rootfd, src->real, src->dst, err, errlen)) < 0)
			return r;
	}
	return 0;
}

int sb_mounts_build(struct sb_session *s, const struct sb_go *go, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	const uint64_t ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	cleanup_fd int rootfd = -1, hostroot = -1, upperfd = -1, workfd = -1, resolvfd = -1, cafd = -1;
	int r;

	/* Nothing we mount may propagate back to the host; host changes may still reach us. */
	if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) < 0)
		return sb_err(err, errlen, "cannot make the mount namespace private: %s", strerror(errno));
	if ((r = sb_sources_prepare(s, err, errlen)) < 0)
		return r;
	hostroot = open(s->anchor, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (hostroot < 0)
		return sb_err(err, errlen, "cannot open %s: %s", s->anchor, strerror(errno));
	if (go->have_resolv && (resolvfd = openat(hostroot, "resolv.conf", O_PATH | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return sb_err(err, errlen, "cannot open %s/resolv.conf: %s", s->anchor, strerror(errno));
	/* Everything the command may write but the project and binds: one limited tmpfs (--disk). */
	if ((r = sb_scratch_mount(s, hostroot, err, errlen)) < 0)
		return r;
	if (c->project_mode == SB_PROJECT_OVERLAY) {
		upperfd = openat(s->scratch_fd, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		workfd = openat(s->scratch_fd, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (upperfd < 0 || workfd < 0)
			return sb_err(err, errlen, "cannot open the overlay directories: %s", strerror(errno));
	}
	if (go->have_ca && (cafd = openat(hostroot, "ca-bundle.crt", O_PATH | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return sb_err(err, errlen, "cannot open %s/ca-bundle.crt: %s", s->anchor, strerror(errno));

	if (c->profile == SB_PROFILE_UNSAFE) {
		/* The whole host, read-only; fresh /tmp, /run, /dev, /proc go on top below. */
		rootfd = clone_tree("/", ro, err, errlen);
	} else if (c->fs_mode == SB_FS_ASK) {
		/* The host read-only behind the gate (fsgate.c); the allow-list is mounted over it below. */
		rootfd = sb_fsgate_mount(s, err, errlen);
	} else {
		const char *opts[] = {"mode", "0755", NULL};
		rootfd = sb_new_fs("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err, errlen);
	}
	if (rootfd < 0)
		return rootfd;
	if ((r = sb_attach(rootfd, hostroot, "the sandbox root", err, errlen)) < 0)
		return r;

	if (c->profile != SB_PROFILE_UNSAFE) {
		if ((r = system_dirs(rootfd, err, errlen)) < 0)
			return r;
		if (symlinkat("../run", rootfd, "var/run") < 0 && errno == ENOENT) {
			cleanup_fd int v = sb_mkpath(rootfd, "/var", true, err, errlen);
			if (v < 0)
				return v;
			if (symlinkat("../run", rootfd, "var/run") < 0)
				return sb_err(err, errlen, "symlink /var/run: %s", strerror(errno));
		}
	}
	const long long owner = s->remap_userns >= 0 ? (long long)s->host_uid : -1;
	const uint64_t nosuid = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	if ((r = sb_scratch_at(s, "tmp", rootfd, "/tmp", 01777, -1, nosuid, err, errlen)) < 0 ||
	    (r = sb_scratch_at(s, "var-tmp", rootfd, "/var/tmp", 01777, -1, nosuid, err, errlen)) < 0 ||
	    (r = sb_scratch_at(s, "run", rootfd, "/run", 0755, owner, nosuid, err, errlen)) < 0)
		return r;
	/* base/plugin: an empty, writable home that vanishes with the session. */
	if (c->profile != SB_PROFILE_UNSAFE && c->fs_mode != SB_FS_ASK && c->home && strcmp(c->home, "/") != 0 &&
	    (r = sb_scratch_at(s, "home", rootfd, c->home, 0700, owner, nosuid, err, errlen)) < 0)
		return r;
	/* --fs ask: the host's home behind the gate, writable in the scratch space */
	if (c->fs_mode == SB_FS_ASK && (r = sb_fsgate_home(s, rootfd, owner, err, errlen)) < 0)
		return r;
	for (size_t i = 0; i < s->n_sources; i++) {
		if (s->sources[i].kind != SB_SRC_HOME || s->sources[i].tree < 0)
			continue;
		cleanup_fd int home = sb_mkpath(rootfd, s->sources[i].dst, true, err, errlen);
		if (home < 0)
			return home;
		if ((r = sb_attach(s->sources[i].tree, home, s->sources[i].dst, err, errlen)) < 0)
			return r;
	}
	/* unsafe: the home is shown without its secrets, also those created after the start (masks.c) */
	if (c->profile == SB_PROFILE_UNSAFE && c->home && strcmp(c->home, "/") != 0 && sb_masks_below(s, c->home) &&
	    (r = sb_masks_view(s, rootfd, c->home, c->home, err, errlen)) < 0)
		return r;
	if ((r = sb_overlay_mount_project(s, rootfd, upperfd, workfd, err, errlen)) < 0)
		return r;
	if ((r = sb_mounts_attach_sources(s, rootfd, err, errlen)) < 0)
		return r;
	if ((r = dev_tree(s, rootfd, err, errlen)) < 0 ||
	    (r = proc_tree(rootfd, s->userns || (s->cfg->allow_containers && s->remap_userns >= 0), err, errlen)) < 0)
		return r;
	if ((r = sb_nest_mounts(s, rootfd, err, errlen)) < 0)
		return r;
	if ((r = sb_masks_apply(s, rootfd, err, errlen)) < 0)
		return r;
	if (go->have_resolv && (r = resolv_conf(resolvfd, rootfd, err, errlen)) < 0)
		return r;
	if (go->have_ca && (r = sb_ca_bundle_mount(cafd, rootfd, err, errlen)) < 0)
		return r;

	/* pivot_root(".", ".") stacks the old root under the new one; detaching it leaves only ours. */
	if (fchdir(rootfd) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
		return sb_err(err, errlen, "pivot_root: %s", strerror(errno));
	if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return sb_err(err, errlen, "cannot detach the host root: %s", strerror(errno));
	struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY};
	if (mount_setattr(AT_FDCWD, "/", 0, &a, sizeof a) < 0)
		return sb_err(err, errlen, "cannot make the sandbox root read-only: %s", strerror(errno));
	return c->fs_mode == SB_FS_ASK ? sb_fsgate_ready(s, err, errlen) : 0;
}
