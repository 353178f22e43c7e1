/* Diagnostic logging shared by every sluice program (not the audit log, which is a separate,
 * structured stream owned by proxy/). Messages go to stderr, prefixed with the program name. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

/* Sets the program name (borrowed: must outlive logging) and the most verbose level printed. */
void log_init(const char *progname, enum log_level level);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
bool log_enabled(enum log_level level);

/* log_warn appends ": strerror(errno)"; log_warnx does not. Levels are checked before formatting. */
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* For a broken invariant of a privileged process only: logs and aborts. Never from library code. */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
