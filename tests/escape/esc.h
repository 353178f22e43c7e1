/* Shared reporting for the escape programs: each attempt prints "SAFE: ..." or "ESCAPE: ...";
 * the program exits 0 when every attempt was refused, 1 when any succeeded. */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int esc_failed;

/* ok: the attempt was refused the way the sandbox promises. */
static inline void esc_report(int ok, const char *what, int err)
{
	if (ok)
		printf("SAFE: %s (%s)\n", what, err ? strerror(err) : "refused");
	else {
		printf("ESCAPE: %s (%s)\n", what, err ? strerror(err) : "succeeded");
		esc_failed = 1;
	}
}
