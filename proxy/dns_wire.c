/* The bounded reading of DNS wire messages that every check of a query or an answer starts with: the
 * section walker (dns_wire.h). Split from dns_msg.c (queries) and dns_answer.c (upstream answers), which
 * both rely on it. */
#include "dns_wire.h"

#include <ldns/ldns.h>
#include <stddef.h>

/* One reading of a message's records, the one ldns has too.
 *
 * Trust boundary: the upstream resolver's bytes. A record's extent is its RDLENGTH to a strict client
 * (and to the walker below), while ldns reads rdata field by field by type and goes on from wherever the
 * last field ended: a name in rdata read past RDLENGTH, or an A record with RDLENGTH 8 (ldns reads 4),
 * and the two see other records after it. The filter checks what ldns sees, the client reads what RDLENGTH
 * says, so every record's rdata must end exactly at its RDLENGTH the way ldns reads it, or the message is
 * refused before ldns reads it (ldns 1.8.3 also leaked on some such messages). For the types below the
 * walker checks the layout itself (cheap, no allocation); for any other type it asks ldns to read that one
 * record (ldns_wire2rr) and compares where it stopped. */

/* rdata layouts, as ldns reads them (its descriptors: ldns_rr_descript) and the RFCs define them: a string
 * of steps. 'N' a name (labels up to a zero octet or a compression pointer, all inside the rdata), 's' a
 * character-string, 'S' character-strings up to the end, 'R' the rest (anything, possibly nothing), a
 * byte 1..31 that many fixed octets. After the last step the rdata must be used up. */
static const char *const rd_layout[] = {
        [LDNS_RR_TYPE_A] = "\x04",         [LDNS_RR_TYPE_NS] = "N",         [LDNS_RR_TYPE_MD] = "N",
        [LDNS_RR_TYPE_MF] = "N",           [LDNS_RR_TYPE_CNAME] = "N",      [LDNS_RR_TYPE_SOA] = "NN\x14",
        [LDNS_RR_TYPE_MB] = "N",           [LDNS_RR_TYPE_MG] = "N",         [LDNS_RR_TYPE_MR] = "N",
        [LDNS_RR_TYPE_PTR] = "N",          [LDNS_RR_TYPE_MINFO] = "NN",     [LDNS_RR_TYPE_MX] = "\x02N",
        [LDNS_RR_TYPE_TXT] = "S",          [LDNS_RR_TYPE_RP] = "NN",        [LDNS_RR_TYPE_AFSDB] = "\x02N",
        [LDNS_RR_TYPE_RT] = "\x02N",       [LDNS_RR_TYPE_SIG] = "\x12NR",   [LDNS_RR_TYPE_PX] = "\x02NN",
        [LDNS_RR_TYPE_AAAA] = "\x10",      [LDNS_RR_TYPE_NXT] = "NR",       [LDNS_RR_TYPE_SRV] = "\x06N",
        [LDNS_RR_TYPE_NAPTR] = "\x04sssN", [LDNS_RR_TYPE_KX] = "\x02N",     [LDNS_RR_TYPE_DNAME] = "N",
        [LDNS_RR_TYPE_OPT] = "R",          [LDNS_RR_TYPE_RRSIG] = "\x12NR", [LDNS_RR_TYPE_NSEC] = "NR",
        [LDNS_RR_TYPE_TALINK] = "NN",      [LDNS_RR_TYPE_SVCB] = "\x02NR",  [LDNS_RR_TYPE_HTTPS] = "\x02NR",
        [LDNS_RR_TYPE_SPF] = "S",          [LDNS_RR_TYPE_LP] = "\x02N",
};

#define POINTER_HOPS_MAX 64

/* The compression pointer at w[at], w[at + 1] (both within len): NULL when it and every pointer of the
 * name it leads to aim backwards and past the header at labels inside the message, else why not. A name
 * read through the header would read otherwise once the client's id is written there (the fast path of
 * dns_msg_filter_answer); the header holds no names, and no server writes forward pointers. */
static const char *pointer_check(const uint8_t *w, size_t len, size_t at)
{
	for (unsigned hops = 0; hops < POINTER_HOPS_MAX; hops++) {
		size_t to = (size_t)(w[at] & 0x3f) << 8 | w[at + 1];
		if (to < 12 || to >= at)
			return "a compression pointer aims into the header or forwards";
		for (;;) {
			if ((w[to] & 0xc0) == 0xc0) {
				if (len - to < 2)
					return "a name runs past the end of the message";
				at = to;
				break;
			}
			if (w[to] & 0xc0)
				return "a name has a bad label type";
			if (w[to] == 0)
				return NULL;
			to += 1 + (size_t)w[to];
			if (to >= len)
				return "a name runs past the end of the message";
		}
	}
	return "a name has too many compression pointers";
}

/* NULL when w[p, end) (end <= len, the message's length) is laid out as `lay` says, else why not. */
static const char *rdata_check(const uint8_t *w, size_t len, size_t p, size_t end, const char *lay)
{
	const char *why;

	for (; *lay; lay++) {
		switch (*lay) {
		case 'N':
			for (;;) {
				if (p >= end)
					return "a name in its rdata runs past its RDLENGTH";
				if ((w[p] & 0xc0) == 0xc0) {
					if (end - p < 2)
						return "a name in its rdata runs past its RDLENGTH";
					if ((why = pointer_check(w, len, p)) != NULL)
						return why;
					p += 2;
					break;
				}
				if (w[p] & 0xc0)
					return "a name in its rdata has a bad label type";
				if (w[p] == 0) {
					p++;
					break;
				}
				p += 1 + (size_t)w[p];
			}
			break;
		case 's':
			if (p >= end || end - p < 1 + (size_t)w[p])
				return "a string in its rdata runs past its RDLENGTH";
			p += 1 + (size_t)w[p];
			break;
		case 'S':
			while (p < end) {
				if (end - p < 1 + (size_t)w[p])
					return "a string in its rdata runs past its RDLENGTH";
				p += 1 + (size_t)w[p];
			}
			break;
		case 'R': p = end; break;
		default:
			if (end - p < (size_t)*lay)
				return "its rdata is shorter than its type's fixed fields";
			p += (size_t)*lay;
			break;
		}
	}
	return p == end ? NULL : "its rdata goes on after its type's fields";
}

/* For a type without a layout above: NULL when ldns reads the record at w[start...] to exactly end. */
static const char *ldns_reads_to(const uint8_t *w, size_t len, size_t start, size_t end, int sec)
{
	ldns_rr *rr = NULL;
	size_t p = start;
	ldns_status st = ldns_wire2rr(&rr, w, len, &p, (ldns_pkt_section)sec);

	ldns_rr_free(rr);
	if (st != LDNS_STATUS_OK)
		return "ldns cannot read it";
	return p == end ? NULL : "ldns reads its rdata to another end than its RDLENGTH";
}

/* dns_wire.h says what the walk promises. */
long dns_wire_walk(const uint8_t *w, size_t len, dns_wire_visit_fn visit, void *arg, struct dns_wire_walk_info *fail)
{
	size_t pos = 12;
	unsigned counts[4];
	struct dns_wire_walk_info dummy;

	if (!fail)
		fail = &dummy;
	fail->why = "a section runs past the end of the message";
	fail->type = -1;
	fail->opaque = false;
	if (len < 12)
		return -1;
	for (int i = 0; i < 4; i++)
		counts[i] = (unsigned)(w[4 + 2 * i] << 8 | w[5 + 2 * i]);
	for (int sec = 0; sec < 4; sec++) {
		for (unsigned k = 0; k < counts[sec]; k++) {
			size_t start = pos, tpos;
			/* the owner name: labels, ending in a zero byte or a compression pointer */
			for (;;) {
				if (pos >= len)
					return -1;
				if ((w[pos] & 0xc0) == 0xc0) {
					if (pos + 2 > len)
						return -1;
					if ((fail->why = pointer_check(w, len, pos)) != NULL)
						return -1;
					pos += 2;
					break;
				}
				if (w[pos] & 0xc0) {
					fail->why = "a name has a bad label type";
					return -1;
				}
				if (w[pos] == 0) {
					pos++;
					break;
				}
				pos += 1 + w[pos];
			}
			fail->why = "a section runs past the end of the message";
			if (pos + 4 > len)
				return -1;
			tpos = pos;
			pos += 4;
			if (sec > 0) {
				uint16_t type = (uint16_t)(w[tpos] << 8 | w[tpos + 1]);
				const char *lay =
				        type < sizeof rd_layout / sizeof rd_layout[0] ? rd_layout[type] : NULL;
				size_t rd;
				if (pos + 6 > len)
					return -1;
				rd = pos + 6;
				pos = rd + (size_t)(w[pos + 4] << 8 | w[pos + 5]);
				if (pos > len)
					return -1;
				fail->why = lay ? rdata_check(w, len, rd, pos, lay)
				                : ldns_reads_to(w, len, start, pos, sec);
				fail->opaque |= !lay;
				if (fail->why) {
					fail->type = type;
					return -1;
				}
			}
			if (visit && visit(w, tpos, sec, arg) != 0) {
				fail->why = "a record that is not allowed there";
				fail->type = (int)(w[tpos] << 8 | w[tpos + 1]);
				return -1;
			}
		}
	}
	return (long)pos;
}

static int prescan_visit(const uint8_t *w, size_t pos, int sec, void *arg)
{
	unsigned *opt = arg;
	uint16_t type = (uint16_t)(w[pos] << 8 | w[pos + 1]);
	return sec > 0 && (type == LDNS_RR_TYPE_TSIG || (type == LDNS_RR_TYPE_OPT && ++*opt > 1));
}

long dns_wire_prescan(const uint8_t *w, size_t len, struct dns_wire_walk_info *fail)
{
	unsigned opt = 0;
	return dns_wire_walk(w, len, prescan_visit, &opt, fail);
}
