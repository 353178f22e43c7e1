/* The section walker shared by the DNS message code (dns_msg.c: queries; dns_answer.c: upstream answers),
 * and the small readers both use. Internal to proxy/: dns_msg.h is the interface.
 *
 * Trust boundary: the bytes are a session's or the upstream resolver's; every read is bounded by len. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a walk found: why it failed, for the audit record (what, and the record type when one is to
 * blame); whether a record of a type without a layout was read by ldns alone. */
struct dns_wire_walk_info {
	const char *why; /* static */
	int type;        /* -1: not one record's fault */
	bool opaque;     /* a record without a layout: its names were not followed (see pointer_check) */
};

/* A bounded walk over every record of a message: visit(w, pos, sec, arg) is called with pos at each
 * record's TYPE field (questions: sec 0; then answer 1, authority 2, additional 3; for sections 1-3 the
 * TTL, RDLENGTH and RDATA are known to lie within len, and the RDATA to read the same to ldns, see
 * dns_wire.c). Returns where the last record ends (bytes after it belong to no record), or -1 when a
 * section overruns the message, a record's rdata does not end where ldns's reading does, a compression
 * pointer aims anywhere but backwards past the header (pointer_check in dns_wire.c), or visit returns
 * nonzero (info, when not NULL, says why). */
typedef int (*dns_wire_visit_fn)(const uint8_t *w, size_t pos, int sec, void *arg);
long dns_wire_walk(const uint8_t *w, size_t len, dns_wire_visit_fn visit, void *arg, struct dns_wire_walk_info *fail);

/* Before ldns (or our query reader) sees a message: rejects messages whose sections overrun it or whose
 * records ldns would read with other boundaries (dns_wire_walk), and any TSIG record or more than one OPT
 * record (ldns 1.8 keeps only the last of either and leaks the others; we never use TSIG, and a message with two
 * OPTs is malformed). Returns where the last record ends, or -1. */
long dns_wire_prescan(const uint8_t *w, size_t len, struct dns_wire_walk_info *fail);

static inline uint16_t dns_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t dns_get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint8_t dns_lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
}

/* Wire names equal but for ASCII letter case (a length byte is at most 63, never a letter). */
static inline bool dns_wire_name_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (dns_lower(a[i]) != dns_lower(b[i]))
			return false;
	return true;
}
