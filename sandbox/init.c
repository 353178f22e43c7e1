/* The sandbox's pid 1: forks the command, reaps every orphan that the pid namespace reparents to
 * it, forwards the launcher's signals to the command, and exits with the command's status
 * (128+N when a signal N killed it). When it exits, the kernel kills everything left in the pid
 * namespace, so no daemon outlives the session. */
#include "session.h"

#include "log.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void sb_forward_sigset(sigset_t *set)
{
	static const int sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};
	sigemptyset(set);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaddset(set, sigs[i]);
}

static int status_of(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return SB_EXIT_FAIL;
}

static void noop_handler(int sig)
{
	(void)sig;
}

int sb_init_run(void (*exec_cmd)(void *), void *arg, const sigset_t *saved_mask)
{
	sigset_t wait_set;
	siginfo_t si;
	pid_t cmd;

	sb_forward_sigset(&wait_set);
	sigaddset(&wait_set, SIGCHLD);
	/* pid 1 only receives signals it handles; blocked ones are queued for sigwaitinfo. A handler
	 * makes sure of it on kernels that check the disposition. */
	struct sigaction sa = {.sa_handler = noop_handler};
	for (int s = 1; s < NSIG; s++)
		if (sigismember(&wait_set, s))
			sigaction(s, &sa, NULL);

	cmd = fork();
	if (cmd < 0) {
		log_warn("fork");
		return SB_EXIT_FAIL;
	}
	if (cmd == 0) {
		/* Default dispositions and the launcher's mask for the command. */
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		for (int s = 1; s < NSIG; s++)
			if (sigismember(&wait_set, s))
				sigaction(s, &dfl, NULL);
		sigprocmask(SIG_SETMASK, saved_mask, NULL);
		exec_cmd(arg);
		_exit(SB_EXIT_FAIL); /* exec_cmd does not return */
	}

	for (;;) {
		int sig = sigwaitinfo(&wait_set, &si);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			log_warn("sigwaitinfo");
			return SB_EXIT_FAIL;
		}
		if (sig != SIGCHLD) {
			/* A signal the terminal generated (SI_KERNEL) already reached the command, which
			 * shares the foreground process group; forwarding it would deliver it twice. */
			if (si.si_code != SI_KERNEL)
				kill(cmd, sig);
			continue;
		}
		for (;;) {
			int st;
			pid_t p = waitpid(-1, &st, WNOHANG);
			if (p <= 0)
				break;
			if (p == cmd)
				return status_of(st);
		}
	}
}
