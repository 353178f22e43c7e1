/* The host paths mounted into the sandbox (the project, writable carve-outs, plugin paths, --bind
 * and --ro-bind): each source is resolved exactly once into an O_PATH descriptor (openat2 with
 * RESOLVE_NO_MAGICLINKS, and RESOLVE_NO_SYMLINKS where the path must be taken literally), the checks
 * run on that descriptor (what it is, where it really lives, whether it is or lies inside a masked
 * path), and the mount is cloned from the same descriptor (open_tree AT_EMPTY_PATH). A source that
 * is swapped for a symlink between the check and the mount therefore cannot smuggle in anything
 * else: there is no second lookup. This runs in the sandbox's pid 1, in its new mount namespace,
 * before the new root is pivoted into; for a root launch whose command runs as an unprivileged uid
 * the trees are idmapped so that root's files are that uid's own (ns.c). */
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

static const char *kind_name(enum sb_source_kind k)
{
	switch (k) {
	case SB_SRC_PROJECT: return "project directory";
	case SB_SRC_HOME: return "home directory";
	case SB_SRC_WRITABLE: return "writable path";
	case SB_SRC_PLUGIN: return "plugin path";
	case SB_SRC_BIND: return "--bind";
	case SB_SRC_RO_BIND: return "--ro-bind";
	}
	return "bind";
}

static int add_source(struct sb_session *s, enum sb_source_kind kind, const char *path, const char *dst)
{
	if (s->n_sources == SB_SOURCES_MAX)
		return -E2BIG;
	struct sb_source *src = &s->sources[s->n_sources];
	memset(src, 0, sizeof *src);
	src->kind = kind;
	src->tree = -1;
	src->rw = kind == SB_SRC_BIND || kind == SB_SRC_WRITABLE ||
	          (kind == SB_SRC_PROJECT && s->cfg->project_mode == SB_PROJECT_RW);
	/* Carve-outs are created by sluice and shared with the host: a symlink on their path was planted
	 * (by an earlier session, say) and is never followed. The others are paths a person wrote. */
	src->literal = kind == SB_SRC_WRITABLE;
	src->optional = kind == SB_SRC_PLUGIN;
	if (!(src->path = strdup(path)) || (dst && !(src->dst = strdup(dst))))
		return -ENOMEM;
	s->n_sources++;
	return 0;
}

int sb_sources_init(struct sb_session *s, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	int r = 0;

	if (!(s->sources = calloc(SB_SOURCES_MAX, sizeof *s->sources)))
		return -ENOMEM;
	if (c->project_dir)
		r = add_source(s, SB_SRC_PROJECT, c->project_dir, c->project_dir);
	/* unsafe shows the home read-only; a remapped root launch's uid could not read root's home
	 * (mode 0700) through the plain host view, so it gets an idmapped view of its own */
	if (r == 0 && c->profile == SB_PROFILE_UNSAFE && s->remap_userns >= 0 && c->home && strcmp(c->home, "/") != 0)
		r = add_source(s, SB_SRC_HOME, c->home, c->home);
	for (size_t i = 0; r == 0 && i < c->writable_paths.n; i++)
		r = add_source(s, SB_SRC_WRITABLE, c->writable_paths.v[i], NULL);
	for (size_t i = 0; r == 0 && c->profile != SB_PROFILE_BASE && i < c->plugin_paths.n; i++)
		r = add_source(s, SB_SRC_PLUGIN, c->plugin_paths.v[i], NULL);
	for (size_t i = 0; r == 0 && i < c->n_binds; i++) {
		r = add_source(s, c->binds[i].rw ? SB_SRC_BIND : SB_SRC_RO_BIND, c->binds[i].src, c->binds[i].dst);
		if (r == 0 && c->binds[i].literal)
			s->sources[s->n_sources - 1].literal = true;
	}
	if (r == -E2BIG)
		return sb_errc(err, errlen, E2BIG,
		               "more than %d paths to mount (project, binds, carve-outs, plugin paths)",
		               SB_SOURCES_MAX);
	return r;
}

void sb_sources_free(struct sb_session *s)
{
	for (size_t i = 0; s->sources && i < s->n_sources; i++) {
		free(s->sources[i].path);
		free(s->sources[i].dst);
		free(s->sources[i].real);
		if (s->sources[i].tree >= 0)
			close(s->sources[i].tree);
	}
	free(s->sources);
	s->sources = NULL;
	s->n_sources = 0;
}

/* Whether the object behind fd is a masked path or lies inside a masked directory: its own identity,
 * then every directory above it (".." from a descriptor, which crosses mount points upwards), so
 * another spelling of the secret (a symlink, a host bind mount of ~/.ssh elsewhere, a hard link to a
 * masked file) is recognised as well. Returns the mask's index or -1. */
static int inside_mask(const struct sb_session *s, int fd, const struct stat *st, const char *real, int *parent_err)
{
	struct stat cur = *st;
	cleanup_fd int dir = -1;

	*parent_err = 0;
	for (size_t i = 0; i < s->n_masks; i++)
		if (s->masks[i].dev == st->st_dev && s->masks[i].ino == st->st_ino)
			return (int)i;
	if (S_ISDIR(st->st_mode)) {
		dir = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	} else {
		/* A file has no ".." of its own: open the directory its real path names (no symlinks left in
		 * it) and make sure that directory's entry is still this very file. */
		char parent[PATH_MAX];
		struct stat again;
		util_strlcpy(parent, real, sizeof parent);
		char *slash = strrchr(parent, '/');
		if (!slash) {
			*parent_err = EINVAL;
			return -1;
		}
		*slash = '\0';
		struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		                       .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
		dir = (int)syscall(SYS_openat2, AT_FDCWD, parent[0] ? parent : "/", &how, sizeof how);
		if (dir < 0 || fstatat(dir, slash + 1, &again, AT_SYMLINK_NOFOLLOW) < 0 || again.st_dev != st->st_dev ||
		    again.st_ino != st->st_ino) {
			*parent_err = dir < 0 ? errno : ESTALE;
			return -1;
		}
	}
	if (dir < 0) {
		*parent_err = errno;
		return -1;
	}
	for (int depth = 0; depth < 4096; depth++) {
		if (fstat(dir, &cur) < 0) {
			*parent_err = errno;
			return -1;
		}
		for (size_t i = 0; i < s->n_masks; i++)
			if (s->masks[i].dir && s->masks[i].dev == cur.st_dev && s->masks[i].ino == cur.st_ino)
				return (int)i;
		int up = openat(dir, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (up < 0) {
			*parent_err = errno;
			return -1;
		}
		struct stat pst;
		if (fstat(up, &pst) < 0 || (pst.st_dev == cur.st_dev && pst.st_ino == cur.st_ino)) {
			close(up);
			return -1; /* reached the root */
		}
		close(dir);
		dir = up;
	}
	*parent_err = ELOOP;
	return -1;
}

/* Opens, checks and clones one source; fills src->tree (and src->real, src->dst). */
static int prepare_one(struct sb_session *s, struct sb_source *src, char *err, size_t errlen)
{
	const char *what = kind_name(src->kind);
	struct open_how how = {.flags = O_PATH | O_CLOEXEC,
	                       .resolve = RESOLVE_NO_MAGICLINKS | (src->literal ? RESOLVE_NO_SYMLINKS : 0)};
	cleanup_fd int fd = (int)syscall(SYS_openat2, AT_FDCWD, src->path, &how, sizeof how);
	char link[64], real[PATH_MAX];
	struct stat st;

	if (fd < 0) {
		int e = errno;
		if (e == ENOENT && src->optional) {
			log_info("%s %s does not exist; skipped", what, src->path);
			return 0;
		}
		if (e == ELOOP && src->literal)
			return sb_errc(err, errlen, e,
			               "%s %s: a symlink on the path; carve-outs are never reached through a symlink "
			               "(name the real directory)",
			               what, src->path);
		return sb_errc(err, errlen, e, "%s %s: %s", what, src->path, strerror(e));
	}
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, real, sizeof real - 1);
	if (n <= 0 || (size_t)n >= sizeof real - 1 || fstat(fd, &st) < 0)
		return sb_err(err, errlen, "%s %s: cannot tell where it leads: %s", what, src->path, strerror(errno));
	real[n] = '\0';
	if (real[0] != '/')
		return sb_errc(err, errlen, EINVAL, "%s %s: it leads out of this mount namespace (%s)", what, src->path,
		               real);
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return sb_errc(err, errlen, EINVAL, "%s %s: only directories and regular files can be bound", what,
		               src->path);
	if (src->kind == SB_SRC_PROJECT && !S_ISDIR(st.st_mode))
		return sb_errc(err, errlen, ENOTDIR, "the project %s is not a directory", src->path);
	int perr;
	int m = inside_mask(s, fd, &st, real, &perr);
	if (perr)
		return sb_errc(err, errlen, perr, "%s %s: cannot check where it lies (%s); refusing it", what,
		               src->path, strerror(perr));
	if (m >= 0 && !s->cfg->org_allow_masked_binds)
		return sb_errc(err, errlen, EPERM,
		               "%s %s: it %s %s, which sluice masks (a secret); refusing to mount it (an organisation "
		               "can allow this with \"allow_masked_binds\": true)",
		               what, src->path, strcmp(real, s->masks[m].path) == 0 ? "is" : "lies inside",
		               s->masks[m].path);
	free(src->real);
	if (!(src->real = strdup(real)) || (!src->dst && !(src->dst = strdup(real))))
		return -ENOMEM;
	src->dir = S_ISDIR(st.st_mode);

	cleanup_fd int tree = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
	if (tree < 0)
		return sb_err(err, errlen, "cannot bind %s %s: %s", what, src->path, strerror(errno));
	if (s->remap_userns >= 0) {
		/* A root launch runs the command as an unprivileged uid (ns.c): the host's root owns these
		 * files, so they are shown to that uid as its own, and what it writes stays root's. */
		struct mount_attr id = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)s->remap_userns};
		if (mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &id, sizeof id) < 0) {
			int e = errno;
			return sb_errc(err, errlen, e,
			               "%s %s: cannot map its owner for the sandbox's unprivileged uid: %s%s", what,
			               src->path, strerror(e),
			               e == EINVAL ? " (the file system does not support idmapped mounts; "
			                             "--keep-root-uid runs the command as uid 0 instead)"
			                           : "");
		}
	}
	struct mount_attr a = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (src->rw ? 0 : MOUNT_ATTR_RDONLY)};
	if (mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0)
		return sb_err(err, errlen, "cannot set mount flags on %s: %s", src->path, strerror(errno));
	src->tree = steal_fd(&tree);
	log_debug("%s %s -> %s: %s", what, src->path, src->dst, real);
	return 0;
}

int sb_sources_prepare(struct sb_session *s, char *err, size_t errlen)
{
	int r;
	for (size_t i = 0; i < s->n_sources; i++)
		if ((r = prepare_one(s, &s->sources[i], err, errlen)) < 0)
			return r;
	return 0;
}
