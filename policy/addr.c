/* Destination address checks: the forbidden ranges (loopback, private, link-local, CGNAT, multicast,
 * unspecified, reserved, IPv4 embedded in IPv6) and CIDR rule parsing and matching.
 *
 * Trust boundary: these run after the proxy resolved a name (or was handed an IP literal) and before
 * it connects; an address refused here is never connected to. */
#include "policy_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct range {
	uint8_t addr[16];
	unsigned prefix;
};

#define V4(a, b, c, d) { a, b, c, d }
static const struct range forbidden4[] = {
	{ V4(0, 0, 0, 0), 8 },       /* "this network", unspecified */
	{ V4(10, 0, 0, 0), 8 },      /* private */
	{ V4(100, 64, 0, 0), 10 },   /* CGNAT */
	{ V4(127, 0, 0, 0), 8 },     /* loopback */
	{ V4(169, 254, 0, 0), 16 },  /* link-local, cloud metadata 169.254.169.254 */
	{ V4(172, 16, 0, 0), 12 },   /* private */
	{ V4(192, 0, 0, 0), 24 },    /* IETF protocol assignments */
	{ V4(192, 168, 0, 0), 16 },  /* private */
	{ V4(224, 0, 0, 0), 4 },     /* multicast */
	{ V4(240, 0, 0, 0), 4 },     /* reserved, broadcast */
};

static const struct range forbidden6[] = {
	{ { 0 }, 96 },                                             /* ::/96: unspecified, loopback, v4-compatible */
	{ { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff }, 96 },    /* ::ffff:0:0/96 v4-mapped */
	{ { 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0 }, 96 },    /* ::ffff:0:0:0/96 v4-translated (SIIT) */
	{ { 0, 0x64, 0xff, 0x9b }, 96 },                          /* 64:ff9b::/96 NAT64 */
	{ { 0, 0x64, 0xff, 0x9b, 0, 1 }, 48 },                    /* 64:ff9b:1::/48 local NAT64 */
	{ { 0x01, 0 }, 64 },                                      /* 100::/64 discard */
	{ { 0x20, 0x01, 0, 0 }, 32 },                             /* 2001::/32 Teredo (embeds IPv4) */
	{ { 0x20, 0x02 }, 16 },                                   /* 2002::/16 6to4 (embeds IPv4) */
	{ { 0xfc }, 7 },                                          /* unique local (private) */
	{ { 0xfe, 0x80 }, 10 },                                   /* link-local */
	{ { 0xfe, 0xc0 }, 10 },                                   /* site-local (deprecated) */
	{ { 0xff }, 8 },                                          /* multicast */
};

static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned prefix)
{
	unsigned full = prefix / 8, rest = prefix % 8;

	if (memcmp(a, net, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[full] & mask) == (net[full] & mask);
}

/* Extracts family and address bytes; false for anything but AF_INET/AF_INET6. */
static bool sa_bytes(const struct sockaddr *sa, int *family, const uint8_t **bytes)
{
	if (!sa)
		return false;
	if (sa->sa_family == AF_INET) {
		*family = AF_INET;
		*bytes = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		*family = AF_INET6;
		*bytes = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
		return true;
	}
	return false;
}

bool policy_addr_is_forbidden(const struct sockaddr *sa)
{
	int family;
	const uint8_t *b;

	if (!sa_bytes(sa, &family, &b))
		return true; /* unknown families are never a destination */
	if (family == AF_INET) {
		for (size_t i = 0; i < sizeof forbidden4 / sizeof forbidden4[0]; i++)
			if (prefix_match(b, forbidden4[i].addr, forbidden4[i].prefix))
				return true;
		return false;
	}
	for (size_t i = 0; i < sizeof forbidden6 / sizeof forbidden6[0]; i++)
		if (prefix_match(b, forbidden6[i].addr, forbidden6[i].prefix))
			return true;
	return false;
}

bool policy_cidr_contains(const struct policy_rule *r, const struct sockaddr *sa)
{
	int family;
	const uint8_t *b;

	if (r->pat != PAT_CIDR || !sa_bytes(sa, &family, &b) || family != r->family)
		return false;
	return prefix_match(b, r->addr, r->prefix);
}

int policy_parse_cidr(const char *text, struct policy_rule *r, char *why, size_t whylen)
{
	char buf[80];
	const char *slash;
	unsigned long prefix;
	unsigned maxp;
	size_t alen;

	if (strlen(text) >= sizeof buf) {
		snprintf(why, whylen, "address range too long");
		return -EINVAL;
	}
	slash = strchr(text, '/');
	alen = slash ? (size_t)(slash - text) : strlen(text);
	memcpy(buf, text, alen);
	buf[alen] = '\0';
	memset(r->addr, 0, sizeof r->addr);
	if (inet_pton(AF_INET, buf, r->addr) == 1) {
		r->family = AF_INET;
		maxp = 32;
	} else if (inet_pton(AF_INET6, buf, r->addr) == 1) {
		r->family = AF_INET6;
		maxp = 128;
	} else {
		snprintf(why, whylen, "\"%s\" is not an IPv4 or IPv6 address (write ranges as 10.0.0.0/8 or fd00::/8)", buf);
		return -EINVAL;
	}
	if (slash) {
		char *end;
		if (!slash[1] || slash[1] < '0' || slash[1] > '9') {
			snprintf(why, whylen, "missing prefix length after '/'");
			return -EINVAL;
		}
		prefix = strtoul(slash + 1, &end, 10);
		if (*end || prefix > maxp) {
			snprintf(why, whylen, "prefix length must be 0 to %u", maxp);
			return -EINVAL;
		}
	} else {
		prefix = maxp;
	}
	/* An allow of 0.0.0.0/0 would re-open every forbidden range, metadata included. */
	if (prefix < (r->family == AF_INET ? 8u : 16u)) {
		snprintf(why, whylen, "range /%lu is too broad (at least /%u): it would allow the forbidden ranges wholesale",
			 prefix, r->family == AF_INET ? 8u : 16u);
		return -EINVAL;
	}
	for (unsigned bit = (unsigned)prefix; bit < maxp; bit++) {
		if (r->addr[bit / 8] & (0x80 >> (bit % 8))) {
			snprintf(why, whylen, "host bits set after /%lu (did you mean the network address?)", prefix);
			return -EINVAL;
		}
	}
	r->prefix = (unsigned)prefix;
	r->pat = PAT_CIDR;
	return 0;
}

bool policy_cidr_touches_forbidden(const struct policy_rule *r)
{
	const struct range *list = r->family == AF_INET ? forbidden4 : forbidden6;
	size_t n = r->family == AF_INET ? sizeof forbidden4 / sizeof forbidden4[0] : sizeof forbidden6 / sizeof forbidden6[0];

	for (size_t i = 0; i < n; i++) {
		/* overlap: one range contains the other's network address at the shorter prefix */
		unsigned p = r->prefix < list[i].prefix ? r->prefix : list[i].prefix;
		if (prefix_match(r->addr, list[i].addr, p))
			return true;
	}
	return false;
}
