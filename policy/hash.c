/* The keyed hash for the policy library's hash tables (the matcher's edge table, jsonpos's path map).
 *
 * Trust boundary: the keys of those tables come from policy files a project controls and from host
 * names a sandboxed program sends. With a fixed, public hash an attacker can pick names that all land
 * in one bucket and make loading and lookups quadratic (measured: 40,000 such names took 16 s to
 * compile). SipHash-1-3 with a random per-process key makes the bucket of a name unpredictable. */
#include "policy_int.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t hash_k0, hash_k1;
static pthread_once_t hash_once = PTHREAD_ONCE_INIT;

static void hash_init(void)
{
	uint64_t k[2];

	if (getrandom(k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
		/* entropy pool not ready (early boot): a weaker key still beats a public constant */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		k[0] = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&ts;
		k[1] = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&hash_k0 ^ (uint64_t)time(NULL);
	}
	hash_k0 = k[0];
	hash_k1 = k[1];
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                             \
	do {                                                                                                 \
		v0 += v1;                                                                                    \
		v1 = ROTL(v1, 13);                                                                           \
		v1 ^= v0;                                                                                    \
		v0 = ROTL(v0, 32);                                                                           \
		v2 += v3;                                                                                    \
		v3 = ROTL(v3, 16);                                                                           \
		v3 ^= v2;                                                                                    \
		v0 += v3;                                                                                    \
		v3 = ROTL(v3, 21);                                                                           \
		v3 ^= v0;                                                                                    \
		v2 += v1;                                                                                    \
		v1 = ROTL(v1, 17);                                                                           \
		v1 ^= v2;                                                                                    \
		v2 = ROTL(v2, 32);                                                                           \
	} while (0)

uint32_t policy_hash(const void *data, size_t len, uint32_t tweak)
{
	const uint8_t *in = data;
	uint64_t k0, k1, v0, v1, v2, v3, b = (uint64_t)len << 56;
	size_t i = 0;

	pthread_once(&hash_once, hash_init);
	k0 = hash_k0 ^ tweak;
	k1 = hash_k1;
	v0 = 0x736f6d6570736575ULL ^ k0;
	v1 = 0x646f72616e646f6dULL ^ k1;
	v2 = 0x6c7967656e657261ULL ^ k0;
	v3 = 0x7465646279746573ULL ^ k1;
	for (; i + 8 <= len; i += 8) {
		uint64_t m = 0;
		for (int j = 7; j >= 0; j--)
			m = m << 8 | in[i + (size_t)j];
		v3 ^= m;
		SIPROUND;
		v0 ^= m;
	}
	for (size_t j = 0; i + j < len; j++)
		b |= (uint64_t)in[i + j] << (8 * j);
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	b = v0 ^ v1 ^ v2 ^ v3;
	return (uint32_t)(b ^ (b >> 32));
}
