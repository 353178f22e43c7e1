/* bench-ipc: the cost of one IPC message (common/ipc.c) from build to checked receipt, over a
 * SOCK_SEQPACKET socketpair in one thread: ipc_buf_init, the attributes, ipc_send, ipc_recv,
 * ipc_msg_check, ipc_msg_clear, ipc_buf_release. Three sizes as sluiced sends them to its engine: a
 * dropped packet's AUDIT_DROP (~80 bytes), a SESSION_ADD with a 1 KiB policy, one with a 30 KiB policy
 * (the longest that goes inline). Prints ns per message for each; for instruction counts run it under
 * `valgrind --tool=callgrind` (docs/netd.md, "Engine protocol" has the figures).
 *
 * usage: bench-ipc [N [KIND]]   (N messages of each size, default 200000; KIND 0, 1 or 2: that size only) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc.h"
#include "proto.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* one message of the kind, built, sent, received and checked; 0 or -errno */
static int one(int sv[2], int kind, const char *policy, uint32_t seq)
{
	struct ipc_buf b;
	struct ipc_msg m;
	char err[256];
	int r;

	if ((r = ipc_buf_init(&b, kind == 0 ? NETD_ENG_AUDIT_DROP : NETD_ENG_SESSION_ADD, seq)) < 0)
		return r;
	if (kind == 0) {
		ipc_buf_put_str(&b, NETD_A_SRC, "100.64.0.2");
		ipc_buf_put_str(&b, NETD_A_DST, "198.18.1.11");
		ipc_buf_put_u16(&b, NETD_A_SPORT, 40000);
		ipc_buf_put_u16(&b, NETD_A_DPORT, 9000);
		ipc_buf_put_u8(&b, NETD_A_PROTO, 17);
	} else {
		ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
		ipc_buf_put_u32(&b, NETD_A_UID, 1000);
		ipc_buf_put_str(&b, NETD_A_COMMAND, "npm ci");
		ipc_buf_put_str(&b, NETD_A_ADDR4, "100.64.0.2");
		ipc_buf_put_str(&b, NETD_A_GW4, "100.64.0.1");
		ipc_buf_put_str(&b, NETD_A_ADDR6, "2001:db8:100::2");
		ipc_buf_put_str(&b, NETD_A_GW6, "2001:db8:100::1");
		ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, policy);
		ipc_buf_put_u32(&b, NETD_A_POLICY_VERSION, 1);
	}
	r = ipc_send(sv[0], &b);
	ipc_buf_release(&b);
	if (r < 0)
		return r;
	r = ipc_recv(sv[1], &m);
	if (r == 0)
		r = ipc_msg_check(&netd_engine_proto, &m, NETD_ES_RUN, err, sizeof err);
	if (r == 0 && m.seq != seq)
		r = -EBADMSG;
	ipc_msg_clear(&m);
	return r;
}

int main(int argc, char **argv)
{
	static const char *names[] = {"AUDIT_DROP (~80 B)", "SESSION_ADD, 1 KiB policy", "SESSION_ADD, 30 KiB policy"};
	static const size_t plen[] = {0, 1024, 30 * 1024};
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 200000;
	int only = argc > 2 ? atoi(argv[2]) : -1, sv[2];

	if (n <= 0 || ipc_socketpair(sv, false) < 0) {
		fprintf(stderr, "usage: bench-ipc [N [KIND]]\n");
		return 2;
	}
	for (int kind = 0; kind < 3; kind++) {
		char *policy;
		double t0;

		if (only >= 0 && kind != only)
			continue;
		if (!(policy = malloc(plen[kind] + 1)))
			return 1;
		memset(policy, 'x', plen[kind]);
		policy[plen[kind]] = '\0';
		if (plen[kind] >= 2) {
			policy[0] = '{';
			policy[plen[kind] - 1] = '}';
		}
		t0 = now();
		for (long i = 0; i < n; i++) {
			int r = one(sv, kind ? 1 : 0, policy, (uint32_t)i + 1);

			if (r < 0) {
				fprintf(stderr, "bench-ipc: %s: %s\n", names[kind], strerror(-r));
				return 1;
			}
		}
		printf("%-28s %8.0f ns per message (%ld)\n", names[kind], (now() - t0) * 1e9 / (double)n, n);
		free(policy);
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
