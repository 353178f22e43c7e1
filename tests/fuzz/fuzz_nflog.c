/* Fuzz target: NFLOG messages and the IP packets they carry (bytes a session chose). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nflog_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct netd_drop d;
	void *copy;

	if (size > 65536)
		return 0;
	copy = malloc(size ? size : 1); /* aligned, exactly sized: out-of-bounds reads trip ASan */
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	if (netd_nflog_parse_msg(copy, size, &d) == 0 &&
	    (strnlen(d.src, sizeof d.src) == sizeof d.src || strnlen(d.prefix, sizeof d.prefix) == sizeof d.prefix))
		abort();
	if (netd_nflog_parse_packet(copy, size, &d) == 0 && strnlen(d.dst, sizeof d.dst) == sizeof d.dst)
		abort();
	free(copy);
	return 0;
}
