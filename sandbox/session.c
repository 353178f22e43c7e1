/* The launcher side of a session: session directory, cgroup, the clone into new namespaces,
 * id maps, cgroup placement and the network step for the new init, then the wait: forwarding
 * signals, enforcing the wall-clock limit, and passing the command's status through. Teardown
 * kills whatever is left in the session cgroup, closes the netd session, saves or discards the
 * project changes and removes the session directory, so nothing outlives the session. The container
 * types (container.c) run in the same session: only their pid 1 differs. */
#include "session.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <linux/sched.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Microseconds since the previous call (for -vv timings of the launcher's steps). */
static long lap_us(void)
{
	static struct timespec prev;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	long us = prev.tv_sec ? (long)((now.tv_sec - prev.tv_sec) * 1000000 + (now.tv_nsec - prev.tv_nsec) / 1000) : 0;
	prev = now;
	return us;
}

static int status_of(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return SB_EXIT_FAIL;
}

/* Everything the launcher does between clone and "go". The network request goes first, so that netd
 * wires the namespace while the launcher writes the id maps and places init in its cgroup, and, when
 * the answer may come later (sb_net_can_finish_late), while pid 1 builds the filesystem: *late is then
 * set and the caller finishes the network step after the go. Returns 0 or -errno with err set. */
static int prepare_outside(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	int r;

	if (s->cfg->allow_network) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/ns/net", (int)s->init_pid);
		cleanup_fd int nsfd = open(path, O_RDONLY | O_CLOEXEC);
		if (nsfd < 0) {
			snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
			return -errno;
		}
		if ((r = sb_net_send(s, nsfd, err, errlen)) < 0)
			return r;
	}
	/* --allow-containers: the command is uid 0 of its namespace, as rootless Podman wants to be
	 * (nest.c); otherwise it keeps its own ids. */
	bool nested = s->cfg->allow_containers;
	if (s->userns && (r = sb_ns_write_idmaps(s->init_pid, nested ? 0 : s->cfg->uid, s->cfg->uid,
	                                         nested ? 0 : s->cfg->gid, s->cfg->gid, err, errlen)) < 0)
		return r;
	if (sb_cgroup_active(s->cg) && (r = sb_cgroup_attach(s->cg, s->init_pid, s->born_in_cgroup, err, errlen)) < 0)
		return r;
	/* Always a cgroup namespace: without a session cgroup it still hides the host's cgroup paths. */
	go->cgroup_ns = 1;
	if (s->cfg->allow_network) {
		if (sb_net_can_finish_late(s)) {
			if ((r = sb_net_placeholder(s, go, err, errlen)) < 0)
				return r;
			go->net_late = 1;
		} else if ((r = sb_net_finish(s, go, err, errlen)) < 0) {
			return r;
		}
	}
	return 0;
}

/* The go, to pid 1 (again after a late network step: pid 1 takes the status and the proxy's addresses
 * from that one). Returns r, or -EPIPE with err set when pid 1 cannot be told. */
static int send_go(struct sb_session *s, struct sb_go *go, int r, char *err, size_t errlen)
{
	go->status = r < 0 ? r : 0;
	if (write(s->sync_fd, go, sizeof *go) != (ssize_t)sizeof *go && r == 0) {
		snprintf(err, errlen, "cannot start the sandbox: %s", strerror(errno));
		return -EPIPE;
	}
	return r;
}

static int wait_session(struct sb_session *s, const sigset_t *set, bool *timed_out)
{
	struct timespec deadline = {0, 0}, now;
	unsigned timeout = s->cfg->limits.timeout_s;
	siginfo_t si;
	int st;

	if (timeout) {
		clock_gettime(CLOCK_MONOTONIC, &deadline);
		deadline.tv_sec += timeout;
	}
	for (;;) {
		pid_t p = waitpid(s->init_pid, &st, WNOHANG);
		if (p == s->init_pid)
			return status_of(st);
		int sig;
		if (timeout && !*timed_out) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			struct timespec left = {deadline.tv_sec - now.tv_sec, deadline.tv_nsec - now.tv_nsec};
			if (left.tv_nsec < 0) {
				left.tv_sec--;
				left.tv_nsec += 1000000000L;
			}
			if (left.tv_sec < 0) {
				fprintf(stderr, "sluice: the session ran out of time (--timeout %u s); killing it\n",
				        timeout);
				*timed_out = true;
				kill(s->init_pid, SIGKILL);
				sb_cgroup_kill_all(s->cg);
				continue;
			}
			sig = sigtimedwait(set, &si, &left);
		} else {
			sig = sigwaitinfo(set, &si);
		}
		if (sig < 0)
			continue; /* EINTR or EAGAIN (timeout): loop re-checks */
		if (sig == SIGCHLD)
			continue;
		/* Terminal-generated signals (SI_KERNEL) reached the whole foreground group already. */
		if (si.si_code != SI_KERNEL)
			kill(s->init_pid, sig);
	}
}

/* When the launcher is the terminal's foreground job, hand the foreground to the sandbox's process
 * group (so ^C and reads from the terminal reach the command) and take it back at the end. */
static void tty_give(struct sb_session *s)
{
	s->tty_fd = -1;
	if (!isatty(STDIN_FILENO) || tcgetpgrp(STDIN_FILENO) != getpgrp())
		return;
	sigset_t ttou, old;
	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	sigprocmask(SIG_BLOCK, &ttou, &old);
	if (tcsetpgrp(STDIN_FILENO, s->init_pid) == 0)
		s->tty_fd = STDIN_FILENO;
	sigprocmask(SIG_SETMASK, &old, NULL);
}

static void tty_take_back(struct sb_session *s)
{
	if (s->tty_fd < 0)
		return;
	sigset_t ttou, old;
	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	sigprocmask(SIG_BLOCK, &ttou, &old);
	tcsetpgrp(s->tty_fd, getpgrp());
	sigprocmask(SIG_SETMASK, &old, NULL);
	s->tty_fd = -1;
}

/* A fork-like clone into the new namespaces: the child is the sandbox's pid 1. With a v2
 * session cgroup, clone3 places it there at birth (CLONE_INTO_CGROUP), which avoids the cost of
 * migrating a running task; older kernels fall back to clone and a write to cgroup.procs. */
static pid_t clone_init(struct sb_session *s)
{
	unsigned long flags = (unsigned long)sb_ns_clone_flags(s);
	cleanup_fd int cgfd = sb_cgroup_v2_fd(s->cg);

	if (cgfd >= 0) {
		struct clone_args ca = {
		        .flags = flags | CLONE_INTO_CGROUP,
		        .exit_signal = SIGCHLD,
		        .cgroup = (uint64_t)cgfd,
		};
		pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
		if (pid >= 0) {
			s->born_in_cgroup = true;
			return pid;
		}
		/* Old kernels (ENOSYS, E2BIG, EINVAL) and container runtimes whose seccomp profile
		 * refuses clone3 (ENOSYS or EPERM): fall back. */
		if (errno != ENOSYS && errno != E2BIG && errno != EINVAL && errno != EPERM)
			return -1;
	}
	return (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
}

static void teardown(struct sb_session *s, bool ran)
{
	char err[SB_ERR_MAX];

	sb_net_records_ask(s); /* gathered by sluiced while the rest of the teardown runs */
	sb_cgroup_free(s->cg);
	s->cg = NULL;
	/* every process of the session is gone: what it could write is written */
	if (ran)
		sb_writes_record(s, s->started_ns, sb_writes_now(false));
	sb_fsgate_stop(s);
	sb_net_close(s);
	if (ran)
		sb_scratch_report(s);
	if (ran && s->cfg->save == SB_SAVE_NONE)
		sb_discard_summary(s);
	if (ran && s->dir && s->cfg->save != SB_SAVE_NONE && s->cfg->project_mode == SB_PROJECT_OVERLAY) {
		err[0] = '\0';
		if (sb_scratch_take_upper(s, err, sizeof err) < 0 || sb_overlay_save(s, err, sizeof err) < 0) {
			fprintf(stderr, "sluice: %s\n", err);
			s->keep_dir = true;
		}
	}
	if (ran)
		sb_protect_rw_end(s);
	sb_session_dir_remove(s);
	if (s->remap_userns >= 0)
		close(s->remap_userns);
	s->remap_userns = -1;
	sb_sources_free(s);
	sb_masks_free(s);
	free(s->cwd);
	s->cwd = NULL;
	if (s->sync_fd >= 0)
		close(s->sync_fd);
	s->sync_fd = -1;
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->lock_fd = -1;
	if (s->scratch_fd >= 0)
		close(s->scratch_fd);
	s->scratch_fd = -1;
	sb_net_release(); /* sluiced ends the session now, off the launcher's way */
}

int sb_session_run(const struct sb_config *cfg, char *const *argv)
{
	struct sb_session s = {.cfg = cfg,
	                       .argv = argv,
	                       .sync_fd = -1,
	                       .init_pid = -1,
	                       .tty_fd = -1,
	                       .lock_fd = -1,
	                       .scratch_fd = -1,
	                       .fsgate_fd = -1,
	                       .fsgate_pid = -1,
	                       .remap_userns = -1,
	                       .vm_tap = -1};
	char err[SB_ERR_MAX] = "";
	struct sb_go go;
	sigset_t set;
	int sv[2] = {-1, -1};
	int status = SB_EXIT_FAIL, r;
	bool timed_out = false;

	memset(&go, 0, sizeof go);
	lap_us();
	/* The launcher waits for its children (and reads an exited one's /proc entry, ns.c): an ignored
	 * SIGCHLD inherited from whoever started us would have the kernel reap them first. */
	signal(SIGCHLD, SIG_DFL);
	s.started_ns = sb_writes_now(true);
	s.userns = geteuid() != 0;
	s.cwd = getcwd(NULL, 0);
	if (!s.cwd && !(s.cwd = strdup("/")))
		return SB_EXIT_FAIL;
	if ((r = sb_session_dir_create(&s, err, sizeof err)) < 0)
		goto fail;
	log_info("launcher: session %s in %s%s: %ld us", s.id, s.anchor, s.dir ? "" : " (lock file only)", lap_us());
	/* the embedded network helper starts now, alongside the steps below (docs/sandbox.md) */
	sb_net_prepare(&s);
	/* the policy is compiled before the namespace exists: the request goes as soon as it does */
	if ((r = sb_net_compile(&s, &go, err, sizeof err)) < 0)
		goto fail;
	if (cfg->allow_network)
		log_info("launcher: network policy compiled: %ld us", lap_us());
	/* A root launch runs the command as an unprivileged uid of its own (ns.c, docs/sandbox.md). */
	s.host_uid = s.userns ? cfg->uid : cfg->keep_root_uid ? 0 : sb_ns_pick_uid(cfg, s.id);
	sb_ulimits_compute(&s.ulimits, cfg->allow_containers);
	if (!s.userns && !cfg->keep_root_uid) {
		if ((s.remap_userns = sb_ns_make_userns(s.host_uid, &s.ulimits, err, sizeof err)) < 0)
			goto fail;
		log_info("launcher: the command runs as host uid %u (uid 0 in its user namespace): %ld us",
		         (unsigned)s.host_uid, lap_us());
	}
	if ((r = sb_protect_rw_begin(&s, err, sizeof err)) < 0 || (r = sb_masks_resolve(&s, err, sizeof err)) < 0)
		goto fail;
	log_info("launcher: masks: %ld us", lap_us());
	if ((r = sb_sources_init(&s, err, sizeof err)) < 0)
		goto fail;
	log_info("launcher: sources: %ld us", lap_us());
	if ((r = sb_cgroup_new(&cfg->limits, s.id, !s.userns, &s.cg, err, sizeof err)) < 0)
		goto fail;
	if (cfg->fs_mode == SB_FS_ASK && (r = sb_fsgate_start(&s, err, sizeof err)) < 0)
		goto fail;
	log_info("launcher: cgroups: %ld us", lap_us());
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		snprintf(err, sizeof err, "socketpair: %s", strerror(errno));
		goto fail;
	}
	sb_forward_sigset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, &s.saved_mask);

	pid_t pid = clone_init(&s);
	if (pid < 0) {
		int e = errno;
		snprintf(err, sizeof err, "cannot create the sandbox namespaces: %s%s", strerror(e),
		         (e == EPERM || e == ENOSPC || e == EINVAL) && s.userns
		                 ? " (are unprivileged user namespaces enabled? see /proc/sys/user/max_user_namespaces)"
		                 : "");
		sigprocmask(SIG_SETMASK, &s.saved_mask, NULL);
		goto fail;
	}
	if (pid == 0) {
		close(sv[0]);
		s.sync_fd = sv[1];
		/* The same session around a different pid 1: Podman runs the command (container.c). */
		if (cfg->type == SB_TYPE_CONTAINER || cfg->type == SB_TYPE_DEVCONTAINER)
			sb_container_main(&s);
		sb_contain_main(&s);
	}
	s.init_pid = pid;
	log_info("launcher: clone: %ld us", lap_us());
	if (s.fsgate_fd >= 0) {
		/* init's copy is the one the gate hears from (the end of setup, or init dying) */
		close(s.fsgate_fd);
		s.fsgate_fd = -1;
	}
	setpgid(pid, pid); /* also done by the child; whichever runs first wins the race harmlessly */
	tty_give(&s);
	close(sv[1]);
	s.sync_fd = sv[0];

	r = prepare_outside(&s, &go, err, sizeof err);
	log_info("launcher: id maps, cgroup%s: %ld us", go.net_late ? ", network request" : ", network",
	         lap_us());
	r = send_go(&s, &go, r, err, sizeof err);
	if (r == 0 && go.net_late) {
		/* pid 1 builds the filesystem meanwhile, and forks the command only after this go */
		r = send_go(&s, &go, sb_net_finish(&s, &go, err, sizeof err), err, sizeof err);
		log_info("launcher: network (while pid 1 built the filesystem): %ld us", lap_us());
	}
	if (r < 0) {
		fprintf(stderr, "sluice: %s\n", err);
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		status = SB_EXIT_FAIL;
	} else {
		sb_scratch_recv(&s);
		status = wait_session(&s, &set, &timed_out);
		if (timed_out)
			status = SB_EXIT_TIMEOUT;
	}
	log_info("launcher: session ran: %ld us", lap_us());
	tty_take_back(&s);
	teardown(&s, r == 0);
	log_info("launcher: teardown: %ld us", lap_us());
	sigprocmask(SIG_SETMASK, &s.saved_mask, NULL);
	return status;
fail:
	if (err[0])
		fprintf(stderr, "sluice: %s\n", err);
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
	teardown(&s, false);
	return SB_EXIT_FAIL;
}
