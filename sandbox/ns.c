/* Namespace steps: which namespaces a session gets, the user namespace's id maps (written by the
 * launcher), the UTS hostname, the loopback interface of the empty network namespace, and the
 * cgroup namespace (entered after the launcher placed init in the session cgroup). */
#include "session.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <grp.h>
#include <linux/securebits.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int sb_ns_clone_flags(const struct sb_session *s)
{
	int f = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
	/* Unprivileged: a user namespace gives the capabilities to build the rest. As root, pid 1 builds
	 * the sandbox as root and then enters the user namespace of the session's unprivileged uid
	 * (sb_ns_make_userns), unless --keep-root-uid. */
	if (s->userns)
		f |= CLONE_NEWUSER;
	return f;
}

/* The default range of a root launch's sandbox uids: the top 65536 ids below 2^31, clear of the
 * usual subordinate-id ranges (/etc/subuid, from 100000), of FreeIPA's (below 2^31 - 2^27 or so), of
 * systemd's container and foreign ranges (up to 0x7FFEFFFF) and of nobody (65534). */
#define SB_ROOT_UID_BASE  0x7fff0000u
#define SB_ROOT_UID_COUNT 0x10000u

uid_t sb_ns_pick_uid(const struct sb_config *c, const char *id)
{
	uid_t base = c->root_uid_count ? c->root_uid_base : SB_ROOT_UID_BASE;
	uint32_t count = c->root_uid_count ? c->root_uid_count : SB_ROOT_UID_COUNT;
	/* The session id is random: sessions that run at once get different uids (and so do not share
	 * per-user kernel limits either), except by a 1 in `count` chance. */
	uint32_t h = (uint32_t)strtoul(id + 8, NULL, 16);
	return base + h % count;
}

static int write_file(const char *path, const char *data, char *err, size_t errlen)
{
	cleanup_fd int fd = open(path, O_WRONLY | O_CLOEXEC);
	size_t len = strlen(data);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
		int e = errno ? errno : EIO;
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

/* Maps one uid and one gid (inside -> outside), with setgroups denied so the supplementary groups
 * cannot be dropped to get around a group-deny permission. */
int sb_ns_write_idmaps(pid_t pid, uid_t in_uid, uid_t out_uid, gid_t in_gid, gid_t out_gid, char *err, size_t errlen)
{
	char path[64], map[64];
	int r;

	snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
	if ((r = write_file(path, "deny", err, errlen)) < 0)
		return r;
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)in_uid, (unsigned)out_uid);
	if ((r = write_file(path, map, err, errlen)) < 0)
		return r;
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)in_gid, (unsigned)out_gid);
	return write_file(path, map, err, errlen);
}

/* A root launch's command runs as an unprivileged host uid, in a user namespace that uid owns:
 * everything the kernel counts per user (inotify instances and watches, POSIX message queue bytes,
 * pending signals, processes, namespaces) is charged to the owner of the user namespace a process
 * runs in, through every level up to the host's, so it must not be root's (nor the user's: see
 * docs/sandbox.md). A child becomes that uid (keeping its capabilities for this one call with
 * SECBIT_NO_SETUID_FIXUP, as some distributions let only privileged callers make user namespaces),
 * makes the namespace, sets its per-user maxima (ulimits.c) and exits; the launcher then opens the
 * namespace and writes its maps (0 inside to the uid) through the child's /proc entry, which stays
 * until the child is reaped (a process's user namespace is held by its credentials, which an exited,
 * unreaped child keeps), and reaps it before the call returns.
 * The child is vfork'd: no copy of the launcher's page tables, and the launcher runs again only once
 * the child is gone, one wake-up instead of a ping-pong over a socketpair (docs/sandbox.md has the
 * start-up profile). It shares the launcher's memory, so it only makes system calls (the credential
 * ones raw, so glibc's all-threads set*id broadcast is not involved) and reports into `res`. */
struct userns_res {
	int err;
	const char *step;
};

static _Noreturn void userns_child(volatile struct userns_res *res, uid_t uid, const struct sb_ulimits *u)
{
	char e2[SB_ERR_MAX];
	const char *step = NULL;

	if (syscall(SYS_setgroups, 0, NULL) < 0)
		step = "setgroups";
	else if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) < 0)
		step = "securebits";
	else if (syscall(SYS_setresgid, uid, uid, uid) < 0 || syscall(SYS_setresuid, uid, uid, uid) < 0)
		step = "setresuid";
	else if (unshare(CLONE_NEWUSER) < 0)
		step = "unshare";
	/* root of the new namespace (until the child is reaped): its per-user maxima */
	else if (sb_ulimits_apply_ns(u, e2, sizeof e2) < 0)
		step = "per-user limits";
	if (step) {
		res->err = errno ? errno : EPERM;
		res->step = step;
	} else {
		res->err = 0;
	}
	_exit(step ? 1 : 0);
}

int sb_ns_make_userns(uid_t uid, const struct sb_ulimits *u, char *err, size_t errlen)
{
	volatile struct userns_res res = {EPIPE, "the child"};
	char path[64];
	int r;

	/* the child's uid change marks the memory it shares with us not dumpable: restored below */
	int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	pid_t c = vfork();
	if (c == 0)
		userns_child(&res, uid, u);
	int e = errno;
	if (dumpable >= 0)
		prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
	if (c < 0)
		return sb_errc(err, errlen, e, "vfork: %s", strerror(e));
	int fd = -1;
	if (res.err == 0) {
		snprintf(path, sizeof path, "/proc/%d/ns/user", (int)c);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			res.err = errno;
			res.step = "opening its namespace";
		}
	}
	if (fd < 0)
		r = sb_errc(err, errlen, res.err,
		            "cannot create a user namespace for uid %u (the session's unprivileged uid): %s: %s; "
		            "--keep-root-uid runs the command as uid 0 instead",
		            (unsigned)uid, res.step, strerror(res.err));
	else
		r = sb_ns_write_idmaps(c, 0, uid, 0, uid, err, errlen);
	while (waitpid(c, NULL, 0) < 0 && errno == EINTR)
		;
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	return fd;
}

/* pid 1 of a root launch, after the mounts: leaves root behind. No supplementary group of root's
 * may stay (setgroups is denied inside), then the namespace made by sb_ns_make_userns, where uid and
 * gid 0 are the session's unprivileged uid. The credential change clears the parent-death signal:
 * it is set again. */
int sb_ns_enter_userns(int fd, char *err, size_t errlen)
{
	if (setgroups(0, NULL) < 0)
		return sb_err(err, errlen, "setgroups: %s", strerror(errno));
	if (setns(fd, CLONE_NEWUSER) < 0)
		return sb_err(err, errlen, "cannot enter the session's user namespace: %s", strerror(errno));
	if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		return sb_err(err, errlen, "cannot become the session's uid: %s", strerror(errno));
	return sb_die_with_parent(err, errlen);
}

int sb_ns_set_hostname(const char *name, char *err, size_t errlen)
{
	if (sethostname(name, strlen(name)) < 0 || setdomainname("", 0) < 0) {
		snprintf(err, errlen, "sethostname(%s): %s", name, strerror(errno));
		return -errno;
	}
	return 0;
}

/* The new network namespace holds only a down `lo`; bring it up so localhost works. */
int sb_ns_loopback_up(char *err, size_t errlen)
{
	cleanup_fd int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;

	if (fd < 0)
		goto fail;
	memset(&ifr, 0, sizeof ifr);
	util_strlcpy(ifr.ifr_name, "lo", sizeof ifr.ifr_name);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		goto fail;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		goto fail;
	return 0;
fail:
	snprintf(err, errlen, "cannot bring up the loopback interface: %s", strerror(errno));
	return -errno;
}

int sb_ns_enter_cgroup_ns(char *err, size_t errlen)
{
	if (unshare(CLONE_NEWCGROUP) < 0) {
		snprintf(err, errlen, "unshare(CLONE_NEWCGROUP): %s", strerror(errno));
		return -errno;
	}
	return 0;
}
