/* Escape attempt: the seccomp filter's architecture handling (sandbox/seccomp.c). A 64-bit process can
 * still enter the kernel through the i386 ABI (`int $0x80`, numbers of arch/x86/entry/syscalls/
 * syscall_32.tbl) and the x32 ABI (`syscall` with __X32_SYSCALL_BIT set). A filter that only knew the
 * x86_64 numbers would let denied calls through under their other numbers. The filter adds the i386 and
 * x32 architectures with the same rules, so each attempt must fail with EPERM; being killed (SIGSYS, the
 * action for an architecture the filter does not know) is refused too. Each attempt runs in a child, so a
 * kill is seen by the parent and reported. x86_64 only: elsewhere this program reports nothing to test
 * and the build does not compile it (tests/escape/meson.build). */
#include "esc.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "esc_compat tests the x86_64 kernel's i386 and x32 entry points"
#endif

#define X32_BIT 0x40000000L

/* i386 ABI: eax = number, ebx, ecx, edx = arguments; the result (or -errno) comes back in eax. */
static long call32(long nr, long a0, long a1, long a2)
{
	long r = nr;
	__asm__ volatile("int $0x80" : "+a"(r) : "b"(a0), "c"(a1), "d"(a2) : "memory", "r8", "r9", "r10", "r11");
	return r;
}

/* x86_64 `syscall` with a raw number (glibc's syscall() would do, but this keeps the number as given). */
static long call64(long nr, long a0, long a1, long a2)
{
	long r;
	register long r10 __asm__("r10") = 0;
	__asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a0), "S"(a1), "d"(a2), "r"(r10) : "rcx", "r11", "memory");
	return r;
}

struct attempt {
	const char *name;
	int abi; /* 32: int $0x80, 64: syscall (with X32_BIT in nr for x32) */
	long nr, a0, a1, a2;
};

/* Runs one attempt in a child; the child exits with the errno it got (0 when the call succeeded). */
static void attempt(const struct attempt *a)
{
	char what[96];
	int st = 0;
	pid_t p;

	snprintf(what, sizeof what, "%s", a->name);
	fflush(stdout);
	p = fork();
	if (p < 0) {
		esc_report(0, "fork", errno);
		return;
	}
	if (p == 0) {
		long r = a->abi == 32 ? call32(a->nr, a->a0, a->a1, a->a2) : call64(a->nr, a->a0, a->a1, a->a2);
		_exit(r < 0 && r > -4096 ? (int)-r : 0);
	}
	if (waitpid(p, &st, 0) < 0) {
		esc_report(0, what, errno);
		return;
	}
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS) {
		/* the filter killed it: refused */
		printf("SAFE: %s (killed by signal %d)\n", what, WTERMSIG(st));
		return;
	}
	esc_report(WIFEXITED(st) && WEXITSTATUS(st) == EPERM, what, WIFEXITED(st) ? WEXITSTATUS(st) : 0);
}

/* Whether int $0x80 reaches the kernel at all (getpid, nr 20, in a child: a kernel without IA32
 * emulation, or a hypervisor that does not pass the vector, answers with SIGSEGV before any system call
 * is made, and then nothing can enter through it, filter or not). */
static int i386_entry_live(void)
{
	int st = 0;
	pid_t p;

	fflush(stdout);
	p = fork();
	if (p == 0)
		_exit(call32(20, 0, 0, 0) == (long)getpid() ? 0 : 1);
	return p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void)
{
	/* keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create) and unshare(CLONE_NEWUSER) succeed
	 * when nothing stops them; bpf and setns would fail in the kernel for other reasons (EINVAL, EBADF),
	 * so any answer but EPERM shows that the filter did not see the call. x32 numbers reach the filter
	 * even where the kernel has no x32 ABI (it would answer ENOSYS after the filter). */
	const struct attempt at[] = {
	        {"i386 keyctl (int $0x80, nr 288)", 32, 288, 0, -3, 1},
	        {"i386 unshare(CLONE_NEWUSER) (int $0x80, nr 310)", 32, 310, CLONE_NEWUSER, 0, 0},
	        {"i386 bpf (int $0x80, nr 357)", 32, 357, 0, 0, 0},
	        {"i386 setns (int $0x80, nr 346)", 32, 346, 0, 0, 0},
	        {"i386 add_key (int $0x80, nr 286)", 32, 286, 0, 0, 0},
	        {"x32 keyctl (nr 0x40000000|250)", 64, X32_BIT | 250, 0, -3, 1},
	        {"x32 unshare(CLONE_NEWUSER) (nr 0x40000000|272)", 64, X32_BIT | 272, CLONE_NEWUSER, 0, 0},
	        {"x32 bpf (nr 0x40000000|321)", 64, X32_BIT | 321, 0, 0, 0},
	        {"x32 setns (nr 0x40000000|308)", 64, X32_BIT | 308, 0, 0, 0},
	};
	int live = i386_entry_live();

	if (!live)
		printf("SAFE: i386: int $0x80 faults on this kernel before any system call (no IA32 entry): "
		       "nothing enters that way\n");
	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
		if (at[i].abi != 32 || live)
			attempt(&at[i]);
	return esc_failed;
}
