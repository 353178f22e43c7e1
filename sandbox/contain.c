/* The containment steps inside the sandbox, in order (each returns 0 or -errno, like nsjail's
 * contain.cc): die with the launcher, wait for the launcher's "go" (id maps, cgroup, network
 * done), cgroup namespace, hostname, loopback, filesystem (pivot), then lock pid 1 down (no fds
 * beyond 0-2, not dumpable, no capabilities, no_new_privs, seccomp) and fork the command, which
 * inherits all of that, sets its environment and working directory and execs. Any failure ends
 * the session with status 125 and one line on stderr. */
#include "session.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

struct sb_step {
	const char *name;
	int (*fn)(struct sb_session *s, struct sb_go *go, char *err, size_t errlen);
};

static int step_die_with_parent(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)s;
	(void)go;
	return sb_die_with_parent(err, errlen);
}

static int step_wait_go(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	ssize_t n;
	do
		n = read(s->sync_fd, go, sizeof *go);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof *go) {
		snprintf(err, errlen, "the launcher went away during setup");
		return -EPIPE;
	}
	go->proxy_url[sizeof go->proxy_url - 1] = '\0';
	go->cred_env[sizeof go->cred_env - 1] = '\0';
	if (go->status < 0) {
		err[0] = '\0'; /* the launcher already said why */
		return go->status;
	}
	return 0;
}

/* The sandbox gets its own process group: kill(0, ...) from inside must reach neither the launcher
 * nor the shell that started it (a process group spans pid namespaces). The launcher makes this
 * group the terminal's foreground group when it owns the terminal. */
static int step_process_group(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)s;
	(void)go;
	if (setpgid(0, 0) < 0) {
		snprintf(err, errlen, "setpgid: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

static int step_cgroup_ns(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)s;
	return go->cgroup_ns ? sb_ns_enter_cgroup_ns(err, errlen) : 0;
}

static int step_hostname(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)go;
	return sb_ns_set_hostname(s->cfg->hostname ? s->cfg->hostname : "sluice", err, errlen);
}

static int step_loopback(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)s;
	(void)go;
	return sb_ns_loopback_up(err, errlen);
}

static int step_mounts(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	int r = sb_mounts_build(s, go, err, errlen);
	/* the launcher keeps the scratch space (--disk) to report on it and save from it at exit */
	if (r == 0)
		r = sb_scratch_send(s, err, errlen);
	return r;
}

/* Root launch: from here on pid 1 (and the command it forks) is the session's unprivileged uid. */
static int step_sandbox_uid(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)go;
	return s->remap_userns >= 0 ? sb_ns_enter_userns(s->remap_userns, err, errlen) : 0;
}

/* The session's share of its user's per-user kernel limits (ulimits.c). A root launch's namespace
 * got its maxima when it was made (ns.c). */
static int step_user_limits(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)go;
	int r;
	if (s->userns && (r = sb_ulimits_apply_ns(&s->ulimits, err, errlen)) < 0)
		return r;
	return sb_ulimits_apply_rlimits(&s->ulimits, err, errlen);
}

/* --sandbox-type vm with a network: the guest's tap stays open as fd 3 for QEMU (vm.c). */
static int step_vm_network(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)go;
	return sb_vm_net_setup(s, err, errlen);
}

/* --allow-network, when the launcher let netd wire the namespace while this pid 1 built the
 * filesystem (go->net_late): a second go says whether it is wired and policed, and where the proxy
 * is. Nothing of the command runs before it: a failure ends the session here. */
static int step_network(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	struct sb_go late;
	ssize_t n;

	if (!go->net_late)
		return 0;
	do
		n = read(s->sync_fd, &late, sizeof late);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof late) {
		snprintf(err, errlen, "the launcher went away while the network was wired");
		return -EPIPE;
	}
	if (late.status < 0) {
		err[0] = '\0'; /* the launcher already said why */
		return late.status;
	}
	memcpy(go->proxy_url, late.proxy_url, sizeof go->proxy_url);
	memcpy(go->socks_url, late.socks_url, sizeof go->socks_url);
	go->proxy_url[sizeof go->proxy_url - 1] = '\0';
	go->socks_url[sizeof go->socks_url - 1] = '\0';
	return 0;
}

static int step_close_fds(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)go;
	s->sync_fd = -1; /* closed below with every other fd above stderr (or above the VM's tap) */
	if (s->vm_tap >= 0) {
		if (s->vm_tap != SB_VM_TAP_FD && dup2(s->vm_tap, SB_VM_TAP_FD) < 0)
			return sb_err(err, errlen, "dup2: %s", strerror(errno));
		s->vm_tap = SB_VM_TAP_FD;
		return sb_close_fds_above(SB_VM_TAP_FD, err, errlen);
	}
	return sb_close_fds_above(2, err, errlen);
}

static int step_not_dumpable(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)s;
	(void)go;
	/* pid 1 keeps no secrets, but the command must not ptrace it (it runs with the same uid). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		snprintf(err, errlen, "prctl(PR_SET_DUMPABLE): %s", strerror(errno));
		return -errno;
	}
	return 0;
}

static int step_caps(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)go;
	return sb_caps_drop_all(s->cfg->allow_containers, err, errlen);
}

static int step_nnp(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)s;
	(void)go;
	return sb_no_new_privs(err, errlen);
}

static int step_seccomp(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	(void)go;
	return sb_seccomp_load(s->cfg->allow_containers, err, errlen);
}

/* The first steps of every pid 1, this one's and a container session's (sb_contain_begin). */
static const struct sb_step sb_begin_steps[] = {
        {"parent death signal", step_die_with_parent},
        {"process group", step_process_group},
        {"launcher handshake", step_wait_go},
        {"loopback", step_loopback},
};

static const struct sb_step sb_steps[] = {
        {"cgroup namespace", step_cgroup_ns},
        {"hostname", step_hostname},
        {"vm network", step_vm_network},
        {"filesystem", step_mounts},
        {"sandbox uid", step_sandbox_uid},
        {"per-user limits", step_user_limits},
        {"network", step_network},
        {"file descriptors", step_close_fds},
        {"dumpable", step_not_dumpable},
        {"capabilities", step_caps},
        {"no_new_privs", step_nnp},
        {"seccomp", step_seccomp},
};

struct sb_exec_arg {
	struct sb_session *s;
	struct sb_go *go;
};

static void exec_command(void *p)
{
	struct sb_exec_arg *a = p;
	struct sb_session *s = a->s;
	extern char **environ;
	char err[SB_ERR_MAX];

	if (sb_die_with_parent(err, sizeof err) < 0) {
		fprintf(stderr, "sluice: %s\n", err);
		_exit(SB_EXIT_FAIL);
	}
	if (chdir(s->cwd) < 0 && (!s->cfg->project_dir || chdir(s->cfg->project_dir) < 0) && chdir("/") < 0)
		_exit(SB_EXIT_FAIL);
	char **env = sb_env_build(s, a->go, environ);
	if (!env) {
		fprintf(stderr, "sluice: cannot build the environment: out of memory\n");
		_exit(SB_EXIT_FAIL);
	}
	/* execvp searches the PATH of the current environment: switch to the sandbox's first. */
	environ = env;
	if (s->cfg->type == SB_TYPE_VM)
		sb_vm_exec(s, env);
	execvp(s->argv[0], s->argv);
	int e = errno;
	fprintf(stderr, "sluice: cannot run %s: %s\n", s->argv[0], strerror(e));
	_exit(e == ENOENT ? SB_EXIT_NOENT : SB_EXIT_NOEXEC);
}

/* Runs the steps in order; the first failure ends pid 1 (status 125, one line on stderr). */
static void run_steps(struct sb_session *s, struct sb_go *go, const struct sb_step *steps, size_t n)
{
	char err[SB_ERR_MAX];

	for (size_t i = 0; i < n; i++) {
		struct timespec t0, t1;
		err[0] = '\0';
		clock_gettime(CLOCK_MONOTONIC, &t0);
		int r = steps[i].fn(s, go, err, sizeof err);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		log_debug("step %s: %ld us", steps[i].name,
		          (long)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000));
		if (r < 0) {
			if (err[0])
				fprintf(stderr, "sluice: %s: %s\n", steps[i].name, err);
			_exit(SB_EXIT_FAIL);
		}
	}
}

void sb_contain_begin(struct sb_session *s, struct sb_go *go)
{
	memset(go, 0, sizeof *go);
	log_init("sluice", s->cfg->verbose > 1 ? LOG_LEVEL_DEBUG : s->cfg->verbose ? LOG_LEVEL_INFO : LOG_LEVEL_WARN);
	run_steps(s, go, sb_begin_steps, sizeof sb_begin_steps / sizeof sb_begin_steps[0]);
}

void sb_contain_main(struct sb_session *s)
{
	struct sb_go go;

	sb_contain_begin(s, &go);
	run_steps(s, &go, sb_steps, sizeof sb_steps / sizeof sb_steps[0]);
	struct sb_exec_arg a = {s, &go};
	_exit(sb_init_run(exec_command, &a, &s->saved_mask));
}
