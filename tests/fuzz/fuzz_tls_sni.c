/* Fuzz target: the TLS ClientHello SNI parser (proxy/tls_sni.c). A found name is 1..255 bytes without
 * NUL; the parser is consistent on prefixes: a prefix of an input that gave a verdict is either still
 * incomplete or gives the same verdict (and name), and a prefix of an incomplete input is incomplete. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tls_sni.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[TLS_SNI_NAME_MAX + 1], pname[TLS_SNI_NAME_MAX + 1];
	const char *why = NULL;
	enum tls_sni_result r = tls_sni_parse(data, size, name, sizeof name, &why);
	size_t cuts[2] = {size / 2, size ? size - 1 : 0};

	if (r == TLS_SNI_FOUND) {
		size_t n = strlen(name);
		if (n == 0 || n > TLS_SNI_NAME_MAX)
			abort();
	}
	if (r == TLS_SNI_ERROR && !why)
		abort();
	for (int i = 0; i < 2; i++) {
		enum tls_sni_result p = tls_sni_parse(data, cuts[i], pname, sizeof pname, &why);
		if (p == TLS_SNI_MORE)
			continue;
		if (r == TLS_SNI_MORE || p != r)
			abort();
		if (r == TLS_SNI_FOUND && strcmp(name, pname) != 0)
			abort();
	}
	return 0;
}
