/* The request the sandboxed side of `--sandbox-type vm` (vm.c) hands the guest's init (vm-init.c):
 * which command, environment, working directory, uid, home and shares. It travels as a
 * file on the read-only root share. Format: records of one tag byte and a NUL-terminated value,
 *   'u' uid, 'g' gid (decimal), 'c' cwd, 'h' home (absolute paths), 'a' an argument, 'e' NAME=VALUE,
 *   'w' the path of a read-write share, 'r' of a read-only one (the Nth share, 'w' or 'r', is mount
 *   tag "sluice.shareN").
 * This file is compiled into the static guest init too: libc only, no allocation. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define SB_VM_SPEC_MAX    (1u << 20) /* bytes */
#define SB_VM_ARGS_MAX    4096
#define SB_VM_ENV_MAX     1024
#define SB_VM_SHARES_MAX  64

struct sb_vm_spec {
	uid_t uid;
	gid_t gid;
	const char *cwd;  /* borrowed from the parsed buffer; NULL: / */
	const char *home; /* borrowed; NULL: none */
	const char *argv[SB_VM_ARGS_MAX + 1]; /* borrowed; NULL-terminated */
	size_t argc;
	const char *envp[SB_VM_ENV_MAX + 1]; /* borrowed; NULL-terminated */
	size_t envc;
	const char *shares[SB_VM_SHARES_MAX]; /* borrowed */
	bool share_ro[SB_VM_SHARES_MAX];
	size_t n_shares;
};

/* Parses buf[0..len) (which must end with a NUL: the last record's terminator). The spec points into
 * buf. Returns 0, or -EINVAL with *bad set to a short reason (unknown tag, unterminated record, a
 * relative path, a number out of range, no argument, too many entries). */
int sb_vm_spec_parse(const char *buf, size_t len, struct sb_vm_spec *out, const char **bad);
