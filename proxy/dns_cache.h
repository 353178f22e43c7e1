/* The DNS proxy's answer cache (dns_cache.c): upstream answers by question, TTL-respecting, shared by
 * sessions because it holds no decision (see dns_cache.c for why that is safe), and with each its copies
 * already filtered for a policy (views), keyed by the policy's generation. Pure: no I/O, fuzzable. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dns_msg.h"

#define DNS_CACHE_ANSWER_MAX 4096 /* a longer answer (fetched over TCP) is not kept */
#define DNS_CACHE_VIEWS      4    /* filtered copies kept per answer; when all are taken, they make way in turn */

struct dns_cache;

/* A cache of at most max entries. NULL on allocation failure. */
struct dns_cache *dns_cache_new(unsigned max);
void dns_cache_free(struct dns_cache *c); /* NULL no-op */
/* Keeps the upstream's answer `ans` to q (checked by dns_msg_filter_answer first) for its TTL (at most an
 * hour); answers that must not be kept (errors, truncated, no TTL) are ignored. */
void dns_cache_put(struct dns_cache *c, const struct dns_query *q, const uint8_t *ans, size_t len, uint64_t now_ms);
/* On a hit, copies the kept answer to q into buf (buflen at least DNS_CACHE_ANSWER_MAX) with every TTL
 * lowered by its age and returns its length; 0 on a miss or an expired entry (then dropped). The copy is
 * the upstream's answer: filter it for the client like a fresh one. */
size_t dns_cache_get(struct dns_cache *c, const struct dns_query *q, uint64_t now_ms, uint8_t *buf, size_t buflen);

/* Identifies the copy dns_cache_get handed out (its entry and the time it was aged to), for
 * dns_cache_put_view. */
struct dns_cache_ticket {
	uint64_t stored_ms, now_ms;
};
/* dns_cache_get, and fills *t on a hit. */
size_t dns_cache_get_ticket(struct dns_cache *c, const struct dns_query *q, uint64_t now_ms, uint8_t *buf,
                            size_t buflen, struct dns_cache_ticket *t);

/* Views: the answer as dns_msg_filter_answer rewrote it for one client, so that the next client with the
 * same policy and the same kind of query is answered with a copy (its id and TTLs patched) instead of
 * filtering again. A view is keyed by everything the filter's output depends on: the policy's generation
 * (proxy_session.policy_gen: a new one for every policy given to a session, never reused, so a view made
 * under one policy is never served under another, nor after the session's policy changed), maxlen, the
 * question as the client spelt it (exact bytes), RD and whether the client used EDNS (CD, DO and the type
 * are the entry's own key). It lives with its entry: gone when the entry's TTL ends or it is evicted.
 *
 * Keeps msg/len, the filter's output for q of the copy dns_cache_get_ticket handed out with *t (and not a
 * fresh upstream answer: its bytes may not be the walker's, see dns_msg_reencode), and *fr, the filter's
 * result. Ignored if that entry is gone or was replaced, or the message is too long. */
void dns_cache_put_view(struct dns_cache *c, const struct dns_query *q, const struct dns_cache_ticket *t,
                        uint64_t policy_gen, size_t maxlen, const uint8_t *msg, size_t len,
                        const struct dns_filter_result *fr);
/* On a hit, copies the view for q, policy_gen and maxlen into buf (buflen at least DNS_CACHE_ANSWER_MAX)
 * with q's id and every TTL lowered by the entry's age (as a fresh filter of dns_cache_get's copy would
 * give them), fills *fr as the filter did (the addresses' TTLs aged too) and returns the length; 0 when
 * there is no such view (or the entry expired: then dropped). */
size_t dns_cache_get_view(struct dns_cache *c, const struct dns_query *q, uint64_t policy_gen, size_t maxlen,
                          uint64_t now_ms, uint8_t *buf, size_t buflen, struct dns_filter_result *fr);
