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

/* Trust boundary: messages carry strings that others chose (a session's command line is whatever a
 * local user's client sent to control.sock; host names; file names). One message is one line: C0
 * controls, DEL and the UTF-8 encodings of C1 controls are written as \xNN, so a newline cannot start a
 * forged line in the journal (which splits stderr at newlines) and an escape sequence cannot reach the
 * terminal of whoever reads the log. out must hold 4 * strlen(in) + 1 bytes. */
static void log_escape(char *out, const char *in)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)in;

	for (; *p; p++) {
		bool c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
		if (*p < 0x20 || *p == 0x7f || c1) {
			for (int k = 0; k < (c1 ? 2 : 1); k++) {
				*out++ = '\\';
				*out++ = 'x';
				*out++ = hex[p[k] >> 4];
				*out++ = hex[p[k] & 0xf];
			}
			p += c1;
		} else {
			*out++ = (char)*p;
		}
	}
	*out = '\0';
}

__attribute__((format(printf, 3, 0))) static void log_emit(const char *tag, int errnum, const char *fmt, va_list ap)
{
	char raw[1024], msg[4 * sizeof raw];

	vsnprintf(raw, sizeof raw, fmt, ap);
	log_escape(msg, raw);
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
