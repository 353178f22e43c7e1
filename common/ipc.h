/* Typed, size-checked message framing between sluice processes (launcher <-> sluiced, sluiced <->
 * proxy engine), with fd passing. One message is one AF_UNIX SOCK_SEQPACKET record: a netlink-style
 * header (struct nlmsghdr: length, type, sequence) followed by netlink attributes, encoded and
 * bounds-checked with libmnl rather than a hand-written parser. File descriptors ride along as
 * SCM_RIGHTS. Every channel declares an ipc_proto: which message types exist, in which connection
 * states each may arrive, how many fds each carries, and each attribute's type, size bound and
 * whether it is required. ipc_msg_check() applies that table before any handler reads a byte.
 *
 * Trust boundary: everything received is untrusted until ipc_msg_check() returned 0. Received fds
 * are owned by the struct ipc_msg until taken with ipc_msg_take_fd(); ipc_msg_clear() closes the
 * rest, so every error path closes them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define IPC_MSG_MAX (128u * 1024u) /* whole message, header included; fits default socket buffers */
#define IPC_MAX_FDS 4
#define IPC_ATTR_MAX 63 /* attribute types per protocol (netd uses 1..33) */

enum ipc_attr_type {
	IPC_T_NONE = 0, /* attribute not allowed in this message */
	IPC_T_U8,
	IPC_T_U16,
	IPC_T_U32,
	IPC_T_U64,
	IPC_T_STR,   /* NUL-terminated, no embedded NUL, strlen <= max_len */
	IPC_T_BYTES, /* opaque, length in [1, max_len] */
};

struct ipc_attr_spec {
	enum ipc_attr_type type;
	uint32_t max_len; /* IPC_T_STR: longest string; IPC_T_BYTES: longest payload */
	bool required;
};

struct ipc_msg_spec {
	const char *name;   /* for errors and logs; NULL marks an unused type slot */
	uint32_t states;    /* bit mask of connection states in which this message may arrive */
	uint8_t nfds;       /* exact number of fds the message carries */
	struct ipc_attr_spec attrs[IPC_ATTR_MAX + 1];
};

struct ipc_proto {
	const char *name;                /* "control", "engine" */
	const struct ipc_msg_spec *msgs; /* borrowed, indexed by message type */
	size_t nmsgs;
};

/* A message being built. Owns its buffer; borrows the fds it will pass. */
struct ipc_buf {
	char *buf; /* owned, IPC_MSG_MAX bytes */
	bool overflow;
	int fds[IPC_MAX_FDS]; /* borrowed until sent */
	size_t nfds;
};

/* A received message. */
struct ipc_msg {
	char *buf;  /* owned */
	size_t len; /* bytes received */
	uint16_t type;
	uint32_t seq;
	int fds[IPC_MAX_FDS]; /* owned; -1 once taken */
	size_t nfds;
	const void *tb[IPC_ATTR_MAX + 1]; /* struct nlattr * into buf, set by ipc_msg_check */
};

/* Creates a connected SOCK_SEQPACKET pair with CLOEXEC (and NONBLOCK if asked). */
int ipc_socketpair(int sv[2], bool nonblock);

int ipc_buf_init(struct ipc_buf *b, uint16_t type, uint32_t seq);
void ipc_buf_release(struct ipc_buf *b);
void ipc_buf_put_u8(struct ipc_buf *b, uint16_t attr, uint8_t v);
void ipc_buf_put_u16(struct ipc_buf *b, uint16_t attr, uint16_t v);
void ipc_buf_put_u32(struct ipc_buf *b, uint16_t attr, uint32_t v);
void ipc_buf_put_u64(struct ipc_buf *b, uint16_t attr, uint64_t v);
void ipc_buf_put_str(struct ipc_buf *b, uint16_t attr, const char *s);
void ipc_buf_put_bytes(struct ipc_buf *b, uint16_t attr, const void *p, size_t len);
/* Adds an fd (borrowed: the caller still closes its copy after sending). */
void ipc_buf_put_fd(struct ipc_buf *b, int fd);
size_t ipc_buf_len(const struct ipc_buf *b);

/* Sends the message in one record. -EMSGSIZE when it overflowed IPC_MSG_MAX or IPC_MAX_FDS;
 * -EAGAIN on a full non-blocking socket; -EPIPE when the peer went away. Does not release b. */
int ipc_send(int sock, struct ipc_buf *b);
/* Convenience: builds and sends a message with no attributes. */
int ipc_send_empty(int sock, uint16_t type, uint32_t seq);

/* Receives one record into m (which the caller ipc_msg_clear()s afterwards, also on error).
 * 0 on success; -EPIPE on orderly EOF; -EAGAIN when nothing is queued (non-blocking);
 * -EMSGSIZE when the record was longer than IPC_MSG_MAX; -EPROTO when control data was
 * truncated or malformed, or more than IPC_MAX_FDS fds came; -EBADMSG when the header is
 * inconsistent. On every error all fds that arrived are closed. */
int ipc_recv(int sock, struct ipc_msg *m);
/* The same without blocking, whatever the socket's mode (-EAGAIN when nothing is queued). */
int ipc_recv_nowait(int sock, struct ipc_msg *m);
void ipc_msg_clear(struct ipc_msg *m);

/* Validates m against the protocol table in connection state `state` (a single bit): type known,
 * allowed now, exact fd count, attributes well formed, of the right type and size, no duplicates,
 * required ones present, no trailing bytes. Fills m->tb. Returns 0, or -EBADMSG / -EPERM with a
 * one-line reason in err. */
int ipc_msg_check(const struct ipc_proto *p, struct ipc_msg *m, uint32_t state, char *err, size_t errlen);

/* Accessors for checked attributes (only valid after ipc_msg_check; absent -> default / NULL). */
bool ipc_has(const struct ipc_msg *m, uint16_t attr);
uint8_t ipc_get_u8(const struct ipc_msg *m, uint16_t attr, uint8_t def);
uint16_t ipc_get_u16(const struct ipc_msg *m, uint16_t attr, uint16_t def);
uint32_t ipc_get_u32(const struct ipc_msg *m, uint16_t attr, uint32_t def);
uint64_t ipc_get_u64(const struct ipc_msg *m, uint16_t attr, uint64_t def);
const char *ipc_get_str(const struct ipc_msg *m, uint16_t attr); /* borrowed from m */
const void *ipc_get_bytes(const struct ipc_msg *m, uint16_t attr, size_t *len);

/* Hands a received fd to the caller (who then owns it); -1 if absent or already taken. */
int ipc_msg_take_fd(struct ipc_msg *m, size_t idx);

/* The peer's credentials of a connected AF_UNIX socket (SO_PEERCRED). */
int ipc_peer_cred(int sock, uid_t *uid, gid_t *gid, pid_t *pid);
