/* Escape attempt: attach to the sandbox's pid 1 (ptrace, process_vm_readv), signal it (SIGKILL
 * from inside a pid namespace must be ignored), and signal or look at a host pid given as argv[1]
 * (it must not exist in the sandbox's pid namespace). */
#include "esc.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	errno = 0;
	long r = ptrace(PTRACE_ATTACH, 1, 0, 0);
	esc_report(r < 0, "ptrace(PTRACE_ATTACH, 1)", r < 0 ? errno : 0);
	if (r == 0)
		ptrace(PTRACE_DETACH, 1, 0, 0);
	char buf[16];
	struct iovec l = {buf, sizeof buf}, rm = {(void *)0x400000, sizeof buf};
	errno = 0;
	ssize_t n = process_vm_readv(1, &l, 1, &rm, 1, 0);
	esc_report(n < 0 && errno != EFAULT, "process_vm_readv(1)", n < 0 ? errno : 0);
	/* pid 1 has no handler for SIGKILL: from inside its namespace the signal is dropped. */
	kill(1, SIGKILL);
	usleep(100000);
	esc_report(kill(1, 0) == 0, "pid 1 survives SIGKILL from inside", 0);
	if (argc > 1) {
		pid_t host = (pid_t)atoi(argv[1]);
		errno = 0;
		r = kill(host, SIGTERM);
		esc_report(r < 0 && errno == ESRCH, "kill(host pid)", r < 0 ? errno : 0);
	}
	return esc_failed;
}
