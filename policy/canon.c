/* Host name canonicalisation, IP literal parsing and HTTP method names.
 *
 * Trust boundary: every host name a sandboxed program sends (HTTP authority, Host header, CONNECT
 * target, DNS question, TLS SNI) passes through policy_canon_host before any decision, and the
 * canonical name it returns is the only spelling used afterwards for the decision, the upstream
 * connection and the audit log. Anything that is not a plain DNS name is refused here. */
#include "policy_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <idn2.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *policy_canon_strerror(enum policy_canon_err e)
{
	switch (e) {
	case POLICY_CANON_OK: return "ok";
	case POLICY_CANON_EMPTY: return "empty host name";
	case POLICY_CANON_TOO_LONG: return "host name longer than 253 bytes";
	case POLICY_CANON_LABEL_TOO_LONG: return "a label of the host name is longer than 63 bytes";
	case POLICY_CANON_EMPTY_LABEL: return "empty label in host name (\"..\", leading dot or extra trailing dot)";
	case POLICY_CANON_BAD_CHAR: return "host name contains a byte that is not a letter, digit, '-' or '_'";
	case POLICY_CANON_BAD_HYPHEN: return "a label of the host name starts or ends with '-'";
	case POLICY_CANON_BAD_IDNA: return "host name is not valid IDNA (bad punycode or unconvertible UTF-8)";
	case POLICY_CANON_IP_LITERAL: return "host is an IP address literal, not a name";
	}
	return "unknown error";
}

static bool is_label_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* True when every byte of s[0..n) is a decimal digit, or it is 0x followed by hex digits. */
static bool label_is_numeric(const char *s, size_t n)
{
	size_t i = 0;

	if (n == 0)
		return false;
	if (n > 2 && s[0] == '0' && s[1] == 'x') {
		for (i = 2; i < n; i++)
			if (!isxdigit((unsigned char)s[i]))
				return false;
		return true;
	}
	for (i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* Checks an all-ASCII lower-case name; returns the error for the first bad label. */
static enum policy_canon_err check_ascii_name(const char *name, size_t len)
{
	size_t start = 0;

	if (len == 0)
		return POLICY_CANON_EMPTY;
	if (len > POLICY_HOST_MAX)
		return POLICY_CANON_TOO_LONG;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && name[i] != '.') {
			if (!is_label_byte((unsigned char)name[i]))
				return POLICY_CANON_BAD_CHAR;
			continue;
		}
		size_t l = i - start;
		if (l == 0)
			return POLICY_CANON_EMPTY_LABEL;
		if (l > POLICY_LABEL_MAX)
			return POLICY_CANON_LABEL_TOO_LONG;
		if (name[start] == '-' || name[i - 1] == '-')
			return POLICY_CANON_BAD_HYPHEN;
		start = i + 1;
	}
	return POLICY_CANON_OK;
}

/* A name with an xn-- label must be the exact A-label that IDNA2008 gives for its own U-label. */
static enum policy_canon_err check_punycode(const char *name)
{
	char *u = NULL, *back = NULL;
	enum policy_canon_err rc = POLICY_CANON_BAD_IDNA;

	if (!strstr(name, "xn--"))
		return POLICY_CANON_OK;
	if (idn2_to_unicode_8z8z(name, &u, 0) != IDN2_OK)
		goto out;
	if (idn2_lookup_u8((const uint8_t *)u, (uint8_t **)&back, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL) != IDN2_OK)
		goto out;
	if (strcasecmp(back, name) == 0)
		rc = POLICY_CANON_OK;
out:
	idn2_free(u);
	idn2_free(back);
	return rc;
}

int policy_parse_ip_literal(const char *in, size_t len, struct sockaddr_storage *ss)
{
	char buf[64];
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	if (!in || len == 0 || len >= sizeof buf)
		return -EINVAL;
	if (memchr(in, '\0', len))
		return -EINVAL;
	memset(ss, 0, sizeof *ss);
	if (in[0] == '[') {
		if (len < 3 || in[len - 1] != ']')
			return -EINVAL;
		memcpy(buf, in + 1, len - 2);
		buf[len - 2] = '\0';
		if (inet_pton(AF_INET6, buf, &s6->sin6_addr) != 1)
			return -EINVAL;
		s6->sin6_family = AF_INET6;
		return 0;
	}
	memcpy(buf, in, len);
	buf[len] = '\0';
	if (len > 1 && buf[len - 1] == '.')
		buf[len - 1] = '\0';
	if (strchr(buf, ':')) {
		if (inet_pton(AF_INET6, buf, &s6->sin6_addr) != 1)
			return -EINVAL;
		s6->sin6_family = AF_INET6;
		return 0;
	}
	/* inet_aton accepts every historical spelling (127.1, 0x7f.1, 2130706433, 0177.0.0.1) — which is
	 * exactly why we use it: whatever a resolver or libc on the client side would read as an address,
	 * we read as that same address. It stops at whitespace, so refuse anything but [0-9a-fA-Fx.]. */
	for (size_t i = 0; buf[i]; i++)
		if (!isxdigit((unsigned char)buf[i]) && buf[i] != '.' && buf[i] != 'x' && buf[i] != 'X')
			return -EINVAL;
	if (inet_aton(buf, &s4->sin_addr) == 0)
		return -EINVAL;
	s4->sin_family = AF_INET;
	return 0;
}

enum policy_canon_err policy_canon_host(const char *in, size_t len, char out[POLICY_HOST_MAX + 1])
{
	char buf[POLICY_HOST_MAX + 2];
	bool ascii = true;
	enum policy_canon_err rc;

	out[0] = '\0';
	if (!in || len == 0)
		return POLICY_CANON_EMPTY;
	if (memchr(in, '\0', len))
		return POLICY_CANON_BAD_CHAR;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c < 0x20 || c == 0x7f)
			return POLICY_CANON_BAD_CHAR;
		if (c >= 0x80)
			ascii = false;
	}
	if (len > 1 && in[len - 1] == '.')
		len--; /* one trailing dot: the root; a second one is an empty label */
	if (in[0] == '[' || memchr(in, ':', len)) {
		struct sockaddr_storage ss;
		return policy_parse_ip_literal(in, len, &ss) == 0 ? POLICY_CANON_IP_LITERAL : POLICY_CANON_BAD_CHAR;
	}

	if (!ascii) {
		/* UTF-8 name: IDNA2008 (non-transitional, NFC) to its A-label form. 4x for the UTF-8 input
		 * bound: anything longer cannot give a legal A-label anyway. */
		char *tmp = NULL, *alabel = NULL;
		if (len > (size_t)4 * POLICY_HOST_MAX)
			return POLICY_CANON_TOO_LONG;
		tmp = strndup(in, len);
		if (!tmp)
			return POLICY_CANON_BAD_IDNA;
		int r = idn2_lookup_u8((const uint8_t *)tmp, (uint8_t **)&alabel, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
		free(tmp);
		if (r != IDN2_OK) {
			idn2_free(alabel);
			return r == IDN2_TOO_BIG_DOMAIN ? POLICY_CANON_TOO_LONG
			       : r == IDN2_TOO_BIG_LABEL ? POLICY_CANON_LABEL_TOO_LONG
							 : POLICY_CANON_BAD_IDNA;
		}
		size_t al = strlen(alabel);
		if (al > POLICY_HOST_MAX) {
			idn2_free(alabel);
			return POLICY_CANON_TOO_LONG;
		}
		memcpy(buf, alabel, al + 1);
		idn2_free(alabel);
		len = al;
	} else {
		if (len > POLICY_HOST_MAX)
			return POLICY_CANON_TOO_LONG;
		memcpy(buf, in, len);
		buf[len] = '\0';
	}
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)tolower((unsigned char)buf[i]);

	rc = check_ascii_name(buf, len);
	if (rc != POLICY_CANON_OK)
		return rc;

	/* A name whose last label is a number is an address in some spelling (or garbage): never a name. */
	const char *last = strrchr(buf, '.');
	last = last ? last + 1 : buf;
	if (label_is_numeric(last, strlen(last))) {
		struct sockaddr_storage ss;
		return policy_parse_ip_literal(buf, len, &ss) == 0 ? POLICY_CANON_IP_LITERAL : POLICY_CANON_BAD_CHAR;
	}
	rc = check_punycode(buf);
	if (rc != POLICY_CANON_OK)
		return rc;
	memcpy(out, buf, len + 1);
	return POLICY_CANON_OK;
}

static const struct {
	const char *name;
	unsigned bit;
} policy_methods[] = {
	{ "GET", POLICY_M_GET },       { "HEAD", POLICY_M_HEAD },
	{ "POST", POLICY_M_POST },     { "PUT", POLICY_M_PUT },
	{ "DELETE", POLICY_M_DELETE }, { "PATCH", POLICY_M_PATCH },
	{ "OPTIONS", POLICY_M_OPTIONS }, { "CONNECT", POLICY_M_CONNECT },
	{ "TRACE", POLICY_M_TRACE },
};

unsigned policy_method_from_name(const char *name, size_t len)
{
	/* RFC 9110 token characters only; methods are case-sensitive. */
	static const char tchar[] = "!#$%&'*+-.^_`|~";

	if (!name || len == 0 || len > 32)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if (!isalnum(c) && !(c && strchr(tchar, c)))
			return 0;
	}
	for (size_t i = 0; i < sizeof policy_methods / sizeof policy_methods[0]; i++)
		if (strlen(policy_methods[i].name) == len && memcmp(policy_methods[i].name, name, len) == 0)
			return policy_methods[i].bit;
	return POLICY_M_OTHER;
}

const char *policy_method_name(unsigned bit)
{
	for (size_t i = 0; i < sizeof policy_methods / sizeof policy_methods[0]; i++)
		if (policy_methods[i].bit == bit)
			return policy_methods[i].name;
	return bit == POLICY_M_OTHER ? "OTHER" : NULL;
}
