/* DNS queries (see dns_msg.h): reading a session's query, building the query relayed upstream and our
 * resolver's own, and local answers (REFUSED, FORMERR...). Upstream answers are dns_answer.c's, the
 * section walker both use dns_wire.c's. */
#include "dns_msg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ldns/ldns.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dns_wire.h"
#include "util.h"

/* a wire name of at most 255 bytes is at most 253 dotted characters */
_Static_assert(sizeof(((struct dns_query *)0)->name) >= 254, "dns_query.name holds any dotted name");

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
	q->id = dns_get16(wire);
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
	qd = dns_get16(wire + 4);
	an = dns_get16(wire + 6);
	ns = dns_get16(wire + 8);
	ar = dns_get16(wire + 10);
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
	if (dns_wire_prescan(wire, len, NULL) < 0) {
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
	q->qtype = dns_get16(wire + pos);
	q->qclass = dns_get16(wire + pos + 2);
	memcpy(q->qname_wire, wire + nstart, pos - nstart);
	q->qname_wire_len = pos - nstart;
	q->have_question = true;
	pos += 4;
	if (ar == 1) {
		/* prescan checked that the record lies within len: owner, type, class, ttl, rdlength, rdata */
		if (wire[pos] != 0 || dns_get16(wire + pos + 1) != LDNS_RR_TYPE_OPT) {
			*why = "additional records other than one EDNS OPT";
			return DNS_RC_FORMERR;
		}
		q->edns = true;
		q->edns_size = dns_get16(wire + pos + 3);
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
			q->qname_wire[w++] = dns_lower((uint8_t)name[i + k]);
		i += l;
		if (name[i] == '.' && name[i + 1] == '\0')
			break; /* one trailing dot */
		if (name[i] == '.')
			i++;
	}
	q->qname_wire[w++] = 0;
	q->qname_wire_len = w;
	for (size_t i = 0; i < n; i++)
		q->name[i] = (char)dns_lower((uint8_t)name[i]);
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
		w[12 + i] = dns_lower(q->qname_wire[i]);
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

const char *dns_msg_type_name(uint16_t qtype, char *buf, size_t len)
{
	const ldns_rr_descriptor *d = ldns_rr_descript(qtype);
	if (d && d->_name)
		util_strlcpy(buf, d->_name, len); /* for every query's audit record: no stdio */
	else
		snprintf(buf, len, "TYPE%u", qtype);
	return buf;
}
