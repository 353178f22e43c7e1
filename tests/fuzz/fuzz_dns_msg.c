/* Fuzz target: DNS message handling (proxy/dns_msg.c, dns_answer.c, dns_wire.c). The input is checked as a query; an
 * accepted query is rebuilt for upstream and answered locally; then the input is also treated as an upstream answer to
 * a fixed query and filtered (forbidden addresses removed, truncated to a small size), and as the name of a query of
 * the engine's own resolver (dns_msg_query_init); an answer that filters is put into the DNS cache and read back aged
 * (dns_cache.c), and the aged copy must filter again (the cache keeps answers re-encoded by ldns: an upstream's pointer
 * into a TTL made an aged copy read differently); that filtered copy is kept as a view and read back later, and must be
 * byte for byte what filtering the entry's copy again at that time gives (the view is patched, not filtered: its aging
 * must not make it read otherwise), and a view is never served to another policy generation.
 *
 * The invariant of the filter (check_forwarded): what goes to the client reads the same record by record
 * to a strict reader (RDLENGTH) and to ldns, and every A/AAAA record in it is one keep() took: an upstream
 * answer whose records read differently by RDLENGTH and field by field (an rdata name running past
 * RDLENGTH) once passed a forbidden address to the client that the filter never saw. A refused answer
 * (-EBADMSG) answers the question, gets SERVFAIL and says why. */
#include <ldns/ldns.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dns_cache.h"
#include "dns_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool keep_odd(const struct sockaddr *sa, void *arg)
{
	(void)arg;
	if (sa->sa_family == AF_INET)
		return (((const struct sockaddr_in *)sa)->sin_addr.s_addr & 1) != 0;
	return true;
}

/* The message the client gets, read here by RDLENGTH as a strict client does (independently of
 * dns_wire.c's walker): each record must read to the same end with ldns, and each A/AAAA record must hold
 * an address of its family's size that keep() takes; their number must be what the filter kept. */
static void check_forwarded(const uint8_t *m, size_t len, const struct dns_filter_result *fr)
{
	size_t pos = 12;
	unsigned addrs = 0;

	if (len < 12)
		abort();
	for (int sec = 0; sec < 4; sec++) {
		unsigned n = (unsigned)(m[4 + 2 * sec] << 8 | m[5 + 2 * sec]);
		for (unsigned k = 0; k < n; k++) {
			size_t start = pos, rdlen, p;
			uint16_t type;
			ldns_rr *rr = NULL;
			for (;;) { /* the owner name */
				if (pos >= len)
					abort();
				if ((m[pos] & 0xc0) == 0xc0) {
					pos += 2;
					break;
				}
				if (m[pos] & 0xc0)
					abort();
				if (m[pos] == 0) {
					pos++;
					break;
				}
				pos += 1 + (size_t)m[pos];
			}
			if (pos + (sec ? 10 : 4) > len)
				abort();
			type = (uint16_t)(m[pos] << 8 | m[pos + 1]);
			if (sec == 0) {
				pos += 4;
				continue;
			}
			rdlen = (size_t)(m[pos + 8] << 8 | m[pos + 9]);
			pos += 10 + rdlen;
			if (pos > len)
				abort();
			p = start;
			if (ldns_wire2rr(&rr, m, len, &p, (ldns_pkt_section)sec) != LDNS_STATUS_OK || p != pos)
				abort(); /* ldns reads another record here than a strict client */
			ldns_rr_free(rr);
			if (type == DNS_TYPE_A || type == DNS_TYPE_AAAA) {
				struct sockaddr_storage ss;
				memset(&ss, 0, sizeof ss);
				if (rdlen != (type == DNS_TYPE_A ? 4u : 16u))
					abort();
				if (type == DNS_TYPE_A) {
					ss.ss_family = AF_INET;
					memcpy(&((struct sockaddr_in *)&ss)->sin_addr, m + pos - 4, 4);
				} else {
					ss.ss_family = AF_INET6;
					memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, m + pos - 16, 16);
				}
				if (!keep_odd((const struct sockaddr *)&ss, NULL))
					abort(); /* an address the filter did not take */
				addrs++;
			}
		}
	}
	if (addrs != (fr->truncated ? 0 : fr->kept))
		abort();
}

/* Two records read by ldns are the same (names without regard to letter case: the fast path spells the
 * question, which names may point at, as the client did). */
static bool rr_same(const ldns_rr *a, const ldns_rr *b)
{
	if (ldns_rr_get_type(a) != ldns_rr_get_type(b) || ldns_rr_get_class(a) != ldns_rr_get_class(b) ||
	    ldns_rr_ttl(a) != ldns_rr_ttl(b) || ldns_dname_compare(ldns_rr_owner(a), ldns_rr_owner(b)) != 0 ||
	    ldns_rr_rd_count(a) != ldns_rr_rd_count(b))
		return false;
	for (size_t i = 0; i < ldns_rr_rd_count(a); i++) {
		const ldns_rdf *x = ldns_rr_rdf(a, i), *y = ldns_rr_rdf(b, i);
		if (ldns_rdf_get_type(x) != ldns_rdf_get_type(y))
			return false;
		if (ldns_rdf_get_type(x) == LDNS_RDF_TYPE_DNAME ? ldns_dname_compare(x, y) != 0
		                                                : ldns_rdf_compare(x, y) != 0)
			return false;
	}
	return true;
}

static bool refused_addr(const ldns_rr *rr)
{
	ldns_rr_type t = ldns_rr_get_type(rr);
	const ldns_rdf *rd = ldns_rr_rd_count(rr) == 1 ? ldns_rr_rdf(rr, 0) : NULL;
	struct sockaddr_storage ss;

	if ((t != LDNS_RR_TYPE_A && t != LDNS_RR_TYPE_AAAA) || !rd)
		return false;
	memset(&ss, 0, sizeof ss);
	if (t == LDNS_RR_TYPE_A && ldns_rdf_size(rd) == 4) {
		ss.ss_family = AF_INET;
		memcpy(&((struct sockaddr_in *)&ss)->sin_addr, ldns_rdf_data(rd), 4);
	} else if (t == LDNS_RR_TYPE_AAAA && ldns_rdf_size(rd) == 16) {
		ss.ss_family = AF_INET6;
		memcpy(&((struct sockaddr_in6 *)&ss)->sin6_addr, ldns_rdf_data(rd), 16);
	} else {
		return false;
	}
	return !keep_odd((const struct sockaddr *)&ss, NULL);
}

/* The records sent are the records the filter checked: as ldns reads the upstream's answer, in order, less
 * the addresses keep() refused (all of them when the reply was truncated). */
static void check_same_records(const uint8_t *in, size_t inlen, const uint8_t *out, size_t outlen, bool truncated)
{
	ldns_pkt *a = NULL, *b = NULL;

	if (ldns_wire2pkt(&a, in, inlen) != LDNS_STATUS_OK || ldns_wire2pkt(&b, out, outlen) != LDNS_STATUS_OK)
		abort();
	for (int sec = 0; sec < 3; sec++) {
		const ldns_rr_list *la = sec == 0   ? ldns_pkt_answer(a)
		                         : sec == 1 ? ldns_pkt_authority(a)
		                                    : ldns_pkt_additional(a);
		const ldns_rr_list *lb = sec == 0   ? ldns_pkt_answer(b)
		                         : sec == 1 ? ldns_pkt_authority(b)
		                                    : ldns_pkt_additional(b);
		size_t na = ldns_rr_list_rr_count(la), nb = ldns_rr_list_rr_count(lb), i = 0;
		if (truncated && nb)
			abort();
		for (size_t k = 0; k < nb; k++, i++) {
			while (i < na && refused_addr(ldns_rr_list_rr(la, i)))
				i++;
			if (i == na || !rr_same(ldns_rr_list_rr(la, i), ldns_rr_list_rr(lb, k)))
				abort(); /* a record the filter did not check, or not as it checked it */
		}
		for (; !truncated && i < na; i++)
			if (!refused_addr(ldns_rr_list_rr(la, i)))
				abort(); /* a record checked and kept, but not sent */
	}
	ldns_pkt_free(a);
	ldns_pkt_free(b);
}

/* The view of the copy dns_cache_get handed out at 7000 ms (out, fr), read back 21 s later, is what
 * filtering the entry's copy of that time gives, and only for its own policy generation. */
static void check_view(struct dns_cache *c, const struct dns_query *q, const uint8_t *out, size_t outlen,
                       const struct dns_filter_result *fr)
{
	static uint8_t view[DNS_CACHE_ANSWER_MAX], raw[DNS_CACHE_ANSWER_MAX];
	struct dns_cache_ticket t;
	struct dns_filter_result vr, fresh;
	uint8_t *again = NULL;
	size_t againlen, vlen, n;

	if (dns_cache_get_ticket(c, q, 7000, raw, sizeof raw, &t) == 0)
		abort();
	dns_cache_put_view(c, q, &t, 1, 512, out, outlen, fr);
	if (dns_cache_get_view(c, q, 2, 512, 28000, view, sizeof view, &vr) != 0)
		abort(); /* another policy's */
	vlen = dns_cache_get_view(c, q, 1, 512, 28000, view, sizeof view, &vr);
	n = dns_cache_get(c, q, 28000, raw, sizeof raw);
	if (!vlen != !n)
		abort(); /* the view lives exactly as long as its entry */
	if (!vlen)
		return;
	if (dns_msg_filter_answer(raw, n, q, keep_odd, NULL, 512, &again, &againlen, &fresh) != 0 || againlen != vlen ||
	    memcmp(again, view, vlen) != 0 || fresh.naddrs != vr.naddrs || fresh.stripped != vr.stripped ||
	    fresh.truncated != vr.truncated || strcmp(fresh.first_addr, vr.first_addr) != 0)
		abort();
	for (unsigned i = 0; i < vr.naddrs; i++)
		if (vr.addrs[i].ttl != fresh.addrs[i].ttl)
			abort();
	check_forwarded(view, vlen, &vr);
	free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dns_query q, fixed;
	struct dns_filter_result fr;
	const char *why;
	uint8_t *out = NULL;
	size_t outlen;
	static const uint8_t query[] = {0x12, 0x34, 0x01, 0x00, 0,   1, 0,   0,   0,   0,   0, 0, 7, 'a', 'l',
	                                'l',  'o',  'w',  'e',  'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0,   1};

	if (dns_msg_parse_query(data, size, &q, &why) == 0) {
		if (dns_msg_build_upstream(&q, &out, &outlen) == 0)
			free(out);
		out = NULL;
		if (dns_msg_reply_rcode(&q, DNS_RC_REFUSED, &out, &outlen) == 0)
			free(out);
		out = NULL;
	} else if (q.have_question && dns_msg_reply_rcode(&q, DNS_RC_FORMERR, &out, &outlen) == 0) {
		free(out);
		out = NULL;
	}
	if (size < 300) {
		char name[300];
		memcpy(name, data, size);
		name[size] = '\0';
		if (dns_msg_query_init(&q, name, DNS_TYPE_A) == 0) {
			if (q.qname_wire_len > sizeof q.qname_wire || dns_msg_build_upstream(&q, &out, &outlen) != 0)
				abort();
			free(out);
			out = NULL;
		}
	}
	if (dns_msg_parse_query(query, sizeof query, &fixed, &why) != 0)
		abort();
	bool matches = dns_msg_answer_matches(data, size, &fixed);
	int r = dns_msg_filter_answer(data, size, &fixed, keep_odd, NULL, size % 2 ? 512 : 64, &out, &outlen, &fr);
	if (r == -EBADMSG && (out || fr.rcode != DNS_RC_SERVFAIL || !fr.bad[0] || !matches))
		abort(); /* refused: nothing to send, SERVFAIL, a reason, and only for an answer to the question */
	if (r == 0) {
		if (!out || outlen < 12 || fr.naddrs > DNS_ANSWER_ADDRS_MAX || (fr.truncated && fr.naddrs))
			abort();
		check_forwarded(out, outlen, &fr);
		check_same_records(data, size, out, outlen, fr.truncated);
		for (unsigned i = 0; i < fr.naddrs; i++) /* direct mode learns only addresses keep() took */
			if ((fr.addrs[i].addr.ss_family != AF_INET && fr.addrs[i].addr.ss_family != AF_INET6) ||
			    !keep_odd((const struct sockaddr *)&fr.addrs[i].addr, NULL))
				abort();
		free(out);
		out = NULL;
		{
			static uint8_t aged[DNS_CACHE_ANSWER_MAX];
			struct dns_cache *c = dns_cache_new(4);
			uint32_t ttl;
			size_t n;
			if (!c)
				abort();
			uint8_t *enc = NULL;
			size_t elen = 0;
			dns_cache_put(c, &fixed, data, size, 0);
			n = dns_cache_get(c, &fixed, 7000, aged, sizeof aged);
			if (n) {
				/* the cache keeps (and times) the answer as ldns re-encodes it; the walker reads the
				 * upstream's bytes as the same records as ldns, so both give the same TTL (they once
				 * did not: an rdata name running past its RDLENGTH) */
				uint32_t ttl_up;
				if (dns_msg_reencode(data, size, &enc, &elen) != 0 ||
				    dns_msg_answer_ttl(enc, elen, &ttl) != 0 || ttl <= 7 ||
				    dns_msg_answer_ttl(data, size, &ttl_up) != 0 || ttl_up != ttl ||
				    dns_msg_filter_answer(aged, n, &fixed, keep_odd, NULL, 512, &out, &outlen, &fr) !=
				            0)
					abort();
				check_forwarded(out, outlen, &fr);
				check_same_records(aged, n, out, outlen, fr.truncated);
				check_view(c, &fixed, out, outlen, &fr);
				free(out);
			}
			free(enc);
			dns_cache_free(c);
		}
	}
	return 0;
}
