/* DNS message checks and rewriting with ldns (see dns_msg.h). */
#include "dns_msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ldns/ldns.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* ---- the section walker: one reading of a message's records, the one ldns has too ----
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

/* What a walk found: why it failed, for the audit record (what, and the record type when one is to
 * blame); whether a record of a type without a layout was read by ldns alone. */
struct walk_info {
	const char *why; /* static */
	int type;        /* -1: not one record's fault */
	bool opaque;     /* a record without a layout: its names were not followed (see pointer_check) */
};

/* A bounded walk over every record of a message: visit(w, pos, sec, arg) is called with pos at each
 * record's TYPE field (questions: sec 0; then answer 1, authority 2, additional 3; for sections 1-3 the
 * TTL, RDLENGTH and RDATA are known to lie within len, and the RDATA to read the same to ldns, see
 * above). Returns where the last record ends (bytes after it belong to no record), or -1 when a section
 * overruns the message, a record's rdata does not end where ldns's reading does, a compression pointer
 * aims anywhere but backwards past the header (pointer_check), or visit returns nonzero (info, when not
 * NULL, says why). */
typedef int (*rr_visit_fn)(const uint8_t *w, size_t pos, int sec, void *arg);

static long rr_walk(const uint8_t *w, size_t len, rr_visit_fn visit, void *arg, struct walk_info *fail)
{
	size_t pos = 12;
	unsigned counts[4];
	struct walk_info dummy;

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

/* Before ldns (or our query reader) sees a message: rejects messages whose sections overrun it or whose
 * records ldns would read with other boundaries (rr_walk), and any TSIG record or more than one OPT record
 * (ldns 1.8 keeps only the last of either and leaks the others; we never use TSIG, and a message with two
 * OPTs is malformed). Returns where the last record ends, or -1. */
static long prescan(const uint8_t *w, size_t len, struct walk_info *fail)
{
	unsigned opt = 0;
	return rr_walk(w, len, prescan_visit, &opt, fail);
}

/* a wire name of at most 255 bytes is at most 253 dotted characters */
_Static_assert(sizeof(((struct dns_query *)0)->name) >= 254, "dns_query.name holds any dotted name");

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/* Queries are read by hand, not by ldns: a query is a header, one question and at most an EDNS OPT record,
 * and ldns_wire2pkt's allocations (a packet, lists, a record and an rdf per field) were a tenth of the
 * DNS proxy's CPU. Every read is bounded by len; a compression pointer in a query is refused (there is
 * nothing before the question it could point to). */
int dns_msg_parse_query(const uint8_t *wire, size_t len, struct dns_query *q, const char **why)
{
	size_t pos = 12, out = 0, nstart;
	unsigned qd, an, ns, ar;

	memset(q, 0, sizeof *q);
	if (len < 12) {
		*why = "message shorter than a DNS header";
		return -1;
	}
	q->id = get16(wire);
	q->opcode = (wire[2] >> 3) & 0x0f;
	q->rd = wire[2] & 0x01;
	q->cd = wire[3] & 0x10;
	if (wire[2] & 0x80) {
		*why = "a response, not a query";
		return -1;
	}
	if (q->opcode != LDNS_PACKET_QUERY) {
		*why = "opcode is not QUERY";
		return DNS_RC_REFUSED;
	}
	/* the counts first: the walk then reads one question and at most one record (a client cannot make it
	 * ask ldns about thousands of records) */
	qd = get16(wire + 4);
	an = get16(wire + 6);
	ns = get16(wire + 8);
	ar = get16(wire + 10);
	if (qd != 1) {
		*why = "not exactly one question";
		return DNS_RC_FORMERR;
	}
	if (an || ns || (wire[2] & 0x02) || (wire[2] & 0x04)) {
		*why = "query with answer/authority records or TC/AA flags";
		return DNS_RC_FORMERR;
	}
	if (ar > 1) {
		*why = "additional records other than one EDNS OPT";
		return DNS_RC_FORMERR;
	}
	if (prescan(wire, len, NULL) < 0) {
		*why = "malformed DNS message";
		return DNS_RC_FORMERR;
	}
	/* the question name: plain labels (prescan bounded them), at most 255 bytes */
	nstart = pos;
	while (wire[pos] != 0) {
		if (wire[pos] & 0xc0 || pos + 1 + wire[pos] >= len) {
			*why = "malformed DNS message";
			return DNS_RC_FORMERR;
		}
		pos += 1 + wire[pos];
	}
	pos++;
	if (pos - nstart > sizeof q->qname_wire || pos - nstart > 255) {
		*why = "malformed DNS message";
		return DNS_RC_FORMERR;
	}
	q->qtype = get16(wire + pos);
	q->qclass = get16(wire + pos + 2);
	memcpy(q->qname_wire, wire + nstart, pos - nstart);
	q->qname_wire_len = pos - nstart;
	q->have_question = true;
	pos += 4;
	if (ar == 1) {
		/* prescan checked that the record lies within len: owner, type, class, ttl, rdlength, rdata */
		if (wire[pos] != 0 || get16(wire + pos + 1) != LDNS_RR_TYPE_OPT) {
			*why = "additional records other than one EDNS OPT";
			return DNS_RC_FORMERR;
		}
		q->edns = true;
		q->edns_size = get16(wire + pos + 3);
		if (wire[pos + 6] != 0) {
			*why = "EDNS version other than 0";
			return DNS_RC_FORMERR;
		}
		if (q->edns_size < DNS_UDP_PLAIN)
			q->edns_size = DNS_UDP_PLAIN;
		q->dnssec_ok = wire[pos + 7] & 0x80;
	}
	/* Dotted form, label by label. A label holding a '.' byte would read as two labels and could
	 * smuggle a different name past the policy: refused. */
	for (size_t i = 0; q->qname_wire[i] != 0;) {
		size_t ll = q->qname_wire[i++];
		if (out)
			q->name[out++] = '.';
		for (size_t k = 0; k < ll; k++, i++) {
			if (q->qname_wire[i] == '.' || q->qname_wire[i] == '\0') {
				*why = "'.' or NUL byte inside a label";
				return DNS_RC_REFUSED;
			}
			q->name[out++] = (char)q->qname_wire[i];
		}
	}
	q->name[out] = '\0';
	q->name_len = out;
	if (out == 0) {
		*why = "query for the root name";
		return DNS_RC_REFUSED;
	}
	if (q->qclass != LDNS_RR_CLASS_IN) {
		*why = "class is not IN";
		return DNS_RC_REFUSED;
	}
	if (q->qtype == LDNS_RR_TYPE_AXFR || q->qtype == LDNS_RR_TYPE_IXFR || q->qtype == LDNS_RR_TYPE_OPT ||
	    q->qtype == LDNS_RR_TYPE_TSIG || q->qtype == 0) {
		*why = "query type not served (zone transfer or meta type)";
		return DNS_RC_REFUSED;
	}
	return 0;
}

static ldns_rr *question_rr(const struct dns_query *q)
{
	ldns_rr *rr;
	ldns_rdf *name;

	if (!q->have_question)
		return NULL;
	name = ldns_rdf_new_frm_data(LDNS_RDF_TYPE_DNAME, q->qname_wire_len, q->qname_wire);
	if (!name)
		return NULL;
	rr = ldns_rr_new();
	if (!rr) {
		ldns_rdf_deep_free(name);
		return NULL;
	}
	ldns_rr_set_owner(rr, name);
	ldns_rr_set_type(rr, (ldns_rr_type)q->qtype);
	ldns_rr_set_class(rr, (ldns_rr_class)q->qclass);
	ldns_rr_set_question(rr, true);
	return rr;
}

static int to_wire(ldns_pkt *pkt, uint8_t **out, size_t *outlen)
{
	if (ldns_pkt2wire(out, pkt, outlen) != LDNS_STATUS_OK || !*out)
		return -ENOMEM;
	return 0;
}

size_t dns_msg_reply_rcode_buf(const struct dns_query *q, int rcode, uint8_t buf[DNS_REPLY_RCODE_MAX])
{
	bool question = rcode != DNS_RC_FORMERR && q->have_question && q->qname_wire_len > 0 &&
	                q->qname_wire_len <= sizeof q->qname_wire;
	bool opt = q->edns && rcode != DNS_RC_FORMERR;
	size_t len = 12;

	buf[0] = (uint8_t)(q->id >> 8);
	buf[1] = (uint8_t)q->id;
	buf[2] = (uint8_t)(0x80 | (q->opcode & 0x0f) << 3 | (q->rd ? 0x01 : 0)); /* QR, opcode, RD */
	buf[3] = (uint8_t)(0x80 | (q->cd ? 0x10 : 0) | (rcode & 0x0f));          /* RA, CD, rcode */
	buf[4] = 0;
	buf[5] = question;
	memset(buf + 6, 0, 4);
	buf[10] = 0;
	buf[11] = opt;
	if (question) {
		memcpy(buf + len, q->qname_wire, q->qname_wire_len);
		len += q->qname_wire_len;
		buf[len++] = (uint8_t)(q->qtype >> 8);
		buf[len++] = (uint8_t)q->qtype;
		buf[len++] = (uint8_t)(q->qclass >> 8);
		buf[len++] = (uint8_t)q->qclass;
	}
	if (opt) {
		static const uint8_t rr[11] = {0, 0, 41, DNS_EDNS_SIZE >> 8, DNS_EDNS_SIZE & 0xff, 0, 0, 0, 0, 0, 0};
		memcpy(buf + len, rr, sizeof rr);
		len += sizeof rr;
	}
	return len;
}

int dns_msg_reply_rcode(const struct dns_query *q, int rcode, uint8_t **out, size_t *outlen)
{
	uint8_t buf[DNS_REPLY_RCODE_MAX];
	size_t len = dns_msg_reply_rcode_buf(q, rcode, buf);

	*out = malloc(len);
	if (!*out)
		return -ENOMEM;
	memcpy(*out, buf, len);
	*outlen = len;
	return 0;
}

static uint8_t lower(uint8_t c)
{
	return c >= 'A' && c <= 'Z' ? (uint8_t)(c + 32) : c;
}

/* Wire names equal but for ASCII letter case (a length byte is at most 63, never a letter). */
static bool wire_name_equal(const uint8_t *a, const uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (lower(a[i]) != lower(b[i]))
			return false;
	return true;
}

int dns_msg_query_init(struct dns_query *q, const char *name, uint16_t qtype)
{
	size_t n = strlen(name), w = 0;

	memset(q, 0, sizeof *q);
	if (n == 0 || n >= sizeof q->name)
		return -EINVAL;
	for (size_t i = 0; i < n;) {
		size_t l = strcspn(name + i, ".");
		if (l == 0 || l > 63 || w + 1 + l + 1 > sizeof q->qname_wire)
			return -EINVAL;
		q->qname_wire[w++] = (uint8_t)l;
		for (size_t k = 0; k < l; k++)
			q->qname_wire[w++] = lower((uint8_t)name[i + k]);
		i += l;
		if (name[i] == '.' && name[i + 1] == '\0')
			break; /* one trailing dot */
		if (name[i] == '.')
			i++;
	}
	q->qname_wire[w++] = 0;
	q->qname_wire_len = w;
	for (size_t i = 0; i < n; i++)
		q->name[i] = (char)lower((uint8_t)name[i]);
	q->name_len = n;
	q->rd = true;
	q->edns = true;
	q->edns_size = DNS_EDNS_SIZE;
	q->have_question = true;
	q->qtype = qtype;
	q->qclass = LDNS_RR_CLASS_IN;
	return 0;
}

int dns_msg_build_upstream(const struct dns_query *q, uint8_t **out, size_t *outlen)
{
	/* Written field by field from the parsed query (no byte of the client's message is copied
	 * except the validated question name): header, question, and an EDNS OPT record. */
	size_t len = 12 + q->qname_wire_len + 4 + 11;
	uint8_t *w;

	if (!q->have_question || q->qname_wire_len == 0 || q->qname_wire_len > sizeof q->qname_wire)
		return -EINVAL;
	w = malloc(len);
	if (!w)
		return -ENOMEM;
	memset(w, 0, 12);
	w[2] = 0x01;                /* RD */
	w[3] = q->cd ? 0x10 : 0x00; /* CD as asked */
	w[5] = 1;                   /* QDCOUNT */
	w[11] = 1;                  /* ARCOUNT: the OPT */
	/* lower case: the client's choice of letter case is not passed on (it could carry bits) */
	for (size_t i = 0; i < q->qname_wire_len; i++)
		w[12 + i] = lower(q->qname_wire[i]);
	len = 12 + q->qname_wire_len;
	w[len++] = (uint8_t)(q->qtype >> 8);
	w[len++] = (uint8_t)q->qtype;
	w[len++] = (uint8_t)(q->qclass >> 8);
	w[len++] = (uint8_t)q->qclass;
	w[len++] = 0; /* OPT: root owner */
	w[len++] = 0;
	w[len++] = 41; /* TYPE OPT */
	w[len++] = (uint8_t)(DNS_EDNS_SIZE >> 8);
	w[len++] = (uint8_t)DNS_EDNS_SIZE;
	w[len++] = 0; /* extended rcode */
	w[len++] = 0; /* version */
	w[len++] = q->dnssec_ok ? 0x80 : 0x00;
	w[len++] = 0;
	w[len++] = 0; /* RDLEN */
	w[len++] = 0;
	*out = w;
	*outlen = len;
	return 0;
}

static bool question_matches(ldns_pkt *pkt, const struct dns_query *q)
{
	ldns_rr *rr;
	ldns_rdf *owner;
	const uint8_t *d;
	size_t dl;

	if (ldns_rr_list_rr_count(ldns_pkt_question(pkt)) != 1)
		return false;
	rr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
	if (ldns_rr_get_type(rr) != q->qtype || ldns_rr_get_class(rr) != q->qclass)
		return false;
	owner = ldns_rr_owner(rr);
	d = ldns_rdf_data(owner);
	dl = ldns_rdf_size(owner);
	return dl == q->qname_wire_len && wire_name_equal(d, q->qname_wire, dl);
}

/* An error answer with neither question nor records: some servers answer REFUSED or NOTIMP with the
 * header alone. It says nothing about any name, so it is taken as the answer to the query whose id it
 * carries. */
static bool bare_error(ldns_pkt *pkt)
{
	uint8_t rc = ldns_pkt_get_rcode(pkt);
	return ldns_pkt_qdcount(pkt) == 0 && ldns_pkt_ancount(pkt) == 0 && ldns_pkt_nscount(pkt) == 0 &&
	       ldns_rr_list_rr_count(ldns_pkt_additional(pkt)) == 0 &&
	       (rc == DNS_RC_FORMERR || rc == DNS_RC_SERVFAIL || rc == DNS_RC_NOTIMP || rc == DNS_RC_REFUSED);
}

/* For an answer ldns is not given (it failed the walk) or cannot read: true when its own bytes say it is a
 * response to exactly q's question (one question, the name letter case aside, type, class). */
static bool raw_answers(const uint8_t *w, size_t len, const struct dns_query *q)
{
	size_t n = q->qname_wire_len;

	return n > 0 && n <= sizeof q->qname_wire && len >= 12 + n + 4 && (w[2] & 0x80) &&
	       ((w[2] >> 3) & 0x0f) == LDNS_PACKET_QUERY && get16(w + 4) == 1 &&
	       wire_name_equal(w + 12, q->qname_wire, n) && get16(w + 12 + n) == q->qtype &&
	       get16(w + 14 + n) == q->qclass;
}

bool dns_msg_answer_matches(const uint8_t *ans, size_t len, const struct dns_query *q)
{
	ldns_pkt *pkt = NULL;
	bool ok;

	if (prescan(ans, len, NULL) < 0 || ldns_wire2pkt(&pkt, ans, len) != LDNS_STATUS_OK)
		return raw_answers(ans, len, q);
	ok = ldns_pkt_qr(pkt) && question_matches(pkt, q);
	ldns_pkt_free(pkt);
	return ok;
}

/* Copies the records of `from` that pass into a new list (owned by the caller). */
static ldns_rr_list *filter_list(const ldns_rr_list *from, dns_addr_keep_fn keep, void *arg,
                                 struct dns_filter_result *res)
{
	ldns_rr_list *to = ldns_rr_list_new();

	if (!to)
		return NULL;
	for (size_t i = 0; from && i < ldns_rr_list_rr_count(from); i++) {
		ldns_rr *rr = ldns_rr_list_rr(from, i);
		ldns_rr_type t = ldns_rr_get_type(rr);
		struct sockaddr_storage ss;

		memset(&ss, 0, sizeof ss);
		if ((t == LDNS_RR_TYPE_A || t == LDNS_RR_TYPE_AAAA) && ldns_rr_rd_count(rr) == 1) {
			ldns_rdf *rd = ldns_rr_rdf(rr, 0);
			size_t want = t == LDNS_RR_TYPE_A ? 4 : 16;
			if (!rd || ldns_rdf_size(rd) != want)
				continue; /* malformed address record: dropped */
			if (t == LDNS_RR_TYPE_A) {
				struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
				s4->sin_family = AF_INET;
				memcpy(&s4->sin_addr, ldns_rdf_data(rd), 4);
			} else {
				struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
				s6->sin6_family = AF_INET6;
				memcpy(&s6->sin6_addr, ldns_rdf_data(rd), 16);
			}
			if (!keep((struct sockaddr *)&ss, arg)) {
				res->stripped++;
				continue;
			}
			if (!res->first_addr[0]) {
				const void *a = ss.ss_family == AF_INET
				                        ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
				                        : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
				inet_ntop(ss.ss_family, a, res->first_addr, sizeof res->first_addr);
			}
			res->kept++;
		}
		ldns_rr *c = ldns_rr_clone(rr);
		if (!c || !ldns_rr_list_push_rr(to, c)) {
			ldns_rr_free(c);
			ldns_rr_list_deep_free(to);
			return NULL;
		}
	}
	return to;
}

/* Counts what keep() decides over the address records of a list; false if anything goes. */
static bool list_passes(const ldns_rr_list *l, dns_addr_keep_fn keep, void *arg, struct dns_filter_result *res)
{
	for (size_t i = 0; l && i < ldns_rr_list_rr_count(l); i++) {
		ldns_rr *rr = ldns_rr_list_rr(l, i);
		ldns_rr_type t = ldns_rr_get_type(rr);
		struct sockaddr_storage ss;
		ldns_rdf *rd;

		if (t != LDNS_RR_TYPE_A && t != LDNS_RR_TYPE_AAAA)
			continue;
		rd = ldns_rr_rd_count(rr) == 1 ? ldns_rr_rdf(rr, 0) : NULL;
		if (!rd || ldns_rdf_size(rd) != (t == LDNS_RR_TYPE_A ? 4u : 16u))
			return false;
		memset(&ss, 0, sizeof ss);
		if (t == LDNS_RR_TYPE_A) {
			ss.ss_family = AF_INET;
			memcpy(&((struct sockaddr_in *)&ss)->sin_addr, ldns_rdf_data(rd), 4);
		} else {
			ss.ss_family = AF_INET6;
			memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, ldns_rdf_data(rd), 16);
		}
		if (!keep((struct sockaddr *)&ss, arg))
			return false;
		if (!res->first_addr[0])
			inet_ntop(ss.ss_family,
			          t == LDNS_RR_TYPE_A ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
			                              : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
			          res->first_addr, sizeof res->first_addr);
		res->kept++;
	}
	return true;
}

/* True when the answer can go to the client as it is (only its id changed): every address kept,
 * flags as the client asked, EDNS present exactly when the client used it, and it fits. */
static bool answer_passes(ldns_pkt *in, const struct dns_query *q, dns_addr_keep_fn keep, void *arg, size_t len,
                          size_t maxlen, struct dns_filter_result *res)
{
	if (len > maxlen || !q->rd || ldns_pkt_tc(in) || ldns_pkt_edns(in) != q->edns || ldns_pkt_cd(in) != q->cd ||
	    (q->edns && ldns_pkt_edns_do(in) != q->dnssec_ok))
		return false;
	return list_passes(ldns_pkt_answer(in), keep, arg, res) &&
	       list_passes(ldns_pkt_authority(in), keep, arg, res) &&
	       list_passes(ldns_pkt_additional(in), keep, arg, res);
}

#define CNAME_CHAIN_MAX 8

/* Fills res->addrs with the kept address records that answer q: the owner is the question's name or a
 * CNAME target reached from it (at most CNAME_CHAIN_MAX links, in any order in the section). */
static void collect_answer_addrs(ldns_pkt *in, const struct dns_query *q, dns_addr_keep_fn keep, void *arg,
                                 struct dns_filter_result *res)
{
	const ldns_rr_list *l = ldns_pkt_answer(in);
	ldns_rdf *chain[CNAME_CHAIN_MAX + 1];
	uint32_t chain_ttl[CNAME_CHAIN_MAX + 1];
	size_t nchain = 0, n = l ? ldns_rr_list_rr_count(l) : 0;

	(void)q; /* the question matched q (question_matches): its owner is q's name */
	res->naddrs = 0;
	if (!ldns_pkt_question(in) || ldns_rr_list_rr_count(ldns_pkt_question(in)) != 1 ||
	    !(chain[0] = ldns_rdf_clone(ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_question(in), 0)))))
		return;
	chain_ttl[0] = UINT32_MAX;
	nchain = 1;
	/* follow CNAMEs: each pass may extend the chain by one link */
	for (bool grew = true; grew && nchain <= CNAME_CHAIN_MAX;) {
		grew = false;
		for (size_t i = 0; i < n && nchain <= CNAME_CHAIN_MAX; i++) {
			ldns_rr *rr = ldns_rr_list_rr(l, i);
			ldns_rdf *target;

			if (ldns_rr_get_type(rr) != LDNS_RR_TYPE_CNAME || ldns_rr_rd_count(rr) != 1 ||
			    ldns_dname_compare(ldns_rr_owner(rr), chain[nchain - 1]) != 0)
				continue;
			target = ldns_rr_rdf(rr, 0);
			if (!target || ldns_rdf_get_type(target) != LDNS_RDF_TYPE_DNAME)
				continue;
			chain[nchain] = ldns_rdf_clone(target);
			if (!chain[nchain])
				goto out;
			chain_ttl[nchain] =
			        ldns_rr_ttl(rr) < chain_ttl[nchain - 1] ? ldns_rr_ttl(rr) : chain_ttl[nchain - 1];
			nchain++;
			grew = true;
			break;
		}
	}
	for (size_t i = 0; i < n && res->naddrs < DNS_ANSWER_ADDRS_MAX; i++) {
		ldns_rr *rr = ldns_rr_list_rr(l, i);
		ldns_rr_type t = ldns_rr_get_type(rr);
		struct dns_answer_addr *a = &res->addrs[res->naddrs];
		ldns_rdf *rd;
		size_t k;

		if ((t != LDNS_RR_TYPE_A && t != LDNS_RR_TYPE_AAAA) || ldns_rr_rd_count(rr) != 1)
			continue;
		rd = ldns_rr_rdf(rr, 0);
		if (!rd || ldns_rdf_size(rd) != (t == LDNS_RR_TYPE_A ? 4u : 16u))
			continue;
		for (k = 0; k < nchain; k++)
			if (ldns_dname_compare(ldns_rr_owner(rr), chain[k]) == 0)
				break;
		if (k == nchain)
			continue; /* an address for some other name */
		memset(a, 0, sizeof *a);
		if (t == LDNS_RR_TYPE_A) {
			a->addr.ss_family = AF_INET;
			memcpy(&((struct sockaddr_in *)&a->addr)->sin_addr, ldns_rdf_data(rd), 4);
		} else {
			a->addr.ss_family = AF_INET6;
			memcpy(&((struct sockaddr_in6 *)&a->addr)->sin6_addr, ldns_rdf_data(rd), 16);
		}
		if (!keep((struct sockaddr *)&a->addr, arg))
			continue;
		a->ttl = ldns_rr_ttl(rr) < chain_ttl[k] ? ldns_rr_ttl(rr) : chain_ttl[k];
		res->naddrs++;
	}
out:
	for (size_t k = 0; k < nchain; k++)
		ldns_rdf_deep_free(chain[k]);
}

int dns_msg_filter_answer(const uint8_t *ans, size_t len, const struct dns_query *q, dns_addr_keep_fn keep, void *arg,
                          size_t maxlen, uint8_t **out, size_t *outlen, struct dns_filter_result *res)
{
	ldns_pkt *in = NULL, *pkt = NULL;
	ldns_rr_list *lists[3] = {NULL, NULL, NULL};
	ldns_rr *qrr;
	int r = -EINVAL;
	struct walk_info wf;
	long end;

	memset(res, 0, sizeof *res);
	*out = NULL;
	end = prescan(ans, len, &wf);
	if (end < 0 || ldns_wire2pkt(&in, ans, len) != LDNS_STATUS_OK) {
		/* Garbage that does not even repeat the question is ignored, as any stray datagram (the relay
		 * waits on for the real answer). One that answers the question but cannot be read one way
		 * only (or at all) is the upstream's answer and is refused: the client gets SERVFAIL now. A
		 * spoofer able to send this could as well send a bare REFUSED, which is taken. */
		if (!raw_answers(ans, len, q))
			return -EINVAL;
		if (end >= 0)
			snprintf(res->bad, sizeof res->bad, "ldns cannot read it");
		else if (wf.type >= 0) {
			char tn[16];
			snprintf(res->bad, sizeof res->bad, "a %s record: %s",
			         dns_msg_type_name((uint16_t)wf.type, tn, sizeof tn), wf.why);
		} else
			snprintf(res->bad, sizeof res->bad, "%s", wf.why);
		res->rcode = DNS_RC_SERVFAIL;
		return -EBADMSG;
	}
	if (!ldns_pkt_qr(in) || ldns_pkt_get_opcode(in) != LDNS_PACKET_QUERY)
		goto out;
	res->rcode = ldns_pkt_get_rcode(in);
	if (bare_error(in)) {
		r = dns_msg_reply_rcode(q, res->rcode, out, outlen);
		goto out;
	}
	if (!question_matches(in, q))
		goto out;
	if ((size_t)end == len && !wf.opaque && answer_passes(in, q, keep, arg, len, maxlen, res)) {
		/* Nothing to remove or rewrite: the upstream's bytes with the client's id. Safe because
		 * prescan proved that every record ends where ldns's reading of it ends, so a client that
		 * reads these bytes by RDLENGTH reads exactly the records ldns read and answer_passes
		 * checked, and that no name reads through the header, where the id changes. Rebuilt
		 * instead: bytes after the last record (end < len: nobody's), or a record of a type
		 * without a layout (ldns alone read it, its names were not followed). */
		*out = malloc(len);
		if (!*out) {
			r = -ENOMEM;
			goto out;
		}
		memcpy(*out, ans, len);
		(*out)[0] = (uint8_t)(q->id >> 8);
		(*out)[1] = (uint8_t)q->id;
		/* the question as the client spelt it (we asked in lower case) */
		if (len >= 12 + q->qname_wire_len && wire_name_equal(*out + 12, q->qname_wire, q->qname_wire_len))
			memcpy(*out + 12, q->qname_wire, q->qname_wire_len);
		*outlen = len;
		collect_answer_addrs(in, q, keep, arg, res);
		r = 0;
		goto out;
	}
	memset(res, 0, sizeof *res);
	res->rcode = ldns_pkt_get_rcode(in);
	r = -ENOMEM;
	pkt = ldns_pkt_new();
	qrr = question_rr(q);
	if (!pkt || !qrr) {
		ldns_rr_free(qrr);
		goto out;
	}
	ldns_pkt_push_rr(pkt, LDNS_SECTION_QUESTION, qrr);
	ldns_pkt_set_id(pkt, q->id);
	ldns_pkt_set_qr(pkt, true);
	ldns_pkt_set_opcode(pkt, LDNS_PACKET_QUERY);
	ldns_pkt_set_rd(pkt, q->rd);
	ldns_pkt_set_ra(pkt, ldns_pkt_ra(in));
	ldns_pkt_set_ad(pkt, ldns_pkt_ad(in));
	ldns_pkt_set_cd(pkt, q->cd);
	ldns_pkt_set_rcode(pkt, (uint8_t)res->rcode);
	if (q->edns) {
		ldns_pkt_set_edns_udp_size(pkt, DNS_EDNS_SIZE);
		ldns_pkt_set_edns_do(pkt, q->dnssec_ok);
	}
	lists[0] = filter_list(ldns_pkt_answer(in), keep, arg, res);
	lists[1] = filter_list(ldns_pkt_authority(in), keep, arg, res);
	lists[2] = filter_list(ldns_pkt_additional(in), keep, arg, res);
	if (!lists[0] || !lists[1] || !lists[2])
		goto out;
	ldns_rr_list_deep_free(ldns_pkt_answer(pkt));
	ldns_rr_list_deep_free(ldns_pkt_authority(pkt));
	ldns_rr_list_deep_free(ldns_pkt_additional(pkt));
	ldns_pkt_set_answer(pkt, lists[0]);
	ldns_pkt_set_authority(pkt, lists[1]);
	ldns_pkt_set_additional(pkt, lists[2]);
	ldns_pkt_set_ancount(pkt, (uint16_t)ldns_rr_list_rr_count(lists[0]));
	ldns_pkt_set_nscount(pkt, (uint16_t)ldns_rr_list_rr_count(lists[1]));
	ldns_pkt_set_arcount(pkt, (uint16_t)ldns_rr_list_rr_count(lists[2]));
	lists[0] = lists[1] = lists[2] = NULL;
	if (to_wire(pkt, out, outlen) != 0)
		goto out;
	if (*outlen > maxlen) {
		/* Too big for the client's transport: header and question with TC, so it retries on TCP. */
		free(*out);
		*out = NULL;
		res->truncated = true;
		ldns_rr_list_deep_free(ldns_pkt_answer(pkt));
		ldns_rr_list_deep_free(ldns_pkt_authority(pkt));
		ldns_rr_list_deep_free(ldns_pkt_additional(pkt));
		ldns_pkt_set_answer(pkt, ldns_rr_list_new());
		ldns_pkt_set_authority(pkt, ldns_rr_list_new());
		ldns_pkt_set_additional(pkt, ldns_rr_list_new());
		ldns_pkt_set_ancount(pkt, 0);
		ldns_pkt_set_nscount(pkt, 0);
		ldns_pkt_set_arcount(pkt, 0);
		ldns_pkt_set_tc(pkt, true);
		if (to_wire(pkt, out, outlen) != 0)
			goto out;
	} else {
		collect_answer_addrs(in, q, keep, arg, res);
	}
	r = 0;
out:
	for (int i = 0; i < 3; i++)
		ldns_rr_list_deep_free(lists[i]);
	ldns_pkt_free(pkt);
	ldns_pkt_free(in);
	if (r && *out) {
		free(*out);
		*out = NULL;
	}
	return r;
}

/* ---- the DNS cache's view of an answer (dns_cache.c) ---- */

struct ttl_scan {
	uint32_t min;
	bool any, soa;
};

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int ttl_visit(const uint8_t *w, size_t pos, int sec, void *arg)
{
	struct ttl_scan *t = arg;
	uint16_t type = get16(w + pos);
	uint32_t ttl;

	if (sec == 0 || type == LDNS_RR_TYPE_OPT)
		return 0; /* an OPT's "TTL" is its extended rcode and flags */
	ttl = get32(w + pos + 4);
	if (sec == 2 && type == LDNS_RR_TYPE_SOA) {
		/* RFC 2308: a negative answer lives for the smaller of the SOA's TTL and its MINIMUM, the
		 * last 4 bytes of its RDATA (rr_walk checked the RDATA lies within the message) */
		uint16_t rdlen = get16(w + pos + 8);
		if (rdlen < 22)
			return -1;
		uint32_t minimum = get32(w + pos + 10 + rdlen - 4);
		if (minimum < ttl)
			ttl = minimum;
		t->soa = true;
	}
	if (!t->any || ttl < t->min)
		t->min = ttl;
	t->any = true;
	return 0;
}

int dns_msg_answer_ttl(const uint8_t *ans, size_t len, uint32_t *ttl)
{
	struct ttl_scan t = {0, false, false};
	unsigned rcode, an;

	if (len < 12 || !(ans[2] & 0x80) || (ans[2] & 0x02) || get16(ans + 4) != 1)
		return -EINVAL; /* not a response, truncated, or not one question */
	rcode = ans[3] & 0x0f;
	an = get16(ans + 6);
	if ((rcode != DNS_RC_NOERROR && rcode != DNS_RC_NXDOMAIN) || rr_walk(ans, len, ttl_visit, &t, NULL) < 0)
		return -EINVAL;
	if (!t.any || ((rcode == DNS_RC_NXDOMAIN || an == 0) && !t.soa))
		return -EINVAL; /* nothing says how long it holds */
	*ttl = t.min;
	return 0;
}

struct age_scan {
	uint8_t *w; /* the message being rewritten (the same bytes rr_walk reads) */
	uint32_t age;
};

static int age_visit(const uint8_t *w, size_t pos, int sec, void *arg)
{
	struct age_scan *a = arg;
	uint32_t ttl;
	(void)w;

	if (sec == 0 || get16(a->w + pos) == LDNS_RR_TYPE_OPT)
		return 0;
	ttl = get32(a->w + pos + 4);
	ttl = ttl > a->age ? ttl - a->age : 0;
	a->w[pos + 4] = (uint8_t)(ttl >> 24);
	a->w[pos + 5] = (uint8_t)(ttl >> 16);
	a->w[pos + 6] = (uint8_t)(ttl >> 8);
	a->w[pos + 7] = (uint8_t)ttl;
	return 0;
}

int dns_msg_age_answer(uint8_t *ans, size_t len, uint32_t age)
{
	struct age_scan a = {ans, age};
	return rr_walk(ans, len, age_visit, &a, NULL) < 0 ? -EINVAL : 0;
}

int dns_msg_reencode(const uint8_t *ans, size_t len, uint8_t **out, size_t *outlen)
{
	ldns_pkt *p = NULL;
	int r;

	*out = NULL;
	*outlen = 0;
	if (prescan(ans, len, NULL) < 0 || ldns_wire2pkt(&p, ans, len) != LDNS_STATUS_OK)
		return -EINVAL;
	r = ldns_pkt2wire(out, p, outlen) == LDNS_STATUS_OK ? 0 : -ENOMEM;
	ldns_pkt_free(p);
	return r;
}

const char *dns_msg_type_name(uint16_t qtype, char *buf, size_t len)
{
	const ldns_rr_descriptor *d = ldns_rr_descript(qtype);
	if (d && d->_name)
		util_strlcpy(buf, d->_name, len); /* for every query's audit record: no stdio */
	else
		snprintf(buf, len, "TYPE%u", qtype);
	return buf;
}
