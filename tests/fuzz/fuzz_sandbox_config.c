/* Fuzz target: the launcher's config reader (the "sandbox" object of a policy file; the project
 * layer comes from a possibly untrusted repository) and the size/cpu/io value parsers. The first
 * input byte picks the layer; the rest is the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sb_config c;
	char err[SB_ERR_MAX];
	uint64_t v;
	unsigned maj, min;
	char *text;

	if (size < 1 || size > 65536)
		return 0;
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	sb_config_init(&c);
	c.home = strdup("/home/fuzz");
	sb_config_load_json(&c, "fuzz.json", text, size - 1, (enum sb_cfg_layer)(data[0] % 3), err, sizeof err);
	/* The value parsers see the same bytes as a command-line argument would be. */
	if (text[0] != '/') {
		sb_parse_size(text, &v);
		sb_parse_cpu(text, &v);
		sb_parse_io(text, &maj, &min, &v);
	}
	sb_config_clear(&c);
	free(text);
	return 0;
}
