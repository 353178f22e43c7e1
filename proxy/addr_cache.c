/* The session's address cache: what the engine's resolver (resolve.c) answered for a name, kept for the
 * answer's TTL, so a session that opens a connection per request (HTTP/1.0 clients, ab, package
 * managers fetching one file per connection) does not wait for the upstream resolver every time.
 *
 * Why it is policy-safe: it keeps addresses, never decisions. A name is decided before it is looked up
 * here (a denied name is never resolved, cached or not), and every address taken from the cache is
 * checked with policy_decide_addr again by the dial, exactly like a fresh answer, so a live policy
 * change applies at once. Why per session: one session must not learn from the time a request takes
 * which names another session used. TTLs are respected (at most PROXY_ADDR_CACHE_TTL_MAX s; TTL 0 is
 * not kept), failures and empty answers are not kept, and the least recently used entry goes first.
 * The memory is allocated on the first name a session resolves. */
#include <stdlib.h>
#include <string.h>

#include "proxy_int.h"

struct addr_entry {
	char name[POLICY_HOST_MAX + 1]; /* canonical; "" = free */
	uint64_t expires_ms, used_ms;   /* proxy_mono_ms() clock */
	size_t n;
	struct sockaddr_storage addrs[PROXY_RESOLVE_MAX];
};

struct proxy_addr_cache {
	struct addr_entry e[PROXY_ADDR_CACHE_ENTRIES];
};

size_t proxy_addr_cache_get(struct proxy_session *s, const char *name, struct sockaddr_storage *out)
{
	uint64_t now;

	if (!s->addr_cache)
		return 0;
	now = proxy_mono_ms();
	for (size_t i = 0; i < PROXY_ADDR_CACHE_ENTRIES; i++) {
		struct addr_entry *a = &s->addr_cache->e[i];
		if (!a->name[0] || strcmp(a->name, name) != 0)
			continue;
		if (now >= a->expires_ms) {
			a->name[0] = '\0';
			return 0;
		}
		a->used_ms = now;
		memcpy(out, a->addrs, a->n * sizeof *out);
		return a->n;
	}
	return 0;
}

/* Which entry a new name takes: a free one, else an expired one, else the least recently used. */
static uint64_t rank(const struct addr_entry *a, uint64_t now)
{
	if (!a->name[0])
		return 0;
	if (now >= a->expires_ms)
		return 1;
	return 2 + a->used_ms;
}

void proxy_addr_cache_put(struct proxy_session *s, const char *name, const struct sockaddr_storage *addrs, size_t n,
                          uint32_t ttl)
{
	struct addr_entry *victim = NULL;
	uint64_t now;

	if (n == 0 || ttl == 0 || strlen(name) > POLICY_HOST_MAX)
		return;
	if (n > PROXY_RESOLVE_MAX)
		n = PROXY_RESOLVE_MAX;
	if (ttl > PROXY_ADDR_CACHE_TTL_MAX)
		ttl = PROXY_ADDR_CACHE_TTL_MAX;
	if (!s->addr_cache && !(s->addr_cache = calloc(1, sizeof *s->addr_cache)))
		return; /* no memory: no cache, the resolver answers every time */
	now = proxy_mono_ms();
	for (size_t i = 0; i < PROXY_ADDR_CACHE_ENTRIES; i++) {
		struct addr_entry *a = &s->addr_cache->e[i];
		if (a->name[0] && strcmp(a->name, name) == 0) {
			victim = a; /* the same name again (two requests raced): the newer answer */
			break;
		}
		if (!victim || rank(a, now) < rank(victim, now))
			victim = a;
	}
	strcpy(victim->name, name);
	victim->expires_ms = now + (uint64_t)ttl * 1000;
	victim->used_ms = now;
	victim->n = n;
	memcpy(victim->addrs, addrs, n * sizeof *addrs);
}

void proxy_addr_cache_session_free(struct proxy_session *s)
{
	free(s->addr_cache);
	s->addr_cache = NULL;
}
