/* Fuzz target: one record as it arrives on a control or engine socket, through ipc_recv and the
 * permission tables of netd's two protocols and of the --fs ask channel in every state, with 0, 1 and 2 fds attached (sealed memfds
 * holding "{}", as a long policy travels), and at the head of a record at the edge of IPC_MSG_MAX. Checks that a message that passes the table only yields
 * attributes of the declared type and size, that its fds are exactly the fixed ones plus one per
 * IPC_T_FD attribute (each naming a distinct extra fd), that a required inline/memfd pair came in
 * exactly one form, and that ipc_msg_text then reads back the text it carried. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fsask.h"
#include "ipc.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* made once: every record that carries fds carries copies of these (the receiver closes its copies) */
static int sealed_memfd(void)
{
	static int fds[2] = {-1, -1};
	static size_t next;
	int fd;

	if (fds[1] >= 0)
		return fds[next++ % 2];
	fd = memfd_create("fuzz-ipc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || write(fd, "{}", 2) != 2 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		abort();
	fds[fds[0] < 0 ? 0 : 1] = fd;
	return fd;
}

/* sends data as one record with nfds fds */
static bool send_record(int sock, const uint8_t *data, size_t size, size_t nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 2)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {(void *)data, size};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	int fds[2];
	ssize_t n;

	for (size_t i = 0; i < nfds; i++)
		fds[i] = sealed_memfd();
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
	n = sendmsg(sock, &msg, 0);
	return n == (ssize_t)size;
}

static void check_one(const struct ipc_proto *p, uint32_t state, const uint8_t *data, size_t size, size_t nfds)
{
	/* one pair for every check: a record that was sent is read by the one recvmsg of ipc_recv, whatever
	 * the verdict, so none is left for the next check */
	static int sv[2] = {-1, -1};
	struct ipc_msg m;
	char err[256];

	if (sv[0] < 0 && ipc_socketpair(sv, true) < 0)
		abort();
	if (send_record(sv[0], data, size, nfds) && ipc_recv(sv[1], &m) == 0 &&
	    ipc_msg_check(p, &m, state, err, sizeof err) == 0) {
		const struct ipc_msg_spec *s = &p->msgs[m.type];
		uint32_t named = 0;
		size_t nfd_attrs = 0;

		for (uint16_t a = 0; a <= IPC_ATTR_MAX; a++) {
			const struct ipc_attr_spec *as = &s->attrs[a];

			if (as->required && !ipc_has(&m, a) && !(as->alt && ipc_has(&m, as->alt)))
				abort();
			if (!ipc_has(&m, a))
				continue;
			if (as->type == IPC_T_NONE)
				abort();
			if (as->alt && ipc_has(&m, as->alt))
				abort();
			if (as->type == IPC_T_STR && strlen(ipc_get_str(&m, a)) > as->max_len)
				abort();
			if (as->type == IPC_T_FD) {
				uint32_t idx = ipc_get_u32(&m, a, UINT32_MAX);

				if (idx < s->nfds || idx >= m.nfds || (named & (1u << idx)))
					abort();
				named |= 1u << idx;
				nfd_attrs++;
			}
		}
		if (m.nfds != s->nfds + nfd_attrs)
			abort();
		if (s->attrs[NETD_A_POLICY].alt == NETD_A_POLICY_FD) {
			const char *inl = ipc_get_str(&m, NETD_A_POLICY);
			char *t = ipc_msg_text(&m, NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX, err, sizeof err);

			if (!t || strcmp(t, inl ? inl : "{}") != 0)
				abort();
			free(t);
		}
	}
	ipc_msg_clear(&m);
}

/* The same bytes at the head of a record of IPC_MSG_MAX - 1, IPC_MSG_MAX or IPC_MSG_MAX + 1 bytes (the
 * rest zero), with one fd: the edge of the receive buffer, from which a message copies exactly what
 * arrived. Over IPC_MSG_MAX the record is refused (-EMSGSIZE); otherwise it arrives whole or its header
 * is refused (-EBADMSG), and what arrives whole goes through both tables. */
static void check_edge(const uint8_t *data, size_t size)
{
	static int sv[2] = {-1, -1};
	static uint8_t *rec;
	size_t len = IPC_MSG_MAX - 1 + size % 3;
	struct ipc_msg m;
	char err[256];
	int r;

	if (!rec && !(rec = calloc(1, IPC_MSG_MAX + 1)))
		abort();
	if (sv[0] < 0 && ipc_socketpair(sv, true) < 0)
		abort();
	memcpy(rec, data, size);
	memset(rec + size, 0, IPC_MSG_MAX + 1 - size);
	if (!send_record(sv[0], rec, len, 1))
		return;
	r = ipc_recv(sv[1], &m);
	if (len > IPC_MSG_MAX ? r != -EMSGSIZE : (r != 0 && r != -EBADMSG) || (r == 0 && m.len != len))
		abort();
	if (r == 0) {
		(void)ipc_msg_check(&netd_control_proto, &m, NETD_CS_ATTACHED, err, sizeof err);
		(void)ipc_msg_check(&netd_engine_proto, &m, NETD_ES_RUN, err, sizeof err);
	}
	ipc_msg_clear(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t cstates[] = {NETD_CS_OPEN, NETD_CS_ATTACHED, NETD_CS_CLIENT};
	static const uint32_t estates[] = {NETD_ES_INIT, NETD_ES_RUN, NETD_ES_PARENT};

	if (size == 0 || size > 65536)
		return 0;
	for (size_t nfds = 0; nfds <= 2; nfds++)
		for (size_t i = 0; i < 3; i++) {
			check_one(&netd_control_proto, cstates[i], data, size, nfds);
			check_one(&netd_engine_proto, estates[i], data, size, nfds);
			/* the --fs ask channel (common/fsask.h): gate and client sides */
			if (i < 2)
				check_one(&fsask_proto, i == 0 ? FSASK_CS_GATE : FSASK_CS_CLIENT, data, size, nfds);
		}
	check_edge(data, size);
	return 0;
}
