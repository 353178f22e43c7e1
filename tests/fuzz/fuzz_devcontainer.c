/* Fuzz target: the devcontainer.json reader (sandbox/devcontainer.c). The file comes from the
 * repository, which may be hostile: JSON with comments, variable substitution, paths that must stay
 * inside the project, mount strings, postCreateCommand quoting. The whole input is the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sb_config c;
	char err[SB_ERR_MAX];
	char *text;

	if (size > 65536)
		return 0;
	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	sb_config_init(&c);
	c.project_dir = strdup("/home/fuzz/project");
	if (c.project_dir)
		sb_devcontainer_parse(&c, "/home/fuzz/project/.devcontainer/devcontainer.json", text, size, err,
		                      sizeof err);
	sb_config_clear(&c);
	free(text);
	return 0;
}
