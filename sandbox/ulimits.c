/* Per-user kernel limits (issue 22, item 6): the kernel counts some resources per user, not per
 * process tree (inotify instances and watches, POSIX message queue bytes, pending signals, processes,
 * namespaces), and a command running as the invoking user could use up that user's whole allowance,
 * so the user's own programs outside fail (EMFILE, EAGAIN). Two mechanisms bound the session:
 *
 *  - In a user namespace the counts are kept per namespace and charged up the chain to the owner of
 *    each namespace; every level checks its own maximum (/proc/sys/user/max_*, which a new namespace
 *    starts at INT_MAX). The session's namespace gets half of the launcher's maxima for inotify and 0
 *    for new namespaces and fanotify (seccomp refuses those calls anyway), so the command can take at
 *    most half of its user's inotify allowance. With --allow-containers it may hold up to 256
 *    namespaces of each kind (rootless Podman's, nest.c).
 *  - The counts the kernel checks against rlimits (RLIMIT_NPROC, _MSGQUEUE, _SIGPENDING, _MEMLOCK)
 *    are checked at the command's own level against its rlimit: the command gets half of the
 *    launcher's (finite) limits, so the user keeps at least the other half.
 *
 * A root launch runs the command in a user namespace owned by a per-session unprivileged uid
 * (ns.c): everything it uses is charged to that uid, and root's allowance is not touched at all.
 * The launcher computes the values (sb_ulimits_compute); the process that is root in the session's
 * user namespace writes them (sb_ulimits_apply_ns); pid 1 sets the rlimits the command inherits. */
#include "session.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* /proc/sys/user entries: inotify ones get half the launcher's value, the others 0. */
static const struct {
	const char *name;
	bool halve;
} sb_ns_limits[SB_NS_LIMITS] = {
        {"max_inotify_instances", true}, {"max_inotify_watches", true},    {"max_fanotify_groups", false},
        {"max_fanotify_marks", false},   {"max_user_namespaces", false},   {"max_pid_namespaces", false},
        {"max_net_namespaces", false},   {"max_mnt_namespaces", false},    {"max_ipc_namespaces", false},
        {"max_uts_namespaces", false},   {"max_cgroup_namespaces", false}, {"max_time_namespaces", false},
};

static const int sb_rlimits[SB_RLIMITS] = {RLIMIT_NPROC, RLIMIT_MSGQUEUE, RLIMIT_SIGPENDING, RLIMIT_MEMLOCK};

static long read_long(const char *path)
{
	char buf[32];
	cleanup_fd int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *end;
	long v = strtol(buf, &end, 10);
	return end == buf ? -1 : v;
}

/* --allow-containers: namespaces of each kind the command may hold at once (rootless Podman makes a
 * handful per container; fanotify stays at 0). */
#define SB_NESTED_NS_MAX 256

void sb_ulimits_compute(struct sb_ulimits *u, bool nested)
{
	char path[96];
	for (size_t i = 0; i < SB_NS_LIMITS; i++) {
		u->ns[i] = nested && strstr(sb_ns_limits[i].name, "_namespaces") ? SB_NESTED_NS_MAX : 0;
		if (!sb_ns_limits[i].halve)
			continue;
		snprintf(path, sizeof path, "/proc/sys/user/%s", sb_ns_limits[i].name);
		long v = read_long(path);
		/* unknown (no such entry on this kernel): leave the namespace's own default */
		u->ns[i] = v < 0 ? -1 : v / 2;
	}
	for (size_t i = 0; i < SB_RLIMITS; i++) {
		struct rlimit rl;
		if (getrlimit(sb_rlimits[i], &rl) < 0 || rl.rlim_cur == RLIM_INFINITY) {
			u->rl[i] = RLIM_INFINITY; /* nothing to exhaust */
			continue;
		}
		u->rl[i] = rl.rlim_cur / 2;
	}
}

int sb_ulimits_apply_ns(const struct sb_ulimits *u, char *err, size_t errlen)
{
	char path[96], val[32];
	for (size_t i = 0; i < SB_NS_LIMITS; i++) {
		if (u->ns[i] < 0)
			continue;
		snprintf(path, sizeof path, "/proc/sys/user/%s", sb_ns_limits[i].name);
		cleanup_fd int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)
			continue; /* not on this kernel */
		int n = snprintf(val, sizeof val, "%ld", u->ns[i]);
		if (fd < 0 || write(fd, val, (size_t)n) != n)
			return sb_err(err, errlen, "cannot limit %s in the session's user namespace: %s", path,
			              strerror(errno));
	}
	return 0;
}

int sb_ulimits_apply_rlimits(const struct sb_ulimits *u, char *err, size_t errlen)
{
	static const char *const names[SB_RLIMITS] = {"RLIMIT_NPROC", "RLIMIT_MSGQUEUE", "RLIMIT_SIGPENDING",
	                                              "RLIMIT_MEMLOCK"};
	for (size_t i = 0; i < SB_RLIMITS; i++) {
		struct rlimit rl;
		if (u->rl[i] == RLIM_INFINITY || getrlimit(sb_rlimits[i], &rl) < 0)
			continue;
		rlim_t v = u->rl[i] < rl.rlim_cur ? u->rl[i] : rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max = v;
		if (setrlimit(sb_rlimits[i], &rl) < 0)
			return sb_err(err, errlen, "cannot set %s to %llu: %s", names[i], (unsigned long long)v,
			              strerror(errno));
	}
	return 0;
}
