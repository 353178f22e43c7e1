/* Unit tests of the NFLOG message and packet parser (netd/nflog_parse.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>

#include "nflog_parse.h"

static const uint8_t ipv4_tcp[] = {
	0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 100, 64, 0, 2, 198, 18, 1, 11, /* IPv4 header */
	0x9c, 0x40, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 2, 0, 0, 0, 0, 0, 0,      /* TCP 40000 -> 80 */
};

static size_t build(char *buf, const void *payload, size_t len, const char *prefix)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *g;

	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
	g = mnl_nlmsg_put_extra_header(nlh, sizeof *g);
	g->nfgen_family = AF_INET;
	if (prefix)
		mnl_attr_put_strz(nlh, NFULA_PREFIX, prefix);
	if (payload)
		mnl_attr_put(nlh, NFULA_PAYLOAD, len, payload);
	return nlh->nlmsg_len;
}

static void test_ipv4_tcp(void **state)
{
	char buf[512];
	struct netd_drop d;
	size_t n = build(buf, ipv4_tcp, sizeof ipv4_tcp, "sluice-drop");

	assert_int_equal(netd_nflog_parse_msg(buf, n, &d), 0);
	assert_int_equal(d.family, AF_INET);
	assert_string_equal(d.src, "100.64.0.2");
	assert_string_equal(d.dst, "198.18.1.11");
	assert_int_equal(d.proto, 6);
	assert_int_equal(d.sport, 40000);
	assert_int_equal(d.dport, 80);
	assert_string_equal(d.prefix, "sluice-drop");
}

static void test_ipv6_udp(void **state)
{
	uint8_t p[48] = {0x60, 0, 0, 0, 0, 8, 17, 64};
	struct netd_drop d;

	inet_pton(AF_INET6, "2001:db8:100::2", p + 8);
	inet_pton(AF_INET6, "2001:db8:1::11", p + 24);
	p[40] = 0x30; p[41] = 0x39; p[42] = 0; p[43] = 53;
	assert_int_equal(netd_nflog_parse_packet(p, sizeof p, &d), 0);
	assert_string_equal(d.src, "2001:db8:100::2");
	assert_string_equal(d.dst, "2001:db8:1::11");
	assert_int_equal(d.proto, 17);
	assert_int_equal(d.sport, 12345);
	assert_int_equal(d.dport, 53);
}

static void test_truncated(void **state)
{
	char buf[512];
	struct netd_drop d;
	uint8_t bad_ihl[20];

	/* header cut short, IHL pointing past the capture, ports missing, unknown version */
	assert_int_equal(netd_nflog_parse_packet(ipv4_tcp, 19, &d), -EBADMSG);
	memcpy(bad_ihl, ipv4_tcp, 20);
	bad_ihl[0] = 0x4f;
	assert_int_equal(netd_nflog_parse_packet(bad_ihl, 20, &d), -EBADMSG);
	assert_int_equal(netd_nflog_parse_packet(ipv4_tcp, 22, &d), 0);
	assert_int_equal(d.sport, 0);
	assert_int_equal(d.dport, 0);
	bad_ihl[0] = 0x55;
	assert_int_equal(netd_nflog_parse_packet(bad_ihl, 20, &d), -EBADMSG);
	/* no payload attribute; a message length larger than the buffer; another message type */
	assert_int_equal(netd_nflog_parse_msg(buf, build(buf, NULL, 0, "x"), &d), -EBADMSG);
	assert_int_equal(netd_nflog_parse_msg(buf, build(buf, ipv4_tcp, sizeof ipv4_tcp, NULL) - 4, &d), -EBADMSG);
	build(buf, ipv4_tcp, sizeof ipv4_tcp, NULL);
	((struct nlmsghdr *)buf)->nlmsg_type = NLMSG_DONE;
	assert_int_equal(netd_nflog_parse_msg(buf, ((struct nlmsghdr *)buf)->nlmsg_len, &d), -ENOENT);
}

static void test_prefix_sanitised(void **state)
{
	char buf[512];
	struct netd_drop d;

	assert_int_equal(netd_nflog_parse_msg(buf, build(buf, ipv4_tcp, sizeof ipv4_tcp, "a\nb\x1b"), &d), 0);
	assert_string_equal(d.prefix, "a?b?");
}

static void test_later_fragment_has_no_ports(void **state)
{
	uint8_t p[sizeof ipv4_tcp];
	struct netd_drop d;

	memcpy(p, ipv4_tcp, sizeof p);
	p[6] = 0x00;
	p[7] = 0x10; /* fragment offset 16 */
	assert_int_equal(netd_nflog_parse_packet(p, sizeof p, &d), 0);
	assert_int_equal(d.dport, 0);
}

/* The group's sequence number (NFULNL_CFG_F_SEQ): nflog.c counts a gap as messages the kernel lost. A
 * short attribute is no number; a message without one has none. And the incoming interface. */
static void test_seq(void **state)
{
	char buf[512];
	struct netd_drop d;
	struct nlmsghdr *nlh = (struct nlmsghdr *)buf;
	size_t n = build(buf, ipv4_tcp, sizeof ipv4_tcp, "sluice-drop");

	assert_int_equal(netd_nflog_parse_msg(buf, n, &d), 0);
	assert_false(d.has_seq);
	mnl_attr_put_u32(nlh, NFULA_SEQ, htonl(0xfffffffeu));
	assert_int_equal(netd_nflog_parse_msg(buf, nlh->nlmsg_len, &d), 0);
	assert_true(d.has_seq);
	assert_int_equal(d.seq, 0xfffffffeu);
	assert_string_equal(d.dst, "198.18.1.11");
	n = build(buf, ipv4_tcp, sizeof ipv4_tcp, NULL);
	mnl_attr_put_u16(nlh, NFULA_SEQ, 7);
	assert_int_equal(netd_nflog_parse_msg(buf, nlh->nlmsg_len, &d), 0);
	assert_false(d.has_seq);
	/* the incoming interface (the per-session share of the audit rate is counted by it) */
	n = build(buf, ipv4_tcp, sizeof ipv4_tcp, NULL);
	assert_int_equal(netd_nflog_parse_msg(buf, nlh->nlmsg_len, &d), 0);
	assert_int_equal(d.indev, 0);
	mnl_attr_put_u32(nlh, NFULA_IFINDEX_INDEV, htonl(4242));
	assert_int_equal(netd_nflog_parse_msg(buf, nlh->nlmsg_len, &d), 0);
	assert_int_equal(d.indev, 4242);
	/* a packet that does not parse still carries its number (it counts for the gaps) */
	n = build(buf, ipv4_tcp, 10, NULL);
	mnl_attr_put_u32(nlh, NFULA_SEQ, htonl(5));
	assert_int_equal(netd_nflog_parse_msg(buf, nlh->nlmsg_len, &d), -EBADMSG);
	assert_true(d.has_seq);
	assert_int_equal(d.seq, 5);
	(void)n;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ipv4_tcp),
		cmocka_unit_test(test_ipv6_udp),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_prefix_sanitised),
		cmocka_unit_test(test_later_fragment_has_no_ports),
		cmocka_unit_test(test_seq),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
