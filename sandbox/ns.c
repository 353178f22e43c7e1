/* Namespace steps: which namespaces a session gets, the user namespace's id maps (written by the
 * launcher), the UTS hostname, the loopback interface of the empty network namespace, and the
 * cgroup namespace (entered after the launcher placed init in the session cgroup). */
#include "session.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int sb_ns_clone_flags(const struct sb_session *s)
{
	int f = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
	/* Unprivileged: a user namespace gives the capabilities to build the rest. As root the
	 * command runs as root without capabilities (like bubblewrap and nsjail by default). */
	if (s->userns)
		f |= CLONE_NEWUSER;
	return f;
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

/* Maps the invoking user to itself inside (one id each), with setgroups denied so the
 * supplementary groups cannot be dropped to get around a group-deny permission. */
int sb_ns_write_idmaps(pid_t pid, uid_t uid, gid_t gid, char *err, size_t errlen)
{
	char path[64], map[64];
	int r;

	snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
	if ((r = write_file(path, "deny", err, errlen)) < 0)
		return r;
	snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	if ((r = write_file(path, map, err, errlen)) < 0)
		return r;
	snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	return write_file(path, map, err, errlen);
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
