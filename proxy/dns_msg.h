/* DNS message handling for the DNS proxy, with ldns: checking a query from a session, building the
 * query relayed upstream (rebuilt, never the client's bytes), local answers (REFUSED, FORMERR...),
 * and filtering an upstream answer (question must match; addresses the policy forbids are removed;
 * truncation to what the client can take). Pure functions: no I/O, fuzzable.
 *
 * Trust boundary: queries come from a sandbox, answers from the upstream resolver (or a spoofer). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "policy.h"

#define DNS_MSG_MAX   65535
#define DNS_UDP_PLAIN 512
#define DNS_EDNS_SIZE 1232 /* what we advertise and accept at most over UDP */

/* DNS rcodes used here */
#define DNS_RC_NOERROR  0
#define DNS_RC_FORMERR  1
#define DNS_RC_SERVFAIL 2
#define DNS_RC_NXDOMAIN 3
#define DNS_RC_NOTIMP   4
#define DNS_RC_REFUSED  5

#define DNS_TYPE_A    1
#define DNS_TYPE_AAAA 28

struct dns_query {
	uint16_t id;
	uint8_t opcode;
	bool rd, cd, dnssec_ok;
	bool edns;
	uint16_t edns_size;
	bool have_question;
	uint16_t qtype, qclass;
	uint8_t qname_wire[256]; /* the question name as the client sent it (case kept, for its answer) */
	size_t qname_wire_len;
	char name[POLICY_HOST_MAX + 2]; /* dotted, raw bytes (not yet canonical) */
	size_t name_len;
};

/* Checks a query. Returns 0 when it may be decided on, an rcode to answer with (FORMERR for a
 * malformed message, REFUSED for an opcode, class or type not served) when it must be refused, or -1 when it must be
 * dropped without an answer (too short to answer, or a response). *why is a static reason. */
int dns_msg_parse_query(const uint8_t *wire, size_t len, struct dns_query *q, const char **why);

/* Builds a local answer with `rcode` (and the question, when known; an EDNS OPT when the client used
 * EDNS; neither for FORMERR) into buf and returns its length. */
#define DNS_REPLY_RCODE_MAX (12 + 255 + 4 + 11)
size_t dns_msg_reply_rcode_buf(const struct dns_query *q, int rcode, uint8_t buf[DNS_REPLY_RCODE_MAX]);
/* The same, malloced: returns 0 and the message in *out, or -ENOMEM. */
int dns_msg_reply_rcode(const struct dns_query *q, int rcode, uint8_t **out, size_t *outlen);

/* Fills q as a query of our own (the engine's resolver) for the dotted name `name` and qtype: RD, EDNS,
 * class IN. Returns 0, or -EINVAL for a name that is not a valid DNS name. */
int dns_msg_query_init(struct dns_query *q, const char *name, uint16_t qtype);

/* Builds the query sent upstream: same name in lower case (the client's letter case carries nothing
 * upstream), type, class IN, RD, CD and DO as asked, EDNS with our buffer size, id 0 (the relay sets a
 * fresh one). */
int dns_msg_build_upstream(const struct dns_query *q, uint8_t **out, size_t *outlen);

/* True when the answer's question is exactly the query's (name case-insensitively, type, class), read from
 * its own bytes when it is malformed. */
bool dns_msg_answer_matches(const uint8_t *ans, size_t len, const struct dns_query *q);

typedef bool (*dns_addr_keep_fn)(const struct sockaddr *sa, void *arg);

#define DNS_ANSWER_ADDRS_MAX 16

/* An address the answer gives for the question's name, with the time it may be used. */
struct dns_answer_addr {
	struct sockaddr_storage addr; /* AF_INET or AF_INET6, port 0 */
	uint32_t ttl;                 /* the smallest TTL on the way: CNAMEs from the name, then the record */
};

struct dns_filter_result {
	int rcode;
	unsigned kept, stripped; /* A/AAAA records kept / removed */
	char first_addr[64];     /* first address kept ("" if none) */
	bool truncated;
	/* The kept A/AAAA records of the answer section that answer the question: owned by the question's
	 * name or by a name the answer's CNAME chain from it leads to (glue and records for other names do
	 * not count). Direct mode (docs/proxy.md) learns these. Empty when the reply was truncated. */
	struct dns_answer_addr addrs[DNS_ANSWER_ADDRS_MAX];
	unsigned naddrs;
	char bad[96]; /* -EBADMSG: what is wrong with the answer (for the audit record's error) */
};

/* Rewrites an upstream answer for the client: its id, its question as the client spelt it, only A/AAAA
 * records for which keep() says true, EDNS as the client asked, truncated (TC, no records) above maxlen.
 * An error answer (FORMERR, SERVFAIL, NOTIMP, REFUSED) without a question and without records is taken
 * as the answer to q (some servers send a bare header; the id on the relay's socket matched it, and it
 * carries nothing but its rcode). The message sent is either the upstream's bytes (only when every record
 * of them ends where ldns's reading of it ends, so a client reads exactly the records checked) or ldns's
 * encoding of what was checked. Returns 0 and a malloced message; -EBADMSG for an answer to q's question
 * that is malformed (a section or an rdata name running past its end, rdata that ldns reads with other
 * boundaries than its RDLENGTH, a TSIG, a second OPT, or anything ldns cannot read): res->rcode is SERVFAIL
 * and res->bad says why, the caller answers SERVFAIL; -EINVAL for anything that does not answer q (not a
 * response, another question, too short to tell), which the caller ignores. */
int dns_msg_filter_answer(const uint8_t *ans, size_t len, const struct dns_query *q, dns_addr_keep_fn keep, void *arg,
                          size_t maxlen, uint8_t **out, size_t *outlen, struct dns_filter_result *res);

/* For the DNS cache: how long an upstream answer (one question, NOERROR or NXDOMAIN, not truncated) may
 * be kept, in seconds: the smallest TTL of its records (OPT aside), and for a negative answer the SOA's
 * (RFC 2308). -EINVAL for an answer that must not be kept (an error, truncated, malformed, or nothing to
 * say how long it holds). */
int dns_msg_answer_ttl(const uint8_t *ans, size_t len, uint32_t *ttl);
/* Lowers every record's TTL (OPT aside) by age seconds, to 0 at least, in place. -EINVAL if malformed. */
int dns_msg_age_answer(uint8_t *ans, size_t len, uint32_t age);
/* Where dns_msg_age_answer would lower TTLs in ans: the offset of every record's TTL (OPT aside), in order,
 * into offs (at most max). Returns how many, or -EINVAL if malformed or there are more than max. For a
 * message that is aged again and again (a cached view): dns_msg_age_at then does what dns_msg_age_answer
 * does without walking the message again. */
int dns_msg_ttl_offsets(const uint8_t *ans, size_t len, uint16_t *offs, unsigned max);
/* Lowers the TTL at each of the n offsets (from dns_msg_ttl_offsets of the same bytes) by age, to 0 at least. */
void dns_msg_age_at(uint8_t *ans, const uint16_t *offs, unsigned n, uint32_t age);
/* For the DNS cache: the answer as ldns writes it again (*out malloced, *outlen bytes). Aging rewrites TTL
 * bytes in place, and an upstream's compression pointer may aim into a TTL (a name read through the
 * header and a record's TTL parses one way fresh and another way aged); ldns's own pointers aim only at
 * names it wrote, so the re-encoded answer parses the same at every age. -EINVAL if ldns cannot read it,
 * -ENOMEM. */
int dns_msg_reencode(const uint8_t *ans, size_t len, uint8_t **out, size_t *outlen);

/* "A", "AAAA", "TYPE65"... into buf. */
const char *dns_msg_type_name(uint16_t qtype, char *buf, size_t len);
