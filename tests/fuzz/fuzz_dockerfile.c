/* Fuzz target: the check of a devcontainer's build.dockerfile before a rootful build
 * (sandbox/devcontainer.c, sb_dockerfile_check). The file comes from the repository, which may be
 * hostile: continuations with either escape character, comments inside them, any bytes. The whole
 * input is the file; a refusal must name a line of it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[SB_ERR_MAX];
	int r;

	if (size > SB_DOCKERFILE_MAX_BYTES + 1)
		return 0;
	r = sb_dockerfile_check("Dockerfile", (const char *)data, size, err, sizeof err);
	if (r == 0 && err[0] != '\0')
		abort(); /* a pass says nothing */
	if (r < 0 && strncmp(err, "Dockerfile", 10) != 0)
		abort(); /* a refusal names the file */
	return 0;
}
