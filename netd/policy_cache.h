/* A small cache of compiled policies, keyed by every byte that decided the compile. sluiced compiles each
 * session's policy under the organisation layer (compile.c) and its proxy engine compiles sluiced's
 * serialisation again (engine_queue.c); most sessions of a host send the same policy text, so both keep
 * what they compiled and a session with the same key gets the same compiled object again, without a
 * thread or a compile. Safe because a compiled policy is immutable once built (every accessor of
 * policy.h takes it const; it is shared by reference count across threads already): a session that
 * changes its policy gets a new object, never a changed one.
 *
 * The key is compared byte for byte (its hash only picks the candidates), so a changed policy can never
 * be served an old object; what else influences a compile (the organisation layer's files, a SIGHUP) is
 * the caller's to put into the key or to answer with netd_policy_cache_clear. Bounded: at most
 * max_entries entries and max_bytes of keys and serialisations together, least recently used evicted
 * first; a key longer than a quarter of max_bytes is not kept, nor a policy that carries credentials (their
 * secrets must not outlive their sessions). Not thread-safe: one loop uses it. */
#ifndef SLUICE_NETD_POLICY_CACHE_H
#define SLUICE_NETD_POLICY_CACHE_H

#include <stdbool.h>
#include <stddef.h>

struct policy;
struct netd_policy_cache;

/* NULL when out of memory. */
struct netd_policy_cache *netd_policy_cache_new(unsigned max_entries, size_t max_bytes);
void netd_policy_cache_free(struct netd_policy_cache *c); /* NULL is a no-op */

/* A new reference to the policy compiled for exactly key[0..len), or NULL. *json (may be NULL) is set
 * to the serialisation kept with it (borrowed: valid until the cache is next changed; NULL if none). */
struct policy *netd_policy_cache_get(struct netd_policy_cache *c, const void *key, size_t len, const char **json);

/* Keeps p (takes a reference of its own) and a copy of json (NULL: none) under a copy of key, replacing
 * an entry of the same key. Nothing happens when it cannot be kept (too long, out of memory). */
void netd_policy_cache_put(struct netd_policy_cache *c, const void *key, size_t len, struct policy *p,
                           const char *json);

/* Forgets every entry (a compile input outside the key changed). */
void netd_policy_cache_clear(struct netd_policy_cache *c);

/* For tests and metrics: entries kept, lookups answered and not answered since the start. */
unsigned netd_policy_cache_size(const struct netd_policy_cache *c);
unsigned long netd_policy_cache_hits(const struct netd_policy_cache *c);
unsigned long netd_policy_cache_misses(const struct netd_policy_cache *c);

#endif
