/* `sluice run --sandbox-type firejail`: firejail does the filesystem/process sandbox and sluice the
 * network. The launcher makes a network namespace, has netd wire it (the same session as the local
 * backend: veth, nftables, proxy, audit log), and runs `firejail --noprofile --netns=NAME` in a
 * private mount namespace of its own where NAME is bound under /run/netns (firejail --netns only
 * opens /var/run/netns/NAME and wants a regular file there) and the session's resolv.conf is bound
 * over /etc/resolv.conf (firejail builds its mount namespace from ours). Neither bind is visible
 * outside. The proxy variables go in the environment (the launcher's whitelist). firejail is set-uid
 * root and joins the namespace itself; binding under /run/netns needs CAP_SYS_ADMIN, so this backend
 * runs for root only (a user asks an administrator or uses `sluice netns create`, see docs). The
 * child enters the namespace before exec too, so the command never runs in the launcher's network
 * even if firejail skips --netns; where firejail would skip its whole sandbox (it does so silently
 * inside containers and PID namespaces), the launcher refuses instead. */
#include "session.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* firejail runs the command WITHOUT any sandbox of its own (exit status 0, one warning line) when it
 * thinks it already runs in one: no kernel thread among /proc/1..10, or `container=` set for us or
 * for pid 1. Its check, mirrored here so that case fails closed before anything runs. Returns a
 * reason or NULL. */
static const char *firejail_would_degrade(void)
{
	static const char *const kthreads[] = {"kthreadd", "ksoftirqd", "kworker", "rcu_sched", "rcu_bh"};
	const char *ct = getenv("container");
	bool kernel = false;

	if (ct && *ct)
		return "the environment variable container is set";
	for (int i = 1; i <= 10 && !kernel; i++) {
		char path[32], comm[64] = "";
		snprintf(path, sizeof path, "/proc/%d/comm", i);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(comm, sizeof comm, f))
			for (size_t k = 0; k < sizeof kthreads / sizeof kthreads[0]; k++)
				if (strncmp(comm, kthreads[k], strlen(kthreads[k])) == 0)
					kernel = true;
		fclose(f);
	}
	if (!kernel)
		return "no kernel threads are visible in /proc (a PID namespace or container)";
	cleanup_fd int fd = open("/proc/1/environ", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char buf[65536];
		ssize_t n = read(fd, buf, sizeof buf - 1);
		for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(buf + i) + 1) {
			buf[n] = '\0';
			if (strncmp(buf + i, "container=", 10) == 0 && buf[i + 10])
				return "pid 1 runs with container= set (a container)";
		}
	}
	return NULL;
}

/* A new, empty network namespace as an fd (the launcher stays in its own). */
static int new_netns(char *err, size_t errlen)
{
	cleanup_fd int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int fd;

	if (self < 0)
		return sb_err(err, errlen, "cannot open /proc/self/ns/net: %s", strerror(errno));
	if (unshare(CLONE_NEWNET) < 0)
		return sb_err(err, errlen, "cannot create a network namespace: %s", strerror(errno));
	fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	int e = errno;
	if (setns(self, CLONE_NEWNET) < 0) {
		/* Staying in the new namespace would leave the launcher without its network: fail. */
		if (fd >= 0)
			close(fd);
		return sb_err(err, errlen, "cannot return to the launcher's network namespace: %s", strerror(errno));
	}
	if (fd < 0)
		return sb_errc(err, errlen, e, "cannot open the new network namespace: %s", strerror(e));
	return fd; /* netd brings its lo up with the rest of the wiring */
}

/* In the child, before exec: the private mounts firejail will see. Returns 0 or -errno. */
static int child_mounts(const struct sb_session *s, int nsfd, const char *nsname, bool resolv, char *err,
                        size_t errlen)
{
	char src[64], dst[PATH_MAX], rc[PATH_MAX];

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sb_err(err, errlen, "cannot make a private mount namespace: %s", strerror(errno));
	/* /run/netns is where `ip netns` keeps its names; created empty if missing, like ip does. */
	if (mkdir("/run/netns", 0755) < 0 && errno != EEXIST)
		return sb_err(err, errlen, "cannot create /run/netns: %s", strerror(errno));
	if (mount("sluice-netns", "/run/netns", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") < 0)
		return sb_err(err, errlen, "cannot mount a private /run/netns: %s", strerror(errno));
	snprintf(dst, sizeof dst, "/run/netns/%s", nsname);
	int f = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (f < 0)
		return sb_err(err, errlen, "cannot create %s: %s", dst, strerror(errno));
	close(f);
	snprintf(src, sizeof src, "/proc/self/fd/%d", nsfd);
	if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
		return sb_err(err, errlen, "cannot bind the session's network namespace on %s: %s", dst, strerror(errno));
	if (resolv) {
		snprintf(rc, sizeof rc, "%s/resolv.conf", s->dir);
		if (mount(rc, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0)
			return sb_err(err, errlen, "cannot bind the session's resolv.conf: %s", strerror(errno));
	}
	return 0;
}

int sb_firejail_run(const struct sb_config *cfg, char *const *argv)
{
	struct sb_config c = *cfg; /* shallow: the project mode differs, nothing is freed here */
	struct sb_session s = {.cfg = &c, .argv = argv, .sync_fd = -1, .init_pid = -1, .tty_fd = -1, .lock_fd = -1};
	char err[SB_ERR_MAX] = "", nsname[32];
	cleanup_free char *fj = sb_find_program("firejail");
	cleanup_fd int nsfd = -1;
	struct sb_go go;
	sigset_t set, old;
	int status = SB_EXIT_FAIL, r, st;
	char **env = NULL;

	memset(&go, 0, sizeof go);
	if (!fj) {
		fprintf(stderr, "sluice: --sandbox-type firejail: firejail is not installed (Debian/Ubuntu: `sudo apt "
		                "install firejail`), or use --sandbox-type local\n");
		return SB_EXIT_FAIL;
	}
	const char *why = firejail_would_degrade();
	if (why) {
		fprintf(stderr,
		        "sluice: --sandbox-type firejail: firejail would run the command without its sandbox here "
		        "(%s); refusing. Use --sandbox-type local (the default)\n",
		        why);
		return SB_EXIT_FAIL;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "sluice: --sandbox-type firejail needs root: firejail --netns only joins namespaces "
		                "named under /run/netns; as a user, use the local sandbox (the default), or have an "
		                "administrator run firejail with a namespace from `sluice netns create`\n");
		return SB_EXIT_FAIL;
	}
	c.project_mode = SB_PROJECT_RW; /* firejail mounts the project itself: no overlay directories */
	c.save = SB_SAVE_NONE;
	s.cwd = getcwd(NULL, 0);
	if ((r = sb_session_dir_create(&s, err, sizeof err)) < 0)
		goto out;
	snprintf(nsname, sizeof nsname, "sluice-%s", s.id);
	/* Without --allow-network firejail's own --net=none gives the command a namespace with only lo. */
	if (c.allow_network) {
		if ((nsfd = new_netns(err, sizeof err)) < 0)
			goto out;
		if ((r = sb_net_open(&s, nsfd, &go, err, sizeof err)) < 0)
			goto out;
	}
	if (c.verbose)
		fprintf(stderr, "sluice: firejail %s in network namespace %s (%s)\n", fj, nsname,
		        c.allow_network ? go.proxy_url : "no network");
	if (!(env = sb_env_build(&s, &go, environ))) {
		snprintf(err, sizeof err, "out of memory");
		goto out;
	}

	sb_forward_sigset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &old);
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, sizeof err, "fork: %s", strerror(errno));
		sigprocmask(SIG_SETMASK, &old, NULL);
		goto out;
	}
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		if (c.allow_network && child_mounts(&s, nsfd, nsname, go.have_resolv, err, sizeof err) < 0) {
			fprintf(stderr, "sluice: %s\n", err);
			_exit(SB_EXIT_FAIL);
		}
		/* firejail joins the namespace by name; entering it first as well means the command can
		 * never run in the launcher's network, whatever firejail decides. */
		if (c.allow_network && setns(nsfd, CLONE_NEWNET) < 0) {
			fprintf(stderr, "sluice: cannot enter the session's network namespace: %s\n", strerror(errno));
			_exit(SB_EXIT_FAIL);
		}
		size_t n = 0;
		while (argv[n])
			n++;
		char netns_arg[64];
		if (c.allow_network)
			snprintf(netns_arg, sizeof netns_arg, "--netns=%s", nsname);
		else
			snprintf(netns_arg, sizeof netns_arg, "--net=none");
		const char **fa = calloc(n + 8, sizeof *fa);
		if (!fa)
			_exit(SB_EXIT_FAIL);
		size_t k = 0;
		fa[k++] = "firejail";
		fa[k++] = "--noprofile";
		if (!c.verbose)
			fa[k++] = "--quiet";
		fa[k++] = netns_arg;
		fa[k++] = "--";
		for (size_t i = 0; i < n; i++)
			fa[k++] = argv[i];
		execve(fj, (char *const *)fa, env);
		fprintf(stderr, "sluice: cannot run %s: %s\n", fj, strerror(errno));
		_exit(SB_EXIT_NOEXEC);
	}
	/* Forward the signals a user sends to the launcher; wait for firejail. */
	for (;;) {
		siginfo_t si;
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		int sig = sigwaitinfo(&set, &si);
		if (sig > 0 && sig != SIGCHLD && si.si_code != SI_KERNEL)
			kill(pid, sig);
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : SB_EXIT_FAIL;
out:
	if (err[0])
		fprintf(stderr, "sluice: %s\n", err);
	sb_env_free(env);
	sb_net_close(&s);
	sb_session_dir_remove(&s);
	sb_net_release();
	free(s.cwd);
	if (s.lock_fd >= 0)
		close(s.lock_fd);
	return status;
}
