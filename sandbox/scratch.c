/* The session's scratch space (--disk, issue 22, item 5): one tmpfs per session, limited in size and
 * in inodes, holds everything the command can write that is not the project or a bind: the overlay's
 * upper and work directories, /tmp, /var/tmp, /run, /dev/shm and the base profile's home. Writing past
 * the limit gets ENOSPC inside; the host's file systems (the session directory lives in /run or
 * /var/tmp) receive nothing. Why a tmpfs: it is the one limited file system an unprivileged user can
 * make (in the session's user namespace); a loop image or ext4 project quota needs root, and the
 * session's /tmp was a tmpfs already. Its pages are charged to the session's memory cgroup too.
 *
 * The sandbox's pid 1 makes it (sb_scratch_mount) and hands the launcher a descriptor on it over the
 * setup socket (sb_scratch_send/_recv): the tmpfs lives as long as that descriptor, so at exit the
 * launcher can tell whether the limit was reached (sb_scratch_report) and, for --save and --apply,
 * copy the upper directory into SESSION/upper on disk, where overlay.c takes it from
 * (sb_scratch_take_upper). */
#include "session.h"

#include "ipc.h"
#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define SB_MSG_SCRATCH 0x5301 /* pid 1 -> launcher on the setup socket: one fd, the scratch tmpfs */

uint64_t sb_scratch_size(const struct sb_config *c)
{
	if (c->limits.disk_bytes)
		return c->limits.disk_bytes;
	/* 2 GiB, or half the memory when that is less (it is a tmpfs) */
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t half = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : 0;
	return half && half < SB_DISK_DEFAULT ? half : SB_DISK_DEFAULT;
}

uint64_t sb_scratch_inodes(uint64_t size)
{
	uint64_t n = size / SB_DISK_BYTES_PER_INODE;
	return n < 1024 ? 1024 : n;
}

int sb_scratch_mount(struct sb_session *s, int hostroot, char *err, size_t errlen)
{
	char size[32], inodes[32];
	uint64_t sz = sb_scratch_size(s->cfg);
	snprintf(size, sizeof size, "%llu", (unsigned long long)sz);
	snprintf(inodes, sizeof inodes, "%llu", (unsigned long long)sb_scratch_inodes(sz));
	const char *opts[] = {"size", size, "nr_inodes", inodes, "mode", "0755", NULL};
	cleanup_fd int fs = sb_new_fs("tmpfs", opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err, errlen);
	if (fs < 0)
		return fs;
	/* Under it, the session directory bound onto itself and unbindable: a recursive clone of a host
	 * path made later (the unsafe profile's "/", base's /usr, /etc and /opt, a view of the home, a
	 * plugin path) skips an unbindable mount with everything on it, so neither the scratch space's root
	 * (the overlay's upper and work directories) nor the masks' tmpfs in it (masks.c) is in the
	 * sandbox, wherever the session directory lies (an XDG_RUNTIME_DIR in the home, or under /opt).
	 * The scratch space itself stays bindable: its directories are cloned (sb_scratch_at). */
	cleanup_fd int hold = open_tree(hostroot, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	struct mount_attr unbindable = {.propagation = MS_UNBINDABLE};
	if (hold < 0)
		return sb_err(err, errlen, "cannot bind the session directory: %s", strerror(errno));
	int r = sb_attach(hold, hostroot, "the session directory", err, errlen);
	if (r < 0)
		return r;
	if (mount_setattr(hold, "", AT_EMPTY_PATH, &unbindable, sizeof unbindable) < 0)
		return sb_err(err, errlen, "cannot make the session directory unbindable: %s", strerror(errno));
	/* On the session directory, in this mount namespace only; the new root is stacked on top of it,
	 * and pivot_root detaches it with the host's tree: what is used of it are clones of its
	 * directories and the descriptors. */
	r = sb_attach(fs, hostroot, "the session's scratch space", err, errlen);
	if (r < 0)
		return r;
	if (s->cfg->project_mode == SB_PROJECT_OVERLAY) {
		if (mkdirat(fs, "upper", 0755) < 0 || mkdirat(fs, "work", 0700) < 0)
			return sb_err(err, errlen, "cannot make the overlay directories: %s", strerror(errno));
		/* A root launch's command runs as host_uid: the overlay's root directory is upper/ itself. */
		if (s->remap_userns >= 0 && fchownat(fs, "upper", s->host_uid, s->host_uid, AT_SYMLINK_NOFOLLOW) < 0)
			return sb_err(err, errlen, "cannot hand the overlay to uid %u: %s", (unsigned)s->host_uid,
			              strerror(errno));
	}
	s->scratch_fd = steal_fd(&fs);
	return 0;
}

int sb_scratch_at(const struct sb_session *s, const char *name, int dirfd, const char *dst, mode_t mode,
                  long long owner, uint64_t attrs, char *err, size_t errlen)
{
	if (mkdirat(s->scratch_fd, name, 0700) < 0 ||
	    (owner >= 0 && fchownat(s->scratch_fd, name, (uid_t)owner, (gid_t)owner, AT_SYMLINK_NOFOLLOW) < 0) ||
	    fchmodat(s->scratch_fd, name, mode, 0) < 0)
		return sb_err(err, errlen, "cannot make %s in the scratch space: %s", dst, strerror(errno));
	cleanup_fd int tree = open_tree(s->scratch_fd, name, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0)
		return sb_err(err, errlen, "cannot mount %s: %s", dst, strerror(errno));
	int r = sb_set_attr(tree, attrs, false, dst, err, errlen);
	if (r < 0)
		return r;
	cleanup_fd int target = sb_mkpath(dirfd, dst, true, err, errlen);
	if (target < 0)
		return target;
	return sb_attach(tree, target, dst, err, errlen);
}

int sb_scratch_send(struct sb_session *s, char *err, size_t errlen)
{
	struct ipc_buf b;
	int r = ipc_buf_init(&b, SB_MSG_SCRATCH, 0);
	if (r == 0) {
		ipc_buf_put_fd(&b, s->scratch_fd);
		r = ipc_send(s->sync_fd, &b);
	}
	ipc_buf_release(&b);
	if (r < 0)
		return sb_errc(err, errlen, -r, "cannot hand the scratch space to the launcher: %s", strerror(-r));
	return 0;
}

void sb_scratch_recv(struct sb_session *s)
{
	struct ipc_msg m;
	struct pollfd p = {.fd = s->sync_fd, .events = POLLIN};
	unsigned t = s->cfg->limits.timeout_s;
	memset(&m, 0, sizeof m);
	/* pid 1 sends it once the file system is built; when it fails before, the socket just closes. A
	 * setup stuck on a hung file system (a view of the home lists it) still ends with --timeout. */
	int pr;
	do
		pr = poll(&p, 1, t ? (t > INT_MAX / 1000 ? INT_MAX : (int)t * 1000) : -1);
	while (pr < 0 && errno == EINTR);
	if (pr <= 0) {
		log_warnx("the sandbox did not finish its setup in time; no scratch space report");
		return;
	}
	if (ipc_recv(s->sync_fd, &m) == 0 && m.type == SB_MSG_SCRATCH && m.nfds == 1) {
		struct statfs sf;
		if (fstatfs(m.fds[0], &sf) == 0 && sf.f_type == 0x01021994 /* TMPFS_MAGIC */) {
			s->scratch_fd = m.fds[0];
			m.fds[0] = -1;
		}
	}
	ipc_msg_clear(&m);
}

bool sb_scratch_report(const struct sb_session *s)
{
	struct statfs sf;
	if (s->scratch_fd < 0 || fstatfs(s->scratch_fd, &sf) < 0)
		return false;
	bool blocks = sf.f_bfree == 0, inodes = sf.f_ffree == 0;
	log_info("scratch space at exit: %llu of %llu KiB, %llu of %llu files",
	         (unsigned long long)((uint64_t)(sf.f_blocks - sf.f_bfree) * (uint64_t)sf.f_bsize >> 10),
	         (unsigned long long)((uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize >> 10),
	         (unsigned long long)(sf.f_files - sf.f_ffree), (unsigned long long)sf.f_files);
	if (!blocks && !inodes)
		return false;
	if (!s->cfg->quiet)
		fprintf(stderr,
		        "sluice: the session's disk limit was reached (%s%llu MiB and %llu files for the overlay, "
		        "/tmp, /var/tmp, /run, /dev/shm%s): writes failed with ENOSPC; raise it with --disk SIZE\n",
		        blocks ? "full: " : "out of files: ",
		        (unsigned long long)((uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize >> 20),
		        (unsigned long long)sf.f_files, s->cfg->profile == SB_PROFILE_UNSAFE ? "" : ", the home");
	return true;
}

/* Copies the directory from (its entries) into the existing directory to: files (no set-id bits),
 * directories, symlinks, overlayfs whiteouts (character device 0/0) and opaque markers. Nothing is
 * followed: all of it was written by the sandboxed command. */
static int copy_tree(int from, int to, int depth)
{
	DIR *d = sb_opendir_dup(from);
	struct dirent *de;
	int r = 0;

	if (!d)
		return -errno;
	if (depth > 256) {
		closedir(d);
		return -ELOOP;
	}
	while (r == 0 && (de = readdir(d))) {
		const char *n = de->d_name;
		struct stat st;
		if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
			continue;
		if (fstatat(from, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
		} else if (S_ISREG(st.st_mode)) {
			r = sb_overlay_copy_file(from, to, n, st.st_mode);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t len = readlinkat(from, n, target, sizeof target - 1);
			if (len < 0)
				r = -errno;
			else if ((target[len] = '\0', symlinkat(target, to, n)) < 0)
				r = -errno;
		} else if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
			if (mknodat(to, n, S_IFCHR | 0000, makedev(0, 0)) < 0)
				r = -errno;
		} else if (S_ISDIR(st.st_mode)) {
			if (mkdirat(to, n, 0700) < 0) {
				r = -errno;
				break;
			}
			cleanup_fd int sf = openat(from, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			cleanup_fd int sd = openat(to, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sf < 0 || sd < 0) {
				r = -errno;
				break;
			}
			static const char *const opaque[] = {"trusted.overlay.opaque", "user.overlay.opaque"};
			for (size_t i = 0; i < 2; i++) {
				char v[8];
				ssize_t l = fgetxattr(sf, opaque[i], v, sizeof v);
				if (l > 0 && fsetxattr(sd, opaque[i], v, (size_t)l, 0) < 0)
					r = -errno;
			}
			if (r == 0)
				r = copy_tree(sf, sd, depth + 1);
			if (r == 0 && fchmod(sd, st.st_mode & 0777) < 0)
				r = -errno;
		}
		/* sockets, fifos, devices: not part of a change to save */
	}
	closedir(d);
	return r;
}

int sb_scratch_take_upper(struct sb_session *s, char *err, size_t errlen)
{
	char path[PATH_MAX];
	if (s->scratch_fd < 0)
		return sb_errc(err, errlen, ENOENT,
		               "the session's changes are gone (its scratch space was not handed over)");
	cleanup_fd int from = openat(s->scratch_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	snprintf(path, sizeof path, "%s/upper", s->dir);
	cleanup_fd int to = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (from < 0 || to < 0)
		return sb_err(err, errlen, "cannot open the session's changes (%s): %s", from < 0 ? "scratch" : path,
		              strerror(errno));
	int r = copy_tree(from, to, 0);
	if (r < 0)
		return sb_errc(err, errlen, -r, "cannot copy the session's changes into %s: %s", path, strerror(-r));
	return 0;
}
