/* Nested containers in the local sandbox (`sluice run --allow-containers`): rootless Podman and
 * Buildah run inside, with no host container socket (none is ever mounted in) and nothing of the
 * host user's container storage. With the flag:
 *
 *  - seccomp lets the command make user, mount and network namespaces of its own and mount in them
 *    (seccomp.c, the nested filter), and the session's user namespace may hold a bounded number of
 *    namespaces (ulimits.c); the command still has no capability in the session's own namespaces,
 *    and the mounts it inherits into a namespace of its own are locked by the kernel;
 *  - /dev/fuse (fuse-overlayfs) and /dev/net/tun (slirp4netns, Podman's rootless network) are there,
 *    and /sys read-only (crun binds it into containers);
 *  - /etc/subuid and /etc/subgid look empty: newuidmap, set-uid root, cannot work under no_new_privs,
 *    so Podman maps the command's own uid as root of its containers (single mapping);
 *  - Podman's configuration is written to /run/sluice-containers (containers.conf, storage.conf; the
 *    environment names them): storage in the sandbox's /var/tmp and /run, which vanish with the
 *    session, no keyring (keyctl stays denied), no cgroups (the session cgroup holds everything),
 *    no events log.
 *
 * Every network the nested containers get is carved out of the session's namespace: --network host
 * is that namespace (the proxy variables are passed on), slirp4netns and the rootless bridge connect
 * from it, so nftables and the proxy see the same session as for any other process.
 *
 * Without the flag, /usr/bin/podman and /usr/bin/buildah (where the sandbox shows them) are covered
 * by a script that says the flag is needed; any other copy fails on the denied calls. */
#include "session.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define SB_NEST_DIR "/run/sluice-containers"

static const char sb_nest_containers_conf[] = "# sluice run --allow-containers: Podman inside the sandbox\n"
                                              "[containers]\n"
                                              "keyring = false\n"
                                              "cgroups = \"disabled\"\n"
                                              "default_sysctls = []\n"
                                              "[engine]\n"
                                              "cgroup_manager = \"cgroupfs\"\n"
                                              "events_logger = \"none\"\n"
                                              "tmp_dir = \"/run/sluice-containers-tmp\"\n";

static const char sb_nest_storage_conf[] = "# sluice run --allow-containers: storage inside the session\n"
                                           "[storage]\n"
                                           "driver = \"overlay\"\n"
                                           "graphroot = \"/var/tmp/containers/storage\"\n"
                                           "runroot = \"/run/sluice-containers-run\"\n"
                                           "[storage.options.overlay]\n"
                                           "ignore_chown_errors = \"true\"\n";

static const char sb_nest_refusal[] =
        "#!/bin/sh\n"
        "echo \"sluice: ${0##*/}: containers are off in this sandbox; run it with sluice run --allow-containers "
        "(rootless Podman inside the session)\" >&2\n"
        "exit 125\n";

static int write_at(int dirfd, const char *name, const char *text, mode_t mode, char *err, size_t errlen)
{
	cleanup_fd int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	size_t len = strlen(text);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len)
		return sb_err(err, errlen, "cannot write %s/%s: %s", SB_NEST_DIR, name, strerror(errno ? errno : EIO));
	return 0;
}

/* Binds the host's device node path at the same place beneath rootfd. */
static int bind_dev(int rootfd, const char *path, char *err, size_t errlen)
{
	struct stat st;
	if (stat(path, &st) < 0 || !S_ISCHR(st.st_mode))
		return sb_errc(err, errlen, ENODEV, "--allow-containers needs %s, which this host lacks", path);
	cleanup_fd int tree = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0)
		return sb_err(err, errlen, "cannot bind %s: %s", path, strerror(errno));
	int r = sb_set_attr(tree, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, path, err, errlen);
	if (r < 0)
		return r;
	cleanup_fd int target = sb_mkpath(rootfd, path, false, err, errlen);
	if (target < 0)
		return target;
	return sb_attach(tree, target, path, err, errlen);
}

/* /sys, read-only, as a container sees it: crun binds it into containers that share the session's
 * network namespace (a fresh sysfs needs a network namespace of one's own) and reads the cgroup
 * layout from it. It is a sysfs of its own, made here in the session's network namespace: a bind of
 * the host's /sys showed the host's interfaces under /sys/class/net (their addresses, and the traffic
 * counters of the machine and of every other session's sl-* link) and the file systems mounted in it
 * (debugfs, tracefs, bpf, securityfs). /sys/fs/cgroup is an empty read-only tmpfs: the session cgroup
 * holds the nested containers (Podman runs with cgroups disabled), and crun refuses a hybrid layout. */
static int sys_tree(int rootfd, char *err, size_t errlen)
{
	int r;
	cleanup_fd int tree =
	        sb_new_fs("sysfs", NULL, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
	                  err, errlen);
	if (tree < 0)
		return tree;
	cleanup_fd int target = sb_mkpath(rootfd, "/sys", true, err, errlen);
	if (target < 0)
		return target;
	if ((r = sb_attach(tree, target, "/sys", err, errlen)) < 0)
		return r;
	const char *opts[] = {"mode", "0755", "size", "4k", NULL};
	cleanup_fd int fs =
	        sb_new_fs("tmpfs", opts, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
	                  err, errlen);
	if (fs < 0)
		return fs;
	cleanup_fd int cg = sb_open_beneath(rootfd, "/sys/fs/cgroup", O_PATH | O_DIRECTORY, err, errlen);
	if (cg < 0)
		return cg;
	return sb_attach(fs, cg, "/sys/fs/cgroup", err, errlen);
}

/* Covers each of the files (paths beneath rootfd) that the sandbox shows with dirfd's file `name`,
 * read-only. */
static int cover(int rootfd, const char *const *files, size_t n, int dirfd, const char *name, char *err, size_t errlen)
{
	int r;

	for (size_t i = 0; i < n; i++) {
		cleanup_fd int target = openat(rootfd, files[i], O_PATH | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (target < 0 || fstat(target, &st) < 0 || !S_ISREG(st.st_mode))
			continue; /* not installed, or not shown by this profile */
		cleanup_fd int tree = open_tree(dirfd, name, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (tree < 0)
			return sb_err(err, errlen, "cannot clone %s/%s: %s", SB_NEST_DIR, name, strerror(errno));
		if ((r = sb_set_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false, files[i],
		                     err, errlen)) < 0 ||
		    (r = sb_attach(tree, target, files[i], err, errlen)) < 0)
			return r;
	}
	return 0;
}

int sb_nest_mounts(const struct sb_session *s, int rootfd, char *err, size_t errlen)
{
	static const char *const tools[] = {"usr/bin/podman", "usr/bin/buildah"};
	static const char *const subids[] = {"etc/subuid", "etc/subgid"};
	int r;

	/* /run is the sandbox's own tmpfs by now; the directory belongs to pid 1 (read-only to the
	 * command of a root launch, which runs as another uid). */
	cleanup_fd int dir = sb_mkpath(rootfd, SB_NEST_DIR, true, err, errlen);
	if (dir < 0)
		return dir;
	cleanup_fd int dirfd = sb_open_beneath(rootfd, SB_NEST_DIR, O_RDONLY | O_DIRECTORY, err, errlen);
	if (dirfd < 0)
		return dirfd;
	if (!s->cfg->allow_containers) {
		if ((r = write_at(dirfd, "refuse", sb_nest_refusal, 0755, err, errlen)) < 0)
			return r;
		return cover(rootfd, tools, 2, dirfd, "refuse", err, errlen);
	}
	/* newuidmap is set-uid root, which no_new_privs and nosuid disable here: with the subordinate
	 * ranges hidden, Podman maps the command's one uid (and ignores the chowns of image files). */
	if ((r = write_at(dirfd, "containers.conf", sb_nest_containers_conf, 0644, err, errlen)) < 0 ||
	    (r = write_at(dirfd, "storage.conf", sb_nest_storage_conf, 0644, err, errlen)) < 0 ||
	    (r = write_at(dirfd, "empty", "", 0644, err, errlen)) < 0 ||
	    (r = cover(rootfd, subids, 2, dirfd, "empty", err, errlen)) < 0)
		return r;
	if ((r = bind_dev(rootfd, "/dev/fuse", err, errlen)) < 0 ||
	    (r = bind_dev(rootfd, "/dev/net/tun", err, errlen)) < 0)
		return r;
	return sys_tree(rootfd, err, errlen);
}
