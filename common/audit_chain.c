/* Hash chain over audit log lines (SHA-256 via OpenSSL EVP); see audit_chain.h for the format. */
#include "audit_chain.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char zero_hash[AUDIT_HASH_HEX + 1] =
	"0000000000000000000000000000000000000000000000000000000000000000";

void audit_chain_init(struct audit_chain *c)
{
	memcpy(c->prev, zero_hash, sizeof c->prev);
}

/* SHA-256 fetched from the provider once for the process (kept to its end). EVP_sha256() in a digest
 * call makes OpenSSL 3 look the algorithm up again each time, under a lock: 3.6 µs a digest against 0.9
 * (500 bytes, this VM), and every audit record is one digest (issue 16: a quarter of the DNS proxy's CPU
 * per denied query was its audit record). */
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_md; /* owned for the process; NULL: fetch failed, EVP_sha256() each time */

/* One digest context for the process, reset for each digest (EVP_MD_CTX_new and _free each time were a
 * malloc and a free per audit record); under a lock, as threads may seal or verify at once.
 *
 * fork: a child made while another thread held the lock would find it held forever, and its first
 * digest (an audit record) would hang. No process does that today: the writers are the proxy engine
 * (its compile workers never digest, and it never forks), sluice-proxy (no threads, no fork) and
 * sluicectl log verify (no threads); sluiced and the embedded helper never digest, and fork their
 * engine only while single-threaded, or exec (netd/engine.c); the launcher never digests. The
 * handlers below keep it so for any later fork: the lock is taken around fork(), so the child gets
 * it free and the context between two digests. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static EVP_MD_CTX *shared_ctx; /* owned for the process; NULL: not made yet (or could not be) */

static void fork_prepare(void)
{
	pthread_mutex_lock(&ctx_lock);
}

static void fork_release(void)
{
	pthread_mutex_unlock(&ctx_lock);
}

static void sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
	/* before the first digest: a fork earlier finds nothing held. On failure (ENOMEM) a fork during
	 * a digest stays unsafe, as it was: nothing in this module forks. */
	(void)pthread_atfork(fork_prepare, fork_release, fork_release);
}

static int digest(const char *prev, const char *body, size_t len, char out[AUDIT_HASH_HEX + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int ok;

	(void)pthread_once(&sha256_once, sha256_fetch);
	pthread_mutex_lock(&ctx_lock);
	if (!shared_ctx)
		shared_ctx = EVP_MD_CTX_new();
	ok = shared_ctx && EVP_DigestInit_ex2(shared_ctx, sha256_md ? sha256_md : EVP_sha256(), NULL) == 1 &&
	     EVP_DigestUpdate(shared_ctx, prev, AUDIT_HASH_HEX) == 1 && EVP_DigestUpdate(shared_ctx, "\n", 1) == 1 &&
	     EVP_DigestUpdate(shared_ctx, body, len) == 1 && EVP_DigestFinal_ex(shared_ctx, md, &mdlen) == 1 &&
	     mdlen == 32;
	pthread_mutex_unlock(&ctx_lock);
	if (!ok)
		return -EIO;
	for (unsigned i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[AUDIT_HASH_HEX] = '\0';
	return 0;
}

int audit_chain_seal(struct audit_chain *c, const char *body, size_t body_len, char *out)
{
	char h[AUDIT_HASH_HEX + 1];
	char *p = out;

	if (digest(c->prev, body, body_len, h) < 0)
		return -EIO;
	/* ,"prev":"<64 hex>","hash":"<64 hex>"} (no stdio: this runs once per audit record) */
	memcpy(p, ",\"prev\":\"", 9);
	memcpy(p += 9, c->prev, AUDIT_HASH_HEX);
	memcpy(p += AUDIT_HASH_HEX, "\",\"hash\":\"", 10);
	memcpy(p += 10, h, AUDIT_HASH_HEX);
	memcpy(p += AUDIT_HASH_HEX, "\"}", 3);
	memcpy(c->prev, h, sizeof c->prev);
	return 0;
}

static bool is_hex64(const char *s)
{
	for (int i = 0; i < AUDIT_HASH_HEX; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Splits a line into body, prev and hash; false if it is not in the chained format. */
static bool split_line(const char *line, size_t len, size_t *body_len, const char **prev, const char **hash)
{
	if (len <= AUDIT_CHAIN_SUFFIX_LEN || line[0] != '{')
		return false;
	const char *s = line + len - AUDIT_CHAIN_SUFFIX_LEN;
	if (memcmp(s, ",\"prev\":\"", 9) != 0 || memcmp(s + 9 + AUDIT_HASH_HEX, "\",\"hash\":\"", 10) != 0 ||
	    memcmp(s + 19 + 2 * AUDIT_HASH_HEX, "\"}", 2) != 0)
		return false;
	*prev = s + 9;
	*hash = s + 19 + AUDIT_HASH_HEX;
	if (!is_hex64(*prev) || !is_hex64(*hash))
		return false;
	*body_len = len - AUDIT_CHAIN_SUFFIX_LEN;
	return true;
}

enum audit_verify_result audit_chain_verify_line(struct audit_chain *c, const char *line, size_t len,
						 bool first, bool *continued)
{
	const char *prev, *hash;
	size_t body_len;
	char h[AUDIT_HASH_HEX + 1];

	if (!split_line(line, len, &body_len, &prev, &hash))
		return AUDIT_VERIFY_MALFORMED;
	if (digest(prev, line, body_len, h) < 0 || memcmp(h, hash, AUDIT_HASH_HEX) != 0)
		return AUDIT_VERIFY_EDITED;
	if (memcmp(prev, c->prev, AUDIT_HASH_HEX) != 0) {
		if (!first)
			return AUDIT_VERIFY_BROKEN;
		if (continued)
			*continued = true;
	}
	memcpy(c->prev, hash, AUDIT_HASH_HEX);
	return AUDIT_VERIFY_OK;
}

int audit_chain_resume(struct audit_chain *c, int fd)
{
	char buf[65536];
	struct stat st;
	off_t start;
	ssize_t n;

	audit_chain_init(c);
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size == 0)
		return 0;
	start = st.st_size > (off_t)sizeof buf ? st.st_size - (off_t)sizeof buf : 0;
	n = pread(fd, buf, sizeof buf, start);
	if (n < 0)
		return -errno;
	/* the last complete line: ends with '\n'; a torn tail without one is ignored */
	size_t end = (size_t)n;
	while (end > 0 && buf[end - 1] != '\n')
		end--;
	if (end == 0)
		return -EBADMSG;
	end--; /* drop the newline */
	size_t begin = end;
	while (begin > 0 && buf[begin - 1] != '\n')
		begin--;
	if (begin == 0 && start != 0)
		return -EBADMSG; /* a line longer than the window: not ours */
	const char *prev, *hash;
	size_t body_len;
	if (!split_line(buf + begin, end - begin, &body_len, &prev, &hash))
		return -EBADMSG;
	memcpy(c->prev, hash, AUDIT_HASH_HEX);
	c->prev[AUDIT_HASH_HEX] = '\0';
	return 0;
}

bool audit_chain_resync(struct audit_chain *c, const char *line, size_t len)
{
	const char *prev, *hash;
	size_t body_len;

	if (!split_line(line, len, &body_len, &prev, &hash)) {
		audit_chain_init(c);
		return true;
	}
	memcpy(c->prev, hash, AUDIT_HASH_HEX);
	c->prev[AUDIT_HASH_HEX] = '\0';
	return false;
}
