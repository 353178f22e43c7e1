/* Privilege steps run last before exec: securebits that stop a uid-0 process from regaining
 * capabilities at exec, every capability dropped (bounding, ambient, inheritable, permitted,
 * effective; libcap), no_new_privs, death with the parent, and no inherited fds beyond 0-2. */
#include "session.h"

#include <errno.h>
#include <linux/close_range.h>
#include <linux/securebits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int sb_caps_drop_all(bool keep_setfcap, char *err, size_t errlen)
{
	cap_t caps = NULL;
	int r = 0;

	/* With these bits a process running as uid 0 (the root launcher's case) gets no capabilities
	 * from execve, and cannot undo it. Needs CAP_SETPCAP, which we still hold here. */
	unsigned bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
	                SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	/* --allow-containers: CAP_SETFCAP, in the session's user namespace only, is what lets rootless
	 * Podman map its uid 0 to the command's (the kernel wants it for a map of the parent's uid 0).
	 * It is raised as an ambient capability (so it survives exec under SECBIT_NOROOT) before the
	 * raising is locked. In that namespace it sets file capabilities that count only in it and its
	 * children; the command has no other capability (docs/sandbox.md). */
	if (keep_setfcap)
		bits &= ~(unsigned)(SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED);
	if (cap_set_secbits(bits) < 0) {
		snprintf(err, errlen, "cannot set securebits: %s", strerror(errno));
		return -errno;
	}
	for (cap_value_t c = 0; CAP_IS_SUPPORTED(c); c++) {
		if (keep_setfcap && c == CAP_SETFCAP)
			continue;
		if (cap_drop_bound(c) < 0) {
			snprintf(err, errlen, "cannot drop capability %d from the bounding set: %s", (int)c,
			         strerror(errno));
			return -errno;
		}
	}
	if (cap_reset_ambient() < 0 && errno != EINVAL) {
		snprintf(err, errlen, "cannot clear ambient capabilities: %s", strerror(errno));
		return -errno;
	}
	caps = cap_init(); /* all clear */
	if (caps && keep_setfcap) {
		/* CAP_SETPCAP a moment longer: the ambient raise is locked after it. */
		const cap_value_t both[] = {CAP_SETFCAP, CAP_SETPCAP}, fcap[] = {CAP_SETFCAP};
		if (cap_set_flag(caps, CAP_PERMITTED, 2, both, CAP_SET) < 0 ||
		    cap_set_flag(caps, CAP_EFFECTIVE, 2, both, CAP_SET) < 0 ||
		    cap_set_flag(caps, CAP_INHERITABLE, 1, fcap, CAP_SET) < 0 || cap_set_proc(caps) < 0 ||
		    cap_set_ambient(CAP_SETFCAP, CAP_SET) < 0 ||
		    cap_set_secbits(bits | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0 ||
		    cap_set_flag(caps, CAP_PERMITTED, 1, both + 1, CAP_CLEAR) < 0 ||
		    cap_set_flag(caps, CAP_EFFECTIVE, 1, both + 1, CAP_CLEAR) < 0) {
			snprintf(err, errlen, "cannot keep CAP_SETFCAP for --allow-containers: %s", strerror(errno));
			cap_free(caps);
			return -errno;
		}
	}
	if (!caps || cap_set_proc(caps) < 0) {
		r = -errno;
		snprintf(err, errlen, "cannot clear capability sets: %s", strerror(errno));
	}
	cap_free(caps);
	return r;
}

int sb_no_new_privs(char *err, size_t errlen)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		snprintf(err, errlen, "prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
		return -errno;
	}
	return 0;
}

int sb_die_with_parent(char *err, size_t errlen)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
		snprintf(err, errlen, "prctl(PR_SET_PDEATHSIG): %s", strerror(errno));
		return -errno;
	}
	return 0;
}

int sb_close_fds_above(int keep_max, char *err, size_t errlen)
{
	if (syscall(SYS_close_range, (unsigned)keep_max + 1, ~0U, 0) < 0) {
		snprintf(err, errlen, "close_range: %s", strerror(errno));
		return -errno;
	}
	return 0;
}
