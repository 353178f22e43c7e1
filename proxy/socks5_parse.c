/* The SOCKS5 method greeting and request (socks5_parse.h): bounded reads of fixed fields and one
 * length-prefixed name. */
#include "socks5_parse.h"

#include <arpa/inet.h>
#include <string.h>

enum socks5_result socks5_parse_greeting(const uint8_t *buf, size_t len, size_t *used, bool *noauth, const char **why)
{
	size_t n;

	*used = 0;
	*noauth = false;
	if (len < 1)
		return SOCKS5_MORE;
	if (buf[0] != SOCKS5_VERSION) {
		*why = buf[0] == 4 ? "SOCKS4 is not supported, only SOCKS5" : "not a SOCKS5 greeting";
		return SOCKS5_ERROR;
	}
	if (len < 2)
		return SOCKS5_MORE;
	n = buf[1];
	if (n == 0) {
		*why = "the greeting offers no authentication method";
		return SOCKS5_ERROR;
	}
	if (len < 2 + n)
		return SOCKS5_MORE;
	for (size_t i = 0; i < n; i++)
		if (buf[2 + i] == SOCKS5_METHOD_NOAUTH)
			*noauth = true;
	*used = 2 + n;
	return SOCKS5_OK;
}

static enum socks5_result fail(struct socks5_request *req, uint8_t rep, const char *what, const char **why)
{
	req->rep = rep;
	*why = what;
	return SOCKS5_ERROR;
}

enum socks5_result socks5_parse_request(const uint8_t *buf, size_t len, size_t *used, struct socks5_request *req,
                                        const char **why)
{
	size_t addr_len, off;

	*used = 0;
	memset(req, 0, sizeof *req);
	req->rep = SOCKS5_REP_FAILURE;
	if (len < 1)
		return SOCKS5_MORE;
	if (buf[0] != SOCKS5_VERSION)
		return fail(req, SOCKS5_REP_FAILURE, "not a SOCKS5 request", why);
	if (len < 4)
		return SOCKS5_MORE;
	req->cmd = buf[1];
	req->atyp = buf[3];
	if (buf[2] != 0)
		return fail(req, SOCKS5_REP_FAILURE, "the request's reserved byte is not 0", why);
	switch (req->atyp) {
	case SOCKS5_ATYP_IPV4: addr_len = 4; off = 4; break;
	case SOCKS5_ATYP_IPV6: addr_len = 16; off = 4; break;
	case SOCKS5_ATYP_DOMAIN:
		if (len < 5)
			return SOCKS5_MORE;
		addr_len = buf[4];
		off = 5;
		if (addr_len == 0)
			return fail(req, SOCKS5_REP_HOST_UNREACH, "an empty host name", why);
		break;
	default: return fail(req, SOCKS5_REP_ATYP_UNSUP, "an unknown address type", why);
	}
	if (len < off + addr_len + 2)
		return SOCKS5_MORE;
	if (req->atyp == SOCKS5_ATYP_DOMAIN) {
		if (memchr(buf + off, '\0', addr_len))
			return fail(req, SOCKS5_REP_HOST_UNREACH, "a NUL byte in the host name", why);
		memcpy(req->host, buf + off, addr_len);
		req->host[addr_len] = '\0';
	} else if (!inet_ntop(req->atyp == SOCKS5_ATYP_IPV4 ? AF_INET : AF_INET6, buf + off, req->host,
	                      sizeof req->host)) {
		return fail(req, SOCKS5_REP_FAILURE, "an unprintable address", why);
	}
	req->port = (uint16_t)(buf[off + addr_len] << 8 | buf[off + addr_len + 1]);
	*used = off + addr_len + 2;
	if (req->cmd == SOCKS5_CMD_BIND)
		return fail(req, SOCKS5_REP_CMD_UNSUP, "BIND is not supported", why);
	if (req->cmd == SOCKS5_CMD_UDP)
		return fail(req, SOCKS5_REP_CMD_UNSUP, "UDP ASSOCIATE is not supported", why);
	if (req->cmd != SOCKS5_CMD_CONNECT)
		return fail(req, SOCKS5_REP_CMD_UNSUP, "an unknown command", why);
	if (req->port == 0)
		return fail(req, SOCKS5_REP_NOT_ALLOWED, "port 0", why);
	return SOCKS5_OK;
}
