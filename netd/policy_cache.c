/* Compiled policies kept for sessions with the same policy (policy_cache.h). A short list in
 * recency order: a handful of entries, searched by hash and then compared in full. */
#include "policy_cache.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

struct entry {
	struct entry *next;    /* most recently used first */
	uint64_t hash;
	size_t len;            /* of key */
	size_t bytes;          /* len + the serialisation's, counted against max_bytes */
	char *key;             /* owned */
	char *json;            /* owned, or NULL */
	struct policy *policy; /* owned reference */
};

struct netd_policy_cache {
	struct entry *head;    /* owned */
	unsigned n, max_entries;
	size_t bytes, max_bytes;
	unsigned long hits, misses;
};

static uint64_t hash_of(const void *key, size_t len)
{
	const unsigned char *p = key;
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a: picks candidates only, every hit is compared in full */

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static void entry_free(struct entry *e)
{
	free(e->key);
	free(e->json);
	policy_unref(e->policy);
	free(e);
}

struct netd_policy_cache *netd_policy_cache_new(unsigned max_entries, size_t max_bytes)
{
	struct netd_policy_cache *c = calloc(1, sizeof *c);

	if (!c)
		return NULL;
	c->max_entries = max_entries;
	c->max_bytes = max_bytes;
	return c;
}

void netd_policy_cache_clear(struct netd_policy_cache *c)
{
	if (!c)
		return;
	for (struct entry *e = c->head, *next; e; e = next) {
		next = e->next;
		entry_free(e);
	}
	c->head = NULL;
	c->n = 0;
	c->bytes = 0;
}

void netd_policy_cache_free(struct netd_policy_cache *c)
{
	netd_policy_cache_clear(c);
	free(c);
}

/* The entry of key, moved to the front; NULL if none. */
static struct entry *find(struct netd_policy_cache *c, const void *key, size_t len)
{
	uint64_t h = hash_of(key, len);

	for (struct entry **pp = &c->head, *e; (e = *pp); pp = &e->next) {
		if (e->hash != h || e->len != len || memcmp(e->key, key, len) != 0)
			continue;
		*pp = e->next;
		e->next = c->head;
		c->head = e;
		return e;
	}
	return NULL;
}

struct policy *netd_policy_cache_get(struct netd_policy_cache *c, const void *key, size_t len, const char **json)
{
	struct entry *e = c ? find(c, key, len) : NULL;

	if (json)
		*json = e ? e->json : NULL;
	if (!c)
		return NULL;
	if (!e) {
		c->misses++;
		return NULL;
	}
	c->hits++;
	return policy_ref(e->policy);
}

static void remove_entry(struct netd_policy_cache *c, struct entry *e)
{
	for (struct entry **pp = &c->head; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	c->n--;
	c->bytes -= e->bytes;
	entry_free(e);
}

void netd_policy_cache_put(struct netd_policy_cache *c, const void *key, size_t len, struct policy *p,
                           const char *json)
{
	size_t jlen = json ? strlen(json) : 0;
	struct entry *e;

	if (!c || !p || c->max_entries == 0 || len + jlen > c->max_bytes / 4)
		return;
	/* HTTPS inspection's credentials: their secrets (in the compiled object, its text and its
	 * serialisation) must not outlive the sessions that use them; every launch's text differs anyway (its
	 * placeholders are random), so keeping one would save nothing */
	if (policy_credential_count(p) > 0)
		return;
	if ((e = find(c, key, len)))
		remove_entry(c, e); /* a compile of the same input again (begun before the first was kept) */
	if (!(e = calloc(1, sizeof *e)) || !(e->key = malloc(len ? len : 1)) || (json && !(e->json = strdup(json)))) {
		if (e) {
			free(e->key);
			free(e);
		}
		return;
	}
	memcpy(e->key, key, len);
	e->len = len;
	e->hash = hash_of(key, len);
	e->bytes = len + jlen;
	e->policy = policy_ref(p);
	/* the least recently used go until the new one fits */
	while (c->head && (c->n >= c->max_entries || c->bytes + e->bytes > c->max_bytes)) {
		struct entry *last = c->head;
		while (last->next)
			last = last->next;
		remove_entry(c, last);
	}
	e->next = c->head;
	c->head = e;
	c->n++;
	c->bytes += e->bytes;
}

unsigned netd_policy_cache_size(const struct netd_policy_cache *c)
{
	return c ? c->n : 0;
}

unsigned long netd_policy_cache_hits(const struct netd_policy_cache *c)
{
	return c ? c->hits : 0;
}

unsigned long netd_policy_cache_misses(const struct netd_policy_cache *c)
{
	return c ? c->misses : 0;
}
