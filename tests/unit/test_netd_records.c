/* Unit tests of sluiced's RECORDS reply (netd/records.c): a session's records from its mark on, one
 * per exchange (the close, or a decision that never closed), nothing of another session, over valid
 * LINES messages; a line longer than one message holds is skipped, never copied (it overflowed the
 * send buffer before), and the records around it still arrive. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netd.h"

#define REC(ev, flow, sess, host)                                                                                      \
	"{\"time\":\"t\",\"event\":\"" ev "\",\"flow\":\"" flow "\",\"session\":\"" sess "\",\"protocol\":\"http\","   \
	"\"host\":\"" host "\",\"port\":80,\"decision\":\"allow\"}\n"

static void put(int fd, const char *text)
{
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
}

/* Receives the reply to seq: the lines of every LINES message, until LIST_END. */
static char *receive(int sock, uint32_t seq, unsigned *messages)
{
	size_t n = 0;
	char *all = calloc(1, 1);

	assert_non_null(all);
	*messages = 0;
	for (;;) {
		struct ipc_msg m;
		char err[256];
		const char *lines;

		assert_int_equal(ipc_recv_nowait(sock, &m), 0);
		assert_int_equal(m.seq, seq);
		assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_CLIENT, err, sizeof err), 0);
		if (m.type == NETD_MSG_LIST_END) {
			ipc_msg_clear(&m);
			return all;
		}
		assert_int_equal(m.type, NETD_MSG_LINES);
		lines = ipc_get_str(&m, NETD_A_LINES);
		assert_non_null(lines);
		assert_non_null(all = realloc(all, n + strlen(lines) + 1));
		memcpy(all + n, lines, strlen(lines) + 1);
		n += strlen(lines);
		(*messages)++;
		ipc_msg_clear(&m);
	}
}

static void test_records(void **state)
{
	int sv[2], fd = memfd_create("netd-records-test", MFD_CLOEXEC), big = 4 << 20;
	size_t hostlen = NETD_LINES_MAX + 100; /* a valid record, longer than a LINES message holds */
	char path[64], *line, *got;
	long long mark;
	unsigned messages;
	(void)state;

	assert_true(fd >= 0);
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	put(fd, REC("complete", "0000000000000009", "s1", "before.test")); /* before the session's mark */
	mark = netd_records_mark(path);
	assert_true(mark > 0);
	put(fd, REC("decision", "0000000000000001", "s1", "a.test"));
	put(fd, REC("complete", "0000000000000002", "s2", "other.test"));
	line = malloc(hostlen + 200);
	assert_non_null(line);
	snprintf(line, hostlen + 200, "{\"time\":\"t\",\"session\":\"s1\",\"decision\":\"deny\",\"host\":\"%0*d\"}\n",
	         (int)hostlen, 7);
	put(fd, line);
	free(line);
	put(fd, REC("close", "0000000000000001", "s1", "a.test"));
	put(fd, REC("decision", "0000000000000003", "s1", "b.test")); /* the engine was killed */

	assert_int_equal(ipc_socketpair(sv, false), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big), 0);
	assert_int_equal(netd_records_send(path, mark, "s1", sv[0], 7), 0);
	got = receive(sv[1], 7, &messages);
	assert_string_equal(got, REC("close", "0000000000000001", "s1", "a.test")
	                                 REC("decision", "0000000000000003", "s1", "b.test"));
	assert_int_equal(messages, 1);
	free(got);

	/* no log yet: an empty reply, not an error */
	assert_int_equal(netd_records_send("/nonexistent/audit.log", 0, "s1", sv[0], 8), 0);
	got = receive(sv[1], 8, &messages);
	assert_string_equal(got, "");
	assert_int_equal(messages, 0);
	free(got);
	close(sv[0]);
	close(sv[1]);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_records),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
