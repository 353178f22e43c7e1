/* Fuzz target: the launcher's splitter of a session's diff into changes.patch and protected.patch
 * (sandbox/protect.c). The diff's file names and contents come from the sandboxed command. Besides
 * not crashing, the plain part must never carry a section for .sluice/ or .git/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sb_config c;
	struct sb_strv prot = {0};
	char *plain_buf = NULL, *prot_buf = NULL;
	size_t plain_len = 0, prot_len = 0;

	if (size > 65536)
		return 0;
	int in = memfd_create("fuzz-diff", MFD_CLOEXEC);
	if (in < 0)
		return 0;
	if (write(in, data, size) != (ssize_t)size || lseek(in, 0, SEEK_SET) < 0) {
		close(in);
		return 0;
	}
	FILE *plain = open_memstream(&plain_buf, &plain_len), *pf = open_memstream(&prot_buf, &prot_len);
	sb_config_init(&c);
	if (plain && pf)
		sb_protect_split_patch(&c, in, plain, pf, &prot);
	else
		close(in);
	if (plain)
		fclose(plain);
	if (pf)
		fclose(pf);
	for (char *line = plain_buf; line && *line;) {
		if (strncmp(line, "diff -ruN --no-dereference a/.sluice/", 38) == 0 ||
		    strncmp(line, "diff -ruN --no-dereference a/.git/", 34) == 0)
			abort();
		char *nl = strchr(line, '\n');
		line = nl ? nl + 1 : NULL;
	}
	free(plain_buf);
	free(prot_buf);
	sb_strv_clear(&prot);
	sb_config_clear(&c);
	return 0;
}
