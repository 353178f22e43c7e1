/* Fuzz target: DNS message handling (proxy/dns_msg.c). The input is checked as a query; an accepted
 * query is rebuilt for upstream and answered locally; then the input is also treated as an upstream
 * answer to a fixed query and filtered (forbidden addresses removed, truncated to a small size), and as
 * the name of a query of the engine's own resolver (dns_msg_query_init); an answer that filters is put into
 * the DNS cache and read back aged (dns_cache.c), and the aged copy must filter again (the cache keeps
 * answers re-encoded by ldns: an upstream's pointer into a TTL made an aged copy read differently). */
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
	(void)dns_msg_answer_matches(data, size, &fixed);
	if (dns_msg_filter_answer(data, size, &fixed, keep_odd, NULL, size % 2 ? 512 : 64, &out, &outlen, &fr) == 0) {
		if (!out || outlen < 12 || fr.naddrs > DNS_ANSWER_ADDRS_MAX || (fr.truncated && fr.naddrs))
			abort();
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
				/* the cache keeps (and times) the answer as ldns re-encodes it: an upstream's bytes can
				 * read as other records to the section walker than to ldns (an rdata name running past
				 * its RDLENGTH), so the TTL that counts is the re-encoded one's */
				if (dns_msg_reencode(data, size, &enc, &elen) != 0 || dns_msg_answer_ttl(enc, elen, &ttl) != 0 ||
				    ttl <= 7 ||
				    dns_msg_filter_answer(aged, n, &fixed, keep_odd, NULL, 512, &out, &outlen, &fr) !=
				            0)
					abort();
				free(out);
			}
			free(enc);
			dns_cache_free(c);
		}
	}
	return 0;
}
