/* Fuzz target: the SOCKS5 greeting and request parser (proxy/socks5_parse.c), fed as a client would:
 * the greeting, then the request from the bytes after it. Checks: `used` never passes the input, a
 * complete request's host is 1..255 bytes without NUL and its port is not 0, an error always says why
 * and carries a reply code, and a prefix of a complete message is "more" or the same verdict. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "socks5_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *why = NULL;
	size_t used = 0, rused = 0;
	bool noauth = false;
	struct socks5_request req, preq;
	enum socks5_result g = socks5_parse_greeting(data, size, &used, &noauth, &why);

	if (g == SOCKS5_ERROR && !why)
		abort();
	if (g != SOCKS5_OK)
		return 0;
	if (used > size || used < 3)
		abort();
	why = NULL;
	enum socks5_result r = socks5_parse_request(data + used, size - used, &rused, &req, &why);
	if (r == SOCKS5_ERROR && (!why || req.rep == SOCKS5_REP_OK))
		abort();
	if (r == SOCKS5_OK) {
		size_t n = strlen(req.host);
		if (rused > size - used || rused > SOCKS5_REQUEST_MAX || n == 0 || n > SOCKS5_NAME_MAX || req.port == 0)
			abort();
		for (size_t cut = 0; cut < rused; cut++)
			if (socks5_parse_request(data + used, cut, &rused, &preq, &why) == SOCKS5_OK)
				abort(); /* a prefix of a complete request is never complete */
	}
	return 0;
}
