/* The channel between `sluicectl asks|approve|deny` and the filesystem gate of a `sluice run --fs
 * ask` session (sandbox/fsgate.c). Each gate listens on an abstract AF_UNIX SOCK_SEQPACKET socket in
 * the host's network namespace (a sandbox, in its own network namespace, cannot reach it), named
 * "@sluice-fs/UID/SESSION" with UID the launching user. Messages are common/ipc.h records checked
 * against fsask_proto. Trust: the gate answers only peers whose SO_PEERCRED uid is 0 or UID; a
 * client talks only to gates whose peer uid is the UID of their name (or 0), a user only to its own
 * UID's, so a name squatted by another user is neither listed nor told a verdict; a gate that does not
 * answer within 3 s is skipped. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc.h"

#define FSASK_SOCK_PREFIX "sluice-fs/" /* abstract name: "\0sluice-fs/UID/SESSION" */
#define FSASK_ID_MAX      15
#define FSASK_SESSION_MAX 16
#define FSASK_PATH_MAX    4095
#define FSASK_COMMAND_MAX 255
#define FSASK_ERRMSG_MAX  255

enum fsask_msg {
	FSASK_MSG_LIST = 1,   /* client -> gate: the held opens */
	FSASK_MSG_DECIDE = 2, /* client -> gate: approve or deny one */
	FSASK_MSG_ASK = 3,    /* gate -> client: one held open (a LIST entry, or DECIDE's answer) */
	FSASK_MSG_END = 4,    /* gate -> client: end of the LIST */
	FSASK_MSG_ERROR = 5,  /* gate -> client */
	FSASK_MSG_COUNT_,
};

enum fsask_attr {
	FSASK_A_ID = 1,        /* str: the ask's id, "fs-" and 8 hex digits */
	FSASK_A_SESSION = 2,   /* str */
	FSASK_A_UID = 3,       /* u32: the session's user */
	FSASK_A_PATH = 4,      /* str: the host path asked about */
	FSASK_A_COMMAND = 5,   /* str: the command line of the process that opened it */
	FSASK_A_TIMEOUT = 6,   /* u32: seconds from creation to the automatic denial */
	FSASK_A_CREATED = 7,   /* u64: unix time */
	FSASK_A_VERDICT = 8,   /* u8: 1 approve, 0 deny */
	FSASK_A_SUBTREE = 9,   /* u8: 1: the verdict covers everything beneath PATH */
	FSASK_A_DIR = 10,      /* u8: PATH is a directory */
	FSASK_A_ERRNO = 11,    /* u32 */
	FSASK_A_ERRMSG = 12,   /* str */
	FSASK_A_PROJECT = 13,  /* str: the session's project directory (for --remember project) */
	FSASK_A_REMEMBER = 14, /* str: the layer sluicectl remembered the approval in (for the audit) */
};

#define FSASK_CS_GATE   1u /* messages a gate accepts */
#define FSASK_CS_CLIENT 2u /* messages a client accepts */

extern const struct ipc_proto fsask_proto;

/* One held open, as a client sees it (strings borrowed from the message for the callback). */
struct fsask_entry {
	const char *id, *session, *path, *command, *project;
	uid_t uid;
	unsigned timeout_s;
	long long created;
	bool dir, subtree;
};

/* Calls fn for each open held by a gate the caller may answer. Returns the number of gates reached,
 * or -errno with a reason in err (/proc/net/unix unreadable). */
int fsask_list(void (*fn)(const struct fsask_entry *e, void *arg), void *arg, char *err, size_t errlen);
/* Approves or denies ask id (an "fs-" id) at the gate that holds it; fn gets the decided entry.
 * remembered: the layer the caller wrote the approval into, for the gate's audit record, or NULL.
 * -ENOENT when no gate of the caller's holds it. */
int fsask_decide(const char *id, bool allow, bool subtree, const char *remembered,
                 void (*fn)(const struct fsask_entry *e, void *arg), void *arg, char *err, size_t errlen);
/* Whether id looks like an fs ask id. */
bool fsask_is_id(const char *id);
