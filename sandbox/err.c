/* One-line error messages for the containment steps: format into the caller's buffer and return
 * the negative errno, saved before formatting so the message cannot clobber it. */
#include "session.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int sb_err(char *err, size_t errlen, const char *fmt, ...)
{
	int e = errno ? errno : EIO;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -e;
}

int sb_errc(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return code > 0 ? -code : code;
}
