/* Unit tests of DNS message handling (proxy/dns_msg.c, dns_answer.c, dns_wire.c): query checks (FORMERR/REFUSED/drop),
 * the rebuilt upstream query, local answers, and answer filtering (question must match, forbidden addresses removed,
 * client id restored, truncation, answers whose records read differently by RDLENGTH and to ldns refused). Messages are
 * built with ldns, or by hand where ldns would not write them. */
#include <arpa/inet.h>
#include <ldns/ldns.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dns_cache.h"
#include "dns_msg.h"

/* Builds a wire message: a query for name/type/class with the given flags (ldns flag bits). */
static uint8_t *mkquery(const char *name, ldns_rr_type t, ldns_rr_class c, uint16_t id, bool edns, size_t *len)
{
	ldns_pkt *p = NULL;
	uint8_t *w = NULL;
	assert_int_equal(ldns_pkt_query_new_frm_str(&p, name, t, c, LDNS_RD), LDNS_STATUS_OK);
	ldns_pkt_set_id(p, id);
	if (edns)
		ldns_pkt_set_edns_udp_size(p, 4096);
	assert_int_equal(ldns_pkt2wire(&w, p, len), LDNS_STATUS_OK);
	ldns_pkt_free(p);
	return w;
}

static void test_query_checks(void **state)
{
	struct dns_query q;
	const char *why;
	size_t len;
	uint8_t *w;
	(void)state;

	w = mkquery("Allowed.Test.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, 0x4242, true, &len);
	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), 0);
	assert_int_equal(q.id, 0x4242);
	assert_string_equal(q.name, "Allowed.Test");
	assert_int_equal(q.qtype, LDNS_RR_TYPE_A);
	assert_true(q.edns);
	assert_true(q.rd);
	/* a response is dropped; a truncated message is FORMERR; < 12 bytes dropped */
	w[2] |= 0x80;
	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), -1);
	w[2] &= 0x7f;
	assert_int_equal(dns_msg_parse_query(w, len - 3, &q, &why), DNS_RC_FORMERR);
	assert_int_equal(dns_msg_parse_query(w, 11, &q, &why), -1);
	w[2] |= 0x10; /* opcode 2 (STATUS) */
	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), DNS_RC_REFUSED);
	free(w);

	w = mkquery("a.test.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_CH, 1, false, &len);
	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), DNS_RC_REFUSED);
	free(w);
	w = mkquery("a.test.", LDNS_RR_TYPE_AXFR, LDNS_RR_CLASS_IN, 1, false, &len);
	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), DNS_RC_REFUSED);
	free(w);
	w = mkquery(".", LDNS_RR_TYPE_NS, LDNS_RR_CLASS_IN, 1, false, &len);
	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), DNS_RC_REFUSED);
	free(w);
	{
		/* one label holding a '.' byte must not read as two labels */
		static const uint8_t dotlabel[] = {0x12, 0x34, 0x01, 0x00, 0,   1,   0,   0,   0,   0,
		                                   0,    0,    12,   'a',  'l', 'l', 'o', 'w', 'e', 'd',
		                                   '.',  't',  'e',  's',  't', 0,   0,   1,   0,   1};
		static const uint8_t twoq[] = {0x12, 0x34, 0x01, 0x00, 0, 2, 0, 0,   0, 0, 0, 0, 1,
		                               'a',  0,    0,    1,    0, 1, 1, 'b', 0, 0, 1, 0, 1};
		assert_int_equal(dns_msg_parse_query(dotlabel, sizeof dotlabel, &q, &why), DNS_RC_REFUSED);
		assert_int_equal(dns_msg_parse_query(twoq, sizeof twoq, &q, &why), DNS_RC_FORMERR);
	}
}

static bool keep_public(const struct sockaddr *sa, void *arg)
{
	(void)arg;
	if (sa->sa_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
		return (a >> 24) != 10 && (a >> 24) != 127;
	}
	return true;
}

static uint8_t *mkanswer(const char *qname, uint16_t id, const char *const *rrs, size_t *len)
{
	ldns_pkt *p = NULL;
	uint8_t *w = NULL;
	assert_int_equal(
	        ldns_pkt_query_new_frm_str(&p, qname, LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, LDNS_RD | LDNS_QR | LDNS_RA),
	        LDNS_STATUS_OK);
	ldns_pkt_set_id(p, id);
	for (; *rrs; rrs++) {
		ldns_rr *rr = NULL;
		assert_int_equal(ldns_rr_new_frm_str(&rr, *rrs, 60, NULL, NULL), LDNS_STATUS_OK);
		ldns_pkt_push_rr(p, LDNS_SECTION_ANSWER, rr);
	}
	assert_int_equal(ldns_pkt2wire(&w, p, len), LDNS_STATUS_OK);
	ldns_pkt_free(p);
	return w;
}

static void test_upstream_and_filter(void **state)
{
	static const char *const rrs[] = {"mixed.test. 60 IN A 10.1.2.3", "mixed.test. 60 IN A 198.18.1.12",
	                                  "mixed.test. 60 IN A 127.0.0.1", NULL};
	struct dns_query q;
	struct dns_filter_result fr;
	const char *why;
	size_t len, alen, olen, ulen;
	uint8_t *w = mkquery("mixed.test.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, 0x7777, false, &len);
	uint8_t *up = NULL, *ans, *out = NULL;
	ldns_pkt *p = NULL;
	(void)state;

	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), 0);
	assert_int_equal(dns_msg_build_upstream(&q, &up, &ulen), 0);
	assert_int_equal(up[0], 0); /* the relay writes a fresh id */
	assert_int_equal(up[1], 0);
	assert_int_equal(ldns_wire2pkt(&p, up, ulen), LDNS_STATUS_OK);
	assert_int_equal(ldns_pkt_qdcount(p), 1);
	assert_int_equal(ldns_pkt_ancount(p), 0);
	assert_true(ldns_pkt_edns(p));
	ldns_pkt_free(p);
	free(up);

	ans = mkanswer("mixed.test.", 0x1111, rrs, &alen);
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr), 0);
	assert_int_equal(fr.kept, 1);
	assert_int_equal(fr.stripped, 2);
	assert_string_equal(fr.first_addr, "198.18.1.12");
	assert_int_equal(ldns_wire2pkt(&p, out, olen), LDNS_STATUS_OK);
	assert_int_equal(ldns_pkt_id(p), 0x7777);
	assert_int_equal(ldns_pkt_ancount(p), 1);
	assert_false(ldns_pkt_edns(p)); /* the client sent no EDNS */
	ldns_pkt_free(p);
	free(out);
	/* truncation when it does not fit */
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 40, &out, &olen, &fr), 0);
	assert_true(fr.truncated);
	assert_int_equal(ldns_wire2pkt(&p, out, olen), LDNS_STATUS_OK);
	assert_true(ldns_pkt_tc(p));
	assert_int_equal(ldns_pkt_ancount(p), 0);
	ldns_pkt_free(p);
	free(out);
	free(ans);
	/* an answer to another question is rejected */
	ans = mkanswer("other.test.", 0x1111, rrs + 3, &alen);
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr), -EINVAL);
	assert_false(dns_msg_answer_matches(ans, alen, &q));
	free(ans);
	/* a local REFUSED carries the question and the client's id */
	assert_int_equal(dns_msg_reply_rcode(&q, DNS_RC_REFUSED, &out, &olen), 0);
	assert_int_equal(ldns_wire2pkt(&p, out, olen), LDNS_STATUS_OK);
	assert_int_equal(ldns_pkt_get_rcode(p), LDNS_RCODE_REFUSED);
	assert_int_equal(ldns_pkt_id(p), 0x7777);
	assert_int_equal(ldns_pkt_qdcount(p), 1);
	assert_true(ldns_pkt_qr(p));
	ldns_pkt_free(p);
	free(out);
	free(w);
}

/* Direct mode learns only the addresses that answer the question: the name's own records and those of the
 * CNAME chain from it (any order), with the smallest TTL on the way; never records for other names, never
 * addresses keep() refuses, never a truncated reply's. */
static void test_answer_addrs(void **state)
{
	static const char *const rrs[] = {
	        "b.test. 30 IN CNAME c.test.",     /* second link, listed first */
	        "c.test. 300 IN A 198.18.1.13",    /* end of the chain: ttl min(100, 30, 300) = 30 */
	        "a.test. 100 IN CNAME b.test.",    /* first link */
	        "a.test. 200 IN A 198.18.1.11",    /* the name's own record */
	        "a.test. 200 IN A 10.9.9.9",       /* refused by keep() */
	        "other.test. 60 IN A 198.18.1.12", /* another name: not an answer to a.test */
	        "x.test. 60 IN CNAME other.test.", /* a chain that does not start at a.test */
	        NULL};
	struct dns_query q;
	struct dns_filter_result fr;
	const char *why;
	size_t len, alen, olen;
	uint8_t *w = mkquery("a.test.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, 0x4242, false, &len);
	uint8_t *ans, *out = NULL;
	char buf[64];
	(void)state;

	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), 0);
	ans = mkanswer("a.test.", 0x1111, rrs, &alen);
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, DNS_MSG_MAX, &out, &olen, &fr), 0);
	assert_int_equal(fr.naddrs, 2);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&fr.addrs[0].addr)->sin_addr, buf, sizeof buf);
	assert_string_equal(buf, "198.18.1.13");
	assert_int_equal(fr.addrs[0].ttl, 30);
	inet_ntop(AF_INET, &((struct sockaddr_in *)&fr.addrs[1].addr)->sin_addr, buf, sizeof buf);
	assert_string_equal(buf, "198.18.1.11");
	assert_int_equal(fr.addrs[1].ttl, 200);
	free(out);
	out = NULL;
	/* too big for the client: truncated, nothing learned */
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 40, &out, &olen, &fr), 0);
	assert_true(fr.truncated);
	assert_int_equal(fr.naddrs, 0);
	free(out);
	free(ans);
	free(w);
}

/* Issue 22, items 7 and 8: the name goes upstream in lower case, the client's answer spells it as the
 * client did; an error answer without a question (a bare REFUSED/NOTIMP header) is the answer to the
 * query it carries the id of; the engine's own queries (dns_msg_query_init). */
static void test_case_and_bare_errors(void **state)
{
	static const char *const rrs[] = {"allowed.test. 60 IN A 198.18.1.11", NULL};
	struct dns_query q, own;
	struct dns_filter_result fr;
	const char *why;
	size_t len, ulen, alen, olen;
	uint8_t *w = mkquery("AlLoWeD.TeSt.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, 0x5151, false, &len);
	uint8_t *up = NULL, *ans, *out = NULL;
	static const uint8_t lower_wire[] = {7, 'a', 'l', 'l', 'o', 'w', 'e', 'd', 4, 't', 'e', 's', 't', 0};
	ldns_pkt *p = NULL;
	(void)state;

	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), 0);
	assert_int_equal(dns_msg_build_upstream(&q, &up, &ulen), 0);
	assert_memory_equal(up + 12, lower_wire, sizeof lower_wire);
	free(up);
	/* the upstream answers in lower case; the client gets its own spelling back, its id, the address */
	ans = mkanswer("allowed.test.", 0x1111, rrs, &alen);
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr), 0);
	assert_memory_equal(out + 12, q.qname_wire, q.qname_wire_len);
	assert_memory_equal(out + 12,
	                    "\x07"
	                    "AlLoWeD",
	                    8);
	assert_int_equal(out[0] << 8 | out[1], 0x5151);
	assert_string_equal(fr.first_addr, "198.18.1.11");
	free(out);
	free(ans);

	/* bare REFUSED / NOTIMP headers: that rcode, with the client's question and id */
	for (int rc = DNS_RC_FORMERR; rc <= DNS_RC_REFUSED; rc++) {
		uint8_t bare[12] = {0x11, 0x11, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0};
		int ret;
		bare[3] = (uint8_t)(0x80 | rc);
		ret = dns_msg_filter_answer(bare, sizeof bare, &q, keep_public, NULL, 512, &out, &olen, &fr);
		if (rc == DNS_RC_NXDOMAIN) {
			/* a claim about the name needs the question */
			assert_int_equal(ret, -EINVAL);
			continue;
		}
		assert_int_equal(ret, 0);
		assert_int_equal(fr.rcode, rc);
		assert_int_equal(ldns_wire2pkt(&p, out, olen), LDNS_STATUS_OK);
		assert_int_equal(ldns_pkt_get_rcode(p), rc);
		assert_int_equal(ldns_pkt_id(p), 0x5151);
		assert_int_equal(ldns_pkt_qdcount(p), rc == DNS_RC_FORMERR ? 0 : 1);
		ldns_pkt_free(p);
		free(out);
		out = NULL;
	}
	{
		/* a bare header that carries records, or says NOERROR, is no answer */
		uint8_t with_rr[] = {0x11, 0x11, 0x81, 0x85, 0, 0, 0,  1, 0, 0, 0, 0, 0, 0,
		                     1,    0,    1,    0,    0, 0, 60, 0, 4, 1, 2, 3, 4};
		uint8_t noerror[12] = {0x11, 0x11, 0x81, 0x80, 0, 0, 0, 0, 0, 0, 0, 0};
		assert_int_equal(
		        dns_msg_filter_answer(with_rr, sizeof with_rr, &q, keep_public, NULL, 512, &out, &olen, &fr),
		        -EINVAL);
		assert_int_equal(
		        dns_msg_filter_answer(noerror, sizeof noerror, &q, keep_public, NULL, 512, &out, &olen, &fr),
		        -EINVAL);
	}

	/* the engine's own queries */
	assert_int_equal(dns_msg_query_init(&own, "Allowed.test", DNS_TYPE_AAAA), 0);
	assert_int_equal(own.qname_wire_len, sizeof lower_wire);
	assert_memory_equal(own.qname_wire, lower_wire, sizeof lower_wire);
	assert_string_equal(own.name, "allowed.test");
	assert_true(own.rd && own.edns);
	assert_int_equal(own.qtype, DNS_TYPE_AAAA);
	assert_int_equal(dns_msg_query_init(&own, "allowed.test.", DNS_TYPE_A), 0);
	assert_int_equal(own.qname_wire_len, sizeof lower_wire);
	assert_int_equal(dns_msg_query_init(&own, "", DNS_TYPE_A), -EINVAL);
	assert_int_equal(dns_msg_query_init(&own, ".", DNS_TYPE_A), -EINVAL);
	assert_int_equal(dns_msg_query_init(&own, "a..test", DNS_TYPE_A), -EINVAL);
	assert_int_equal(dns_msg_query_init(&own, "a.test..", DNS_TYPE_A), -EINVAL);
	{
		char longlabel[80];
		memset(longlabel, 'x', 64);
		strcpy(longlabel + 64, ".test");
		assert_int_equal(dns_msg_query_init(&own, longlabel, DNS_TYPE_A), -EINVAL);
	}
	free(w);
}

static uint32_t first_ttl(const uint8_t *msg, size_t len)
{
	ldns_pkt *p = NULL;
	uint32_t ttl;
	assert_int_equal(ldns_wire2pkt(&p, msg, len), LDNS_STATUS_OK);
	assert_true(ldns_rr_list_rr_count(ldns_pkt_answer(p)) > 0);
	ttl = ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(p), 0));
	ldns_pkt_free(p);
	return ttl;
}

/* The DNS cache (dns_cache.c): kept by question (any letter case), for the smallest TTL, handed out aged;
 * errors and truncated answers are not kept; negative answers for their SOA's time; LRU eviction. */
static void test_cache(void **state)
{
	static const char *const rrs[] = {"cached.test. 100 IN A 198.18.1.11", "cached.test. 30 IN A 198.18.1.12",
	                                  NULL};
	struct dns_cache *c = dns_cache_new(2);
	struct dns_query q, q6, upper;
	const char *why;
	size_t len, alen;
	uint8_t *w, *ans, buf[DNS_CACHE_ANSWER_MAX];
	uint32_t ttl;
	(void)state;

	assert_non_null(c);
	w = mkquery("cached.test.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, 1, false, &len);
	assert_int_equal(dns_msg_parse_query(w, len, &q, &why), 0);
	free(w);
	w = mkquery("CaChEd.TEST.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, 2, false, &len);
	assert_int_equal(dns_msg_parse_query(w, len, &upper, &why), 0);
	free(w);
	w = mkquery("cached.test.", LDNS_RR_TYPE_AAAA, LDNS_RR_CLASS_IN, 3, false, &len);
	assert_int_equal(dns_msg_parse_query(w, len, &q6, &why), 0);
	free(w);

	ans = mkanswer("cached.test.", 0x1111, rrs, &alen);
	assert_int_equal(dns_msg_answer_ttl(ans, alen, &ttl), 0);
	assert_int_equal(ttl, 30);
	assert_int_equal(dns_cache_get(c, &q, 1000, buf, sizeof buf), 0);
	dns_cache_put(c, &q, ans, alen, 1000);
	/* 10.5 s later, by the other spelling: the same answer, every TTL 10 s lower */
	assert_int_equal(dns_cache_get(c, &upper, 11500, buf, sizeof buf), alen);
	assert_int_equal(first_ttl(buf, alen), 90);
	assert_int_equal(dns_cache_get(c, &q6, 11500, buf, sizeof buf), 0); /* another type */
	/* gone after the smallest TTL */
	assert_int_equal(dns_cache_get(c, &q, 1000 + 30 * 1000, buf, sizeof buf), 0);
	assert_int_equal(dns_cache_get(c, &q, 1000, buf, sizeof buf), 0); /* and dropped */

	/* errors and truncated answers are not kept */
	ans[3] = (uint8_t)((ans[3] & 0xf0) | DNS_RC_SERVFAIL);
	assert_int_equal(dns_msg_answer_ttl(ans, alen, &ttl), -EINVAL);
	dns_cache_put(c, &q, ans, alen, 1000);
	assert_int_equal(dns_cache_get(c, &q, 1000, buf, sizeof buf), 0);
	ans[3] &= 0xf0;
	ans[2] |= 0x02;
	dns_cache_put(c, &q, ans, alen, 1000);
	assert_int_equal(dns_cache_get(c, &q, 1000, buf, sizeof buf), 0);
	ans[2] &= (uint8_t)~0x02;
	free(ans);

	{
		/* NXDOMAIN: kept for min(SOA TTL, SOA MINIMUM); without an SOA not at all */
		ldns_pkt *p = NULL;
		ldns_rr *soa = NULL;
		uint8_t *neg = NULL;
		size_t nlen;
		assert_int_equal(ldns_pkt_query_new_frm_str(&p, "cached.test.", LDNS_RR_TYPE_AAAA, LDNS_RR_CLASS_IN,
		                                            LDNS_RD | LDNS_QR | LDNS_RA),
		                 LDNS_STATUS_OK);
		ldns_pkt_set_rcode(p, LDNS_RCODE_NXDOMAIN);
		assert_int_equal(ldns_pkt2wire(&neg, p, &nlen), LDNS_STATUS_OK);
		assert_int_equal(dns_msg_answer_ttl(neg, nlen, &ttl), -EINVAL);
		free(neg);
		assert_int_equal(
		        ldns_rr_new_frm_str(&soa, "test. 600 IN SOA ns.test. h.test. 1 2 3 4 45", 60, NULL, NULL),
		        LDNS_STATUS_OK);
		ldns_pkt_push_rr(p, LDNS_SECTION_AUTHORITY, soa);
		assert_int_equal(ldns_pkt2wire(&neg, p, &nlen), LDNS_STATUS_OK);
		assert_int_equal(dns_msg_answer_ttl(neg, nlen, &ttl), 0);
		assert_int_equal(ttl, 45);
		dns_cache_put(c, &q6, neg, nlen, 0);
		assert_int_equal(dns_cache_get(c, &q6, 44000, buf, sizeof buf), nlen);
		assert_int_equal(dns_cache_get(c, &q6, 45000, buf, sizeof buf), 0);
		free(neg);
		ldns_pkt_free(p);
	}
	{
		/* at most 2 entries: the least recently used goes */
		static const char *const a[] = {"a.test. 60 IN A 198.18.1.1", NULL},
		                         *const b[] = {"b.test. 60 IN A 198.18.1.2", NULL},
		                         *const d[] = {"d.test. 60 IN A 198.18.1.4", NULL};
		struct dns_query qa, qb, qd;
		uint8_t *wa = mkanswer("a.test.", 1, a, &alen);
		size_t la = alen;
		uint8_t *wb = mkanswer("b.test.", 1, b, &alen);
		size_t lb = alen;
		uint8_t *wd = mkanswer("d.test.", 1, d, &alen);
		assert_int_equal(dns_msg_query_init(&qa, "a.test", DNS_TYPE_A), 0);
		assert_int_equal(dns_msg_query_init(&qb, "b.test", DNS_TYPE_A), 0);
		assert_int_equal(dns_msg_query_init(&qd, "d.test", DNS_TYPE_A), 0);
		dns_cache_put(c, &qa, wa, la, 0);
		dns_cache_put(c, &qb, wb, lb, 0);
		assert_int_equal(dns_cache_get(c, &qa, 1, buf, sizeof buf), la); /* a is now the most recent */
		dns_cache_put(c, &qd, wd, alen, 0);
		assert_int_equal(dns_cache_get(c, &qb, 1, buf, sizeof buf), 0);
		assert_int_equal(dns_cache_get(c, &qa, 1, buf, sizeof buf), la);
		assert_int_equal(dns_cache_get(c, &qd, 1, buf, sizeof buf), alen);
		free(wa);
		free(wb);
		free(wd);
	}
	dns_cache_free(c);
	dns_cache_free(NULL);
}

/* q: a query for name's A records, with id, with or without EDNS, as the client sends it. */
static void parsed_a(const char *name, uint16_t id, bool edns, struct dns_query *q)
{
	const char *why;
	size_t len;
	uint8_t *w = mkquery(name, LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, id, edns, &len);
	assert_int_equal(dns_msg_parse_query(w, len, q, &why), 0);
	free(w);
}

static bool keep_all(const struct sockaddr *sa, void *arg)
{
	(void)sa;
	(void)arg;
	return true;
}

/* Filters the entry's copy at now with keep (what dns.c does on a hit without a view) and keeps the
 * output as gen's view. */
static void make_view(struct dns_cache *c, const struct dns_query *q, uint64_t gen, size_t maxlen,
                      dns_addr_keep_fn keep, uint64_t now)
{
	static uint8_t raw[DNS_CACHE_ANSWER_MAX];
	struct dns_cache_ticket t;
	struct dns_filter_result fr;
	uint8_t *out = NULL;
	size_t outlen, n = dns_cache_get_ticket(c, q, now, raw, sizeof raw, &t);

	assert_true(n > 0);
	assert_int_equal(t.now_ms, now);
	assert_int_equal(dns_msg_filter_answer(raw, n, q, keep, NULL, maxlen, &out, &outlen, &fr), 0);
	dns_cache_put_view(c, q, &t, gen, maxlen, out, outlen, &fr);
	free(out);
}

/* The view of gen must be byte for byte what filtering the entry's copy at now with keep gives, with the
 * same result (and the addresses' TTLs); returns its number of addresses. */
static unsigned expect_view(struct dns_cache *c, const struct dns_query *q, uint64_t gen, size_t maxlen,
                            dns_addr_keep_fn keep, uint64_t now)
{
	static uint8_t raw[DNS_CACHE_ANSWER_MAX], view[DNS_CACHE_ANSWER_MAX];
	struct dns_filter_result fr, vr;
	uint8_t *out = NULL;
	size_t outlen, vlen = dns_cache_get_view(c, q, gen, maxlen, now, view, sizeof view, &vr);
	size_t n = dns_cache_get(c, q, now, raw, sizeof raw);

	assert_true(vlen > 0);
	assert_true(n > 0);
	assert_int_equal(dns_msg_filter_answer(raw, n, q, keep, NULL, maxlen, &out, &outlen, &fr), 0);
	assert_int_equal(vlen, outlen);
	assert_memory_equal(view, out, outlen);
	assert_int_equal(vr.rcode, fr.rcode);
	assert_int_equal(vr.kept, fr.kept);
	assert_int_equal(vr.stripped, fr.stripped);
	assert_int_equal(vr.truncated, fr.truncated);
	assert_string_equal(vr.first_addr, fr.first_addr);
	assert_int_equal(vr.naddrs, fr.naddrs);
	for (unsigned i = 0; i < fr.naddrs; i++) {
		assert_int_equal(vr.addrs[i].ttl, fr.addrs[i].ttl);
		assert_memory_equal(&vr.addrs[i].addr, &fr.addrs[i].addr, sizeof fr.addrs[i].addr);
	}
	free(out);
	return vr.naddrs;
}

/* Views (dns_cache.h): an answer filtered for one policy generation is served to that generation only,
 * exactly as filtering again would give it (id, TTLs aged, addresses and their TTLs), for the kind of query
 * it was made for only, and never past the entry's TTL. */
static void test_cache_views(void **state)
{
	static const char *const rrs[] = {"view.test. 100 IN A 198.18.1.11", "view.test. 60 IN A 10.1.1.12",
	                                  "view.test. 80 IN A 198.18.1.13", NULL};
	struct dns_cache *c = dns_cache_new(4);
	struct dns_query q, q2, upper, eq;
	struct dns_filter_result fr;
	struct dns_cache_ticket t;
	size_t alen;
	uint8_t *ans, buf[DNS_CACHE_ANSWER_MAX];
	(void)state;

	assert_non_null(c);
	parsed_a("view.test.", 0x0101, false, &q);
	parsed_a("view.test.", 0x0202, false, &q2);
	parsed_a("VIEW.test.", 0x0303, false, &upper);
	parsed_a("view.test.", 0x0404, true, &eq);
	ans = mkanswer("view.test.", 0x1111, rrs, &alen);
	dns_cache_put(c, &q, ans, alen, 1000);

	/* no view before one is made; then policy 1's (every address) and policy 2's (no private one) */
	assert_int_equal(dns_cache_get_view(c, &q, 1, DNS_UDP_PLAIN, 1000, buf, sizeof buf, &fr), 0);
	make_view(c, &q, 1, DNS_UDP_PLAIN, keep_all, 1000);
	assert_int_equal(expect_view(c, &q, 1, DNS_UDP_PLAIN, keep_all, 1000), 3);
	assert_int_equal(dns_cache_get_view(c, &q, 2, DNS_UDP_PLAIN, 1000, buf, sizeof buf, &fr), 0);
	make_view(c, &q, 2, DNS_UDP_PLAIN, keep_public, 2500);
	assert_int_equal(expect_view(c, &q, 2, DNS_UDP_PLAIN, keep_public, 2500), 2);
	/* each policy keeps its own, aged like a fresh filter (26.5 s later), with the asker's id */
	assert_int_equal(expect_view(c, &q, 1, DNS_UDP_PLAIN, keep_all, 27500), 3);
	assert_int_equal(expect_view(c, &q2, 2, DNS_UDP_PLAIN, keep_public, 27500), 2);
	assert_int_equal(dns_cache_get_view(c, &q2, 2, DNS_UDP_PLAIN, 27500, buf, sizeof buf, &fr), alen - 16);
	assert_int_equal(buf[0] << 8 | buf[1], 0x0202);
	assert_int_equal(fr.stripped, 1);
	assert_int_equal(fr.addrs[0].ttl, 100 - 26);
	/* a policy generation without a view (a new policy) gets none of the others' */
	assert_int_equal(dns_cache_get_view(c, &q, 3, DNS_UDP_PLAIN, 27500, buf, sizeof buf, &fr), 0);
	/* another spelling, another size, EDNS: not the query the view was made for */
	assert_int_equal(dns_cache_get_view(c, &upper, 1, DNS_UDP_PLAIN, 27500, buf, sizeof buf, &fr), 0);
	assert_int_equal(dns_cache_get_view(c, &q, 1, DNS_EDNS_SIZE, 27500, buf, sizeof buf, &fr), 0);
	assert_int_equal(dns_cache_get_view(c, &eq, 1, DNS_UDP_PLAIN, 27500, buf, sizeof buf, &fr), 0);
	make_view(c, &eq, 1, DNS_EDNS_SIZE, keep_all, 27500);
	assert_int_equal(expect_view(c, &eq, 1, DNS_EDNS_SIZE, keep_all, 30000), 3);
	/* truncated for a small client: the view says so too */
	make_view(c, &upper, 1, 40, keep_all, 30000);
	assert_int_equal(expect_view(c, &upper, 1, 40, keep_all, 31000), 0);
	assert_true(dns_cache_get_view(c, &upper, 1, 40, 31000, buf, sizeof buf, &fr) > 0);
	assert_true(fr.truncated);
	/* DNS_CACHE_VIEWS views at most (4 are taken now): they make way in turn */
	for (uint64_t g = 10; g <= 10 + DNS_CACHE_VIEWS; g++)
		make_view(c, &q, g, DNS_UDP_PLAIN, keep_all, 31000);
	assert_int_equal(dns_cache_get_view(c, &q, 10, DNS_UDP_PLAIN, 31000, buf, sizeof buf, &fr), 0);
	assert_int_equal(expect_view(c, &q, 10 + DNS_CACHE_VIEWS, DNS_UDP_PLAIN, keep_all, 31000), 3);
	/* not past the answer's TTL (60 s), and the entry goes with its views */
	assert_int_equal(dns_cache_get_view(c, &q, 10 + DNS_CACHE_VIEWS, DNS_UDP_PLAIN, 61000, buf, sizeof buf, &fr), 0);
	assert_int_equal(dns_cache_get(c, &q, 1000, buf, sizeof buf), 0);

	/* a view made from a copy whose entry was replaced since is not kept */
	dns_cache_put(c, &q, ans, alen, 70000);
	assert_true(dns_cache_get_ticket(c, &q, 70000, buf, sizeof buf, &t) > 0);
	dns_cache_put(c, &q, ans, alen, 71000);
	{
		uint8_t *out = NULL;
		size_t outlen;
		assert_int_equal(dns_msg_filter_answer(buf, alen, &q, keep_all, NULL, DNS_UDP_PLAIN, &out, &outlen, &fr),
		                 0);
		dns_cache_put_view(c, &q, &t, 1, DNS_UDP_PLAIN, out, outlen, &fr);
		free(out);
	}
	assert_int_equal(dns_cache_get_view(c, &q, 1, DNS_UDP_PLAIN, 71000, buf, sizeof buf, &fr), 0);
	/* nor is one for an entry that expired */
	assert_true(dns_cache_get_ticket(c, &q, 71000, buf, sizeof buf, &t) > 0);
	t.now_ms = 71000 + 60 * 1000;
	dns_cache_put_view(c, &q, &t, 1, DNS_UDP_PLAIN, buf, alen, &fr);
	assert_int_equal(dns_cache_get(c, &q, 71000, buf, sizeof buf), 0);
	free(ans);
	dns_cache_free(c);
}

/* A view ages by the TTL offsets it found when it was made (dns_msg_ttl_offsets, dns_msg_age_at) instead of
 * walking itself on every hit: the same bytes as dns_msg_age_answer, OPT untouched, never below 0; a view
 * with more records than it keeps offsets for ages by the walk, and both still equal a fresh filter. */
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void test_view_ttl_offsets(void **state)
{
	static const char *const few[] = {"ttl.test. 100 IN A 198.18.1.11", "ttl.test. 5 IN A 198.18.1.12", NULL};
	static char lines[40][64];
	const char *many[41];
	struct dns_cache *c = dns_cache_new(4);
	struct dns_query q, eq;
	uint16_t offs[64];
	uint8_t *ans, *big, walked[DNS_CACHE_ANSWER_MAX], patched[DNS_CACHE_ANSWER_MAX];
	size_t alen, blen;
	int n;
	(void)state;

	assert_non_null(c);
	parsed_a("ttl.test.", 0x0101, true, &eq);
	parsed_a("ttl.test.", 0x0102, false, &q);
	ans = mkanswer("ttl.test.", 0x1111, few, &alen);
	/* two records' TTLs, in order; the answer's EDNS OPT (if any) is not one of them */
	n = dns_msg_ttl_offsets(ans, alen, offs, 64);
	assert_int_equal(n, 2);
	assert_int_equal(get32(ans + offs[0]), 100);
	assert_int_equal(get32(ans + offs[1]), 5);
	assert_int_equal(dns_msg_ttl_offsets(ans, alen, offs, 1), -EINVAL); /* more than it may keep */
	assert_int_equal(dns_msg_ttl_offsets(ans, 20, offs, 64), -EINVAL);  /* cut short */
	for (uint32_t age = 0; age < 120; age += 7) {
		memcpy(walked, ans, alen);
		memcpy(patched, ans, alen);
		assert_int_equal(dns_msg_age_answer(walked, alen, age), 0);
		dns_msg_age_at(patched, offs, 2, age);
		assert_memory_equal(walked, patched, alen);
	}
	dns_cache_put(c, &q, ans, alen, 1000);
	make_view(c, &eq, 7, DNS_EDNS_SIZE, keep_all, 1000);
	for (uint64_t now = 1000; now < 6000; now += 900)
		assert_int_equal(expect_view(c, &eq, 7, DNS_EDNS_SIZE, keep_all, now), 2);
	/* not past the smallest TTL (5 s) */
	assert_int_equal(dns_cache_get_view(c, &eq, 7, DNS_EDNS_SIZE, 6000, walked, sizeof walked,
	                                    &(struct dns_filter_result){0}),
	                 0);

	/* 40 records: more than a view keeps offsets for */
	for (int i = 0; i < 40; i++) {
		snprintf(lines[i], sizeof lines[i], "ttl.test. %d IN A 198.18.2.%d", 200 + i, i + 1);
		many[i] = lines[i];
	}
	many[40] = NULL;
	big = mkanswer("ttl.test.", 0x2222, many, &blen);
	assert_int_equal(dns_msg_ttl_offsets(big, blen, offs, 64), 40);
	dns_cache_put(c, &q, big, blen, 10000);
	make_view(c, &eq, 8, DNS_EDNS_SIZE, keep_all, 10000);
	assert_int_equal(expect_view(c, &eq, 8, DNS_EDNS_SIZE, keep_all, 10000), DNS_ANSWER_ADDRS_MAX);
	assert_int_equal(expect_view(c, &eq, 8, DNS_EDNS_SIZE, keep_all, 150000), DNS_ANSWER_ADDRS_MAX);
	free(ans);
	free(big);
	dns_cache_free(c);
}

/* ---- answers that read differently by RDLENGTH and field by field ---- */

/* An answer to "q.test A" (id 0x1111, RD RA, no EDNS) with an answer records, the records' bytes as given
 * (owner names 0xc00c point at the question). */
static uint8_t *raw_answer(const uint8_t *recs, size_t rlen, unsigned an, size_t *len)
{
	static const uint8_t head[] = {0x11, 0x11, 0x81, 0x80, 0,   1,   0,   0, 0, 0, 0, 0,
	                               1,    'q',  4,    't',  'e', 's', 't', 0, 0, 1, 0, 1};
	uint8_t *w = malloc(sizeof head + rlen);
	assert_non_null(w);
	memcpy(w, head, sizeof head);
	w[7] = (uint8_t)an;
	memcpy(w + sizeof head, recs, rlen);
	*len = sizeof head + rlen;
	return w;
}

/* What a strict client reads (every record by its RDLENGTH, as tests/lib/proxy-lab.sh's dns_ask does):
 * true when some A record of the message holds addr (dotted). */
static bool strict_has_a(const uint8_t *d, size_t len, const char *addr)
{
	size_t i = 12;
	unsigned qd = (unsigned)(d[4] << 8 | d[5]),
	         n = (unsigned)(d[6] << 8 | d[7]) + (unsigned)(d[8] << 8 | d[9]) + (unsigned)(d[10] << 8 | d[11]);
	struct in_addr want;
	assert_int_equal(inet_pton(AF_INET, addr, &want), 1);
	for (unsigned k = 0; k < qd + n; k++) {
		while (i < len && d[i] != 0 && (d[i] & 0xc0) != 0xc0)
			i += 1u + d[i];
		i += i < len && d[i] == 0 ? 1 : 2;
		if (k < qd) {
			i += 4;
			continue;
		}
		if (i + 10 > len)
			return false;
		size_t rdl = (size_t)(d[i + 8] << 8 | d[i + 9]);
		if (d[i] == 0 && d[i + 1] == 1 && rdl == 4 && i + 14 <= len && memcmp(d + i + 10, &want, 4) == 0)
			return true;
		i += 10 + rdl;
	}
	return false;
}

/* The finding of docs/testing.md (2026-11-27): a CNAME whose rdata name runs past its RDLENGTH. By
 * RDLENGTH the answer is a CNAME and "A 127.0.0.1"; ldns reads the CNAME's name on through those bytes and
 * then "A 9.9.9.9", which the filter let through, so the upstream's bytes went to the client unchanged. */
static void test_rdata_smuggling(void **state)
{
	static const uint8_t recs[] = {
	        /* CNAME, RDLENGTH 1: a label of 16 bytes, by RDLENGTH only its length byte */
	        0xc0, 0x0c, 0, 5, 0, 1, 0, 0, 0, 60, 0, 1, 16,
	        /* what a strict client reads as the second record (ldns: the label's 16 bytes) */
	        0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1,
	        /* ldns: the end of the CNAME's name, then its second record */
	        0, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 9, 9, 9, 9};
	struct dns_query q;
	struct dns_filter_result fr;
	size_t alen, olen = 0;
	uint8_t *ans, *out = NULL;
	int r;
	(void)state;

	assert_int_equal(dns_msg_query_init(&q, "q.test", DNS_TYPE_A), 0);
	q.id = 0x2222;
	q.edns = false; /* a client without EDNS, as the answer: nothing to rewrite, the fast path */
	ans = raw_answer(recs, sizeof recs, 2, &alen);
	assert_true(strict_has_a(ans, alen, "127.0.0.1"));
	r = dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr);
	if (r == 0) /* what the client would get must not hold the address keep_public forbids */
		assert_false(strict_has_a(out, olen, "127.0.0.1"));
	free(out);
	/* it answers the question, so it is not ignored as a spoof: SERVFAIL, with the reason */
	assert_int_equal(r, -EBADMSG);
	assert_int_equal(fr.rcode, DNS_RC_SERVFAIL);
	assert_non_null(strstr(fr.bad, "CNAME"));
	assert_true(dns_msg_answer_matches(ans, alen, &q)); /* with TC set it would be asked again over TCP */
	/* the same bytes answering another question are ignored like any other stray answer */
	assert_int_equal(dns_msg_query_init(&q, "other.test", DNS_TYPE_A), 0);
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr), -EINVAL);
	assert_false(dns_msg_answer_matches(ans, alen, &q));
	free(ans);
	{
		/* an owner name read through the header: the client's id, written there, would change it */
		static const uint8_t viaid[] = {0xc0, 0x01, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 9, 9, 9, 9};
		assert_int_equal(dns_msg_query_init(&q, "q.test", DNS_TYPE_A), 0);
		q.edns = false;
		ans = raw_answer(viaid, sizeof viaid, 1, &alen);
		assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr),
		                 -EBADMSG);
		assert_non_null(strstr(fr.bad, "into the header"));
		free(ans);
	}
}

/* Every record's rdata must end exactly at its RDLENGTH as its type lays it out: names inside it, and
 * fixed fields (A 4, AAAA 16, MX's preference, SOA's 20 octets after its names, SRV's 6 before its
 * target); a type without a layout here is read by ldns and must end there too. Each record comes once
 * well-formed (the answer is taken) and once broken (SERVFAIL). In the broken ones the bytes after
 * RDLENGTH are where ldns's reading went on, so the message is otherwise whole. */
static void test_rdata_layouts(void **state)
{
	struct rdcase {
		const char *what;
		uint16_t type;
		uint8_t rdlen; /* as declared */
		uint8_t n;     /* bytes that follow (rdata and what ldns reads past it) */
		uint8_t rd[40];
		bool ok;
	};
	static const struct rdcase cases[] = {
	        {"A", 1, 4, 4, {1, 2, 3, 4}, true},
	        {"A", 1, 8, 8, {1, 2, 3, 4, 5, 6, 7, 8}, false},
	        {"A", 1, 3, 4, {1, 2, 3, 4}, false},
	        {"A", 1, 0, 0, {0}, false},
	        {"AAAA", 28, 16, 16, {0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, true},
	        {"AAAA", 28, 15, 16, {0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, false},
	        {"CNAME", 5, 5, 5, {3, 'a', 'b', 'c', 0}, true},
	        {"CNAME", 5, 4, 5, {3, 'a', 'b', 'c', 0}, false},
	        {"CNAME", 5, 2, 2, {0xc0, 0x0c}, true},
	        {"CNAME", 5, 1, 2, {0xc0, 0x0c}, false},
	        {"CNAME", 5, 3, 3, {0xc0, 0x0c, 0}, false}, /* a byte after the name */
	        /* a pointer into the header (where the client's id is written) or forwards */
	        {"CNAME", 5, 2, 2, {0xc0, 0x01}, false},
	        {"CNAME", 5, 2, 2, {0xc0, 0x30}, false},
	        {"CNAME", 5, 4, 4, {1, 'x', 0xc0, 0x0c}, true},
	        {"NS", 2, 3, 5, {3, 'a', 'b', 'c', 0}, false},
	        {"PTR", 12, 2, 5, {3, 'a', 'b', 'c', 0}, false},
	        {"DNAME", 39, 4, 5, {3, 'a', 'b', 'c', 0}, false},
	        {"MB", 7, 4, 5, {3, 'a', 'b', 'c', 0}, false},
	        {"MX", 15, 4, 4, {0, 10, 0xc0, 0x0c}, true},
	        {"MX", 15, 3, 4, {0, 10, 0xc0, 0x0c}, false},
	        {"MX", 15, 1, 1, {0}, false},
	        {"AFSDB", 18, 3, 4, {0, 1, 0xc0, 0x0c}, false},
	        {"RT", 21, 3, 4, {0, 1, 0xc0, 0x0c}, false},
	        {"KX", 36, 3, 4, {0, 1, 0xc0, 0x0c}, false},
	        {"PX", 26, 6, 6, {0, 1, 0xc0, 0x0c, 0xc0, 0x0c}, true},
	        {"PX", 26, 5, 6, {0, 1, 0xc0, 0x0c, 0xc0, 0x0c}, false},
	        {"RP", 17, 4, 4, {0xc0, 0x0c, 0xc0, 0x0c}, true},
	        {"RP", 17, 3, 4, {0xc0, 0x0c, 0xc0, 0x0c}, false},
	        {"MINFO", 14, 3, 4, {0xc0, 0x0c, 0xc0, 0x0c}, false},
	        {"SOA",
	         6,
	         24,
	         24,
	         {0xc0, 0x0c, 0xc0, 0x0c, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5},
	         true},
	        {"SOA",
	         6,
	         23,
	         24,
	         {0xc0, 0x0c, 0xc0, 0x0c, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5},
	         false},
	        {"SOA",
	         6,
	         3,
	         24,
	         {0xc0, 0x0c, 0xc0, 0x0c, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5},
	         false},
	        {"SRV", 33, 8, 8, {0, 1, 0, 2, 0, 80, 0xc0, 0x0c}, true},
	        {"SRV", 33, 7, 8, {0, 1, 0, 2, 0, 80, 0xc0, 0x0c}, false},
	        {"SRV", 33, 5, 5, {0, 1, 0, 2, 0}, false},
	        {"NAPTR", 35, 9, 9, {0, 1, 0, 2, 0, 0, 0, 0xc0, 0x0c}, true},
	        {"NAPTR", 35, 8, 9, {0, 1, 0, 2, 0, 0, 0, 0xc0, 0x0c}, false},
	        {"NAPTR", 35, 6, 9, {0, 1, 0, 2, 0, 5, 0, 0xc0, 0x0c}, false}, /* a string past RDLENGTH */
	        {"HTTPS", 65, 4, 4, {0, 1, 0xc0, 0x0c}, true},
	        {"HTTPS", 65, 8, 8, {0, 1, 0, 0, 1, 0, 0, 0}, true}, /* "." and a parameter */
	        {"HTTPS", 65, 3, 4, {0, 1, 0xc0, 0x0c}, false},
	        {"SVCB", 64, 4, 5, {0, 1, 3, 'a', 'b'}, false},
	        {"RRSIG",
	         46,
	         22,
	         22,
	         {0, 1, 8, 2, 0, 0, 0, 60, 0, 0, 0, 2, 0, 0, 0, 1, 0, 7, 0xc0, 0x0c, 0xaa, 0xbb},
	         true},
	        {"RRSIG", 46, 19, 20, {0, 1, 8, 2, 0, 0, 0, 60, 0, 0, 0, 2, 0, 0, 0, 1, 0, 7, 0xc0, 0x0c}, false},
	        {"NSEC", 47, 6, 6, {0xc0, 0x0c, 0, 1, 0x40, 0}, true},
	        {"NSEC", 47, 1, 2, {0xc0, 0x0c}, false},
	        {"TXT", 16, 6, 6, {2, 'h', 'i', 2, 'y', 'o'}, true},
	        {"TXT", 16, 5, 6, {2, 'h', 'i', 2, 'y', 'o'}, false},
	        /* no layout here: ldns's reading is compared (HINFO: two strings, then ldns stops) */
	        {"HINFO", 13, 4, 4, {1, 'a', 1, 'b'}, true},
	        {"HINFO", 13, 6, 6, {1, 'a', 1, 'b', 1, 'c'}, false},
	        {"TYPE4242", 4242, 3, 3, {1, 2, 3}, true},
	};
	struct dns_query q;
	(void)state;

	assert_int_equal(dns_msg_query_init(&q, "q.test", DNS_TYPE_A), 0);
	q.edns = false; /* nothing to rewrite: a taken answer would be passed on as it came */
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const struct rdcase *k = &cases[c];
		uint8_t rec[12 + 40];
		struct dns_filter_result fr;
		size_t alen, olen;
		uint8_t *ans, *out = NULL;
		int r;
		const uint8_t fixed[] = {0xc0, 0x0c,    (uint8_t)(k->type >> 8), (uint8_t)k->type, 0, 1, 0, 0, 0, 60,
		                         0,    k->rdlen};
		memcpy(rec, fixed, sizeof fixed);
		memcpy(rec + sizeof fixed, k->rd, k->n);
		ans = raw_answer(rec, sizeof fixed + k->n, 1, &alen);
		r = dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr);
		if (r != (k->ok ? 0 : -EBADMSG))
			fail_msg("case %zu (%s, RDLENGTH %u): %d, want %d", c, k->what, k->rdlen, r,
			         k->ok ? 0 : -EBADMSG);
		if (!k->ok && !strstr(fr.bad, k->what))
			fail_msg("case %zu (%s): the reason \"%s\" does not name the type", c, k->what, fr.bad);
		if (k->ok) {
			ldns_pkt *p = NULL;
			assert_int_equal(ldns_wire2pkt(&p, out, olen), LDNS_STATUS_OK);
			assert_int_equal(ldns_pkt_ancount(p), 1);
			ldns_pkt_free(p);
		}
		free(out);
		free(ans);
	}
}

/* Bytes after the last record are nobody's: the answer is rebuilt without them rather than passed on. */
static void test_trailing_bytes(void **state)
{
	static const uint8_t recs[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 9, 9, 9, 9, 0xc0, 0x0c, 0, 1, 0, 1};
	struct dns_query q;
	struct dns_filter_result fr;
	size_t alen, olen;
	uint8_t *ans, *out = NULL;
	(void)state;

	assert_int_equal(dns_msg_query_init(&q, "q.test", DNS_TYPE_A), 0);
	q.edns = false;
	ans = raw_answer(recs, sizeof recs, 1, &alen);
	assert_int_equal(dns_msg_filter_answer(ans, alen, &q, keep_public, NULL, 512, &out, &olen, &fr), 0);
	assert_int_equal(olen, alen - 6);
	assert_true(strict_has_a(out, olen, "9.9.9.9"));
	free(out);
	free(ans);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_query_checks),  cmocka_unit_test(test_upstream_and_filter),
	        cmocka_unit_test(test_answer_addrs),  cmocka_unit_test(test_case_and_bare_errors),
	        cmocka_unit_test(test_cache),         cmocka_unit_test(test_cache_views),
	        cmocka_unit_test(test_view_ttl_offsets),
	        cmocka_unit_test(test_rdata_smuggling),
	        cmocka_unit_test(test_rdata_layouts), cmocka_unit_test(test_trailing_bytes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
