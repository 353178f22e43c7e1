/* Small ownership helpers shared by all parts: scope-bound cleanup and explicit hand-over. */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A pointer or fd declared with these is released when it leaves scope; steal_* hands ownership on. */
#define cleanup_free __attribute__((cleanup(util_freep)))
#define cleanup_fd __attribute__((cleanup(util_closep)))

static inline void util_freep(void *p)
{
	free(*(void **)p);
}

static inline void util_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
	*fd = -1;
}

static inline void *util_steal_pointer(void *pp)
{
	void **p = pp;
	void *v = *p;
	*p = NULL;
	return v;
}
#define steal_pointer(pp) util_steal_pointer(pp)

static inline int steal_fd(int *fd)
{
	int v = *fd;
	*fd = -1;
	return v;
}

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Copies at most size-1 bytes and always terminates; returns strlen(src) so callers detect truncation. */
static inline size_t util_strlcpy(char *dst, const char *src, size_t size)
{
	size_t n = strlen(src);
	if (size) {
		size_t c = n < size - 1 ? n : size - 1;
		memcpy(dst, src, c);
		dst[c] = '\0';
	}
	return n;
}

/* Copies s (NULL: "") into dst (size > 0 bytes, always terminated) with every byte outside printable
 * ASCII as '?': text from an untrusted source (a sandbox's command line, a host file name) shown on a
 * terminal can then carry no control byte, no C1 control in any encoding (0x9b is CSI on some
 * terminals, U+009B on others) and no bidirectional override. Returns dst. */
static inline char *util_printable(char *dst, size_t size, const char *s)
{
	size_t o = 0;
	for (; s && *s && o + 1 < size; s++)
		dst[o++] = ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) ? '?' : *s;
	dst[o] = '\0';
	return dst;
}

/* Writes v in decimal into the bytes that end just before end (no terminator) and returns where the digits
 * begin: 20 bytes hold any uint64_t. For hot paths where snprintf costs more than the rest (the audit
 * record's numbers, a request head's port). */
static inline char *util_u64_dec(char *end, uint64_t v)
{
	do {
		*--end = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return end;
}
