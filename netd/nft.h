/* nftables state of sluice, through libnftnl + libmnl (no `nft` process): table `inet sluice` and
 * nothing else. Per-packet cost does not depend on the number of sessions: session interfaces are
 * recognised by their reserved name prefix (one compare), and each session only adds elements to
 * hash sets (anti-spoofing: interface . source; allowed services: interface . gateway . protocol .
 * port). Every change is one netlink batch whose ACKs are all read and mapped back to the command
 * that caused them. */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define NETD_NFT_TABLE "sluice"
#define NETD_LINK_PREFIX "sl-" /* reserved: every interface named sl-* is a session interface */

struct netd_nft;

/* One session's view for the rules. Borrowed strings/addresses; NULL address = family unused. */
struct netd_nft_session {
	const char *ifname; /* host-side interface, NETD_LINK_PREFIX... */
	const struct in_addr *addr4, *gw4;
	const struct in6_addr *addr6, *gw6;
	uint16_t proxy_port, dns_port;
	uint16_t transparent_port; /* 0 = transparent mode off; else TCP 80/443 are redirected here */
	uint16_t socks_port;       /* 0 = no SOCKS5 listener */
	bool direct;               /* direct mode: the session may have direct4/6 elements (flushed on delete) */
};

/* Opens the netfilter netlink socket. Returns NULL with *err = -errno. */
struct netd_nft *netd_nft_new(int *err);
void netd_nft_free(struct netd_nft *n); /* NULL no-op */

/* Creates (idempotently) table, sets and chains and (re)writes the rules, atomically; then adds the
 * gateway addresses (which become unreachable from non-session interfaces). Live sessions' set
 * elements are left alone, so several instances can share the table. */
int netd_nft_setup(struct netd_nft *n, uint32_t log_group, const struct in_addr *gw4,
		   const struct in6_addr *gw6, char *err, size_t errlen);
/* Removes our gateway addresses from the gateway sets. */
int netd_nft_gateway_del(struct netd_nft *n, const struct in_addr *gw4, const struct in6_addr *gw6,
			 char *err, size_t errlen);

/* Adds / removes one session's elements in one batch. */
int netd_nft_session_add(struct netd_nft *n, const struct netd_nft_session *s, char *err, size_t errlen);
int netd_nft_session_del(struct netd_nft *n, const struct netd_nft_session *s, char *err, size_t errlen);

/* Deletes every set element whose interface name `keep` rejects (reconciliation after a crash).
 * Returns the number of elements removed or -errno. */
int netd_nft_prune(struct netd_nft *n, bool (*keep)(const char *ifname, void *arg), void *arg,
		   char *err, size_t errlen);

/* Direct mode: lets the session on `ifname` open new `proto` (IPPROTO_TCP) flows to dst (AF_INET or
 * AF_INET6; port ignored) on each of ports, for timeout_ms; a flow opened in time lives on after the
 * element expired. Adding an element again sets its timeout anew. One batch. The caller validated
 * everything (the engine that asks for it is untrusted). */
#define NETD_NFT_DIRECT_PORTS_MAX 16
int netd_nft_direct_add(struct netd_nft *n, const char *ifname, const struct sockaddr *dst, uint8_t proto,
			const uint16_t *ports, size_t nports, uint64_t timeout_ms, char *err, size_t errlen);
/* Removes every direct-mode element of ifname (policy change, teardown). Returns how many or -errno. */
int netd_nft_direct_flush(struct netd_nft *n, const char *ifname, char *err, size_t errlen);

/* Deletes table inet sluice (when the last instance stops). */
int netd_nft_destroy(struct netd_nft *n, char *err, size_t errlen);
/* How many instances (sluiced, embedded helpers: whatever their run directory) still have a gateway in
 * the shared table; -errno (-ENOENT: there is no table). */
int netd_nft_gateways_count(struct netd_nft *n);
