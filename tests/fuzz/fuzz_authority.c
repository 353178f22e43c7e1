/* Fuzz target: CONNECT authority parsing (proxy/http_parse.c http_parse_authority) and the
 * canonicalisation that follows it in the proxy (policy_canon_host, policy_parse_ip_literal): the
 * returned host always lies inside the input, a port is in 1..65535, and a name the canonicaliser
 * accepts has no bytes outside [a-z0-9.-_]. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http_parse.h"
#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_authority a;
	const char *why;
	const char *s = (const char *)data;
	char canon[POLICY_HOST_MAX + 1];
	struct sockaddr_storage ss;

	for (int need = 0; need < 2; need++) {
		if (http_parse_authority(s, size, need, 80, &a, &why) != 0)
			continue;
		if (a.host < s || a.host + a.host_len > s + size || a.host_len == 0)
			abort();
		if (a.port == 0 || (need && !a.has_port))
			abort();
		if (!a.bracketed) {
			enum policy_canon_err e = policy_canon_host(a.host, a.host_len, canon);
			if (e == POLICY_CANON_OK) {
				for (const char *p = canon; *p; p++)
					if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' ||
					      *p == '-' || *p == '_'))
						abort();
			} else if (e == POLICY_CANON_IP_LITERAL) {
				/* the canonicaliser drops one trailing dot (the root) before it classifies */
				size_t n = a.host_len > 1 && a.host[a.host_len - 1] == '.' ? a.host_len - 1 : a.host_len;
				if (policy_parse_ip_literal(a.host, n, &ss) != 0)
					abort();
			}
		} else {
			(void)policy_parse_ip_literal(a.host - 1, a.host_len + 2, &ss);
		}
	}
	return 0;
}
