/* Shipping the audit log to the host's log pipeline (`sluiced --audit-ship syslog|journald`): a thread
 * of sluiced follows the hash-chained audit file the engine writes (common/audit_read.h, rotation
 * included) and sends each new record on, as RFC 5424 syslog to a Unix datagram socket (default /dev/log)
 * or to journald with structured fields (its native protocol, as sd_journal_sendv sends it, without
 * linking libsystemd). The file stays the record of
 * truth: shipping reads it after it was written, never holds up the engine or sluiced's loop (a slow or
 * absent receiver only costs the thread), and what cannot be sent is counted, not retried. */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum netd_ship_kind {
	NETD_SHIP_NONE = 0,
	NETD_SHIP_SYSLOG,
	NETD_SHIP_JOURNALD,
};

struct netd_ship;

/* Parses "syslog" / "journald"; -EINVAL otherwise. */
int netd_ship_kind_parse(const char *s, enum netd_ship_kind *out);
/* Starts following log_path from its current end. socket_path: the syslog socket (NULL = /dev/log; not
 * used for journald, which is always at /run/systemd/journal/socket). 0 or -errno with
 * a one-line message in err. */
int netd_ship_start(struct netd_ship **out, enum netd_ship_kind kind, const char *log_path,
		    const char *socket_path, char *err, size_t errlen);
/* Ships what is left in the file, then stops the thread. NULL is a no-op. */
void netd_ship_free(struct netd_ship *s);
/* Records sent and records that could not be sent (receiver absent or full, malformed line). */
void netd_ship_counts(const struct netd_ship *s, uint64_t *sent, uint64_t *errors);
/* Formats one record as an RFC 5424 message: <PRI>1 TIME HOST sluiced PID audit - [sluice@32473 ...] LINE.
 * Returns the length, or -ENOSPC. For tests too. */
struct audit_entry;
int netd_ship_syslog_format(const struct audit_entry *e, const char *hostname, int pid, char *buf, size_t len);
