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
 * rest, so every error path closes them.
 *
 * Long texts: a netlink attribute holds at most 64 KiB and a record IPC_MSG_MAX, but some texts (a
 * policy of thousands of rules) are larger. ipc_buf_put_text() sends a text inline (an IPC_T_STR
 * attribute) when it is at most IPC_TEXT_INLINE_MAX bytes, else in a sealed memfd passed with
 * SCM_RIGHTS, named by a u32 attribute of type IPC_T_FD that holds the fd's index in the message.
 * Such an fd is an "extra" fd: it comes after the ones the message always carries (spec nfds), so
 * those keep their indexes. ipc_msg_text() reads either form back into an owned string, with the
 * same distrust as an inline one (size bound, no NUL) plus: a regular file carrying the memfd seals,
 * which only shmem files can have, so a peer cannot pass a FIFO, socket or FUSE file that would
 * block the reader, nor change the text while it is read.
 *
 * Buffers are sized to the message: one being built starts small and grows with its attributes (up to
 * IPC_MSG_MAX); one received is read into a buffer of IPC_MSG_MAX + 1 bytes that each thread keeps (freed
 * when the thread exits), and a copy of just the bytes that arrived is the message's own. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define IPC_MSG_MAX (128u * 1024u) /* whole message, header included; fits default socket buffers */
#define IPC_MAX_FDS 4
#define IPC_ATTR_MAX 63 /* attribute types per protocol (netd uses 1..51) */
#define IPC_TEXT_INLINE_MAX (32u * 1024u - 1u) /* longest text ipc_buf_put_text() sends inline */
#define IPC_TEXT_MAX (64u << 20) /* longest text any message carries (in a memfd): 64 MiB */

enum ipc_attr_type {
	IPC_T_NONE = 0, /* attribute not allowed in this message */
	IPC_T_U8,
	IPC_T_U16,
	IPC_T_U32,
	IPC_T_U64,
	IPC_T_STR,   /* NUL-terminated, no embedded NUL, strlen <= max_len */
	IPC_T_BYTES, /* opaque, length in [1, max_len] */
	IPC_T_FD,    /* u32: index of an extra fd of this message (a text in a memfd, see ipc_buf_put_text) */
};

struct ipc_attr_spec {
	enum ipc_attr_type type;
	uint32_t max_len; /* IPC_T_STR: longest string; IPC_T_BYTES: longest payload; IPC_T_FD: longest
			   * text the fd may hold (ipc_msg_text's max; not checked by ipc_msg_check) */
	bool required;
	/* Nonzero: the other attribute of an inline/memfd pair (an IPC_T_STR and an IPC_T_FD naming each
	 * other). `required` on either is met by one of the two; both in one message are refused. */
	uint8_t alt;
};

struct ipc_msg_spec {
	const char *name;   /* for errors and logs; NULL marks an unused type slot */
	uint32_t states;    /* bit mask of connection states in which this message may arrive */
	uint8_t nfds;       /* fds the message always carries (indexes 0..nfds-1); each IPC_T_FD attribute
			     * present adds exactly one more, after those, and nothing else may */
	struct ipc_attr_spec attrs[IPC_ATTR_MAX + 1];
};

struct ipc_proto {
	const char *name;                /* "control", "engine" */
	const struct ipc_msg_spec *msgs; /* borrowed, indexed by message type */
	size_t nmsgs;
};

/* A message being built. Owns its buffer and the memfds of texts that did not fit inline; borrows
 * the fds given with ipc_buf_put_fd(). */
struct ipc_buf {
	char *buf;  /* owned: cap bytes, grown as attributes are put, up to IPC_MSG_MAX */
	size_t cap;
	bool overflow;
	int err;              /* first failure of ipc_buf_put_text() other than overflow, or -ENOMEM of a growth;
	                       * ipc_send returns it */
	int fds[IPC_MAX_FDS]; /* borrowed until sent */
	size_t nfds;
	int text_fds[IPC_MAX_FDS];       /* owned memfds, closed by ipc_buf_release(); sent after fds[] */
	uint32_t text_off[IPC_MAX_FDS]; /* offset in buf of each one's IPC_T_FD payload (set by ipc_send) */
	size_t ntext_fds;
};

/* A received message. */
struct ipc_msg {
	char *buf;  /* owned: exactly the len bytes received */
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
/* Adds a text of any length up to IPC_TEXT_MAX: as attribute `attr` (a string) when it has at most
 * IPC_TEXT_INLINE_MAX bytes and fits the record, else written to a memfd (sealed against any change)
 * that the buffer owns and passes as an extra fd, with attribute `fd_attr` (u32) holding its index.
 * The index is final only at ipc_send(), so the order of puts does not matter. Returns 0, -EMSGSIZE
 * (text over IPC_TEXT_MAX, or no room for the attribute or the fd) or -errno of memfd_create/write;
 * any failure also makes ipc_send() fail with it. */
int ipc_buf_put_text(struct ipc_buf *b, uint16_t attr, uint16_t fd_attr, const char *s);
size_t ipc_buf_len(const struct ipc_buf *b);

/* Sends the message in one record. -EMSGSIZE when it overflowed IPC_MSG_MAX or IPC_MAX_FDS;
 * -EAGAIN on a full non-blocking socket; -EPIPE when the peer went away. Does not release b. */
int ipc_send(int sock, struct ipc_buf *b);
/* The same, never waiting: -EAGAIN when the socket's buffer is full, even on a blocking socket (for a
 * message that may be counted instead of sent, rather than stall the sender's event loop). */
int ipc_send_nowait(int sock, struct ipc_buf *b);
/* Convenience: builds and sends a message with no attributes. */
int ipc_send_empty(int sock, uint16_t type, uint32_t seq);

/* An outgoing queue: what a sender that must never wait (sluiced's loop talking to its engine, and the
 * engine's loop talking to sluiced: netd/outq_ev.c drives it for both) could not send yet, kept in the
 * order it was given and sent when the socket is writable again. A queued message owns a copy of the record, its texts' memfds and a copy (dup) of
 * every fd it carries, so the caller releases its ipc_buf and closes its fds exactly as after
 * ipc_send(). */
struct ipc_outq_msg;
struct ipc_outq {
	struct ipc_outq_msg *head;  /* owned: the oldest message */
	struct ipc_outq_msg **tail; /* where the next one goes */
	size_t n;                   /* messages queued */
	size_t bytes;               /* their records' bytes */
	/* Nonzero: the kernel refused the oldest message for want of memory (-ENOBUFS, -ENOMEM), not for a
	 * full socket, so the socket may well poll writable while nothing can be sent: the owner tries again
	 * after this many milliseconds (a timer, not EV_WRITE, which would spin). It doubles with each refusal
	 * in a row, from IPC_OUTQ_RETRY_MIN_MS up to IPC_OUTQ_RETRY_MAX_MS, and is 0 again once a message
	 * goes or the socket is merely full. */
	unsigned retry_ms;
};
#define IPC_OUTQ_RETRY_MIN_MS 5
#define IPC_OUTQ_RETRY_MAX_MS 320

void ipc_outq_init(struct ipc_outq *q);
/* Sends b at once when nothing is queued and the socket takes it without waiting; else (the socket
 * full, -ENOBUFS or -ENOMEM: then q->retry_ms is set) queues it behind the others, so messages leave in
 * the order given. 0: sent or queued (q->n tells which);
 * -ENOMEM or -EMFILE when it could not be queued; ipc_send()'s other errors (-EMSGSIZE, b->err,
 * -EPIPE, ...), with nothing queued. b is not released. */
int ipc_outq_send(struct ipc_outq *q, int sock, struct ipc_buf *b);
/* Sends queued messages, oldest first, without waiting, until none is left, the socket is full (wait for
 * it to be writable) or the kernel refuses one for want of memory (-ENOBUFS, -ENOMEM: q->retry_ms says
 * when to try again). Returns how many were sent, or ipc_send()'s -errno of the first other failure
 * (that message and those after it stay queued). A refusal that never ends is the owner's to bound (it
 * sees no progress), as a peer that never reads is. */
int ipc_outq_flush(struct ipc_outq *q, int sock);
/* Frees every queued message and closes its fds. */
void ipc_outq_clear(struct ipc_outq *q);

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
 * allowed now, fd count (nfds, plus one per IPC_T_FD attribute, each naming a distinct extra fd),
 * attributes well formed, of the right type and size, no duplicates, required ones (or their alt)
 * present, not both of a pair, no trailing bytes. Fills m->tb. Returns 0, or -EBADMSG / -EPERM with
 * a one-line reason in err. */
int ipc_msg_check(const struct ipc_proto *p, struct ipc_msg *m, uint32_t state, char *err, size_t errlen);

/* Accessors for checked attributes (only valid after ipc_msg_check; absent -> default / NULL). */
bool ipc_has(const struct ipc_msg *m, uint16_t attr);
uint8_t ipc_get_u8(const struct ipc_msg *m, uint16_t attr, uint8_t def);
uint16_t ipc_get_u16(const struct ipc_msg *m, uint16_t attr, uint16_t def);
uint32_t ipc_get_u32(const struct ipc_msg *m, uint16_t attr, uint32_t def);
uint64_t ipc_get_u64(const struct ipc_msg *m, uint16_t attr, uint64_t def);
const char *ipc_get_str(const struct ipc_msg *m, uint16_t attr); /* borrowed from m */
const void *ipc_get_bytes(const struct ipc_msg *m, uint16_t attr, size_t *len);

/* A text sent with ipc_buf_put_text(), after ipc_msg_check: attribute `attr` (inline), else the fd
 * that attribute `fd_attr` names (read whole, then closed). Returns an owned NUL-terminated copy
 * (free() it), or NULL with errno set (EBADMSG: absent, not a sealed regular memfd, a NUL in it;
 * EMSGSIZE: over max bytes; ENOMEM; an I/O error) and a one-line reason in err. max is clamped to
 * IPC_TEXT_MAX. */
char *ipc_msg_text(struct ipc_msg *m, uint16_t attr, uint16_t fd_attr, size_t max, char *err, size_t errlen);

/* Hands a received fd to the caller (who then owns it); -1 if absent or already taken. */
int ipc_msg_take_fd(struct ipc_msg *m, size_t idx);

/* The peer's credentials of a connected AF_UNIX socket (SO_PEERCRED). */
int ipc_peer_cred(int sock, uid_t *uid, gid_t *gid, pid_t *pid);
