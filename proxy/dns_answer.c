/* Upstream DNS answers (see dns_msg.h): whether an answer answers the query, the filter that rewrites it
 * for the session (addresses the policy forbids removed, truncation), and the DNS cache's TTL, aging and
 * re-encoding. Trust boundary: the upstream resolver's bytes (or a spoofer's); the section walker
 * (dns_wire.c) bounds them before ldns reads them. */
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
	return dl == q->qname_wire_len && dns_wire_name_equal(d, q->qname_wire, dl);
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
	       ((w[2] >> 3) & 0x0f) == LDNS_PACKET_QUERY && dns_get16(w + 4) == 1 &&
	       dns_wire_name_equal(w + 12, q->qname_wire, n) && dns_get16(w + 12 + n) == q->qtype &&
	       dns_get16(w + 14 + n) == q->qclass;
}

bool dns_msg_answer_matches(const uint8_t *ans, size_t len, const struct dns_query *q)
{
	ldns_pkt *pkt = NULL;
	bool ok;

	if (dns_wire_prescan(ans, len, NULL) < 0 || ldns_wire2pkt(&pkt, ans, len) != LDNS_STATUS_OK)
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
	struct dns_wire_walk_info wf;
	long end;

	memset(res, 0, sizeof *res);
	*out = NULL;
	end = dns_wire_prescan(ans, len, &wf);
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
		if (len >= 12 + q->qname_wire_len && dns_wire_name_equal(*out + 12, q->qname_wire, q->qname_wire_len))
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

static int ttl_visit(const uint8_t *w, size_t pos, int sec, void *arg)
{
	struct ttl_scan *t = arg;
	uint16_t type = dns_get16(w + pos);
	uint32_t ttl;

	if (sec == 0 || type == LDNS_RR_TYPE_OPT)
		return 0; /* an OPT's "TTL" is its extended rcode and flags */
	ttl = dns_get32(w + pos + 4);
	if (sec == 2 && type == LDNS_RR_TYPE_SOA) {
		/* RFC 2308: a negative answer lives for the smaller of the SOA's TTL and its MINIMUM, the
		 * last 4 bytes of its RDATA (rr_walk checked the RDATA lies within the message) */
		uint16_t rdlen = dns_get16(w + pos + 8);
		if (rdlen < 22)
			return -1;
		uint32_t minimum = dns_get32(w + pos + 10 + rdlen - 4);
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

	if (len < 12 || !(ans[2] & 0x80) || (ans[2] & 0x02) || dns_get16(ans + 4) != 1)
		return -EINVAL; /* not a response, truncated, or not one question */
	rcode = ans[3] & 0x0f;
	an = dns_get16(ans + 6);
	if ((rcode != DNS_RC_NOERROR && rcode != DNS_RC_NXDOMAIN) || dns_wire_walk(ans, len, ttl_visit, &t, NULL) < 0)
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

	if (sec == 0 || dns_get16(a->w + pos) == LDNS_RR_TYPE_OPT)
		return 0;
	ttl = dns_get32(a->w + pos + 4);
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
	return dns_wire_walk(ans, len, age_visit, &a, NULL) < 0 ? -EINVAL : 0;
}

struct ttl_offsets {
	uint16_t *offs;
	unsigned n, max;
};

static int ttl_offset_visit(const uint8_t *w, size_t pos, int sec, void *arg)
{
	struct ttl_offsets *t = arg;

	if (sec == 0 || dns_get16(w + pos) == LDNS_RR_TYPE_OPT)
		return 0;
	if (t->n == t->max || pos + 4 > UINT16_MAX)
		return -1;
	t->offs[t->n++] = (uint16_t)(pos + 4);
	return 0;
}

int dns_msg_ttl_offsets(const uint8_t *ans, size_t len, uint16_t *offs, unsigned max)
{
	struct ttl_offsets t = {offs, 0, max};
	return dns_wire_walk(ans, len, ttl_offset_visit, &t, NULL) < 0 ? -EINVAL : (int)t.n;
}

void dns_msg_age_at(uint8_t *ans, const uint16_t *offs, unsigned n, uint32_t age)
{
	for (unsigned i = 0; i < n; i++) {
		uint8_t *p = ans + offs[i];
		uint32_t ttl = dns_get32(p);
		ttl = ttl > age ? ttl - age : 0;
		p[0] = (uint8_t)(ttl >> 24);
		p[1] = (uint8_t)(ttl >> 16);
		p[2] = (uint8_t)(ttl >> 8);
		p[3] = (uint8_t)ttl;
	}
}

int dns_msg_reencode(const uint8_t *ans, size_t len, uint8_t **out, size_t *outlen)
{
	ldns_pkt *p = NULL;
	int r;

	*out = NULL;
	*outlen = 0;
	if (dns_wire_prescan(ans, len, NULL) < 0 || ldns_wire2pkt(&p, ans, len) != LDNS_STATUS_OK)
		return -EINVAL;
	r = ldns_pkt2wire(out, p, outlen) == LDNS_STATUS_OK ? 0 : -ENOMEM;
	ldns_pkt_free(p);
	return r;
}
