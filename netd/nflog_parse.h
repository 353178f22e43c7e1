/* Parsing of NFLOG netlink messages (packets nftables dropped with `log group N`) into the
 * addresses, protocol and ports the audit log records. The packet bytes are attacker-controlled
 * (a session crafted them): every read is bounds-checked; see tests/fuzz/fuzz_nflog.c. */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct netd_drop {
	int family; /* AF_INET / AF_INET6 */
	char src[46], dst[46];
	uint8_t proto;
	uint16_t sport, dport; /* 0 unless TCP/UDP/SCTP and the header was captured */
	char prefix[64];       /* the rule's log prefix ("sluice-drop", "sluice-spoof", "sluice-fwd") */
	uint32_t indev;        /* the interface it came in on (NFULA_IFINDEX_INDEV), 0 if not said */
	bool has_seq;          /* the message carried NFULA_SEQ (the group was bound with NFULNL_CFG_F_SEQ) */
	uint32_t seq;          /* the group instance's packet number: a gap is messages the kernel lost */
};

/* Parses the IP packet at the start of a captured payload. 0, or -EBADMSG when it is not a
 * complete enough IPv4/IPv6 header. */
int netd_nflog_parse_packet(const uint8_t *p, size_t len, struct netd_drop *d);
/* Parses one netlink message of the NFLOG subsystem. 0 with *d filled for a logged packet,
 * -ENOENT for other message types, -EBADMSG for malformed ones. */
int netd_nflog_parse_msg(const void *nlmsg, size_t len, struct netd_drop *d);
