/* --allow-kvm: /dev/kvm inside the sandbox, usable by the command's uid and by nothing else of the
 * host. Without the flag the sandbox's fresh /dev has no kvm node at all (open fails with ENOENT).
 * A root launch runs the command as a per-session unprivileged uid (ns.c), which the host's node
 * (root:kvm 0660) would refuse: pid 1, still root in the host's user namespace, makes a node of its
 * own for the same device in the sandbox's /dev tmpfs, owned by that uid, mode 0600. It vanishes
 * with the session's mount namespace and changes nothing on the host. An unprivileged launch cannot
 * make device nodes: it binds the host's node, which the user must already be allowed to open
 * (checked before the session starts). The seccomp filter (seccomp.c) is a deny list that does
 * not touch the KVM ioctls, so nothing more is needed there. */
#include "session.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define SB_KVM_PATH "/dev/kvm"

int sb_kvm_check(const struct sb_config *c, const char *who, char *err, size_t errlen)
{
	struct stat st;

	if (stat(SB_KVM_PATH, &st) < 0)
		return sb_err(err, errlen, "%s: %s: %s (load the kvm module, or run on a host with virtualisation enabled)",
		              who, SB_KVM_PATH, strerror(errno));
	if (!S_ISCHR(st.st_mode))
		return sb_errc(err, errlen, ENODEV, "%s: %s is not a character device", who, SB_KVM_PATH);
	/* Opened, not only looked at: a node whose driver is gone (ENXIO, ENODEV) or that a container
	 * runtime's device rules refuse (EPERM, even to root) is no KVM, and says so here rather than as a
	 * failure inside the sandbox. A root launch then makes its own node (below); a user's session can
	 * only use the host's, so a user needs the right to open it. */
	cleanup_fd int fd = open(SB_KVM_PATH, O_RDWR | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		if (geteuid() != 0 && e == EACCES)
			return sb_errc(err, errlen, e,
			               "%s: uid %u cannot open %s: %s (add the user to the group that owns it, usually kvm)",
			               who, (unsigned)c->uid, SB_KVM_PATH, strerror(e));
		return sb_errc(err, errlen, e,
		               "%s: cannot open %s: %s (the kvm module is not loaded, or this machine's device rules, "
		               "a container's for instance, refuse it)",
		               who, SB_KVM_PATH, strerror(e));
	}
	/* and asked for a VM (about 0.5 ms), as the tests ask whether a machine has KVM: a node that opens
	 * but makes no VM would fail only inside the session */
	cleanup_fd int vm = ioctl(fd, KVM_CREATE_VM, 0);
	if (vm < 0)
		return sb_err(err, errlen, "%s: %s: no VM can be made: %s (KVM is there but does not work on this machine)",
		              who, SB_KVM_PATH, strerror(errno));
	return 0;
}

int sb_kvm_node(const struct sb_session *s, int devfd, char *err, size_t errlen)
{
	struct stat st;
	int r;

	if (stat(SB_KVM_PATH, &st) < 0 || !S_ISCHR(st.st_mode))
		return sb_errc(err, errlen, errno ? errno : ENODEV, "--allow-kvm: %s is gone", SB_KVM_PATH);
	if (s->userns) {
		cleanup_fd int tree = open_tree(AT_FDCWD, SB_KVM_PATH, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (tree < 0)
			return sb_err(err, errlen, "--allow-kvm: cannot bind %s: %s", SB_KVM_PATH, strerror(errno));
		if ((r = sb_set_attr(tree, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, SB_KVM_PATH, err, errlen)) < 0)
			return r;
		cleanup_fd int target = sb_mkpath(devfd, "kvm", false, err, errlen);
		if (target < 0)
			return target;
		return sb_attach(tree, target, SB_KVM_PATH, err, errlen);
	}
	if (mknodat(devfd, "kvm", S_IFCHR | 0600, st.st_rdev) < 0)
		return sb_err(err, errlen, "--allow-kvm: mknod /dev/kvm (%u:%u): %s", major(st.st_rdev), minor(st.st_rdev),
		              strerror(errno));
	if (fchownat(devfd, "kvm", s->host_uid, s->host_uid, AT_SYMLINK_NOFOLLOW) < 0 ||
	    fchmodat(devfd, "kvm", 0600, 0) < 0)
		return sb_err(err, errlen, "--allow-kvm: cannot give /dev/kvm to uid %u: %s", (unsigned)s->host_uid,
		              strerror(errno));
	return 0;
}
