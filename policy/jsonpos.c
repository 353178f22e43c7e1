/* Source positions for JSON values.
 *
 * json-c parses policy files but keeps no line numbers, and every policy error and every decision
 * must name file:line:col. This scanner walks text that json-c has already accepted and records
 * where each value starts, keyed by its path ("/allow/3/ports/0"). It validates nothing json-c does
 * not, with one addition: it refuses duplicate keys in an object, which json-c would silently
 * resolve to the last one (a second "deny" key must not quietly replace the first). */
#include "jsonpos.h"
#include "policy_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jpos_entry {
	char *path; /* in the map's arena */
	uint32_t hash;
	unsigned line, col;
};

struct jpos {
	struct jpos_entry *slots; /* owned (a bulk array); open addressing */
	size_t cap, n;
	struct policy_arena paths; /* owns every entry's path: one allocation per MiB, not one per value */
};

struct scanner {
	const char *s;
	size_t len, off;
	unsigned line;
	size_t line_start;
	struct jpos *map;
	int depth;
	int unrecorded; /* > 0 while inside a value whose path does not fit: nothing recorded there */
	char dup_path[256];
	unsigned dup_line, dup_col;
};

/* Keyed: paths carry the keys of a (possibly hostile) policy file (see hash.c). */
static uint32_t hash_str(const char *s)
{
	return policy_hash(s, strlen(s), 0);
}

static int map_grow(struct jpos *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64;
	struct jpos_entry *ns = policy_bulk_calloc(ncap, sizeof *ns);

	if (!ns)
		return -ENOMEM;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].path)
			continue;
		size_t j = m->slots[i].hash & (ncap - 1);
		while (ns[j].path)
			j = (j + 1) & (ncap - 1);
		ns[j] = m->slots[i];
	}
	policy_bulk_free(m->slots);
	m->slots = ns;
	m->cap = ncap;
	return 0;
}

/* Inserts path; returns 1 if it was already there, 0 if inserted, -ENOMEM. */
static int map_put(struct jpos *m, const char *path, unsigned line, unsigned col)
{
	uint32_t h = hash_str(path);
	size_t j;

	if ((m->n + 1) * 2 > m->cap && map_grow(m) < 0)
		return -ENOMEM;
	for (j = h & (m->cap - 1); m->slots[j].path; j = (j + 1) & (m->cap - 1))
		if (m->slots[j].hash == h && strcmp(m->slots[j].path, path) == 0)
			return 1;
	m->slots[j].path = policy_arena_strndup(&m->paths, path, strlen(path));
	if (!m->slots[j].path)
		return -ENOMEM;
	m->slots[j].hash = h;
	m->slots[j].line = line;
	m->slots[j].col = col;
	m->n++;
	return 0;
}

bool jpos_find(const struct jpos *m, const char *path, unsigned *line, unsigned *col)
{
	uint32_t h;

	if (!m || !m->cap)
		return false;
	h = hash_str(path);
	for (size_t j = h & (m->cap - 1); m->slots[j].path; j = (j + 1) & (m->cap - 1)) {
		if (m->slots[j].hash == h && strcmp(m->slots[j].path, path) == 0) {
			*line = m->slots[j].line;
			*col = m->slots[j].col;
			return true;
		}
	}
	return false;
}

void jpos_free(struct jpos *m)
{
	if (!m)
		return;
	policy_arena_release(&m->paths);
	policy_bulk_free(m->slots);
	free(m);
}

void jpos_offset_to_linecol(const char *s, size_t off, unsigned *line, unsigned *col)
{
	unsigned l = 1;
	size_t start = 0;

	for (size_t i = 0; i < off && s[i]; i++) {
		if (s[i] == '\n') {
			l++;
			start = i + 1;
		}
	}
	*line = l;
	*col = (unsigned)(off - start + 1);
}

static void advance(struct scanner *sc)
{
	if (sc->s[sc->off] == '\n') {
		sc->line++;
		sc->line_start = sc->off + 1;
	}
	sc->off++;
}

static void skip_ws(struct scanner *sc)
{
	while (sc->off < sc->len) {
		char c = sc->s[sc->off];
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			advance(sc);
		} else if (c == '/' && sc->off + 1 < sc->len && sc->s[sc->off + 1] == '/') {
			while (sc->off < sc->len && sc->s[sc->off] != '\n')
				advance(sc);
		} else if (c == '/' && sc->off + 1 < sc->len && sc->s[sc->off + 1] == '*') {
			advance(sc);
			advance(sc);
			while (sc->off + 1 < sc->len && !(sc->s[sc->off] == '*' && sc->s[sc->off + 1] == '/'))
				advance(sc);
			if (sc->off + 1 < sc->len) {
				advance(sc);
				advance(sc);
			} else {
				sc->off = sc->len;
			}
		} else {
			break;
		}
	}
}

static int hex4(const char *s, size_t avail, unsigned *v)
{
	*v = 0;
	if (avail < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
		if (d > 15)
			return -1;
		*v = *v << 4 | d;
	}
	return 0;
}

/* Appends code point cp as UTF-8 (U+FFFD for what is not a scalar value). */
static void put_utf8(char *out, size_t outlen, size_t *o, unsigned cp)
{
	char u[4];
	size_t n;

	if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		cp = 0xfffd;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
		u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	for (size_t i = 0; i < n && *o + 1 < outlen; i++)
		out[(*o)++] = u[i];
}

/* Scans a string starting at '"'; writes up to outlen-1 bytes of its decoded content into out, escapes
 * decoded as json-c decodes them (so "\u0064eny" and "deny" are the same key, as they are to json-c). */
static int scan_string(struct scanner *sc, char *out, size_t outlen)
{
	size_t o = 0;

	if (sc->off >= sc->len || (sc->s[sc->off] != '"' && sc->s[sc->off] != '\''))
		return -EINVAL;
	char q = sc->s[sc->off];
	advance(sc);
	while (sc->off < sc->len && sc->s[sc->off] != q) {
		if (sc->s[sc->off] == '\\' && sc->off + 1 < sc->len) {
			char e = sc->s[sc->off + 1];
			unsigned cp, lo;
			advance(sc);
			advance(sc);
			if (!out)
				continue;
			if (e == 'u' && hex4(sc->s + sc->off, sc->len - sc->off, &cp) == 0) {
				for (int i = 0; i < 4; i++)
					advance(sc);
				/* a surrogate pair: \uD8xx\uDCxx */
				if (cp >= 0xd800 && cp <= 0xdbff && sc->off + 6 <= sc->len && sc->s[sc->off] == '\\' &&
				    sc->s[sc->off + 1] == 'u' && hex4(sc->s + sc->off + 2, 4, &lo) == 0 && lo >= 0xdc00 &&
				    lo <= 0xdfff) {
					for (int i = 0; i < 6; i++)
						advance(sc);
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				}
				put_utf8(out, outlen, &o, cp);
				continue;
			}
			char d = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
			if (o + 1 < outlen)
				out[o++] = d;
			continue;
		}
		if (out && o + 1 < outlen)
			out[o++] = sc->s[sc->off];
		advance(sc);
	}
	if (out && outlen)
		out[o] = '\0';
	if (sc->off >= sc->len)
		return -EINVAL;
	advance(sc);
	return 0;
}

static int scan_value(struct scanner *sc, char *path, size_t plen, size_t cap);

static int record(struct scanner *sc, const char *path)
{
	unsigned line = sc->line, col = (unsigned)(sc->off - sc->line_start + 1);
	if (sc->unrecorded)
		return 0;
	int r = map_put(sc->map, path[0] ? path : "/", line, col);

	if (r == 1 && !sc->dup_line) {
		snprintf(sc->dup_path, sizeof sc->dup_path, "%s", path);
		sc->dup_line = line;
		sc->dup_col = col;
	}
	return r < 0 ? r : 0;
}

static int scan_value(struct scanner *sc, char *path, size_t plen, size_t cap)
{
	int r;

	if (++sc->depth > 64)
		return -EINVAL;
	skip_ws(sc);
	if (sc->off >= sc->len)
		return -EINVAL;
	char c = sc->s[sc->off];
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		unsigned idx = 0;
		if ((r = record(sc, path)) < 0)
			return r;
		advance(sc);
		for (;;) {
			skip_ws(sc);
			if (sc->off >= sc->len)
				return -EINVAL;
			if (sc->s[sc->off] == close) {
				advance(sc);
				break;
			}
			if (sc->s[sc->off] == ',') {
				advance(sc);
				continue;
			}
			size_t n;
			if (c == '{') {
				char key[200];
				unsigned kline = sc->line, kcol = (unsigned)(sc->off - sc->line_start + 1);
				if (scan_string(sc, key, sizeof key) < 0)
					return -EINVAL;
				n = (size_t)snprintf(path + plen, cap - plen, "/%s", key);
				/* A duplicate key is reported at the key, the value gets its own entry below. */
				char kpath[600];
				int d = 0;
				if (n >= cap - plen) {
					/* too deep or too long to name: scanned, not recorded (no rule lives there) */
					n = 0;
					path[plen] = '\0';
					sc->unrecorded++;
				} else if (!sc->unrecorded) {
					snprintf(kpath, sizeof kpath, "%s#key", path);
					d = map_put(sc->map, kpath, kline, kcol);
				}
				if (d < 0)
					return d;
				if (d == 1 && !sc->dup_line) {
					snprintf(sc->dup_path, sizeof sc->dup_path, "%s", path);
					sc->dup_line = kline;
					sc->dup_col = kcol;
				}
				skip_ws(sc);
				if (sc->off >= sc->len || sc->s[sc->off] != ':')
					return -EINVAL;
				advance(sc);
			} else {
				n = (size_t)snprintf(path + plen, cap - plen, "/%u", idx++);
				if (n >= cap - plen) {
					n = 0;
					path[plen] = '\0';
					sc->unrecorded++;
				}
			}
			bool deep = n == 0;
			r = scan_value(sc, path, plen + n, cap);
			path[plen] = '\0';
			if (deep)
				sc->unrecorded--;
			if (r < 0)
				return r;
		}
	} else {
		if ((r = record(sc, path)) < 0)
			return r;
		if (c == '"' || c == '\'') {
			if (scan_string(sc, NULL, 0) < 0)
				return -EINVAL;
		} else {
			while (sc->off < sc->len && !strchr(",]} \t\r\n/", sc->s[sc->off]))
				advance(sc);
		}
	}
	sc->depth--;
	return 0;
}

int jpos_scan(const char *text, size_t len, struct jpos **out, char *dup_path, size_t dup_len, unsigned *dup_line,
	      unsigned *dup_col)
{
	struct scanner sc = { .s = text, .len = len, .line = 1 };
	char path[512] = "";
	int r;

	*out = NULL;
	sc.map = calloc(1, sizeof *sc.map);
	if (!sc.map)
		return -ENOMEM;
	r = scan_value(&sc, path, 0, sizeof path);
	if (r < 0) {
		jpos_free(sc.map);
		return r;
	}
	if (sc.dup_line) {
		snprintf(dup_path, dup_len, "%s", sc.dup_path);
		*dup_line = sc.dup_line;
		*dup_col = sc.dup_col;
		jpos_free(sc.map);
		return -EEXIST;
	}
	*out = sc.map;
	return 0;
}
