/* Message framing and fd passing for sluice's internal channels (see ipc.h for the format). */
#include "ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

int ipc_socketpair(int sv[2], bool nonblock)
{
	int type = SOCK_SEQPACKET | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0);

	if (socketpair(AF_UNIX, type, 0, sv) < 0)
		return -errno;
	return 0;
}

/* A message's buffer starts this small and doubles as attributes need it, up to IPC_MSG_MAX: most
 * messages are under 200 bytes, and every one used to cost a zeroed IPC_MSG_MAX (a 128 KiB memset). */
#define IPC_BUF_START 256u

int ipc_buf_init(struct ipc_buf *b, uint16_t type, uint32_t seq)
{
	struct nlmsghdr *nlh;

	memset(b, 0, sizeof *b);
	for (size_t i = 0; i < IPC_MAX_FDS; i++)
		b->fds[i] = b->text_fds[i] = -1;
	b->buf = malloc(IPC_BUF_START);
	if (!b->buf)
		return -ENOMEM;
	b->cap = IPC_BUF_START;
	nlh = mnl_nlmsg_put_header(b->buf); /* zeroes the header */
	nlh->nlmsg_type = type;
	nlh->nlmsg_seq = seq;
	return 0;
}

void ipc_buf_release(struct ipc_buf *b)
{
	for (size_t i = 0; i < b->ntext_fds && i < IPC_MAX_FDS; i++)
		if (b->text_fds[i] >= 0) {
			close(b->text_fds[i]);
			b->text_fds[i] = -1;
		}
	b->ntext_fds = 0;
	free(b->buf);
	b->buf = NULL;
	b->cap = 0;
	b->nfds = 0;
}

/* Appends one attribute (what mnl_attr_put_check does against IPC_MSG_MAX, into a buffer that grows,
 * padding zeroed: the buffer is not). Past IPC_MSG_MAX: overflow; out of memory: err. */
static void ipc_buf_put(struct ipc_buf *b, uint16_t attr, size_t len, const void *data)
{
	struct nlmsghdr *nlh;
	struct nlattr *a;
	size_t off, need;

	if (!b->buf || b->overflow || b->err)
		return;
	off = ipc_buf_len(b);
	need = off + MNL_ATTR_HDRLEN + MNL_ALIGN(len);
	if (len > UINT16_MAX - MNL_ATTR_HDRLEN || need > IPC_MSG_MAX) {
		b->overflow = true;
		return;
	}
	if (need > b->cap) {
		size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
		char *nb = realloc(b->buf, cap > IPC_MSG_MAX ? IPC_MSG_MAX : cap);

		if (!nb) {
			b->err = -ENOMEM;
			return;
		}
		b->buf = nb;
		b->cap = cap > IPC_MSG_MAX ? IPC_MSG_MAX : cap;
	}
	nlh = (struct nlmsghdr *)b->buf;
	a = (struct nlattr *)(b->buf + off);
	a->nla_type = attr;
	a->nla_len = (uint16_t)(MNL_ATTR_HDRLEN + len);
	if (len)
		memcpy((char *)a + MNL_ATTR_HDRLEN, data, len);
	memset((char *)a + MNL_ATTR_HDRLEN + len, 0, MNL_ALIGN(len) - len);
	nlh->nlmsg_len = (uint32_t)need;
}

void ipc_buf_put_u8(struct ipc_buf *b, uint16_t attr, uint8_t v) { ipc_buf_put(b, attr, sizeof v, &v); }
void ipc_buf_put_u16(struct ipc_buf *b, uint16_t attr, uint16_t v) { ipc_buf_put(b, attr, sizeof v, &v); }
void ipc_buf_put_u32(struct ipc_buf *b, uint16_t attr, uint32_t v) { ipc_buf_put(b, attr, sizeof v, &v); }
void ipc_buf_put_u64(struct ipc_buf *b, uint16_t attr, uint64_t v) { ipc_buf_put(b, attr, sizeof v, &v); }

void ipc_buf_put_str(struct ipc_buf *b, uint16_t attr, const char *s)
{
	ipc_buf_put(b, attr, strlen(s) + 1, s);
}

void ipc_buf_put_bytes(struct ipc_buf *b, uint16_t attr, const void *p, size_t len)
{
	ipc_buf_put(b, attr, len, p);
}

void ipc_buf_put_fd(struct ipc_buf *b, int fd)
{
	if (b->nfds + b->ntext_fds >= IPC_MAX_FDS || fd < 0) {
		b->overflow = true;
		return;
	}
	b->fds[b->nfds++] = fd;
}

size_t ipc_buf_len(const struct ipc_buf *b)
{
	return b->buf ? ((const struct nlmsghdr *)b->buf)->nlmsg_len : 0;
}

#define IPC_TEXT_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) /* what a reader requires */

/* A memfd holding s (len bytes, no NUL), sealed: nobody, not even the sender, can change it. */
static int ipc_text_memfd(const char *s, size_t len)
{
	int fd = memfd_create("sluice-ipc-text", MFD_CLOEXEC | MFD_ALLOW_SEALING), r;
	size_t off = 0;

	if (fd < 0)
		return -errno;
	while (off < len) {
		ssize_t n = write(fd, s + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			close(fd);
			return r;
		}
		off += (size_t)n;
	}
	if (fcntl(fd, F_ADD_SEALS, IPC_TEXT_SEALS | F_SEAL_SEAL) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int ipc_buf_put_text(struct ipc_buf *b, uint16_t attr, uint16_t fd_attr, const char *s)
{
	size_t len = strlen(s), off;
	int fd;

	if (!b->buf)
		return -ENOMEM;
	if (b->err)
		return b->err;
	if (b->overflow)
		return -EMSGSIZE;
	if (len <= IPC_TEXT_INLINE_MAX && ipc_buf_len(b) + MNL_ATTR_HDRLEN + MNL_ALIGN(len + 1) <= IPC_MSG_MAX) {
		ipc_buf_put_str(b, attr, s);
		return b->overflow ? -EMSGSIZE : 0;
	}
	if (len > IPC_TEXT_MAX || b->nfds + b->ntext_fds >= IPC_MAX_FDS) {
		b->overflow = true;
		return -EMSGSIZE;
	}
	off = ipc_buf_len(b) + MNL_ATTR_HDRLEN;
	ipc_buf_put_u32(b, fd_attr, UINT32_MAX); /* the index, set by ipc_send */
	if (b->overflow)
		return -EMSGSIZE;
	fd = ipc_text_memfd(s, len);
	if (fd < 0) {
		b->err = fd;
		return fd;
	}
	b->text_fds[b->ntext_fds] = fd;
	b->text_off[b->ntext_fds] = (uint32_t)off;
	b->ntext_fds++;
	return 0;
}

/* 0 when b can be sent: built, no failed text, within IPC_MSG_MAX and IPC_MAX_FDS. */
static int ipc_buf_ready(const struct ipc_buf *b)
{
	if (!b->buf)
		return -ENOMEM;
	if (b->err)
		return b->err;
	if (b->overflow || b->nfds + b->ntext_fds > IPC_MAX_FDS)
		return -EMSGSIZE;
	return 0;
}

static int ipc_send_flags(int sock, struct ipc_buf *b, int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov;
	struct msghdr msg = {0};
	int fds[IPC_MAX_FDS];
	size_t nfds;
	ssize_t n;
	int r;

	if ((r = ipc_buf_ready(b)) < 0)
		return r;
	/* the fds every such message carries first, so their indexes are fixed; then the texts' memfds,
	 * whose attributes now get their index */
	memcpy(fds, b->fds, sizeof(int) * b->nfds);
	nfds = b->nfds;
	for (size_t i = 0; i < b->ntext_fds; i++) {
		uint32_t idx = (uint32_t)nfds;

		memcpy(b->buf + b->text_off[i], &idx, sizeof idx);
		fds[nfds++] = b->text_fds[i];
	}
	iov.iov_base = b->buf;
	iov.iov_len = ipc_buf_len(b);
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof ctl);
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? -EPIPE : -errno;
	if ((size_t)n != iov.iov_len)
		return -EIO; /* SEQPACKET is all or nothing; a short write is a kernel contract break */
	return 0;
}

int ipc_send(int sock, struct ipc_buf *b)
{
	return ipc_send_flags(sock, b, 0);
}

int ipc_send_nowait(int sock, struct ipc_buf *b)
{
	return ipc_send_flags(sock, b, MSG_DONTWAIT);
}

int ipc_send_empty(int sock, uint16_t type, uint32_t seq)
{
	struct ipc_buf b;
	int r = ipc_buf_init(&b, type, seq);

	if (r == 0)
		r = ipc_send(sock, &b);
	ipc_buf_release(&b);
	return r;
}

struct ipc_outq_msg {
	struct ipc_outq_msg *next;
	struct ipc_buf b; /* owns its buffer, text_fds and (unlike a caller's) fds[] */
};

static void outq_msg_free(struct ipc_outq_msg *qm)
{
	for (size_t i = 0; i < qm->b.nfds; i++)
		if (qm->b.fds[i] >= 0)
			close(qm->b.fds[i]);
	ipc_buf_release(&qm->b);
	free(qm);
}

/* A copy of b that owns everything it refers to: the record, and a dup of every fd. */
static int outq_msg_new(const struct ipc_buf *b, struct ipc_outq_msg **out)
{
	struct ipc_outq_msg *qm = calloc(1, sizeof *qm);
	size_t len = ipc_buf_len(b);
	int r = 0;

	*out = NULL;
	if (!qm)
		return -ENOMEM;
	qm->b = *b;
	qm->b.nfds = qm->b.ntext_fds = 0;
	for (size_t i = 0; i < IPC_MAX_FDS; i++)
		qm->b.fds[i] = qm->b.text_fds[i] = -1;
	if (!(qm->b.buf = malloc(len))) {
		free(qm);
		return -ENOMEM;
	}
	memcpy(qm->b.buf, b->buf, len);
	for (size_t i = 0; r == 0 && i < b->nfds; i++) {
		if ((qm->b.fds[i] = fcntl(b->fds[i], F_DUPFD_CLOEXEC, 0)) < 0)
			r = -errno;
		else
			qm->b.nfds = i + 1;
	}
	for (size_t i = 0; r == 0 && i < b->ntext_fds; i++) {
		if ((qm->b.text_fds[i] = fcntl(b->text_fds[i], F_DUPFD_CLOEXEC, 0)) < 0)
			r = -errno;
		else
			qm->b.ntext_fds = i + 1;
	}
	if (r < 0) {
		outq_msg_free(qm);
		return r;
	}
	*out = qm;
	return 0;
}

void ipc_outq_init(struct ipc_outq *q)
{
	q->head = NULL;
	q->tail = &q->head;
	q->n = q->bytes = 0;
	q->retry_ms = 0;
}

static bool outq_short_of_memory(int r)
{
	return r == -ENOBUFS || r == -ENOMEM;
}

/* The kernel refused the oldest message for want of memory: try again later, a little later each time */
static void outq_back_off(struct ipc_outq *q)
{
	q->retry_ms = !q->retry_ms ? IPC_OUTQ_RETRY_MIN_MS
	              : q->retry_ms >= IPC_OUTQ_RETRY_MAX_MS / 2 ? IPC_OUTQ_RETRY_MAX_MS : q->retry_ms * 2;
}

int ipc_outq_send(struct ipc_outq *q, int sock, struct ipc_buf *b)
{
	struct ipc_outq_msg *qm;
	int r, sent = 0;

	if ((r = ipc_buf_ready(b)) < 0)
		return r;
	/* a full socket, or the kernel short of memory for a moment: queued, tried again when writable (or,
	 * short of memory, after q->retry_ms) */
	if (!q->n && (sent = ipc_send_nowait(sock, b)) != -EAGAIN && !outq_short_of_memory(sent))
		return sent;
	if ((r = outq_msg_new(b, &qm)) < 0)
		return r;
	if (!q->n && outq_short_of_memory(sent))
		outq_back_off(q);
	*q->tail = qm;
	q->tail = &qm->next;
	q->n++;
	q->bytes += ipc_buf_len(b);
	return 0;
}

int ipc_outq_flush(struct ipc_outq *q, int sock)
{
	int sent = 0;

	while (q->head) {
		struct ipc_outq_msg *qm = q->head;
		int r = ipc_send_nowait(sock, &qm->b);

		if (r == -EAGAIN) {
			q->retry_ms = 0; /* merely full: the socket says when it has room */
			break;
		}
		if (outq_short_of_memory(r)) {
			outq_back_off(q);
			break;
		}
		if (r < 0)
			return r;
		q->retry_ms = 0;
		q->head = qm->next;
		if (!q->head)
			q->tail = &q->head;
		q->n--;
		q->bytes -= ipc_buf_len(&qm->b);
		outq_msg_free(qm);
		sent++;
	}
	return sent;
}

void ipc_outq_clear(struct ipc_outq *q)
{
	while (q->head) {
		struct ipc_outq_msg *qm = q->head;

		q->head = qm->next;
		outq_msg_free(qm);
	}
	ipc_outq_init(q);
}

/* Where records are received: one buffer of IPC_MSG_MAX + 1 bytes per thread, kept for the thread's
 * life (freed when it exits), from which a message takes a copy of just the bytes that arrived: a
 * message used to cost a malloc of the largest record. */
static pthread_key_t ipc_rx_key;
static pthread_once_t ipc_rx_once = PTHREAD_ONCE_INIT;
static bool ipc_rx_keyed;
static __thread char *ipc_rx;

static void ipc_rx_key_make(void)
{
	ipc_rx_keyed = pthread_key_create(&ipc_rx_key, free) == 0;
}

static char *ipc_rx_buf(void)
{
	if (!ipc_rx) {
		pthread_once(&ipc_rx_once, ipc_rx_key_make);
		if (!ipc_rx_keyed || !(ipc_rx = malloc(IPC_MSG_MAX + 1)))
			return NULL;
		if (pthread_setspecific(ipc_rx_key, ipc_rx) != 0) {
			free(ipc_rx);
			ipc_rx = NULL;
		}
	}
	return ipc_rx;
}

static void ipc_msg_reset_fds(struct ipc_msg *m)
{
	for (size_t i = 0; i < IPC_MAX_FDS; i++)
		m->fds[i] = -1;
	m->nfds = 0;
}

void ipc_msg_clear(struct ipc_msg *m)
{
	for (size_t i = 0; i < m->nfds; i++)
		if (m->fds[i] >= 0)
			close(m->fds[i]);
	ipc_msg_reset_fds(m);
	free(m->buf);
	m->buf = NULL;
	m->len = 0;
	memset(m->tb, 0, sizeof m->tb);
}

/* Collects SCM_RIGHTS fds into m, checking every cmsg_len. Every fd seen ends up either in m->fds
 * (closed later by ipc_msg_clear) or closed here; returns -EPROTO if anything was off. */
static int ipc_collect_fds(struct msghdr *msg, struct ipc_msg *m)
{
	int r = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		size_t payload, n;
		const unsigned char *data;

		if (c->cmsg_len < CMSG_LEN(0)) {
			r = -EPROTO;
			break; /* cannot walk further safely */
		}
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			r = -EPROTO; /* no other control message is part of any sluice protocol */
			continue;
		}
		payload = c->cmsg_len - CMSG_LEN(0);
		if (payload % sizeof(int))
			r = -EPROTO;
		n = payload / sizeof(int);
		data = CMSG_DATA(c);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, data + i * sizeof(int), sizeof fd);
			if (m->nfds < IPC_MAX_FDS)
				m->fds[m->nfds++] = fd;
			else {
				close(fd);
				r = -EPROTO;
			}
		}
	}
	return r;
}

static int ipc_recv_flags(int sock, struct ipc_msg *m, int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * IPC_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov;
	struct msghdr msg = {0};
	const struct nlmsghdr *nlh;
	char *rx = ipc_rx_buf();
	ssize_t n;
	int r;

	memset(m, 0, sizeof *m);
	ipc_msg_reset_fds(m);
	if (!rx)
		return -ENOMEM;
	/* One spare byte: a record longer than IPC_MSG_MAX shows up as MSG_TRUNC either way. */
	iov.iov_base = rx;
	iov.iov_len = IPC_MSG_MAX + 1;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof ctl.buf;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? -EPIPE : -errno;
	r = ipc_collect_fds(&msg, m);
	if (r < 0)
		return r;
	if (msg.msg_flags & MSG_CTRUNC)
		return -EPROTO; /* the sender passed more fds than any message carries */
	if (n == 0)
		return -EPIPE;
	if ((msg.msg_flags & MSG_TRUNC) || (size_t)n > IPC_MSG_MAX)
		return -EMSGSIZE;
	if ((size_t)n < sizeof(struct nlmsghdr))
		return -EBADMSG;
	if (!(m->buf = malloc((size_t)n)))
		return -ENOMEM;
	memcpy(m->buf, rx, (size_t)n);
	m->len = (size_t)n;
	nlh = (const struct nlmsghdr *)m->buf;
	if (nlh->nlmsg_len != m->len)
		return -EBADMSG;
	m->type = nlh->nlmsg_type;
	m->seq = nlh->nlmsg_seq;
	return 0;
}

int ipc_recv(int sock, struct ipc_msg *m)
{
	return ipc_recv_flags(sock, m, 0);
}

int ipc_recv_nowait(int sock, struct ipc_msg *m)
{
	return ipc_recv_flags(sock, m, MSG_DONTWAIT);
}

static int ipc_fail(char *err, size_t errlen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int ipc_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static int ipc_check_attr(const struct ipc_attr_spec *s, const struct nlattr *a)
{
	uint16_t plen = mnl_attr_get_payload_len(a);
	const char *p = mnl_attr_get_payload(a);

	switch (s->type) {
	case IPC_T_U8:
		return plen == 1 ? 0 : -1;
	case IPC_T_U16:
		return plen == 2 ? 0 : -1;
	case IPC_T_U32:
	case IPC_T_FD: /* the index itself is checked against the fds by ipc_msg_check */
		return plen == 4 ? 0 : -1;
	case IPC_T_U64:
		return plen == 8 ? 0 : -1;
	case IPC_T_STR:
		/* exactly one NUL, at the end */
		if (plen < 1 || p[plen - 1] != '\0' || memchr(p, '\0', plen - 1u) ||
		    (uint32_t)(plen - 1) > s->max_len)
			return -1;
		return 0;
	case IPC_T_BYTES:
		return plen >= 1 && plen <= s->max_len ? 0 : -1;
	case IPC_T_NONE:
	default:
		return -1;
	}
}

int ipc_msg_check(const struct ipc_proto *p, struct ipc_msg *m, uint32_t state, char *err, size_t errlen)
{
	const struct ipc_msg_spec *spec;
	const struct nlmsghdr *nlh;
	const struct nlattr *a;
	uint32_t fd_seen = 0; /* bit i: extra fd i is named by an IPC_T_FD attribute */
	size_t nfd_attrs = 0;
	int len;

	memset(m->tb, 0, sizeof m->tb);
	if (!m->buf || m->len < sizeof(struct nlmsghdr))
		return ipc_fail(err, errlen, -EBADMSG, "%s: empty message", p->name);
	if (m->type >= p->nmsgs || !p->msgs[m->type].name)
		return ipc_fail(err, errlen, -EBADMSG, "%s: unknown message type %u", p->name, m->type);
	spec = &p->msgs[m->type];
	if (!(spec->states & state))
		return ipc_fail(err, errlen, -EPERM, "%s: %s not allowed in this state", p->name, spec->name);
	if (m->nfds < spec->nfds)
		return ipc_fail(err, errlen, -EBADMSG, "%s: %s carries %zu fds, expected %u", p->name, spec->name,
				m->nfds, spec->nfds);
	nlh = (const struct nlmsghdr *)m->buf;
	a = (const struct nlattr *)((const char *)nlh + MNL_NLMSG_HDRLEN);
	len = (int)(m->len - MNL_NLMSG_HDRLEN);
	if (m->len < MNL_NLMSG_HDRLEN)
		return ipc_fail(err, errlen, -EBADMSG, "%s: %s shorter than its header", p->name, spec->name);
	while (len > 0) {
		uint16_t t;

		if (!mnl_attr_ok(a, len))
			return ipc_fail(err, errlen, -EBADMSG, "%s: %s: malformed attribute", p->name, spec->name);
		t = mnl_attr_get_type(a);
		if (t > IPC_ATTR_MAX || spec->attrs[t].type == IPC_T_NONE)
			return ipc_fail(err, errlen, -EBADMSG, "%s: %s: unexpected attribute %u", p->name, spec->name, t);
		if (m->tb[t])
			return ipc_fail(err, errlen, -EBADMSG, "%s: %s: duplicate attribute %u", p->name, spec->name, t);
		if (ipc_check_attr(&spec->attrs[t], a) < 0)
			return ipc_fail(err, errlen, -EBADMSG, "%s: %s: attribute %u has a bad type or size", p->name,
					spec->name, t);
		if (spec->attrs[t].type == IPC_T_FD) {
			uint32_t idx = mnl_attr_get_u32(a);

			/* an extra fd (never one of the fixed ones), present, and named once */
			if (idx < spec->nfds || idx >= m->nfds || idx >= IPC_MAX_FDS || (fd_seen & (1u << idx)))
				return ipc_fail(err, errlen, -EBADMSG, "%s: %s: attribute %u names fd %u, which is not "
						"one of its %zu extra fds", p->name, spec->name, t, idx,
						m->nfds - spec->nfds);
			fd_seen |= 1u << idx;
			nfd_attrs++;
		}
		m->tb[t] = a;
		a = mnl_attr_next(a);
		len -= (int)MNL_ALIGN(((const struct nlattr *)m->tb[t])->nla_len);
	}
	if (len != 0)
		return ipc_fail(err, errlen, -EBADMSG, "%s: %s: trailing bytes", p->name, spec->name);
	if (m->nfds != spec->nfds + nfd_attrs)
		return ipc_fail(err, errlen, -EBADMSG, "%s: %s carries %zu fds, expected %u (+%zu named by attributes)",
				p->name, spec->name, m->nfds, spec->nfds, nfd_attrs);
	for (unsigned t = 0; t <= IPC_ATTR_MAX; t++) {
		unsigned alt = spec->attrs[t].alt;
		bool alt_ok = alt && alt <= IPC_ATTR_MAX;

		if (spec->attrs[t].required && !m->tb[t] && !(alt_ok && m->tb[alt]))
			return ipc_fail(err, errlen, -EBADMSG, "%s: %s: required attribute %u missing", p->name,
					spec->name, t);
		if (m->tb[t] && alt_ok && m->tb[alt])
			return ipc_fail(err, errlen, -EBADMSG, "%s: %s: attributes %u and %u both present (one or the other)",
					p->name, spec->name, t, alt);
	}
	return 0;
}

bool ipc_has(const struct ipc_msg *m, uint16_t attr)
{
	return attr <= IPC_ATTR_MAX && m->tb[attr];
}

uint8_t ipc_get_u8(const struct ipc_msg *m, uint16_t attr, uint8_t def)
{
	return ipc_has(m, attr) ? mnl_attr_get_u8(m->tb[attr]) : def;
}

uint16_t ipc_get_u16(const struct ipc_msg *m, uint16_t attr, uint16_t def)
{
	return ipc_has(m, attr) ? mnl_attr_get_u16(m->tb[attr]) : def;
}

uint32_t ipc_get_u32(const struct ipc_msg *m, uint16_t attr, uint32_t def)
{
	return ipc_has(m, attr) ? mnl_attr_get_u32(m->tb[attr]) : def;
}

uint64_t ipc_get_u64(const struct ipc_msg *m, uint16_t attr, uint64_t def)
{
	uint64_t v;

	if (!ipc_has(m, attr))
		return def;
	memcpy(&v, mnl_attr_get_payload(m->tb[attr]), sizeof v); /* attributes are only 4-aligned */
	return v;
}

const char *ipc_get_str(const struct ipc_msg *m, uint16_t attr)
{
	return ipc_has(m, attr) ? mnl_attr_get_str(m->tb[attr]) : NULL;
}

const void *ipc_get_bytes(const struct ipc_msg *m, uint16_t attr, size_t *len)
{
	if (!ipc_has(m, attr)) {
		*len = 0;
		return NULL;
	}
	*len = mnl_attr_get_payload_len(m->tb[attr]);
	return mnl_attr_get_payload(m->tb[attr]);
}

static char *ipc_text_fail(char *err, size_t errlen, int e, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Fills err, sets errno = e (after formatting, which may clobber it) and returns NULL. */
static char *ipc_text_fail(char *err, size_t errlen, int e, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	errno = e;
	return NULL;
}

char *ipc_msg_text(struct ipc_msg *m, uint16_t attr, uint16_t fd_attr, size_t max, char *err, size_t errlen)
{
	struct stat st;
	uint32_t idx;
	char *out;
	size_t size, off = 0;
	int fd, seals;

	if (max > IPC_TEXT_MAX)
		max = IPC_TEXT_MAX;
	if (ipc_has(m, attr)) {
		const char *s = ipc_get_str(m, attr);
		size_t len = strlen(s);

		if (len > max)
			return ipc_text_fail(err, errlen, EMSGSIZE, "text of %zu bytes, over the limit of %zu", len, max);
		if (!(out = strdup(s)))
			return ipc_text_fail(err, errlen, ENOMEM, "out of memory");
		return out;
	}
	idx = ipc_get_u32(m, fd_attr, UINT32_MAX);
	if (!ipc_has(m, fd_attr) || idx >= m->nfds || idx >= IPC_MAX_FDS || m->fds[idx] < 0)
		return ipc_text_fail(err, errlen, EBADMSG, "text missing (attribute %u, or an fd named by attribute %u)",
				     attr, fd_attr);
	fd = m->fds[idx];
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return ipc_text_fail(err, errlen, EBADMSG, "the text's fd is not a regular file");
	/* only shmem files (memfd) take seals: no FIFO, socket or FUSE file can stall this read, and no
	 * one can change or resize the text while it is read */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & IPC_TEXT_SEALS) != IPC_TEXT_SEALS)
		return ipc_text_fail(err, errlen, EBADMSG,
				     "the text's fd is not a sealed memfd (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE)");
	if (st.st_size < 0 || (uint64_t)st.st_size > max)
		return ipc_text_fail(err, errlen, EMSGSIZE, "text of %lld bytes, over the limit of %zu",
				     (long long)st.st_size, max);
	size = (size_t)st.st_size;
	if (!(out = malloc(size + 1)))
		return ipc_text_fail(err, errlen, ENOMEM, "out of memory");
	while (off < size) {
		ssize_t n = pread(fd, out + off, size - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EBADMSG;

			free(out);
			return ipc_text_fail(err, errlen, e, "reading the text's fd: %s",
					     n < 0 ? strerror(e) : "shorter than its size");
		}
		off += (size_t)n;
	}
	if (memchr(out, '\0', size)) {
		free(out);
		return ipc_text_fail(err, errlen, EBADMSG, "the text has a NUL byte");
	}
	out[size] = '\0';
	m->fds[idx] = -1; /* read: its memory can go now */
	close(fd);
	return out;
}

int ipc_msg_take_fd(struct ipc_msg *m, size_t idx)
{
	int fd;

	if (idx >= m->nfds)
		return -1;
	fd = m->fds[idx];
	m->fds[idx] = -1;
	return fd;
}

int ipc_peer_cred(int sock, uid_t *uid, gid_t *gid, pid_t *pid)
{
	struct ucred uc;
	socklen_t len = sizeof uc;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	if (len != sizeof uc)
		return -EPROTO;
	if (uid)
		*uid = uc.uid;
	if (gid)
		*gid = uc.gid;
	if (pid)
		*pid = uc.pid;
	return 0;
}
