/* Unit tests of common/ipc (framing, attribute checks, fd passing) and of netd's permission tables,
 * over socketpairs: no privileges needed. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <libmnl/libmnl.h>

#include "ipc.h"
#include "proto.h"

static int sv[2];

static int setup(void **state)
{
	return ipc_socketpair(sv, false) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
	close(sv[0]);
	close(sv[1]);
	return 0;
}

static int open_fd_count(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static void test_roundtrip(void **state)
{
	struct ipc_buf b;
	struct ipc_msg m;
	char err[256];

	assert_int_equal(ipc_buf_init(&b, NETD_MSG_END, 42), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(m.type, NETD_MSG_END);
	assert_int_equal(m.seq, 42);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), 0);
	assert_string_equal(ipc_get_str(&m, NETD_A_ID), "0123456789");
	assert_false(ipc_has(&m, NETD_A_COMMAND));
	ipc_msg_clear(&m);
}

static void test_all_types(void **state)
{
	struct ipc_buf b;
	struct ipc_msg m;
	char err[256];
	size_t len;

	assert_int_equal(ipc_buf_init(&b, NETD_ENG_AUDIT_DROP, 7), 0);
	ipc_buf_put_str(&b, NETD_A_SRC, "10.0.0.2");
	ipc_buf_put_str(&b, NETD_A_DST, "2001:db8::1");
	ipc_buf_put_u16(&b, NETD_A_SPORT, 65535);
	ipc_buf_put_u16(&b, NETD_A_DPORT, 443);
	ipc_buf_put_u8(&b, NETD_A_PROTO, 17);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_engine_proto, &m, NETD_ES_RUN, err, sizeof err), 0);
	assert_int_equal(ipc_get_u16(&m, NETD_A_SPORT, 0), 65535);
	assert_int_equal(ipc_get_u16(&m, NETD_A_DPORT, 0), 443);
	assert_int_equal(ipc_get_u8(&m, NETD_A_PROTO, 0), 17);
	assert_null(ipc_get_bytes(&m, NETD_A_ID, &len));
	ipc_msg_clear(&m);
	/* u64 */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_SESSION, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "ab");
	ipc_buf_put_u64(&b, NETD_A_CREATED, 0x1122334455667788ull);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_CLIENT, err, sizeof err), 0);
	assert_true(ipc_get_u64(&m, NETD_A_CREATED, 0) == 0x1122334455667788ull);
	ipc_msg_clear(&m);
}

/* sends raw bytes as one record */
static void send_raw(const void *p, size_t len)
{
	assert_int_equal(send(sv[0], p, len, 0), (ssize_t)len);
}

static void test_truncated_header(void **state)
{
	struct ipc_msg m;
	char small[8] = {0};

	send_raw(small, sizeof small);
	assert_int_equal(ipc_recv(sv[1], &m), -EBADMSG);
	ipc_msg_clear(&m);
}

static void test_length_mismatch(void **state)
{
	struct ipc_msg m;
	char buf[64] = {0};
	struct nlmsghdr *nlh = (struct nlmsghdr *)buf;

	nlh->nlmsg_len = 48; /* claims more than is sent */
	nlh->nlmsg_type = NETD_MSG_LIST;
	send_raw(buf, 32);
	assert_int_equal(ipc_recv(sv[1], &m), -EBADMSG);
	ipc_msg_clear(&m);
}

static void test_truncated_attribute(void **state)
{
	struct ipc_msg m;
	char err[256], buf[64] = {0};
	struct nlmsghdr *nlh = (struct nlmsghdr *)buf;
	struct nlattr *a = (struct nlattr *)(buf + sizeof *nlh);

	nlh->nlmsg_len = sizeof *nlh + 6;
	nlh->nlmsg_type = NETD_MSG_END;
	a->nla_len = 20; /* runs past the end of the message */
	a->nla_type = NETD_A_ID;
	send_raw(buf, nlh->nlmsg_len);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "malformed"));
	ipc_msg_clear(&m);
}

static void test_oversized(void **state)
{
	struct ipc_msg m;
	size_t len = IPC_MSG_MAX + 100;
	char *big = calloc(1, len);
	struct nlmsghdr *nlh = (struct nlmsghdr *)big;
	int sb = 4 << 20;

	assert_non_null(big);
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
	nlh->nlmsg_len = (uint32_t)len;
	nlh->nlmsg_type = NETD_MSG_LIST;
	if (send(sv[0], big, len, 0) == (ssize_t)len) {
		assert_int_equal(ipc_recv(sv[1], &m), -EMSGSIZE);
		ipc_msg_clear(&m);
	}
	free(big);
	/* and the builder refuses to build one */
	{
		struct ipc_buf b;
		char *s = malloc(IPC_MSG_MAX);

		assert_non_null(s);
		memset(s, 'x', IPC_MSG_MAX - 1);
		s[IPC_MSG_MAX - 1] = '\0';
		assert_int_equal(ipc_buf_init(&b, NETD_MSG_ATTACH, 1), 0);
		ipc_buf_put_str(&b, NETD_A_POLICY, s);
		assert_int_equal(ipc_send(sv[0], &b), -EMSGSIZE);
		ipc_buf_release(&b);
		free(s);
	}
}

static void test_wrong_type_and_state(void **state)
{
	struct ipc_msg m;
	struct ipc_buf b;
	char err[256];

	/* unknown type */
	assert_int_equal(ipc_send_empty(sv[0], 99, 1), 0);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	ipc_msg_clear(&m);
	/* a reply type sent to the daemon */
	assert_int_equal(ipc_send_empty(sv[0], NETD_MSG_OK, 1), 0);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), -EPERM);
	ipc_msg_clear(&m);
	/* a second ATTACH on an attached connection */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_ATTACH, 1), 0);
	ipc_buf_put_str(&b, NETD_A_COMMAND, "x");
	ipc_buf_put_str(&b, NETD_A_POLICY, "{}");
	ipc_buf_put_fd(&b, 0);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_ATTACHED, err, sizeof err), -EPERM);
	ipc_msg_clear(&m);
	/* engine messages before START are refused in RUN and vice versa */
	assert_int_equal(ipc_send_empty(sv[0], NETD_ENG_START, 1), 0);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_engine_proto, &m, NETD_ES_RUN, err, sizeof err), -EPERM);
	ipc_msg_clear(&m);
}

static void test_bad_attributes(void **state)
{
	struct ipc_msg m;
	struct ipc_buf b;
	char err[256];

	/* missing required attribute */
	assert_int_equal(ipc_send_empty(sv[0], NETD_MSG_END, 1), 0);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "missing"));
	ipc_msg_clear(&m);
	/* string too long, and a u32 where a string belongs, and a duplicate */
	for (int k = 0; k < 4; k++) {
		assert_int_equal(ipc_buf_init(&b, NETD_MSG_END, 1), 0);
		if (k == 0)
			ipc_buf_put_str(&b, NETD_A_ID, "0123456789abcdef0123");
		else if (k == 1)
			ipc_buf_put_u32(&b, NETD_A_ID, 5);
		else if (k == 2) {
			ipc_buf_put_str(&b, NETD_A_ID, "a");
			ipc_buf_put_str(&b, NETD_A_ID, "b");
		} else {
			ipc_buf_put_str(&b, NETD_A_ID, "a");
			ipc_buf_put_str(&b, NETD_A_POLICY, "not allowed in END");
		}
		assert_int_equal(ipc_send(sv[0], &b), 0);
		ipc_buf_release(&b);
		assert_int_equal(ipc_recv(sv[1], &m), 0);
		assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
		ipc_msg_clear(&m);
	}
	/* a string with an embedded NUL */
	{
		char buf[64] = {0};
		struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);

		nlh->nlmsg_type = NETD_MSG_END;
		mnl_attr_put(nlh, NETD_A_ID, 4, "a\0b");
		send_raw(buf, nlh->nlmsg_len);
		assert_int_equal(ipc_recv(sv[1], &m), 0);
		assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
		ipc_msg_clear(&m);
	}
}

/* Interactive approval: ASKS/DECIDE from clients, ASK back to them; VERDICT to the engine and
 * ASK/ASK_END from it. Attribute numbers above 31 (TIMEOUT is 33) are checked like the others. */
static int check_one(const struct ipc_proto *proto, struct ipc_buf *b, uint32_t state)
{
	struct ipc_msg m;
	char err[256];
	int r;

	assert_int_equal(ipc_send(sv[0], b), 0);
	ipc_buf_release(b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	r = ipc_msg_check(proto, &m, state, err, sizeof err);
	ipc_msg_clear(&m);
	return r;
}

static void put_ask(struct ipc_buf *b, uint16_t type, const char *host)
{
	assert_int_equal(ipc_buf_init(b, type, 3), 0);
	ipc_buf_put_str(b, NETD_A_ASK_ID, "0123abcd");
	ipc_buf_put_str(b, NETD_A_ID, "0123456789");
	ipc_buf_put_u32(b, NETD_A_UID, 1000);
	ipc_buf_put_str(b, NETD_A_PROTOCOL, "http");
	ipc_buf_put_str(b, NETD_A_METHOD, "GET");
	if (host)
		ipc_buf_put_str(b, NETD_A_HOST, host);
	ipc_buf_put_u16(b, NETD_A_DPORT, 443);
	ipc_buf_put_u32(b, NETD_A_TIMEOUT, 60);
}

/* RECORDS only on the connection that attached a session; LINES a bounded string, a reply only */
static void test_records_messages(void **state)
{
	struct ipc_buf b;
	char *big = malloc(NETD_LINES_MAX + 2);

	(void)state;
	assert_non_null(big);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_RECORDS, 1), 0);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_ATTACHED), 0);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_RECORDS, 1), 0);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), -EPERM);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_LINES, 1), 0);
	ipc_buf_put_str(&b, NETD_A_LINES, "{\"session\":\"ab\"}\n");
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_CLIENT), 0);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_LINES, 1), 0);
	ipc_buf_put_str(&b, NETD_A_LINES, "{}\n");
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_ATTACHED), -EPERM);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_LINES, 1), 0);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_CLIENT), -EBADMSG); /* no lines */
	memset(big, 'x', NETD_LINES_MAX + 1);
	big[NETD_LINES_MAX + 1] = '\0';
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_LINES, 1), 0);
	ipc_buf_put_str(&b, NETD_A_LINES, big);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_CLIENT), -EBADMSG); /* over the bound */
	free(big);
}

static void test_ask_messages(void **state)
{
	struct ipc_buf b;
	struct ipc_msg m;
	char err[256], longhost[300];

	/* DECIDE: from any client connection, with an 8-character id and a u8 verdict */
	for (int st = 0; st < 2; st++) {
		assert_int_equal(ipc_buf_init(&b, NETD_MSG_DECIDE, 1), 0);
		ipc_buf_put_str(&b, NETD_A_ASK_ID, "0123abcd");
		ipc_buf_put_u8(&b, NETD_A_VERDICT, 1);
		assert_int_equal(check_one(&netd_control_proto, &b, st ? NETD_CS_ATTACHED : NETD_CS_OPEN), 0);
	}
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_DECIDE, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ASK_ID, "0123abcd");
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), -EBADMSG); /* no verdict */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_DECIDE, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ASK_ID, "0123abcde");
	ipc_buf_put_u8(&b, NETD_A_VERDICT, 1);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), -EBADMSG); /* id too long */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_DECIDE, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ASK_ID, "0123abcd");
	ipc_buf_put_u32(&b, NETD_A_VERDICT, 1);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), -EBADMSG); /* verdict not a u8 */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_ASKS, 1), 0);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), 0);
	/* WATCH: on a connection of its own (OPEN), naming the session */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_WATCH, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), 0);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_WATCH, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_ATTACHED), -EPERM);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_WATCH, 1), 0);
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), -EBADMSG);
	/* ASK is a reply: refused at the daemon, read by a client with every field */
	put_ask(&b, NETD_MSG_ASK, "example.com");
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), -EPERM);
	put_ask(&b, NETD_MSG_ASK, "example.com");
	ipc_buf_put_u64(&b, NETD_A_CREATED, 1700000000);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_CLIENT, err, sizeof err), 0);
	assert_string_equal(ipc_get_str(&m, NETD_A_HOST), "example.com");
	assert_int_equal(ipc_get_u16(&m, NETD_A_DPORT, 0), 443);
	assert_int_equal(ipc_get_u32(&m, NETD_A_TIMEOUT, 0), 60);
	assert_int_equal(ipc_get_u64(&m, NETD_A_CREATED, 0), 1700000000);
	ipc_msg_clear(&m);

	/* engine: ASK and ASK_END come from the engine only; a host over 253 bytes or none is refused */
	put_ask(&b, NETD_ENG_ASK, "example.com");
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), 0);
	put_ask(&b, NETD_ENG_ASK, "example.com");
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_RUN), -EPERM);
	put_ask(&b, NETD_ENG_ASK, NULL);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), -EBADMSG);
	memset(longhost, 'a', 254);
	longhost[254] = '\0';
	put_ask(&b, NETD_ENG_ASK, longhost);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), -EBADMSG);
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_ASK_END, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ASK_ID, "0123abcd");
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), 0);
	/* VERDICT goes to a running engine, with who decided */
	for (int st = 0; st < 2; st++) {
		assert_int_equal(ipc_buf_init(&b, NETD_ENG_VERDICT, 1), 0);
		ipc_buf_put_str(&b, NETD_A_ASK_ID, "0123abcd");
		ipc_buf_put_u8(&b, NETD_A_VERDICT, 0);
		ipc_buf_put_u32(&b, NETD_A_UID, 0);
		assert_int_equal(check_one(&netd_engine_proto, &b, st ? NETD_ES_INIT : NETD_ES_RUN), st ? -EPERM : 0);
	}
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_VERDICT, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ASK_ID, "0123abcd");
	ipc_buf_put_u8(&b, NETD_A_VERDICT, 1);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_RUN), -EBADMSG); /* no uid */
}

/* Direct mode: DIRECT_ADD / DIRECT_REVOKE come from the engine only, with every field (the protocol
 * too) and PORTS at most 16 ports; SESSION_POLICY goes to a running engine; POLICY from any client connection. */
static void put_direct(struct ipc_buf *b, size_t nports, bool with_ttl, bool with_proto)
{
	uint16_t ports[17] = {0};

	assert_int_equal(ipc_buf_init(b, NETD_ENG_DIRECT_ADD, 5), 0);
	ipc_buf_put_str(b, NETD_A_ID, "0123456789");
	ipc_buf_put_str(b, NETD_A_HOST, "git.example.org");
	ipc_buf_put_str(b, NETD_A_DST, "192.0.2.7");
	ipc_buf_put_bytes(b, NETD_A_PORTS, ports, nports * 2);
	if (with_proto)
		ipc_buf_put_u8(b, NETD_A_PROTO, 17);
	if (with_ttl)
		ipc_buf_put_u32(b, NETD_A_TTL, 60);
}

static void test_direct_messages(void **state)
{
	struct ipc_buf b;
	(void)state;

	put_direct(&b, 1, true, true);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), 0);
	put_direct(&b, 16, true, true);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), 0);
	put_direct(&b, 17, true, true); /* more than 16 ports */
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), -EBADMSG);
	put_direct(&b, 1, false, true); /* no TTL */
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), -EBADMSG);
	put_direct(&b, 1, true, false); /* no protocol */
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), -EBADMSG);
	put_direct(&b, 1, true, true); /* never towards the engine */
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_RUN), -EPERM);
	/* DIRECT_DONE (the grants of a held DNS answer are in place) only towards a running engine */
	for (int st = 0; st < 3; st++) {
		static const unsigned states[] = {NETD_ES_RUN, NETD_ES_INIT, NETD_ES_PARENT};
		assert_int_equal(ipc_buf_init(&b, NETD_ENG_DIRECT_DONE, 7), 0);
		assert_int_equal(check_one(&netd_engine_proto, &b, states[st]), st == 0 ? 0 : -EPERM);
	}
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_DIRECT_REVOKE, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_str(&b, NETD_A_DST, "2001:db8::7");
	ipc_buf_put_u8(&b, NETD_A_PROTO, 6);
	ipc_buf_put_u16(&b, NETD_A_DPORT, 22);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), 0);
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_DIRECT_REVOKE, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_str(&b, NETD_A_DST, "2001:db8::7");
	ipc_buf_put_u8(&b, NETD_A_PROTO, 6);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), -EBADMSG); /* no port */
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_DIRECT_REVOKE, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_str(&b, NETD_A_DST, "2001:db8::7");
	ipc_buf_put_u16(&b, NETD_A_DPORT, 22);
	assert_int_equal(check_one(&netd_engine_proto, &b, NETD_ES_PARENT), -EBADMSG); /* no protocol */
	for (int st = 0; st < 2; st++) {
		assert_int_equal(ipc_buf_init(&b, NETD_ENG_SESSION_POLICY, 1), 0);
		ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
		ipc_buf_put_str(&b, NETD_A_POLICY, "{}");
		assert_int_equal(check_one(&netd_engine_proto, &b, st ? NETD_ES_PARENT : NETD_ES_RUN), st ? -EPERM : 0);
	}
	for (int st = 0; st < 2; st++) {
		assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
		ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
		ipc_buf_put_str(&b, NETD_A_POLICY, "{}");
		assert_int_equal(check_one(&netd_control_proto, &b, st ? NETD_CS_ATTACHED : NETD_CS_OPEN), 0);
	}
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	assert_int_equal(check_one(&netd_control_proto, &b, NETD_CS_OPEN), -EBADMSG); /* no policy */
}

static void test_fd_passing(void **state)
{
	struct ipc_msg m;
	struct ipc_buf b;
	struct stat a, c;
	char err[256];
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC), got;

	assert_true(fd >= 0);
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_LISTENER, 3), 0);
	ipc_buf_put_u32(&b, NETD_A_KIND, 1);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(m.nfds, 1);
	assert_int_equal(ipc_msg_check(&netd_engine_proto, &m, NETD_ES_INIT, err, sizeof err), 0);
	got = ipc_msg_take_fd(&m, 0);
	assert_true(got >= 0);
	assert_int_equal(ipc_msg_take_fd(&m, 0), -1);
	assert_true(fcntl(got, F_GETFD) & FD_CLOEXEC);
	fstat(fd, &a);
	fstat(got, &c);
	assert_true(a.st_ino == c.st_ino && a.st_dev == c.st_dev);
	ipc_msg_clear(&m);
	close(got);
	close(fd);
}

/* every error path closes the fds that arrived */
static void test_fds_closed_on_error(void **state)
{
	struct ipc_msg m;
	struct ipc_buf b;
	char err[256];
	int before = open_fd_count(), fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	/* an fd on a message that carries none */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_LIST, 1), 0);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	ipc_msg_clear(&m);
	/* an fd on a message that is refused for its state */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_ATTACH, 1), 0);
	ipc_buf_put_str(&b, NETD_A_COMMAND, "x");
	ipc_buf_put_str(&b, NETD_A_POLICY, "{}");
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_ATTACHED, err, sizeof err), -EPERM);
	ipc_msg_clear(&m);
	close(fd);
	assert_int_equal(open_fd_count(), before);
}

/* more fds than any message carries: MSG_CTRUNC, and none of them leaks */
static void test_too_many_fds(void **state)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} ctl;
	struct msghdr msg = {0};
	struct iovec iov;
	struct cmsghdr *c;
	struct ipc_msg m;
	char body[16] = {0};
	int fds[8], before = open_fd_count();

	((struct nlmsghdr *)body)->nlmsg_len = sizeof body;
	((struct nlmsghdr *)body)->nlmsg_type = NETD_MSG_LIST;
	for (int i = 0; i < 8; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	iov.iov_base = body;
	iov.iov_len = sizeof body;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof ctl.buf;
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof fds);
	memcpy(CMSG_DATA(c), fds, sizeof fds);
	assert_int_equal(sendmsg(sv[0], &msg, 0), (ssize_t)sizeof body);
	for (int i = 0; i < 8; i++)
		close(fds[i]);
	assert_int_equal(ipc_recv(sv[1], &m), -EPROTO);
	ipc_msg_clear(&m);
	assert_int_equal(open_fd_count(), before);
}

static void test_eof(void **state)
{
	struct ipc_msg m;

	close(sv[0]);
	sv[0] = open("/dev/null", O_RDONLY); /* for teardown */
	assert_int_equal(ipc_recv(sv[1], &m), -EPIPE);
	ipc_msg_clear(&m);
}

static void test_peer_cred(void **state)
{
	uid_t uid;
	pid_t pid;

	assert_int_equal(ipc_peer_cred(sv[1], &uid, NULL, &pid), 0);
	assert_int_equal(uid, getuid());
	assert_int_equal(pid, getpid());
}

/* ---- long texts (ipc_buf_put_text / ipc_msg_text): inline when short, else a sealed memfd ---- */

/* a string of n 'a'..'z' characters, and a policy-like header so a diff shows where it broke */
static char *text_of(size_t n)
{
	char *t = malloc(n + 1);

	assert_non_null(t);
	for (size_t i = 0; i < n; i++)
		t[i] = (char)('a' + i % 26);
	t[n] = '\0';
	return t;
}

/* a memfd holding len bytes of p, sealed as ipc_buf_put_text seals it (or not) */
static int memfd_of(const void *p, size_t len, bool seal)
{
	int fd = memfd_create("test-ipc", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, p, len), (ssize_t)len);
	if (seal)
		assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
	return fd;
}

static void test_text_inline_and_memfd(void **state)
{
	static const size_t sizes[] = {0, 10, IPC_TEXT_INLINE_MAX, IPC_TEXT_INLINE_MAX + 1, 200000, 3u << 20};
	struct ipc_msg m;
	struct ipc_buf b;
	char err[256];
	int sb = 8 << 20;

	(void)state;
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		char *t = text_of(sizes[i]), *got;
		bool spilled = sizes[i] > IPC_TEXT_INLINE_MAX;
		int before = open_fd_count(), fd = open("/dev/null", O_RDONLY | O_CLOEXEC), netns;
		struct stat a, c;

		/* ATTACH: the text put before the netns fd, which still arrives as fd 0 */
		assert_int_equal(ipc_buf_init(&b, NETD_MSG_ATTACH, 5), 0);
		ipc_buf_put_str(&b, NETD_A_COMMAND, "true");
		assert_int_equal(ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, t), 0);
		ipc_buf_put_fd(&b, fd);
		assert_int_equal(b.ntext_fds, spilled ? 1 : 0);
		assert_int_equal(ipc_send(sv[0], &b), 0);
		ipc_buf_release(&b);
		close(fd);
		assert_int_equal(open_fd_count(), before); /* the sender's memfd is gone with the buffer */
		assert_int_equal(ipc_recv(sv[1], &m), 0);
		assert_int_equal(m.nfds, spilled ? 2 : 1);
		assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), 0);
		assert_int_equal(ipc_has(&m, NETD_A_POLICY), !spilled);
		assert_int_equal(ipc_has(&m, NETD_A_POLICY_FD), spilled);
		if (spilled) {
			assert_int_equal(ipc_get_u32(&m, NETD_A_POLICY_FD, 9), 1);
			assert_int_equal(fcntl(m.fds[1], F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE),
					 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
		}
		netns = ipc_msg_take_fd(&m, 0);
		assert_true(fstat(netns, &a) == 0 && stat("/dev/null", &c) == 0);
		assert_true(a.st_ino == c.st_ino && a.st_dev == c.st_dev);
		close(netns);
		got = ipc_msg_text(&m, NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX, err, sizeof err);
		assert_non_null(got);
		assert_int_equal(strlen(got), sizes[i]);
		assert_memory_equal(got, t, sizes[i]);
		if (spilled)
			assert_int_equal(m.fds[1], -1); /* read and closed */
		free(got);
		ipc_msg_clear(&m);
		assert_int_equal(open_fd_count(), before);
		free(t);
	}
	/* the engine's SESSION_POLICY too */
	{
		char *t = text_of(100000), *got;

		assert_int_equal(ipc_buf_init(&b, NETD_ENG_SESSION_POLICY, 6), 0);
		ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
		assert_int_equal(ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, t), 0);
		assert_int_equal(ipc_send(sv[0], &b), 0);
		ipc_buf_release(&b);
		assert_int_equal(ipc_recv(sv[1], &m), 0);
		assert_int_equal(ipc_msg_check(&netd_engine_proto, &m, NETD_ES_RUN, err, sizeof err), 0);
		assert_int_equal(ipc_get_u32(&m, NETD_A_POLICY_FD, 9), 0);
		got = ipc_msg_text(&m, NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX, err, sizeof err);
		assert_non_null(got);
		assert_string_equal(got, t);
		free(got);
		ipc_msg_clear(&m);
		free(t);
	}
}

/* builds a POLICY message whose text is in fd (passed at index 0), checks it, and reads it back with
 * limit max: returns what ipc_msg_text gave (NULL with errno, reason in err) */
static char *text_via_fd(int fd, size_t max, char *err, size_t errlen)
{
	struct ipc_msg m;
	struct ipc_buf b;
	char *got;
	int e;

	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 7), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 0);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	close(fd);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_ATTACHED, err, errlen), 0);
	got = ipc_msg_text(&m, NETD_A_POLICY, NETD_A_POLICY_FD, max, err, errlen);
	e = errno;
	ipc_msg_clear(&m);
	errno = e;
	return got;
}

/* what ipc_msg_text refuses: an unsealed memfd, a file on disk, a pipe, a NUL, over the limit */
static void test_text_refused(void **state)
{
	char err[256], tmpl[] = "/tmp/test-ipc-XXXXXX", *got;
	int before = open_fd_count(), p[2], fd;

	(void)state;
	/* a sealed memfd within the limit: the control case */
	got = text_via_fd(memfd_of("{\"allow\":[]}", 12, true), 12, err, sizeof err);
	assert_non_null(got);
	assert_string_equal(got, "{\"allow\":[]}");
	free(got);
	/* unsealed: the sender could change it while it is read */
	assert_null(text_via_fd(memfd_of("{}", 2, false), 100, err, sizeof err));
	assert_int_equal(errno, EBADMSG);
	assert_non_null(strstr(err, "sealed"));
	/* a regular file on disk (no seals possible) */
	fd = mkstemp(tmpl);
	assert_true(fd >= 0);
	unlink(tmpl);
	assert_int_equal(write(fd, "{}", 2), 2);
	assert_null(text_via_fd(fd, 100, err, sizeof err));
	assert_int_equal(errno, EBADMSG);
	assert_non_null(strstr(err, "sealed"));
	/* a pipe: would block the reader */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_null(text_via_fd(p[0], 100, err, sizeof err));
	assert_int_equal(errno, EBADMSG);
	assert_non_null(strstr(err, "regular file"));
	close(p[1]);
	/* a NUL inside */
	assert_null(text_via_fd(memfd_of("{}\0{}", 5, true), 100, err, sizeof err));
	assert_int_equal(errno, EBADMSG);
	assert_non_null(strstr(err, "NUL"));
	/* one byte over the receiver's limit, in a memfd and inline */
	assert_null(text_via_fd(memfd_of("0123456789", 10, true), 9, err, sizeof err));
	assert_int_equal(errno, EMSGSIZE);
	assert_non_null(strstr(err, "over the limit"));
	{
		struct ipc_msg m;
		struct ipc_buf b;

		assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 8), 0);
		ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
		ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, "0123456789");
		assert_int_equal(ipc_send(sv[0], &b), 0);
		ipc_buf_release(&b);
		assert_int_equal(ipc_recv(sv[1], &m), 0);
		assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), 0);
		assert_null(ipc_msg_text(&m, NETD_A_POLICY, NETD_A_POLICY_FD, 9, err, sizeof err));
		assert_int_equal(errno, EMSGSIZE);
		ipc_msg_clear(&m);
	}
	/* every fd that came is closed, refused or not */
	assert_int_equal(open_fd_count(), before);
}

/* sends b (released), receives it and returns ipc_msg_check's verdict in state st of proto */
static int check_fds(const struct ipc_proto *proto, struct ipc_buf *b, uint32_t st, char *err, size_t errlen)
{
	struct ipc_msg m;
	int r;

	assert_int_equal(ipc_send(sv[0], b), 0);
	ipc_buf_release(b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	r = ipc_msg_check(proto, &m, st, err, errlen);
	ipc_msg_clear(&m);
	return r;
}

/* the fd count rules: an IPC_T_FD attribute names exactly one extra fd, after the fixed ones */
static void test_text_fd_rules(void **state)
{
	struct ipc_buf b;
	char err[256];
	int before = open_fd_count(), fd = memfd_of("{}", 2, true), nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

	(void)state;
	/* POLICY_FD present, no fd came */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 0);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "extra fds"));
	/* an fd came that no attribute names (the policy inline) */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_str(&b, NETD_A_POLICY, "{}");
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "fds"));
	/* both forms at once */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_str(&b, NETD_A_POLICY, "{}");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 0);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "both"));
	/* neither */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "missing"));
	/* an index past the fds that came */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 3);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	/* ATTACH: the policy may not name fd 0, which is the netns */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_ATTACH, 1), 0);
	ipc_buf_put_str(&b, NETD_A_COMMAND, "x");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 0);
	ipc_buf_put_fd(&b, nul);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	/* ... but fd 1 */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_ATTACH, 1), 0);
	ipc_buf_put_str(&b, NETD_A_COMMAND, "x");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 1);
	ipc_buf_put_fd(&b, nul);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), 0);
	/* ATTACH with the policy's fd and without the netns one */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_ATTACH, 1), 0);
	ipc_buf_put_str(&b, NETD_A_COMMAND, "x");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 0);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	/* an extra fd on messages that have no fd attribute (control and engine) */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_END, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_END, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 0);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_control_proto, &b, NETD_CS_OPEN, err, sizeof err), -EBADMSG);
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_LISTENER, 1), 0);
	ipc_buf_put_u32(&b, NETD_A_KIND, 1);
	ipc_buf_put_fd(&b, nul);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_engine_proto, &b, NETD_ES_INIT, err, sizeof err), -EBADMSG);
	/* a memfd policy is still refused in the wrong state, and its fd closed */
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_SESSION_POLICY, 1), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "0123456789");
	ipc_buf_put_u32(&b, NETD_A_POLICY_FD, 0);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(check_fds(&netd_engine_proto, &b, NETD_ES_INIT, err, sizeof err), -EPERM);
	close(fd);
	close(nul);
	assert_int_equal(open_fd_count(), before);
}

/* the sender's side: limits, and the memfds it owns closed whatever happens */
static void test_text_sender_limits(void **state)
{
	struct ipc_buf b;
	char *t = text_of(IPC_TEXT_INLINE_MAX + 1);
	int before = open_fd_count(), nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

	(void)state;
	/* built, never sent: release closes the memfd */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	assert_int_equal(ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, t), 0);
	assert_int_equal(b.ntext_fds, 1);
	ipc_buf_release(&b);
	assert_int_equal(open_fd_count(), before + 1);
	/* no room for one more fd */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
	for (int i = 0; i < IPC_MAX_FDS; i++)
		ipc_buf_put_fd(&b, nul);
	assert_int_equal(ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, t), -EMSGSIZE);
	assert_int_equal(ipc_send(sv[0], &b), -EMSGSIZE);
	ipc_buf_release(&b);
	/* a text that fits no attribute no longer overflows: it spills even in a nearly full record */
	{
		char *filler = text_of(60000);

		assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
		ipc_buf_put_str(&b, NETD_A_ID, filler);
		ipc_buf_put_str(&b, NETD_A_COMMAND, filler);
		filler[11027] = '\0'; /* leaves 8 bytes: room for a u32 attribute, not for the text */
		ipc_buf_put_str(&b, NETD_A_NAME, filler);
		assert_int_equal(ipc_buf_len(&b), IPC_MSG_MAX - 8);
		assert_int_equal(ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, "{\"allow\":[\"short\"]}"), 0);
		assert_int_equal(b.ntext_fds, 1); /* 20 bytes, but the record had no room left */
		ipc_buf_release(&b);
		free(filler);
	}
	/* over IPC_TEXT_MAX: refused, nothing leaks */
	{
		char *huge = text_of((size_t)IPC_TEXT_MAX + 1);

		assert_int_equal(ipc_buf_init(&b, NETD_MSG_POLICY, 1), 0);
		assert_int_equal(ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, huge), -EMSGSIZE);
		assert_int_equal(ipc_send(sv[0], &b), -EMSGSIZE);
		ipc_buf_release(&b);
		free(huge);
	}
	close(nul);
	assert_int_equal(open_fd_count(), before);
	free(t);
}

/* A message's buffer grows with its attributes (it starts small): the limits are those of a record of
 * IPC_MSG_MAX bytes, exactly, every padding byte sent is zero, and a received message holds exactly the
 * bytes that arrived. */
static void test_sizes(void **state)
{
	struct ipc_buf b;
	struct ipc_msg m;
	char err[256], *s = malloc(IPC_MSG_MAX);
	const struct nlattr *a;
	size_t len;
	int sb = 4 << 20;

	assert_non_null(s);
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
	/* odd lengths (padding after each) across every growth, up to a record of exactly IPC_MSG_MAX */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_LINES, 7), 0);
	for (size_t n = 1; ipc_buf_len(&b) + 4 + ((n + 1 + 3) & ~3u) <= IPC_MSG_MAX - 4 - 3000; n = n * 3 + 1) {
		memset(s, 'a' + (int)(n % 26), n);
		s[n] = '\0';
		ipc_buf_put_str(&b, NETD_A_LINES, s); /* the same type again: check refuses it, framing is what counts */
		assert_false(b.overflow);
	}
	while (IPC_MSG_MAX - ipc_buf_len(&b) > 60000) { /* an attribute holds at most 64 KiB */
		memset(s, 'y', 50000);
		s[50000] = '\0';
		ipc_buf_put_str(&b, NETD_A_COMMAND, s);
	}
	len = IPC_MSG_MAX - ipc_buf_len(&b) - 4; /* the payload that fills the record to the byte */
	memset(s, 'z', len - 1);
	s[len - 1] = '\0';
	ipc_buf_put_str(&b, NETD_A_ERRMSG, s);
	assert_false(b.overflow);
	assert_int_equal(ipc_buf_len(&b), IPC_MSG_MAX);
	ipc_buf_put_u8(&b, NETD_A_ERRNO, 1); /* not one byte more */
	assert_true(b.overflow);
	b.overflow = false; /* (sent as it was before the refused attribute) */
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(m.len, IPC_MSG_MAX);
	/* walk the record: every attribute's padding is zero */
	for (len = MNL_NLMSG_HDRLEN; len < m.len; len += MNL_ALIGN(a->nla_len)) {
		const char *p;
		size_t plen;

		a = (const struct nlattr *)(m.buf + len);
		assert_true(a->nla_len >= MNL_ATTR_HDRLEN && len + MNL_ALIGN(a->nla_len) <= m.len);
		p = mnl_attr_get_payload(a);
		plen = mnl_attr_get_payload_len(a);
		for (size_t i = plen; i < MNL_ALIGN(plen); i++)
			assert_int_equal(p[i], 0);
	}
	assert_int_equal(len, IPC_MSG_MAX);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_CLIENT, err, sizeof err), -EBADMSG);
	ipc_msg_clear(&m);
	/* a small message: received whole, and only it */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_END, 9), 0);
	ipc_buf_put_str(&b, NETD_A_ID, "abc");
	assert_int_equal(b.cap < 1024, true);
	assert_int_equal(ipc_send(sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(ipc_recv(sv[1], &m), 0);
	assert_int_equal(m.len, MNL_NLMSG_HDRLEN + MNL_ATTR_HDRLEN + 4);
	assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), 0);
	assert_string_equal(ipc_get_str(&m, NETD_A_ID), "abc");
	ipc_msg_clear(&m);
	free(s);
}

/* The outgoing queue (ipc_outq): what a full socket did not take waits, in order, with its own copies of
 * the fds it carries; a flush sends it when the socket has room, and a message given meanwhile never
 * overtakes it. */
static void test_outq(void **state)
{
	struct ipc_outq q;
	struct ipc_buf b;
	struct ipc_msg m;
	struct stat a, c;
	char err[256], id[16];
	int before = open_fd_count(), fd = open("/dev/null", O_RDONLY | O_CLOEXEC), r;
	unsigned sent = 0, got = 0;

	assert_true(fd >= 0);
	ipc_outq_init(&q);
	/* fill the socket: the first messages go at once, the rest queue */
	while (q.n == 0) {
		assert_int_equal(ipc_buf_init(&b, NETD_MSG_END, ++sent), 0);
		snprintf(id, sizeof id, "%010u", sent);
		ipc_buf_put_str(&b, NETD_A_ID, id);
		assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0);
		ipc_buf_release(&b);
		assert_true(sent < 100000);
	}
	assert_int_equal(q.n, 1);
	assert_true(q.bytes > 0);
	/* a message with an fd queues behind it, and the caller's fd may close at once */
	assert_int_equal(ipc_buf_init(&b, NETD_ENG_LISTENER, ++sent), 0);
	ipc_buf_put_u32(&b, NETD_A_KIND, 1);
	ipc_buf_put_fd(&b, fd);
	assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0);
	ipc_buf_release(&b);
	assert_int_equal(q.n, 2);
	fstat(fd, &a);
	close(fd);
	/* a malformed message is refused, not queued */
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_END, 0), 0);
	for (int i = 0; i < 5000; i++)
		ipc_buf_put_str(&b, NETD_A_ID, "0123456789012345678901234567890123456789");
	assert_int_equal(ipc_outq_send(&q, sv[0], &b), -EMSGSIZE);
	ipc_buf_release(&b);
	assert_int_equal(q.n, 2);
	/* nothing leaves while the socket is full */
	assert_int_equal(ipc_outq_flush(&q, sv[0]), 0);
	/* the reader drains: every message arrives once, in the order given */
	for (;;) {
		r = ipc_recv_nowait(sv[1], &m);
		if (r == -EAGAIN) {
			ipc_msg_clear(&m);
			if (!q.n)
				break;
			assert_true(ipc_outq_flush(&q, sv[0]) > 0);
			continue;
		}
		assert_int_equal(r, 0);
		assert_int_equal(m.seq, ++got);
		if (got < sent) {
			assert_int_equal(ipc_msg_check(&netd_control_proto, &m, NETD_CS_OPEN, err, sizeof err), 0);
			snprintf(id, sizeof id, "%010u", got);
			assert_string_equal(ipc_get_str(&m, NETD_A_ID), id);
		} else {
			int fd2;

			assert_int_equal(ipc_msg_check(&netd_engine_proto, &m, NETD_ES_INIT, err, sizeof err), 0);
			fd2 = ipc_msg_take_fd(&m, 0);
			assert_true(fd2 >= 0);
			fstat(fd2, &c);
			assert_true(a.st_ino == c.st_ino && a.st_dev == c.st_dev);
			close(fd2);
		}
		ipc_msg_clear(&m);
	}
	assert_int_equal(got, sent);
	assert_int_equal(q.bytes, 0);
	/* queued messages that never go are freed with their fds */
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (unsigned i = 0; q.n < 3; i++) {
		assert_int_equal(ipc_buf_init(&b, NETD_ENG_REOPEN_LOG, i), 0);
		ipc_buf_put_fd(&b, fd);
		assert_int_equal(ipc_outq_send(&q, sv[0], &b), 0);
		ipc_buf_release(&b);
		assert_true(i < 100000);
	}
	close(fd);
	ipc_outq_clear(&q);
	assert_int_equal(q.n, 0);
	assert_null(q.head);
	teardown(state); /* the records still in the socket hold fds too */
	assert_int_equal(open_fd_count(), before - 2);
	setup(state);
	/* a peer that went away: an error, nothing queued */
	close(sv[1]);
	assert_int_equal(ipc_buf_init(&b, NETD_MSG_OK, 1), 0);
	assert_int_equal(ipc_outq_send(&q, sv[0], &b), -EPIPE);
	ipc_buf_release(&b);
	assert_int_equal(q.n, 0);
	sv[1] = open("/dev/null", O_RDONLY | O_CLOEXEC); /* for teardown */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_all_types, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_length_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_attribute, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_type_and_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_attributes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ask_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_direct_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fd_passing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fds_closed_on_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_many_fds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_cred, setup, teardown),
		cmocka_unit_test_setup_teardown(test_records_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_text_inline_and_memfd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_text_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_text_fd_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_text_sender_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_outq, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sizes, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
