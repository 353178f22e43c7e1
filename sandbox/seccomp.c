/* The seccomp step (libseccomp): a deny list of kernel surface a build never needs. Denied calls
 * fail with EPERM (clone3 with ENOSYS, so C libraries fall back to clone, whose flags we can
 * inspect) instead of killing the process, so a program that probes for a feature degrades and
 * a user can see what was refused (strace shows the EPERM). Calls from a foreign architecture
 * (32-bit on a 64-bit kernel) get the same rules; any other architecture is killed.
 *
 * libseccomp compiles the rules into BPF at build time (sandbox/seccomp-gen.c writes the program
 * into sb_seccomp_bpf.h), so a session only loads it: compiling at every start cost ~1.5 ms.
 * When the kernel refuses the prebuilt program the rules are compiled again at run time. */
#include "session.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#if SB_HAVE_PREBUILT_SECCOMP
#include "sb_seccomp_bpf.h"
#endif
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

/* Why each call is denied: see docs/sandbox.md, which lists the same table. */
static const char *const sb_denied[] = {
        /* new kernel attack surface, historically rich in escapes */
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        /* the kernel keyring is not namespaced */
        "keyctl",
        "add_key",
        "request_key",
        /* kernel images and modules */
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
};

/* Denied unless --allow-containers (nest.c): rootless Podman builds its containers with them, in user,
 * mount and network namespaces of its own. The command has no capability in the session's namespaces,
 * so these only act on namespaces it creates; mounts it inherits there are locked by the kernel (a
 * mask cannot be lifted from a more privileged mount namespace's copy). */
static const char *const sb_denied_unless_nested[] = {
        /* reshaping the filesystem view (the launcher built it) */
        "mount",
        "umount",
        "umount2",
        "pivot_root",
        "chroot",
        "move_mount",
        "open_tree",
        "open_tree_attr",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        /* joining other namespaces */
        "setns",
};

static const char *const sb_denied_more[] = {
        /* host-wide state */
        "acct",
        "swapon",
        "swapoff",
        "reboot",
        "syslog",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "stime",
        "quotactl",
        "quotactl_fd",
        "nfsservctl",
        "vhangup",
        "lookup_dcookie",
        "uselib",
        "_sysctl",
        "ustat",
        "sysfs",
        "iopl",
        "ioperm",
        /* file handles bypass path-based checks (the classic container escape) */
        "open_by_handle_at",
        "name_to_handle_at",
        /* fanotify can watch whole mounts */
        "fanotify_init",
};

static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *args)
{
	int nr = seccomp_syscall_resolve_name(name);
	/* fchmodat2 (Linux 6.6) is 452 on every architecture; older libseccomp does not know the name. */
	if (nr == __NR_SCMP_ERROR && strcmp(name, "fchmodat2") == 0)
		nr = 452;
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not a system call on this architecture */
	return seccomp_rule_add_array(ctx, action, nr, n, args);
}

/* No set-id file may outlive the session: the command can write the project (rw), binds and carve-outs
 * on the host, and a setuid file left there runs with its owner's rights for anyone who starts it
 * later (nosuid on our mounts does not follow the file to the host). Every call that sets a file's
 * mode from an argument is refused when that mode carries S_ISUID or S_ISGID: chmod and friends,
 * open/openat/creat when they create (O_CREAT or O_TMPFILE; without them the mode argument is
 * garbage), and mknod. openat2 passes its mode in memory seccomp cannot read: it gets ENOSYS, and C
 * libraries fall back to openat. File capabilities (security.capability) need CAP_SETFCAP, which the
 * command never has. Each rule tests one bit, so a rule list covers both. */
static int setid_rules(scmp_filter_ctx ctx, const char **what)
{
	static const struct {
		const char *name;
		int flags_arg; /* -1: the call always creates or sets the mode */
		int mode_arg;
	} calls[] = {
	        {"chmod", -1, 1}, {"fchmod", -1, 1},  {"fchmodat", -1, 2}, {"fchmodat2", -1, 2}, {"creat", -1, 1},
	        {"mknod", -1, 1}, {"mknodat", -1, 2}, {"open", 1, 2},      {"openat", 2, 3},
	};
	static const unsigned setid[] = {S_ISUID, S_ISGID};
	static const unsigned creating[] = {O_CREAT, __O_TMPFILE};
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	int r;

	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		*what = calls[i].name;
		for (size_t b = 0; b < sizeof setid / sizeof setid[0]; b++) {
			struct scmp_arg_cmp mode = {.arg = (unsigned)calls[i].mode_arg,
			                            .op = SCMP_CMP_MASKED_EQ,
			                            .datum_a = setid[b],
			                            .datum_b = setid[b]};
			if (calls[i].flags_arg < 0) {
				if ((r = add_rule(ctx, eperm, calls[i].name, 1, &mode)) < 0)
					return r;
				continue;
			}
			for (size_t c = 0; c < sizeof creating / sizeof creating[0]; c++) {
				struct scmp_arg_cmp args[2] = {{.arg = (unsigned)calls[i].flags_arg,
				                                .op = SCMP_CMP_MASKED_EQ,
				                                .datum_a = creating[c],
				                                .datum_b = creating[c]},
				                               mode};
				if ((r = add_rule(ctx, eperm, calls[i].name, 2, args)) < 0)
					return r;
			}
		}
	}
	*what = "openat2";
	return add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "openat2", 0, NULL);
}

int sb_seccomp_build(scmp_filter_ctx *out, bool nested, char *err, size_t errlen)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	const char *what = "seccomp_init";
	int r = -ENOMEM;

	if (!ctx)
		goto fail;
	/* Any architecture we did not add is killed outright (no rules were written for it). */
	what = "architecture setup";
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) < 0)
		goto fail;
	/* A binary tree of syscall numbers instead of a list: the same rules, fewer instructions on every
	 * system call's path, and a cheaper load (the kernel runs the program once per syscall number to
	 * build its allow cache; docs/sandbox.md, start-up profile). */
	what = "filter optimisation";
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0)
		goto fail;
#if defined(__x86_64__)
	if ((r = seccomp_arch_add(ctx, SCMP_ARCH_X86)) < 0 && r != -EEXIST)
		goto fail;
	if ((r = seccomp_arch_add(ctx, SCMP_ARCH_X32)) < 0 && r != -EEXIST)
		goto fail;
#elif defined(__aarch64__)
	if ((r = seccomp_arch_add(ctx, SCMP_ARCH_ARM)) < 0 && r != -EEXIST)
		goto fail;
#endif
	for (size_t i = 0; i < sizeof sb_denied / sizeof sb_denied[0]; i++) {
		what = sb_denied[i];
		if ((r = add_rule(ctx, eperm, sb_denied[i], 0, NULL)) < 0)
			goto fail;
	}
	for (size_t i = 0; i < sizeof sb_denied_more / sizeof sb_denied_more[0]; i++) {
		what = sb_denied_more[i];
		if ((r = add_rule(ctx, eperm, sb_denied_more[i], 0, NULL)) < 0)
			goto fail;
	}
	for (size_t i = 0; !nested && i < sizeof sb_denied_unless_nested / sizeof sb_denied_unless_nested[0]; i++) {
		what = sb_denied_unless_nested[i];
		if ((r = add_rule(ctx, eperm, sb_denied_unless_nested[i], 0, NULL)) < 0)
			goto fail;
	}

	/* No new user namespaces inside: they would hand back every capability we dropped (within
	 * namespaces of their own only: --allow-containers allows them for rootless Podman). */
	struct scmp_arg_cmp newuser = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
	what = "unshare(CLONE_NEWUSER)";
	if (!nested && (r = add_rule(ctx, eperm, "unshare", 1, &newuser)) < 0)
		goto fail;
	/* clone's flags are its first argument on every architecture we support. */
	what = "clone(CLONE_NEWUSER)";
	if (!nested && (r = add_rule(ctx, eperm, "clone", 1, &newuser)) < 0)
		goto fail;
	/* clone3 passes its flags in memory, which seccomp cannot read: ENOSYS makes glibc and
	 * others fall back to clone, which the rule above can check. */
	what = "clone3";
	if ((r = add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL)) < 0)
		goto fail;
	if ((r = setid_rules(ctx, &what)) < 0)
		goto fail;

	/* Typing into the terminal's input queue (TIOCSTI) or the console (TIOCLINUX) would let the
	 * command run keystrokes in the shell that started sluice once it exits. The command is an
	 * unsigned int: compare the low 32 bits only. */
	struct scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI);
	struct scmp_arg_cmp linux_ = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX);
	what = "ioctl(TIOCSTI)";
	if ((r = add_rule(ctx, eperm, "ioctl", 1, &sti)) < 0)
		goto fail;
	what = "ioctl(TIOCLINUX)";
	if ((r = add_rule(ctx, eperm, "ioctl", 1, &linux_)) < 0)
		goto fail;

	/* personality: only the query (0xffffffff) and the plain Linux personas PER_LINUX (0) and
	 * PER_LINUX32 (8); flags such as ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC weaken exploit
	 * mitigations. libseccomp allows one comparison per argument in a rule, so the complement of
	 * {0, 8, 0xffffffff} is written as masked tests: (bit b set, bit 31 clear) for b != 3 covers
	 * every other value with bit 31 clear; (bit 31 set, bit c clear) for c < 31 covers every value
	 * with bit 31 set except 0xffffffff. The kernel reads only the low 32 bits. */
	what = "personality";
	for (unsigned b = 0; b < 31; b++) {
		if (b == 3)
			continue;
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, (1ul << b) | (1ul << 31), 1ul << b);
		if ((r = add_rule(ctx, eperm, "personality", 1, &a)) < 0)
			goto fail;
	}
	for (unsigned b = 0; b < 31; b++) {
		struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, (1ul << b) | (1ul << 31), 1ul << 31);
		if ((r = add_rule(ctx, eperm, "personality", 1, &a)) < 0)
			goto fail;
	}

	*out = ctx;
	return 0;
fail:
	snprintf(err, errlen, "seccomp filter: %s: %s", what, strerror(-r));
	seccomp_release(ctx);
	*out = NULL;
	return r;
}

int sb_seccomp_load(bool nested, char *err, size_t errlen)
{
	scmp_filter_ctx ctx = NULL;
	int r;

#if SB_HAVE_PREBUILT_SECCOMP
	/* The program is a whole number of BPF instructions (checked at build time). no_new_privs
	 * is already set, so no capability is needed. */
	struct sock_fprog prog = {
	        .len = (unsigned short)((nested ? sizeof sb_seccomp_bpf_nested : sizeof sb_seccomp_bpf) /
	                                sizeof(struct sock_filter)),
	        .filter = (struct sock_filter *)(uintptr_t)(nested ? sb_seccomp_bpf_nested : sb_seccomp_bpf),
	};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0)
		return 0;
	log_debug("the prebuilt seccomp filter was refused (%s); compiling it now", strerror(errno));
#endif
	if ((r = sb_seccomp_build(&ctx, nested, err, errlen)) < 0)
		return r;
	if ((r = seccomp_load(ctx)) < 0)
		snprintf(err, errlen, "seccomp filter: seccomp_load: %s", strerror(-r));
	seccomp_release(ctx);
	return r;
}
