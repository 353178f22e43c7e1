/* bench-dns-msg: CPU time of dns_msg_filter_answer (proxy/dns_answer.c) per upstream answer, for a few typical
 * answers, on its two paths: passed on (the upstream's bytes with the client's id: the client asked without
 * EDNS, as the answer) and rebuilt (ldns encodes what it read: the client asked with EDNS, so the OPT
 * differs). The gap is what forwarding only ldns's re-encoding would cost (docs/proxy.md, "Why the fast path
 * stays"); tools/bench-dns.sh measures the whole DNS proxy.
 * usage: bench-dns-msg [ANSWERS]   (default 200000 per answer and path)
 * Exits non-zero if an answer is refused, or a passed-on one differs from the upstream's bytes. */
#include "dns_msg.h"

#include <ldns/ldns.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static bool keep_all(const struct sockaddr *sa, void *arg)
{
	(void)sa;
	(void)arg;
	return true;
}

/* An upstream answer to NAME/TYPE with the records RRS (presentation format), id 0; malloced, or NULL. */
static uint8_t *answer(const char *name, ldns_rr_type type, const char *const *rrs, size_t *len)
{
	ldns_pkt *p = NULL;
	uint8_t *w = NULL;

	if (ldns_pkt_query_new_frm_str(&p, name, type, LDNS_RR_CLASS_IN, LDNS_RD | LDNS_QR | LDNS_RA) != LDNS_STATUS_OK)
		return NULL;
	ldns_pkt_set_id(p, 0);
	for (; *rrs; rrs++) {
		ldns_rr *rr = NULL;
		if (ldns_rr_new_frm_str(&rr, *rrs, 60, NULL, NULL) != LDNS_STATUS_OK) {
			ldns_pkt_free(p);
			return NULL;
		}
		ldns_pkt_push_rr(p, LDNS_SECTION_ANSWER, rr);
	}
	if (ldns_pkt2wire(&w, p, len) != LDNS_STATUS_OK)
		w = NULL;
	ldns_pkt_free(p);
	return w;
}

int main(int argc, char **argv)
{
	static const char *const one_a[] = {"www.example.test. 60 IN A 198.18.1.12", NULL};
	static const char *const cname[] = {"www.example.test. 60 IN CNAME edge.example.test.",
	                                    "edge.example.test. 60 IN A 198.18.1.12",
	                                    "edge.example.test. 60 IN A 198.18.1.13", NULL};
	static const char *const https[] = {"www.example.test. 60 IN HTTPS 1 . alpn=h2", NULL};
	static const struct {
		const char *what;
		ldns_rr_type type;
		const char *const *rrs;
	} cases[] = {
	        {"A (1 record)", LDNS_RR_TYPE_A, one_a},
	        {"CNAME + 2 A", LDNS_RR_TYPE_A, cname},
	        {"HTTPS", LDNS_RR_TYPE_HTTPS, https},
	};
	long n = argc > 1 ? atol(argv[1]) : 200000;

	if (n <= 0) {
		fprintf(stderr, "bench-dns-msg: ANSWERS must be a positive number, not \"%s\"\n", argv[1]);
		return 2;
	}
	printf("%-14s %16s %16s\n", "answer", "passed on ns", "rebuilt ns");
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct dns_query q;
		size_t len;
		uint8_t *ans = answer("www.example.test.", cases[c].type, cases[c].rrs, &len);
		double ns[2];

		if (!ans || dns_msg_query_init(&q, "www.example.test", cases[c].type) != 0) {
			fprintf(stderr, "bench-dns-msg: cannot build the answer \"%s\"\n", cases[c].what);
			return 1;
		}
		q.id = 0;
		for (int rebuilt = 0; rebuilt < 2; rebuilt++) {
			double t0;
			q.edns = rebuilt;
			t0 = cpu_ns();
			for (long i = 0; i < n; i++) {
				struct dns_filter_result fr;
				uint8_t *out = NULL;
				size_t olen = 0;
				if (dns_msg_filter_answer(ans, len, &q, keep_all, NULL, DNS_MSG_MAX, &out, &olen,
				                          &fr) != 0 ||
				    (!rebuilt && (olen != len || memcmp(out, ans, len) != 0))) {
					fprintf(stderr, "bench-dns-msg: the answer \"%s\" was refused or changed\n",
					        cases[c].what);
					return 1;
				}
				free(out);
			}
			ns[rebuilt] = (cpu_ns() - t0) / (double)n;
		}
		printf("%-14s %16.0f %16.0f\n", cases[c].what, ns[0], ns[1]);
		free(ans);
	}
	return 0;
}
