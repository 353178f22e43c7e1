/* The DNS proxy's answer cache (dns_cache.c): upstream answers by question, TTL-respecting, shared by
 * sessions because it holds no decision (see dns_cache.c for why that is safe). Pure: no I/O, fuzzable. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dns_msg.h"

#define DNS_CACHE_ANSWER_MAX 4096 /* a longer answer (fetched over TCP) is not kept */

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
