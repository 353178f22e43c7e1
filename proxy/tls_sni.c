/* Finds the SNI host_name in a TLS ClientHello (RFC 8446 4.1.2, RFC 6066 3) without terminating TLS.
 * Records are reassembled into one handshake message (at most TLS_SNI_RECORDS_MAX records and
 * TLS_SNI_HELLO_MAX bytes); every length is checked against what remains before it is used. */
#include "tls_sni.h"

#include <string.h>

#define REC_HDR         5
#define REC_MAX         16384 /* TLSPlaintext.length limit (2^14) */
#define HS_HDR          4
#define HS_CLIENT_HELLO 1
#define EXT_SERVER_NAME 0
#define SNI_HOST_NAME   0

/* A bounded reader over one buffer. */
struct rd {
	const uint8_t *p;
	size_t left;
};

static int rd_u8(struct rd *r, unsigned *v)
{
	if (r->left < 1)
		return -1;
	*v = r->p[0];
	r->p++;
	r->left--;
	return 0;
}

static int rd_u16(struct rd *r, unsigned *v)
{
	if (r->left < 2)
		return -1;
	*v = ((unsigned)r->p[0] << 8) | r->p[1];
	r->p += 2;
	r->left -= 2;
	return 0;
}

static int rd_skip(struct rd *r, size_t n)
{
	if (r->left < n)
		return -1;
	r->p += n;
	r->left -= n;
	return 0;
}

/* A sub-reader of n bytes. */
static int rd_sub(struct rd *r, size_t n, struct rd *sub)
{
	if (r->left < n)
		return -1;
	sub->p = r->p;
	sub->left = n;
	r->p += n;
	r->left -= n;
	return 0;
}

static enum tls_sni_result fail(const char **why, const char *msg)
{
	*why = msg;
	return TLS_SNI_ERROR;
}

/* The server_name extension's body: exactly one host_name. */
static enum tls_sni_result parse_sni_ext(struct rd *ext, char *name, size_t name_size, const char **why)
{
	struct rd list;
	unsigned list_len, type, nlen;
	int found = 0;

	if (rd_u16(ext, &list_len) != 0 || list_len != ext->left || list_len == 0)
		return fail(why, "malformed server_name extension");
	if (rd_sub(ext, list_len, &list) != 0)
		return fail(why, "malformed server_name extension");
	while (list.left > 0) {
		if (rd_u8(&list, &type) != 0 || rd_u16(&list, &nlen) != 0 || nlen > list.left)
			return fail(why, "malformed server_name entry");
		if (type != SNI_HOST_NAME) {
			rd_skip(&list, nlen);
			continue;
		}
		if (found)
			return fail(why, "more than one host_name in server_name");
		if (nlen == 0 || nlen > TLS_SNI_NAME_MAX || nlen + 1 > name_size)
			return fail(why, "server name empty or too long");
		if (memchr(list.p, '\0', nlen))
			return fail(why, "NUL byte in the server name");
		memcpy(name, list.p, nlen);
		name[nlen] = '\0';
		rd_skip(&list, nlen);
		found = 1;
	}
	if (!found)
		return fail(why, "server_name extension without a host_name");
	return TLS_SNI_FOUND;
}

/* A complete ClientHello body. */
static enum tls_sni_result parse_hello(struct rd *h, char *name, size_t name_size, const char **why)
{
	unsigned ver, n, exts_len, etype, elen;
	struct rd exts;
	enum tls_sni_result res = TLS_SNI_NONE;
	int seen_sni = 0;

	if (rd_u16(h, &ver) != 0 || (ver >> 8) != 3)
		return fail(why, "ClientHello: bad legacy_version");
	if (rd_skip(h, 32) != 0)
		return fail(why, "ClientHello: truncated random");
	if (rd_u8(h, &n) != 0 || n > 32 || rd_skip(h, n) != 0)
		return fail(why, "ClientHello: bad session id");
	if (rd_u16(h, &n) != 0 || n < 2 || (n & 1) || rd_skip(h, n) != 0)
		return fail(why, "ClientHello: bad cipher suites");
	if (rd_u8(h, &n) != 0 || n < 1 || rd_skip(h, n) != 0)
		return fail(why, "ClientHello: bad compression methods");
	if (h->left == 0)
		return TLS_SNI_NONE; /* no extensions at all (TLS 1.0-era clients) */
	if (rd_u16(h, &exts_len) != 0 || exts_len != h->left)
		return fail(why, "ClientHello: extensions length does not match the message");
	if (rd_sub(h, exts_len, &exts) != 0)
		return fail(why, "ClientHello: truncated extensions");
	while (exts.left > 0) {
		struct rd ext;
		if (rd_u16(&exts, &etype) != 0 || rd_u16(&exts, &elen) != 0 || rd_sub(&exts, elen, &ext) != 0)
			return fail(why, "ClientHello: malformed extension");
		if (etype != EXT_SERVER_NAME)
			continue;
		if (seen_sni)
			return fail(why, "ClientHello: server_name extension repeated");
		seen_sni = 1;
		res = parse_sni_ext(&ext, name, name_size, why);
		if (res == TLS_SNI_ERROR)
			return res;
	}
	return res;
}

enum tls_sni_result tls_sni_parse(const uint8_t *buf, size_t len, char *name, size_t name_size, const char **why)
{
	/* the handshake message, reassembled from its records */
	static _Thread_local uint8_t hs[HS_HDR + TLS_SNI_HELLO_MAX];
	size_t hs_len = 0, need = HS_HDR, off = 0;
	unsigned records = 0;

	*why = NULL;
	if (!buf || !name || name_size < TLS_SNI_NAME_MAX + 1)
		return fail(why, "internal: bad arguments");
	name[0] = '\0';
	if (len == 0)
		return TLS_SNI_MORE;
	if (buf[0] != 0x16)
		return TLS_SNI_NOT_TLS;
	for (;;) {
		size_t rlen, take;

		if (len - off < REC_HDR)
			return TLS_SNI_MORE;
		if (buf[off] != 0x16)
			return fail(why, "ClientHello interrupted by a record that is not a handshake");
		if (buf[off + 1] != 3 || buf[off + 2] > 4)
			return fail(why, "TLS record with an unknown version");
		rlen = ((size_t)buf[off + 3] << 8) | buf[off + 4];
		if (rlen == 0 || rlen > REC_MAX)
			return fail(why, "TLS record length out of range");
		if (++records > TLS_SNI_RECORDS_MAX)
			return fail(why, "ClientHello split over too many records");
		off += REC_HDR;
		/* only what this record carries of the message (a record never ends beyond what we have) */
		take = rlen;
		if (take > len - off)
			take = len - off;
		if (take > need - hs_len)
			take = need - hs_len;
		memcpy(hs + hs_len, buf + off, take);
		hs_len += take;
		if (hs_len >= HS_HDR && need == HS_HDR) {
			size_t body = ((size_t)hs[1] << 16) | ((size_t)hs[2] << 8) | hs[3];
			if (hs[0] != HS_CLIENT_HELLO)
				return fail(why, "first handshake message is not a ClientHello");
			if (body > TLS_SNI_HELLO_MAX)
				return fail(why, "ClientHello larger than the limit");
			need = HS_HDR + body;
			/* the rest of this record may carry more of the body */
			if (rlen > take) {
				size_t more = rlen - take;
				if (more > len - off - take)
					more = len - off - take;
				if (more > need - hs_len)
					more = need - hs_len;
				memcpy(hs + hs_len, buf + off + take, more);
				hs_len += more;
				take += more;
			}
		}
		if (hs_len == need) {
			struct rd h = {hs + HS_HDR, need - HS_HDR};
			return parse_hello(&h, name, name_size, why);
		}
		if (take < rlen)
			return TLS_SNI_MORE; /* this record is not complete yet */
		off += rlen;
	}
}
