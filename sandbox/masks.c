/* The masks: secrets (credential stores in the home, agent and daemon sockets, the host's own
 * secrets) hidden wherever the sandbox can see them. The launcher resolves the list once, before any
 * namespace exists (sb_masks_resolve: each path's real location and identity, which binds.c also
 * checks bind sources against); the sandbox's init then covers each visible one, last, so that
 * nothing is mounted over a mask: a directory gets an empty read-only tmpfs, a file or socket an
 * empty read-only file. Masks are mounts, so every spelling of a path reaches them, and the command
 * cannot remove them (no capabilities, umount2 refused by seccomp). */
#include "session.h"

#include "log.h"
#include "util.h"

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
        "~/.ssh",
        "~/.gnupg",
        "~/.aws",
        "~/.config/gcloud",
        "~/.azure",
        "~/.kube",
        "~/.docker",
        "~/.netrc",
        "~/.git-credentials",
        "~/.config/gh",
        "~/.password-store",
        "~/.local/share/keyrings",
        "~/.pki",
        "$S",
        "$R/gnupg",
        "$R/bus",
        "$R/keyring",
        "$R/docker.sock",
        "$R/podman",
        "$R/ssh-agent",
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/dbus/system_bus_socket",
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
}

/* The host path is resolved first (a ~/.ssh that is a symlink to ~/dotfiles/ssh masks the real
 * directory); a path missing on the host has nothing to hide. */
int sb_masks_resolve(struct sb_session *s, char *err, size_t errlen)
{
	const size_t n = sizeof sb_default_masks / sizeof sb_default_masks[0];
	char path[PATH_MAX], real[PATH_MAX];

	if (!(s->masks = calloc(n, sizeof *s->masks)))
		return sb_errc(err, errlen, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		if (!mask_path(sb_default_masks[i], s->cfg, path, sizeof path))
			continue;
		if (!realpath(path, real) || stat(real, &st) < 0)
			continue;
		struct sb_mask *m = &s->masks[s->n_masks];
		if (!(m->path = strdup(real)))
			return sb_errc(err, errlen, ENOMEM, "out of memory");
		m->dev = st.st_dev;
		m->ino = st.st_ino;
		m->dir = S_ISDIR(st.st_mode);
		s->n_masks++;
	}
	return 0;
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
			/* Files are covered by an empty read-only file from a small detached tmpfs. */
			if (emptyfs < 0) {
				const char *opts[] = {"mode", "0555", "size", "4k", NULL};
				emptyfs = sb_new_fs("tmpfs", opts,
				                    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err,
				                    errlen);
				if (emptyfs < 0)
					return emptyfs;
				int e = openat(emptyfs, "empty", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
				if (e < 0)
					return sb_err(err, errlen, "cannot create the mask file: %s", strerror(errno));
				close(e);
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
