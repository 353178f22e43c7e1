/* Escape attempt: calls the kernel surface the seccomp filter denies; each must fail with EPERM
 * (clone3 with ENOSYS). A different errno (e.g. EINVAL from the kernel itself) means the filter
 * did not see the call, which is also reported as an escape. */
#include "esc.h"

#include <linux/sched.h>
#include <sched.h>
#include <stdint.h>
#include <sys/personality.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif

struct attempt {
	const char *name;
	long nr;
	long a0, a1, a2, a3, a4;
	int want; /* the errno the filter returns */
};

int main(void)
{
	static char buf[256];
	struct clone_args ca = {.flags = CLONE_NEWUSER, .exit_signal = 17};
	const struct attempt at[] = {
	        {"io_uring_setup", __NR_io_uring_setup, 8, (long)buf, 0, 0, 0, EPERM},
	        {"bpf", SYS_bpf, 0, (long)buf, 64, 0, 0, EPERM},
	        {"perf_event_open", SYS_perf_event_open, (long)buf, 0, -1, -1, 0, EPERM},
	        {"userfaultfd", SYS_userfaultfd, 0, 0, 0, 0, 0, EPERM},
	        {"keyctl", SYS_keyctl, 0, 0, 0, 0, 0, EPERM},
	        {"add_key", SYS_add_key, (long)"user", (long)"x", (long)"y", 1, -3, EPERM},
	        {"request_key", SYS_request_key, (long)"user", (long)"x", 0, 0, 0, EPERM},
	        {"unshare(CLONE_NEWUSER)", SYS_unshare, CLONE_NEWUSER, 0, 0, 0, 0, EPERM},
	        {"clone(CLONE_NEWUSER)", SYS_clone, CLONE_NEWUSER | 17, 0, 0, 0, 0, EPERM},
	        {"clone3", SYS_clone3, (long)&ca, sizeof ca, 0, 0, 0, ENOSYS},
	        {"mount", SYS_mount, (long)"none", (long)"/tmp", (long)"tmpfs", 0, 0, EPERM},
	        {"umount2", SYS_umount2, (long)"/proc", 2, 0, 0, 0, EPERM},
	        {"pivot_root", SYS_pivot_root, (long)"/tmp", (long)"/tmp", 0, 0, 0, EPERM},
	        {"open_tree", SYS_open_tree, -100, (long)"/", 1, 0, 0, EPERM},
	        {"fsopen", SYS_fsopen, (long)"tmpfs", 0, 0, 0, 0, EPERM},
	        {"fsmount", SYS_fsmount, 3, 0, 0, 0, 0, EPERM},
	        {"move_mount", SYS_move_mount, -1, (long)"", -1, (long)"", 0, EPERM},
	        {"mount_setattr", SYS_mount_setattr, -1, (long)"", 0, 0, 0, EPERM},
	        {"setns", SYS_setns, 0, 0, 0, 0, 0, EPERM},
	        {"kexec_load", SYS_kexec_load, 0, 0, 0, 0, 0, EPERM},
	        {"init_module", SYS_init_module, (long)buf, 16, (long)"", 0, 0, EPERM},
	        {"finit_module", SYS_finit_module, 0, (long)"", 0, 0, 0, EPERM},
	        {"delete_module", SYS_delete_module, (long)"x", 0, 0, 0, 0, EPERM},
	        {"acct", SYS_acct, 0, 0, 0, 0, 0, EPERM},
	        {"swapon", SYS_swapon, (long)"/x", 0, 0, 0, 0, EPERM},
	        {"reboot", SYS_reboot, 0, 0, 0, 0, 0, EPERM},
	        {"open_by_handle_at", SYS_open_by_handle_at, -100, (long)buf, 0, 0, 0, EPERM},
	        {"personality(ADDR_NO_RANDOMIZE)", SYS_personality, ADDR_NO_RANDOMIZE, 0, 0, 0, 0, EPERM},
	        {"personality(READ_IMPLIES_EXEC|bit31)", SYS_personality, READ_IMPLIES_EXEC | 0x80000000L, 0, 0, 0, 0,
	         EPERM},
	};

	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
		errno = 0;
		long r = syscall(at[i].nr, at[i].a0, at[i].a1, at[i].a2, at[i].a3, at[i].a4);
		int e = errno;
		if (r == 0 && (at[i].nr == SYS_clone || at[i].nr == SYS_clone3))
			_exit(0); /* a child was created after all: the parent reports it */
		esc_report(r < 0 && e == at[i].want, at[i].name, r < 0 ? e : 0);
	}
	/* The allowed personalities still work: the filter must not break them. */
	errno = 0;
	long q = syscall(SYS_personality, 0xffffffffL);
	esc_report(q >= 0, "personality query still allowed (not an escape)", q < 0 ? errno : 0);
	return esc_failed;
}
