/* Fuzz target: the guest init's parser of the VM request (sandbox/vm-spec.c), whose bytes cross from
 * the sandbox into the guest. Besides not crashing: every string it hands back lies inside the input,
 * is NUL-terminated there, and the paths it accepts are absolute. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vm-spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sb_vm_spec spec;

static void inside(const char *p, const char *buf, size_t len)
{
	if (p && (p < buf || p >= buf + len || !memchr(p, '\0', (size_t)(buf + len - p))))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *bad;
	if (size > SB_VM_SPEC_MAX + 1)
		return 0;
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (sb_vm_spec_parse(buf, size, &spec, &bad) == 0) {
		if (spec.argc == 0 || spec.argv[spec.argc] || spec.envp[spec.envc])
			abort();
		for (size_t i = 0; i < spec.argc; i++)
			inside(spec.argv[i], buf, size);
		for (size_t i = 0; i < spec.envc; i++)
			inside(spec.envp[i], buf, size);
		for (size_t i = 0; i < spec.n_shares; i++) {
			inside(spec.shares[i], buf, size);
			if (spec.shares[i][0] != '/')
				abort();
		}
		inside(spec.cwd, buf, size);
		inside(spec.home, buf, size);
		if ((spec.cwd && spec.cwd[0] != '/') || (spec.home && spec.home[0] != '/'))
			abort();
	} else if (!bad || !*bad) {
		abort();
	}
	free(buf);
	return 0;
}
