/* Source positions (line:col) of values in JSON text that json-c already accepted; see jsonpos.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jpos;

/* Scans text. Returns 0 and a new map in *out; -EEXIST for a duplicate object key (its path and
 * position are written to dup_*); -EINVAL if the text is not a JSON value; -ENOMEM. */
int jpos_scan(const char *text, size_t len, struct jpos **out, char *dup_path, size_t dup_len, unsigned *dup_line,
	      unsigned *dup_col);
/* Position of the value at path ("/allow/3"); false if unknown. */
bool jpos_find(const struct jpos *m, const char *path, unsigned *line, unsigned *col);
void jpos_free(struct jpos *m); /* NULL is a no-op */
/* 1-based line and column of a byte offset. */
void jpos_offset_to_linecol(const char *s, size_t off, unsigned *line, unsigned *col);
