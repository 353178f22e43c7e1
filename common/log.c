/* Diagnostic logging to stderr for all sluice programs. */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *log_prog = "sluice";
static enum log_level log_level = LOG_LEVEL_WARN;

void log_init(const char *progname, enum log_level level)
{
	if (progname)
		log_prog = progname;
	log_level = level;
}

void log_set_level(enum log_level level) { log_level = level; }
enum log_level log_get_level(void) { return log_level; }
bool log_enabled(enum log_level level) { return level <= log_level; }

__attribute__((format(printf, 3, 0))) static void log_emit(const char *tag, int errnum, const char *fmt, va_list ap)
{
	char msg[1024];

	vsnprintf(msg, sizeof msg, fmt, ap);
	if (errnum)
		fprintf(stderr, "%s: %s%s: %s\n", log_prog, tag, msg, strerror(errnum));
	else
		fprintf(stderr, "%s: %s%s\n", log_prog, tag, msg);
}

void log_warn(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (!log_enabled(LOG_LEVEL_WARN))
		return;
	va_start(ap, fmt);
	log_emit("", saved, fmt, ap);
	va_end(ap);
	errno = saved;
}

void log_warnx(const char *fmt, ...)
{
	va_list ap;

	if (!log_enabled(LOG_LEVEL_WARN))
		return;
	va_start(ap, fmt);
	log_emit("", 0, fmt, ap);
	va_end(ap);
}

void log_info(const char *fmt, ...)
{
	va_list ap;

	if (!log_enabled(LOG_LEVEL_INFO))
		return;
	va_start(ap, fmt);
	log_emit("", 0, fmt, ap);
	va_end(ap);
}

void log_debug(const char *fmt, ...)
{
	va_list ap;

	if (!log_enabled(LOG_LEVEL_DEBUG))
		return;
	va_start(ap, fmt);
	log_emit("debug: ", 0, fmt, ap);
	va_end(ap);
}

void fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_emit("fatal: ", 0, fmt, ap);
	va_end(ap);
	abort();
}
