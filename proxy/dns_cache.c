/* The DNS proxy's answer cache (opt-in: proxy_config.dns_cache_entries). It keeps upstream answers to the
 * queries the relay asked, by question (name in lower case, type, and the CD and DO bits that shaped the
 * answer), for as long as their TTLs say (at most DNS_CACHE_TTL_MAX), and hands out copies with the TTLs
 * lowered by their age.
 *
 * Why it is safe to share between sessions: it holds upstream answers only, never a decision. dns.c
 * decides every query with the asking session's policy first (a denied name never reaches the cache,
 * so it is never answered from it, and nothing is stored for it), and a cached answer then goes through
 * the same filter as a fresh one with that session's policy (forbidden addresses removed, the client's
 * id, question spelling and EDNS); every query still gets its audit record. One engine thread: no locks.
 * Least recently used entries go first when it is full.
 *
 * Views (dns_cache.h): the filter's output for a policy is kept with the entry, so that a hit is a lookup,
 * a copy and a patch of the id and TTLs (issue 16: filtering the cached answer again, ldns reading it and
 * malloc, was a quarter of the CPU of a cached answer). A view is the filter's own output, made from the
 * entry's bytes by dns_msg_filter_answer with the asking session's policy; it is keyed by the policy's
 * generation, which no other policy ever has (a session given a new policy gets a new one), and by every
 * property of the query the output depends on, so it is exactly what filtering again would give. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "dns_cache.h"

#define DNS_CACHE_TTL_MAX 3600 /* seconds: a longer TTL is cut to this */
#define DNS_CACHE_KEY_MAX (256 + 3)
#define DNS_VIEW_TTLS     32 /* TTL offsets kept per view; a view with more records is aged by a walk */

struct dns_cache_view {
	uint64_t policy_gen;
	size_t maxlen;
	bool rd, edns;
	size_t qname_len;
	uint8_t qname[256]; /* the question as the client spelt it */
	uint32_t aged_s;    /* the entry's age its TTLs were lowered by when it was filtered */
	int rcode;
	unsigned kept, stripped, naddrs;
	bool truncated;
	char first_addr[64];
	int nttl;                      /* TTLs at ttl_off (dns_msg_ttl_offsets), or -1: aged by a walk */
	uint16_t ttl_off[DNS_VIEW_TTLS];
	struct dns_answer_addr *addrs; /* naddrs, in this allocation */
	size_t len;
	uint8_t *msg; /* len bytes, in this allocation */
};

struct dns_cache_entry {
	TAILQ_ENTRY(dns_cache_entry) lru; /* most recently used first */
	struct dns_cache_view *views[DNS_CACHE_VIEWS]; /* owned; NULL: free slot */
	unsigned next_view;                            /* the slot the next view replaces when all are taken */
	struct dns_cache_entry *next;     /* in its hash bucket */
	uint32_t hash;
	size_t keylen;
	uint8_t key[DNS_CACHE_KEY_MAX];
	uint64_t stored_ms, expires_ms;
	size_t len;
	uint8_t msg[]; /* the upstream's answer as ldns re-encoded it (checked by dns_msg_filter_answer first) */
};

struct dns_cache {
	unsigned max, n;
	unsigned nbuckets;                /* a power of two */
	struct dns_cache_entry **buckets; /* owned array of owned chains */
	TAILQ_HEAD(dns_cache_lru, dns_cache_entry) lru;
};

static size_t make_key(const struct dns_query *q, uint8_t key[DNS_CACHE_KEY_MAX])
{
	size_t n = q->qname_wire_len;

	if (n == 0 || n > 256)
		return 0;
	for (size_t i = 0; i < n; i++)
		key[i] = q->qname_wire[i] >= 'A' && q->qname_wire[i] <= 'Z' ? (uint8_t)(q->qname_wire[i] + 32)
		                                                            : q->qname_wire[i];
	key[n++] = (uint8_t)(q->qtype >> 8);
	key[n++] = (uint8_t)q->qtype;
	key[n++] = (uint8_t)((q->cd ? 1 : 0) | (q->dnssec_ok ? 2 : 0));
	return n;
}

static uint32_t hash_key(const uint8_t *k, size_t n)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ k[i]) * 16777619u;
	return h;
}

struct dns_cache *dns_cache_new(unsigned max)
{
	struct dns_cache *c = calloc(1, sizeof *c);

	if (!c)
		return NULL;
	c->max = max;
	c->nbuckets = 64;
	while (c->nbuckets < max && c->nbuckets < (1u << 20))
		c->nbuckets <<= 1;
	c->buckets = calloc(c->nbuckets, sizeof *c->buckets);
	if (!c->buckets) {
		free(c);
		return NULL;
	}
	TAILQ_INIT(&c->lru);
	return c;
}

static void entry_remove(struct dns_cache *c, struct dns_cache_entry *e)
{
	struct dns_cache_entry **p = &c->buckets[e->hash & (c->nbuckets - 1)];
	while (*p != e)
		p = &(*p)->next;
	*p = e->next;
	TAILQ_REMOVE(&c->lru, e, lru);
	c->n--;
	for (unsigned i = 0; i < DNS_CACHE_VIEWS; i++)
		free(e->views[i]);
	free(e);
}

void dns_cache_free(struct dns_cache *c)
{
	struct dns_cache_entry *e;

	if (!c)
		return;
	while ((e = TAILQ_FIRST(&c->lru)) != NULL)
		entry_remove(c, e);
	free(c->buckets);
	free(c);
}

static struct dns_cache_entry *find(struct dns_cache *c, const uint8_t *key, size_t keylen, uint32_t h)
{
	for (struct dns_cache_entry *e = c->buckets[h & (c->nbuckets - 1)]; e; e = e->next)
		if (e->hash == h && e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
			return e;
	return NULL;
}

/* The live entry for q (an expired one is dropped), or NULL. */
static struct dns_cache_entry *lookup(struct dns_cache *c, const struct dns_query *q, uint64_t now_ms)
{
	uint8_t key[DNS_CACHE_KEY_MAX];
	size_t keylen = make_key(q, key);
	struct dns_cache_entry *e;

	if (!c || !keylen)
		return NULL;
	e = find(c, key, keylen, hash_key(key, keylen));
	if (e && now_ms >= e->expires_ms) {
		entry_remove(c, e);
		return NULL;
	}
	return e;
}

static void touch(struct dns_cache *c, struct dns_cache_entry *e)
{
	TAILQ_REMOVE(&c->lru, e, lru);
	TAILQ_INSERT_HEAD(&c->lru, e, lru);
}

size_t dns_cache_get_ticket(struct dns_cache *c, const struct dns_query *q, uint64_t now_ms, uint8_t *buf,
                            size_t buflen, struct dns_cache_ticket *t)
{
	struct dns_cache_entry *e = lookup(c, q, now_ms);

	if (!e || e->len > buflen)
		return 0;
	memcpy(buf, e->msg, e->len);
	if (dns_msg_age_answer(buf, e->len, (uint32_t)((now_ms - e->stored_ms) / 1000)) != 0) {
		entry_remove(c, e); /* cannot happen: it was walked when stored */
		return 0;
	}
	touch(c, e);
	if (t) {
		t->stored_ms = e->stored_ms;
		t->now_ms = now_ms;
	}
	return e->len;
}

size_t dns_cache_get(struct dns_cache *c, const struct dns_query *q, uint64_t now_ms, uint8_t *buf, size_t buflen)
{
	return dns_cache_get_ticket(c, q, now_ms, buf, buflen, NULL);
}

static bool view_matches(const struct dns_cache_view *v, const struct dns_query *q, uint64_t policy_gen,
                         size_t maxlen)
{
	return v && v->policy_gen == policy_gen && v->maxlen == maxlen && v->rd == q->rd && v->edns == q->edns &&
	       v->qname_len == q->qname_wire_len && memcmp(v->qname, q->qname_wire, q->qname_wire_len) == 0;
}

void dns_cache_put_view(struct dns_cache *c, const struct dns_query *q, const struct dns_cache_ticket *t,
                        uint64_t policy_gen, size_t maxlen, const uint8_t *msg, size_t len,
                        const struct dns_filter_result *fr)
{
	struct dns_cache_entry *e = lookup(c, q, t->now_ms);
	struct dns_cache_view *v;
	unsigned slot;

	if (!e || e->stored_ms != t->stored_ms || len > DNS_CACHE_ANSWER_MAX || len < 12 ||
	    fr->naddrs > DNS_ANSWER_ADDRS_MAX || q->qname_wire_len > sizeof v->qname)
		return;
	for (slot = 0; slot < DNS_CACHE_VIEWS; slot++)
		if (!e->views[slot] || view_matches(e->views[slot], q, policy_gen, maxlen))
			break;
	if (slot == DNS_CACHE_VIEWS)
		slot = e->next_view++ % DNS_CACHE_VIEWS;
	v = malloc(sizeof *v + fr->naddrs * sizeof *v->addrs + len);
	if (!v)
		return;
	free(e->views[slot]);
	e->views[slot] = v;
	v->policy_gen = policy_gen;
	v->maxlen = maxlen;
	v->rd = q->rd;
	v->edns = q->edns;
	v->qname_len = q->qname_wire_len;
	memcpy(v->qname, q->qname_wire, q->qname_wire_len);
	v->aged_s = (uint32_t)((t->now_ms - e->stored_ms) / 1000);
	v->rcode = fr->rcode;
	v->kept = fr->kept;
	v->stripped = fr->stripped;
	v->naddrs = fr->naddrs;
	v->truncated = fr->truncated;
	memcpy(v->first_addr, fr->first_addr, sizeof v->first_addr);
	v->addrs = (struct dns_answer_addr *)(v + 1);
	memcpy(v->addrs, fr->addrs, fr->naddrs * sizeof *v->addrs);
	v->len = len;
	v->msg = (uint8_t *)(v->addrs + fr->naddrs);
	memcpy(v->msg, msg, len);
	/* where its TTLs are, so that each hit ages it without walking it again (the bytes never change) */
	v->nttl = dns_msg_ttl_offsets(v->msg, len, v->ttl_off, DNS_VIEW_TTLS);
	if (v->nttl < 0)
		v->nttl = -1;
}

size_t dns_cache_get_view(struct dns_cache *c, const struct dns_query *q, uint64_t policy_gen, size_t maxlen,
                          uint64_t now_ms, uint8_t *buf, size_t buflen, struct dns_filter_result *fr)
{
	struct dns_cache_entry *e = lookup(c, q, now_ms);
	const struct dns_cache_view *v = NULL;
	uint32_t age, more;

	if (!e)
		return 0;
	for (unsigned i = 0; i < DNS_CACHE_VIEWS && !v; i++)
		if (view_matches(e->views[i], q, policy_gen, maxlen))
			v = e->views[i];
	age = (uint32_t)((now_ms - e->stored_ms) / 1000);
	if (!v || v->len > buflen || age < v->aged_s)
		return 0;
	more = age - v->aged_s;
	memcpy(buf, v->msg, v->len);
	buf[0] = (uint8_t)(q->id >> 8);
	buf[1] = (uint8_t)q->id;
	if (more && v->nttl >= 0)
		dns_msg_age_at(buf, v->ttl_off, (unsigned)v->nttl, more);
	else if (more && dns_msg_age_answer(buf, v->len, more) != 0)
		return 0; /* cannot happen: the filter's output is walked by the client's reading */
	memset(fr, 0, offsetof(struct dns_filter_result, addrs));
	fr->rcode = v->rcode;
	fr->kept = v->kept;
	fr->stripped = v->stripped;
	fr->truncated = v->truncated;
	memcpy(fr->first_addr, v->first_addr, sizeof fr->first_addr);
	fr->naddrs = v->naddrs;
	for (unsigned i = 0; i < v->naddrs; i++) {
		fr->addrs[i] = v->addrs[i];
		fr->addrs[i].ttl = v->addrs[i].ttl > more ? v->addrs[i].ttl - more : 0;
	}
	fr->bad[0] = '\0';
	touch(c, e);
	return v->len;
}

void dns_cache_put(struct dns_cache *c, const struct dns_query *q, const uint8_t *ans, size_t len, uint64_t now_ms)
{
	uint8_t key[DNS_CACHE_KEY_MAX];
	size_t keylen = make_key(q, key);
	uint32_t h, ttl;
	struct dns_cache_entry *e;
	uint8_t *enc = NULL;

	if (!c || !keylen || len > DNS_CACHE_ANSWER_MAX || dns_msg_answer_ttl(ans, len, &ttl) != 0 || ttl == 0)
		return;
	/* kept as ldns writes it, so that aging its TTLs cannot change how its names read (dns_msg.h) */
	if (dns_msg_reencode(ans, len, &enc, &len) != 0 || len > DNS_CACHE_ANSWER_MAX ||
	    dns_msg_answer_ttl(enc, len, &ttl) != 0 || ttl == 0) {
		free(enc);
		return;
	}
	ans = enc;
	if (ttl > DNS_CACHE_TTL_MAX)
		ttl = DNS_CACHE_TTL_MAX;
	h = hash_key(key, keylen);
	if ((e = find(c, key, keylen, h)) != NULL)
		entry_remove(c, e);
	if (c->n >= c->max && !TAILQ_EMPTY(&c->lru))
		entry_remove(c, TAILQ_LAST(&c->lru, dns_cache_lru));
	e = malloc(sizeof *e + len);
	if (!e) {
		free(enc);
		return;
	}
	memset(e->views, 0, sizeof e->views);
	e->next_view = 0;
	e->hash = h;
	e->keylen = keylen;
	memcpy(e->key, key, keylen);
	e->stored_ms = now_ms;
	e->expires_ms = now_ms + (uint64_t)ttl * 1000;
	e->len = len;
	memcpy(e->msg, ans, len);
	free(enc);
	e->next = c->buckets[h & (c->nbuckets - 1)];
	c->buckets[h & (c->nbuckets - 1)] = e;
	TAILQ_INSERT_HEAD(&c->lru, e, lru);
	c->n++;
}
