/* Fuzz target: host canonicalisation and IP literal parsing. Checks the invariants callers rely on:
 * a canonical name is idempotent, short enough, made only of [a-z0-9-_.], and never something the C
 * library would read as an address (it would bypass the forbidden ranges as a "name"). */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[POLICY_HOST_MAX + 1], again[POLICY_HOST_MAX + 1];
	struct sockaddr_storage ss;

	if (size > 4096)
		return 0;
	(void)policy_parse_ip_literal((const char *)data, size, &ss);
	(void)policy_method_from_name((const char *)data, size);
	if (policy_canon_host((const char *)data, size, out) != POLICY_CANON_OK)
		return 0;
	size_t n = strlen(out);
	if (n == 0 || n > POLICY_HOST_MAX)
		abort();
	for (size_t i = 0; i < n; i++) {
		char c = out[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
			abort();
	}
	if (policy_canon_host(out, n, again) != POLICY_CANON_OK || strcmp(out, again) != 0)
		abort();
	struct in_addr a4;
	struct in6_addr a6;
	if (inet_aton(out, &a4) != 0 || inet_pton(AF_INET6, out, &a6) == 1)
		abort();
	return 0;
}
