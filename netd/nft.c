/* Builds sluice's nftables ruleset and per-session set elements with libnftnl: table, sets, chains and
 * rules, the gateway and session elements, direct mode, reconciliation and teardown. Each change goes
 * out as one batch through nft_batch.c (the netlink transport). */
#include "nft_int.h"

#include <errno.h>
#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "util.h"


/* nft's datatype ids, so `nft list ruleset` shows our sets readably. */
enum { T_IPADDR = 7, T_IP6ADDR = 8, T_INET_PROTO = 12, T_INET_SERVICE = 13, T_IFNAME = 41 };
#define CONCAT2(a, b) (((a) << 6) | (b))
#define CONCAT4(a, b, c, d) (((((((a) << 6) | (b)) << 6) | (c)) << 6) | (d))

/* key layouts: each field in 4-byte register slots */
#define KEY_SRC4_LEN (IFNAMSIZ + 4)
#define KEY_SRC6_LEN (IFNAMSIZ + 16)
#define KEY_SVC4_LEN (IFNAMSIZ + 4 + 4 + 4)
#define KEY_SVC6_LEN (IFNAMSIZ + 16 + 4 + 4)
#define KEY_TREDIR_LEN (IFNAMSIZ + 4) /* ifname . inet_service : inet_service (transparent mode) */
/* direct mode: the same layout as svc4/6 (iif . destination . proto . port), in timeout sets */
#define KEY_DIRECT4_LEN KEY_SVC4_LEN
#define KEY_DIRECT6_LEN KEY_SVC6_LEN

/* Deletes an element if it exists (kernel 6.3+); not in every uapi header yet. Used to refresh an
 * element's timeout (destroy + add in one batch) and to flush elements that may just have expired. */
#ifndef NFT_MSG_DESTROYSETELEM
#define NFT_MSG_DESTROYSETELEM 30
#endif

/* A set whose elements carry an interface name first (reconciliation, session flushes). */
struct purge_set {
	const char *name;
	size_t keylen;
	bool timeouts; /* elements may expire between the dump and the delete: DESTROY, not DELETE */
};

/* ---- expressions ---- */

static void add_expr(struct nftnl_rule *r, struct nftnl_expr *e)
{
	nftnl_rule_add_expr(r, e);
}

static void x_meta(struct nftnl_rule *r, uint32_t key, uint32_t dreg)
{
	struct nftnl_expr *e = nftnl_expr_alloc("meta");

	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, dreg);
	add_expr(r, e);
}

static void x_payload(struct nftnl_rule *r, uint32_t base, uint32_t off, uint32_t len, uint32_t dreg)
{
	struct nftnl_expr *e = nftnl_expr_alloc("payload");

	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, dreg);
	add_expr(r, e);
}

static void x_cmp(struct nftnl_rule *r, uint32_t sreg, uint32_t op, const void *data, uint32_t len)
{
	struct nftnl_expr *e = nftnl_expr_alloc("cmp");

	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, sreg);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
	add_expr(r, e);
}

static void x_cmp_u8(struct nftnl_rule *r, uint32_t sreg, uint32_t op, uint8_t v)
{
	x_cmp(r, sreg, op, &v, 1);
}

static void x_lookup(struct nftnl_rule *r, uint32_t sreg, const char *set, bool inv)
{
	struct nftnl_expr *e = nftnl_expr_alloc("lookup");

	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, sreg);
	nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
	if (inv)
		nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
	add_expr(r, e);
}

static void x_counter(struct nftnl_rule *r)
{
	add_expr(r, nftnl_expr_alloc("counter"));
}

static void x_log(struct nftnl_rule *r, uint32_t group, const char *prefix)
{
	struct nftnl_expr *e = nftnl_expr_alloc("log");

	nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, (uint16_t)group);
	nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, prefix);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOG_SNAPLEN, 128);
	add_expr(r, e);
}

static void x_verdict(struct nftnl_rule *r, int verdict, const char *chain)
{
	struct nftnl_expr *e = nftnl_expr_alloc("immediate");

	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
	if (chain)
		nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
	add_expr(r, e);
}

/* ct state established,related */
static void x_ct_est_rel(struct nftnl_rule *r)
{
	struct nftnl_expr *e = nftnl_expr_alloc("ct");
	uint32_t mask = (1u << 1) | (1u << 2), zero = 0; /* NF_CT_STATE_BIT(ESTABLISHED | RELATED) */

	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
	add_expr(r, e);
	e = nftnl_expr_alloc("bitwise");
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &zero, 4);
	add_expr(r, e);
	x_cmp(r, NFT_REG_1, NFT_CMP_NEQ, &zero, 4);
}

static void x_ifprefix(struct nftnl_rule *r, uint32_t key)
{
	x_meta(r, key, NFT_REG_1);
	x_cmp(r, NFT_REG_1, NFT_CMP_EQ, NETD_LINK_PREFIX, sizeof NETD_LINK_PREFIX - 1);
}

static void x_nfproto(struct nftnl_rule *r, uint8_t proto)
{
	x_meta(r, NFT_META_NFPROTO, NFT_REG_1);
	x_cmp_u8(r, NFT_REG_1, NFT_CMP_EQ, proto);
}

/* Appends one rule to the batch. */
static void put_rule(struct netd_nft *n, struct nftnl_rule *r, const char *chain, const char *what)
{
	struct nlmsghdr *nlh;

	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, NETD_NFT_TABLE);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
	nlh = nft_batch_msg(n, NFT_MSG_NEWRULE, NLM_F_APPEND | NLM_F_CREATE, what);
	if (nlh) {
		nftnl_rule_nlmsg_build_payload(nlh, r);
		nft_batch_next(n);
	}
	nftnl_rule_free(r);
}

static struct nftnl_rule *rule_new(void)
{
	struct nftnl_rule *r = nftnl_rule_alloc();

	if (!r)
		abort(); /* libnftnl allocation failure: nothing sane to do in a privileged parent */
	return r;
}

static void put_set_flags(struct netd_nft *n, const char *name, uint32_t key_type, uint32_t key_len,
			  uint32_t flags)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nlmsghdr *nlh;

	if (!s)
		abort();
	nftnl_set_set_str(s, NFTNL_SET_TABLE, NETD_NFT_TABLE);
	nftnl_set_set_str(s, NFTNL_SET_NAME, name);
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, key_type);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, key_len);
	if (flags)
		nftnl_set_set_u32(s, NFTNL_SET_FLAGS, flags);
	nftnl_set_set_u32(s, NFTNL_SET_ID, n->seq);
	nlh = nft_batch_msg(n, NFT_MSG_NEWSET, NLM_F_CREATE, "create set");
	if (nlh) {
		nftnl_set_nlmsg_build_payload(nlh, s);
		nft_batch_next(n);
	}
	nftnl_set_free(s);
}

static void put_set(struct netd_nft *n, const char *name, uint32_t key_type, uint32_t key_len)
{
	put_set_flags(n, name, key_type, key_len, 0);
}

/* hook < 0: a regular chain; else a base chain of `type` ("filter", "nat") at priority prio. */
static void put_chain_at(struct netd_nft *n, const char *name, int hook, int prio, const char *type, bool flush)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	struct nlmsghdr *nlh;

	if (!c)
		abort();
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, NETD_NFT_TABLE);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	if (hook >= 0) {
		nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t)hook);
		nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
		nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
		nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type);
	}
	nlh = nft_batch_msg(n, NFT_MSG_NEWCHAIN, NLM_F_CREATE, "create chain");
	if (nlh) {
		nftnl_chain_nlmsg_build_payload(nlh, c);
		nft_batch_next(n);
	}
	nftnl_chain_free(c);
	if (flush) {
		struct nftnl_rule *r = rule_new();

		nftnl_rule_set_str(r, NFTNL_RULE_TABLE, NETD_NFT_TABLE);
		nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, name);
		nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
		nlh = nft_batch_msg(n, NFT_MSG_DELRULE, 0, "flush chain");
		if (nlh) {
			nftnl_rule_nlmsg_build_payload(nlh, r);
			nft_batch_next(n);
		}
		nftnl_rule_free(r);
	}
}

static void put_chain(struct netd_nft *n, const char *name, int hook, bool flush)
{
	put_chain_at(n, name, hook, -10, "filter", flush);
}

/* The transparent-mode map: ifname . inet_service -> inet_service (the port to redirect to). */
static void put_tredir_map(struct netd_nft *n)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nlmsghdr *nlh;

	if (!s)
		abort();
	nftnl_set_set_str(s, NFTNL_SET_TABLE, NETD_NFT_TABLE);
	nftnl_set_set_str(s, NFTNL_SET_NAME, "tredir");
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_MAP);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, CONCAT2(T_IFNAME, T_INET_SERVICE));
	nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, KEY_TREDIR_LEN);
	nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, T_INET_SERVICE);
	nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, 2);
	nftnl_set_set_u32(s, NFTNL_SET_ID, n->seq);
	nlh = nft_batch_msg(n, NFT_MSG_NEWSET, NLM_F_CREATE, "create map tredir");
	if (nlh) {
		nftnl_set_nlmsg_build_payload(nlh, s);
		nft_batch_next(n);
	}
	nftnl_set_free(s);
}

/* prerouting (nat): iifname "sl-*" meta l4proto tcp redirect to : iifname . tcp dport map @tredir
 * Only sessions whose policy enables transparent mode have elements (their ports 80 and 443). */
static void rule_tredir(struct netd_nft *n)
{
	struct nftnl_rule *r = rule_new();
	struct nftnl_expr *e;

	x_ifprefix(r, NFT_META_IIFNAME);
	x_meta(r, NFT_META_L4PROTO, NFT_REG_1);
	x_cmp_u8(r, NFT_REG_1, NFT_CMP_EQ, IPPROTO_TCP);
	x_meta(r, NFT_META_IIFNAME, NFT_REG32_00);
	x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_04);
	e = nftnl_expr_alloc("lookup");
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG32_00);
	nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG32_05);
	nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, "tredir");
	add_expr(r, e);
	x_counter(r);
	e = nftnl_expr_alloc("redir");
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG32_05);
	add_expr(r, e);
	put_rule(n, r, "prerouting", "add rule prerouting: transparent redirect");
}

/* transport dport after an l4proto check happens through the set key (proto is part of it) */
static void rule_dst_lookup(struct netd_nft *n, bool v6, const char *chain, const char *set, const char *what)
{
	struct nftnl_rule *r = rule_new();

	x_nfproto(r, v6 ? NFPROTO_IPV6 : NFPROTO_IPV4);
	x_meta(r, NFT_META_IIFNAME, NFT_REG32_00);
	if (v6)
		x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 24, 16, NFT_REG32_04);
	else
		x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 16, 4, NFT_REG32_04);
	x_meta(r, NFT_META_L4PROTO, v6 ? NFT_REG32_08 : NFT_REG32_05);
	x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, v6 ? NFT_REG32_09 : NFT_REG32_06);
	x_lookup(r, NFT_REG32_00, set, false);
	x_counter(r);
	x_verdict(r, NF_ACCEPT, NULL);
	put_rule(n, r, chain, what);
}

static void rule_svc(struct netd_nft *n, bool v6)
{
	rule_dst_lookup(n, v6, "session_in", v6 ? "svc6" : "svc4", "add rule session_in: allowed services");
}

static void rule_antispoof(struct netd_nft *n, const char *chain, bool v6, uint32_t group)
{
	struct nftnl_rule *r = rule_new();

	x_nfproto(r, v6 ? NFPROTO_IPV6 : NFPROTO_IPV4);
	x_meta(r, NFT_META_IIFNAME, NFT_REG32_00);
	if (v6)
		x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 8, 16, NFT_REG32_04);
	else
		x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG32_04);
	x_lookup(r, NFT_REG32_00, v6 ? "src6" : "src4", true);
	x_counter(r);
	x_log(r, group, "sluice-spoof");
	x_verdict(r, NF_DROP, NULL);
	put_rule(n, r, chain, "add rule: anti-spoofing");
}

static void rule_gw_closed(struct netd_nft *n, bool v6)
{
	struct nftnl_rule *r = rule_new();

	x_nfproto(r, v6 ? NFPROTO_IPV6 : NFPROTO_IPV4);
	if (v6)
		x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 24, 16, NFT_REG_1);
	else
		x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 16, 4, NFT_REG_1);
	x_lookup(r, NFT_REG_1, v6 ? "gateways6" : "gateways4", false);
	x_counter(r);
	x_verdict(r, NF_DROP, NULL);
	put_rule(n, r, "input", "add rule input: gateways closed to other interfaces");
}

/* One element message: type NEWSETELEM (timeout_ms > 0: each element expires then), DELSETELEM or
 * DESTROYSETELEM. */
static void put_elems_msg(struct netd_nft *n, uint16_t type, const char *set, const void *keys, size_t keylen,
			  size_t nkeys, uint64_t timeout_ms, const char *what)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nlmsghdr *nlh;

	if (!s)
		abort();
	nftnl_set_set_str(s, NFTNL_SET_TABLE, NETD_NFT_TABLE);
	nftnl_set_set_str(s, NFTNL_SET_NAME, set);
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	for (size_t i = 0; i < nkeys; i++) {
		struct nftnl_set_elem *e = nftnl_set_elem_alloc();

		if (!e)
			abort();
		nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, (const char *)keys + i * keylen, (uint32_t)keylen);
		if (type == NFT_MSG_NEWSETELEM && timeout_ms)
			nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout_ms);
		nftnl_set_elem_add(s, e);
	}
	nlh = nft_batch_msg(n, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0, what);
	if (nlh) {
		nftnl_set_elems_nlmsg_build_payload(nlh, s);
		nft_batch_next(n);
	}
	nftnl_set_free(s);
}

static void put_elems(struct netd_nft *n, bool add, const char *set, const void *keys, size_t keylen,
		      size_t nkeys, const char *what)
{
	put_elems_msg(n, add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, set, keys, keylen, nkeys, 0, what);
}

static void gw_elems(struct netd_nft *n, bool add, const struct in_addr *gw4, const struct in6_addr *gw6)
{
	if (gw4)
		put_elems(n, add, "gateways4", gw4, 4, 1, add ? "add gateway4" : "delete gateway4");
	if (gw6)
		put_elems(n, add, "gateways6", gw6, 16, 1, add ? "add gateway6" : "delete gateway6");
}

int netd_nft_setup(struct netd_nft *n, uint32_t log_group, const struct in_addr *gw4,
		   const struct in6_addr *gw6, char *err, size_t errlen)
{
	struct nftnl_table *t;
	struct nlmsghdr *nlh;
	struct nftnl_rule *r;
	int rc = nft_batch_begin(n);

	if (rc < 0)
		return rc;
	t = nftnl_table_alloc();
	if (!t)
		abort();
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, NETD_NFT_TABLE);
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nlh = nft_batch_msg(n, NFT_MSG_NEWTABLE, NLM_F_CREATE, "create table inet sluice");
	if (nlh) {
		nftnl_table_nlmsg_build_payload(nlh, t);
		nft_batch_next(n);
	}
	nftnl_table_free(t);

	put_set(n, "gateways4", T_IPADDR, 4);
	put_set(n, "gateways6", T_IP6ADDR, 16);
	put_set(n, "src4", CONCAT2(T_IFNAME, T_IPADDR), KEY_SRC4_LEN);
	put_set(n, "src6", CONCAT2(T_IFNAME, T_IP6ADDR), KEY_SRC6_LEN);
	put_set(n, "svc4", CONCAT4(T_IFNAME, T_IPADDR, T_INET_PROTO, T_INET_SERVICE), KEY_SVC4_LEN);
	put_set(n, "svc6", CONCAT4(T_IFNAME, T_IP6ADDR, T_INET_PROTO, T_INET_SERVICE), KEY_SVC6_LEN);
	put_tredir_map(n);
	put_set_flags(n, "direct4", CONCAT4(T_IFNAME, T_IPADDR, T_INET_PROTO, T_INET_SERVICE), KEY_DIRECT4_LEN,
		      NFT_SET_TIMEOUT);
	put_set_flags(n, "direct6", CONCAT4(T_IFNAME, T_IP6ADDR, T_INET_PROTO, T_INET_SERVICE), KEY_DIRECT6_LEN,
		      NFT_SET_TIMEOUT);
	/* base chains first: flushing them removes the jumps before the regular chains are flushed */
	put_chain(n, "input", NF_INET_LOCAL_IN, true);
	put_chain(n, "forward", NF_INET_FORWARD, true);
	put_chain(n, "session_in", -1, true);
	put_chain(n, "session_fwd", -1, true);
	put_chain_at(n, "prerouting", NF_INET_PRE_ROUTING, -100 /* dstnat */, "nat", true);
	rule_tredir(n);

	/* session_in: everything a session interface sends to this host */
	r = rule_new(); /* neighbour discovery to and from the gateway (link-local, hop limit 255) */
	x_nfproto(r, NFPROTO_IPV6);
	x_meta(r, NFT_META_L4PROTO, NFT_REG_1);
	x_cmp_u8(r, NFT_REG_1, NFT_CMP_EQ, IPPROTO_ICMPV6);
	x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1, NFT_REG_1);
	x_cmp_u8(r, NFT_REG_1, NFT_CMP_GTE, 135); /* nd-neighbor-solicit */
	x_cmp_u8(r, NFT_REG_1, NFT_CMP_LTE, 136); /* nd-neighbor-advert */
	x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 7, 1, NFT_REG_1);
	x_cmp_u8(r, NFT_REG_1, NFT_CMP_EQ, 255);
	x_verdict(r, NF_ACCEPT, NULL);
	put_rule(n, r, "session_in", "add rule session_in: neighbour discovery");
	r = rule_new(); /* multicast/broadcast (MLD, mDNS...): dropped, not logged */
	x_meta(r, NFT_META_PKTTYPE, NFT_REG_1);
	x_cmp_u8(r, NFT_REG_1, NFT_CMP_NEQ, 0 /* PACKET_HOST */);
	x_counter(r);
	x_verdict(r, NF_DROP, NULL);
	put_rule(n, r, "session_in", "add rule session_in: non-unicast");
	rule_antispoof(n, "session_in", false, log_group);
	rule_antispoof(n, "session_in", true, log_group);
	r = rule_new();
	x_ct_est_rel(r);
	x_verdict(r, NF_ACCEPT, NULL);
	put_rule(n, r, "session_in", "add rule session_in: established");
	rule_svc(n, false);
	rule_svc(n, true);
	r = rule_new();
	x_counter(r);
	x_log(r, log_group, "sluice-drop");
	x_verdict(r, NF_DROP, NULL);
	put_rule(n, r, "session_in", "add rule session_in: drop the rest");

	/* session_fwd: nothing is routed for a session except direct-mode flows: a new flow only to an
	 * (iif, destination, protocol, port) that sluiced put into direct4/6 for this interface (after
	 * re-validating the engine's DNS-learned grant; the element expires with the answer's TTL), and
	 * then that flow's own packets. Anti-spoofing first: the key trusts the interface, so the
	 * source must be the session's own. No rule routes anything for a session without elements. */
	rule_antispoof(n, "session_fwd", false, log_group);
	rule_antispoof(n, "session_fwd", true, log_group);
	r = rule_new();
	x_ct_est_rel(r);
	x_verdict(r, NF_ACCEPT, NULL);
	put_rule(n, r, "session_fwd", "add rule session_fwd: established direct flows");
	rule_dst_lookup(n, false, "session_fwd", "direct4", "add rule session_fwd: direct flows (IPv4)");
	rule_dst_lookup(n, true, "session_fwd", "direct6", "add rule session_fwd: direct flows (IPv6)");
	r = rule_new();
	x_counter(r);
	x_log(r, log_group, "sluice-fwd");
	x_verdict(r, NF_DROP, NULL);
	put_rule(n, r, "session_fwd", "add rule session_fwd: drop");

	/* input */
	r = rule_new();
	x_ifprefix(r, NFT_META_IIFNAME);
	x_verdict(r, NFT_JUMP, "session_in");
	put_rule(n, r, "input", "add rule input: jump session_in");
	rule_gw_closed(n, false);
	rule_gw_closed(n, true);

	/* forward */
	r = rule_new();
	x_ifprefix(r, NFT_META_IIFNAME);
	x_verdict(r, NFT_JUMP, "session_fwd");
	put_rule(n, r, "forward", "add rule forward: jump session_fwd");
	r = rule_new();
	x_ifprefix(r, NFT_META_OIFNAME);
	x_ct_est_rel(r);
	x_verdict(r, NF_ACCEPT, NULL);
	put_rule(n, r, "forward", "add rule forward: replies to sessions");
	r = rule_new();
	x_ifprefix(r, NFT_META_OIFNAME);
	x_counter(r);
	x_verdict(r, NF_DROP, NULL);
	put_rule(n, r, "forward", "add rule forward: nothing else into sessions");

	gw_elems(n, true, gw4, gw6);
	return nft_batch_talk(n, err, errlen);
}

int netd_nft_gateway_del(struct netd_nft *n, const struct in_addr *gw4, const struct in6_addr *gw6,
			 char *err, size_t errlen)
{
	int rc = nft_batch_begin(n);

	if (rc < 0)
		return rc;
	gw_elems(n, false, gw4, gw6);
	return nft_batch_talk(n, err, errlen);
}

static void key_if(unsigned char *k, const char *ifname)
{
	memset(k, 0, IFNAMSIZ);
	util_strlcpy((char *)k, ifname, IFNAMSIZ);
}

/* Transparent mode: the session's TCP 80 and 443 are redirected to transparent_port. */
static void tredir_elems(struct netd_nft *n, const struct netd_nft_session *s, bool add)
{
	static const uint16_t ports[2] = {80, 443};
	struct nftnl_set *set = nftnl_set_alloc();
	struct nlmsghdr *nlh;
	uint16_t to = htons(s->transparent_port);

	if (!set)
		abort();
	nftnl_set_set_str(set, NFTNL_SET_TABLE, NETD_NFT_TABLE);
	nftnl_set_set_str(set, NFTNL_SET_NAME, "tredir");
	nftnl_set_set_u32(set, NFTNL_SET_FAMILY, NFPROTO_INET);
	for (int i = 0; i < 2; i++) {
		struct nftnl_set_elem *e = nftnl_set_elem_alloc();
		unsigned char key[KEY_TREDIR_LEN];
		uint16_t p = htons(ports[i]);

		if (!e)
			abort();
		memset(key, 0, sizeof key);
		key_if(key, s->ifname);
		memcpy(key + IFNAMSIZ, &p, 2);
		nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, sizeof key);
		if (add)
			nftnl_set_elem_set(e, NFTNL_SET_ELEM_DATA, &to, sizeof to);
		nftnl_set_elem_add(set, e);
	}
	nlh = nft_batch_msg(n, add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, add ? NLM_F_CREATE : 0,
			"session transparent redirect");
	if (nlh) {
		nftnl_set_elems_nlmsg_build_payload(nlh, set);
		nft_batch_next(n);
	}
	nftnl_set_free(set);
}

struct svc_port {
	uint8_t proto;
	uint16_t port;
};

/* The gateway services a session may reach: proxy, DNS (UDP and TCP), and the transparent and SOCKS5
 * listeners when they are on. Returns how many. */
static int session_services(const struct netd_nft_session *s, struct svc_port sv[5])
{
	int n = 0;

	sv[n++] = (struct svc_port){IPPROTO_TCP, s->proxy_port};
	sv[n++] = (struct svc_port){IPPROTO_UDP, s->dns_port};
	sv[n++] = (struct svc_port){IPPROTO_TCP, s->dns_port};
	if (s->transparent_port)
		sv[n++] = (struct svc_port){IPPROTO_TCP, s->transparent_port};
	if (s->socks_port)
		sv[n++] = (struct svc_port){IPPROTO_TCP, s->socks_port};
	return n;
}

static void session_elems(struct netd_nft *n, const struct netd_nft_session *s, bool add)
{
	struct svc_port sv[5];
	int nsvc = session_services(s, sv);

	if (s->addr4 && s->gw4) {
		unsigned char src[KEY_SRC4_LEN], svc[5][KEY_SVC4_LEN];

		key_if(src, s->ifname);
		memcpy(src + IFNAMSIZ, s->addr4, 4);
		for (int i = 0; i < nsvc; i++) {
			uint16_t port = htons(sv[i].port);

			memset(svc[i], 0, KEY_SVC4_LEN);
			key_if(svc[i], s->ifname);
			memcpy(svc[i] + IFNAMSIZ, s->gw4, 4);
			svc[i][IFNAMSIZ + 4] = sv[i].proto;
			memcpy(svc[i] + IFNAMSIZ + 8, &port, 2);
		}
		put_elems(n, add, "src4", src, sizeof src, 1, "session source address (IPv4)");
		put_elems(n, add, "svc4", svc, KEY_SVC4_LEN, (size_t)nsvc, "session services (IPv4)");
	}
	if (s->addr6 && s->gw6) {
		unsigned char src[KEY_SRC6_LEN], svc[5][KEY_SVC6_LEN];

		key_if(src, s->ifname);
		memcpy(src + IFNAMSIZ, s->addr6, 16);
		for (int i = 0; i < nsvc; i++) {
			uint16_t port = htons(sv[i].port);

			memset(svc[i], 0, KEY_SVC6_LEN);
			key_if(svc[i], s->ifname);
			memcpy(svc[i] + IFNAMSIZ, s->gw6, 16);
			svc[i][IFNAMSIZ + 16] = sv[i].proto;
			memcpy(svc[i] + IFNAMSIZ + 20, &port, 2);
		}
		put_elems(n, add, "src6", src, sizeof src, 1, "session source address (IPv6)");
		put_elems(n, add, "svc6", svc, KEY_SVC6_LEN, (size_t)nsvc, "session services (IPv6)");
	}
	if (s->transparent_port)
		tredir_elems(n, s, add);
}

int netd_nft_session_add(struct netd_nft *n, const struct netd_nft_session *s, char *err, size_t errlen)
{
	int rc = nft_batch_begin(n);

	if (rc < 0)
		return rc;
	session_elems(n, s, true);
	return nft_batch_talk(n, err, errlen);
}

static int purge(struct netd_nft *n, const struct purge_set *sets, size_t nsets,
		 bool (*keep)(const char *ifname, void *arg), void *arg, char *err, size_t errlen);

int netd_nft_session_del(struct netd_nft *n, const struct netd_nft_session *s, char *err, size_t errlen)
{
	int rc = nft_batch_begin(n);

	if (rc < 0)
		return rc;
	session_elems(n, s, false);
	rc = nft_batch_talk(n, err, errlen);
	/* direct-mode elements are the DNS proxy's, not a fixed list: those of this interface go too (a dump
	 * of the sets, so only for sessions that can have any) */
	if (s->direct) {
		char e2[256];
		int r2 = netd_nft_direct_flush(n, s->ifname, e2, sizeof e2);

		if (r2 < 0 && rc == 0) {
			util_strlcpy(err, e2, errlen);
			rc = r2;
		}
	}
	return rc;
}

/* ---- reconciliation ---- */

struct prune_state {
	bool (*keep)(const char *ifname, void *arg);
	void *arg;
	unsigned char *keys; /* malloced: doomed keys */
	size_t nkeys, cap, keylen;
	bool count_only; /* only count the elements (keys that are not interface-led) */
	int err;
};

static int prune_elem_cb(struct nftnl_set_elem *e, void *data)
{
	struct prune_state *st = data;
	uint32_t len = 0;
	const unsigned char *k = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &len);
	char ifname[IFNAMSIZ];

	if (!k || len != st->keylen)
		return 0;
	if (st->count_only) {
		st->nkeys++;
		return 0;
	}
	memcpy(ifname, k, IFNAMSIZ);
	ifname[IFNAMSIZ - 1] = '\0';
	if (st->keep(ifname, st->arg))
		return 0;
	if (st->nkeys == st->cap) {
		size_t nc = st->cap ? st->cap * 2 : 64;
		unsigned char *nk = realloc(st->keys, nc * st->keylen);

		if (!nk) {
			st->err = -ENOMEM;
			return -1;
		}
		st->keys = nk;
		st->cap = nc;
	}
	memcpy(st->keys + st->nkeys++ * st->keylen, k, st->keylen);
	return 0;
}

static int prune_msg_cb(const struct nlmsghdr *nlh, void *data)
{
	struct prune_state *st = data;
	struct nftnl_set *s = nftnl_set_alloc();

	if (!s)
		return MNL_CB_ERROR;
	if (nftnl_set_elems_nlmsg_parse(nlh, s) == 0)
		nftnl_set_elem_foreach(s, prune_elem_cb, st);
	nftnl_set_free(s);
	return st->err ? MNL_CB_ERROR : MNL_CB_OK;
}

static int dump_set(struct netd_nft *n, const char *set, struct prune_state *st)
{
	char buf[NFT_RECV_BUF];
	struct nftnl_set *s = nftnl_set_alloc();
	struct nlmsghdr *nlh;
	uint32_t seq = n->seq++;
	int r;

	if (!s)
		return -ENOMEM;
	nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSETELEM, NFPROTO_INET, NLM_F_DUMP | NLM_F_ACK, seq);
	nftnl_set_set_str(s, NFTNL_SET_TABLE, NETD_NFT_TABLE);
	nftnl_set_set_str(s, NFTNL_SET_NAME, set);
	nftnl_set_elems_nlmsg_build_payload(nlh, s);
	nftnl_set_free(s);
	r = nft_dump(n, nlh, prune_msg_cb, st);
	return r < 0 && st->err ? st->err : r;
}

/* Deletes every element of the sets whose interface name keep() rejects, in batches of 256.
 * Returns the number of elements removed or -errno (-ENOENT: no table). */
static int purge(struct netd_nft *n, const struct purge_set *sets, size_t nsets,
		 bool (*keep)(const char *ifname, void *arg), void *arg, char *err, size_t errlen)
{
	int total = 0;

	for (size_t i = 0; i < nsets; i++) {
		struct prune_state st = {.keep = keep, .arg = arg, .keylen = sets[i].keylen};
		int r = dump_set(n, sets[i].name, &st);

		if (r < 0) {
			if (r != -ENOENT)
				snprintf(err, errlen, "listing nftables set %s: %s", sets[i].name, strerror(-r));
			free(st.keys);
			return r;
		}
		/* delete in chunks that fit one netlink message */
		for (size_t off = 0; off < st.nkeys; off += 256) {
			size_t cnt = st.nkeys - off < 256 ? st.nkeys - off : 256;

			r = nft_batch_begin(n);
			if (r == 0) {
				put_elems_msg(n, sets[i].timeouts ? NFT_MSG_DESTROYSETELEM : NFT_MSG_DELSETELEM,
					      sets[i].name, st.keys + off * st.keylen, st.keylen, cnt, 0,
					      "delete stale elements");
				r = nft_batch_talk(n, err, errlen);
			}
			if (r < 0) {
				free(st.keys);
				return r;
			}
		}
		total += (int)st.nkeys;
		free(st.keys);
	}
	return total;
}

int netd_nft_gateways_count(struct netd_nft *n)
{
	struct prune_state st4 = {.keylen = 4, .count_only = true}, st6 = {.keylen = 16, .count_only = true};
	int r = dump_set(n, "gateways4", &st4);

	if (r == 0)
		r = dump_set(n, "gateways6", &st6);
	if (r < 0)
		return r;
	return (int)(st4.nkeys + st6.nkeys);
}

int netd_nft_prune(struct netd_nft *n, bool (*keep)(const char *ifname, void *arg), void *arg,
		   char *err, size_t errlen)
{
	static const struct purge_set sets[] = {
		{"src4", KEY_SRC4_LEN, false}, {"src6", KEY_SRC6_LEN, false}, {"svc4", KEY_SVC4_LEN, false},
		{"svc6", KEY_SVC6_LEN, false}, {"tredir", KEY_TREDIR_LEN, false},
		{"direct4", KEY_DIRECT4_LEN, true}, {"direct6", KEY_DIRECT6_LEN, true}};
	int r = purge(n, sets, ARRAY_SIZE(sets), keep, arg, err, errlen);

	return r == -ENOENT ? 0 : r; /* no table yet: nothing to prune */
}

/* ---- direct mode ---- */

int netd_nft_direct_add(struct netd_nft *n, const char *ifname, const struct sockaddr *dst, uint8_t proto,
			const uint16_t *ports, size_t nports, uint64_t timeout_ms, char *err, size_t errlen)
{
	unsigned char keys[NETD_NFT_DIRECT_PORTS_MAX][KEY_DIRECT6_LEN];
	bool v6 = dst->sa_family == AF_INET6;
	size_t keylen = v6 ? KEY_DIRECT6_LEN : KEY_DIRECT4_LEN, alen = v6 ? 16 : 4;
	const void *a;
	int rc;

	if ((dst->sa_family != AF_INET && !v6) || nports == 0 || nports > NETD_NFT_DIRECT_PORTS_MAX ||
	    timeout_ms == 0) {
		snprintf(err, errlen, "bad direct-mode element");
		return -EINVAL;
	}
	a = v6 ? (const void *)&((const struct sockaddr_in6 *)dst)->sin6_addr
	       : (const void *)&((const struct sockaddr_in *)dst)->sin_addr;
	for (size_t i = 0; i < nports; i++) {
		uint16_t port = htons(ports[i]);

		memset(keys[i], 0, sizeof keys[i]);
		key_if(keys[i], ifname);
		memcpy(keys[i] + IFNAMSIZ, a, alen);
		keys[i][IFNAMSIZ + alen] = proto;
		memcpy(keys[i] + IFNAMSIZ + alen + 4, &port, 2);
	}
	/* contiguous keys of this family's length */
	if (!v6)
		for (size_t i = 1; i < nports; i++)
			memmove((unsigned char *)keys + i * keylen, keys[i], keylen);
	rc = nft_batch_begin(n);
	if (rc < 0)
		return rc;
	/* destroy + add in one transaction: a new answer sets the element's timeout anew */
	put_elems_msg(n, NFT_MSG_DESTROYSETELEM, v6 ? "direct6" : "direct4", keys, keylen, nports, 0,
		      "refresh direct-mode elements");
	put_elems_msg(n, NFT_MSG_NEWSETELEM, v6 ? "direct6" : "direct4", keys, keylen, nports, timeout_ms,
		      "add direct-mode elements");
	return nft_batch_talk(n, err, errlen);
}

static bool keep_other_if(const char *ifname, void *arg)
{
	return strcmp(ifname, (const char *)arg) != 0;
}

int netd_nft_direct_flush(struct netd_nft *n, const char *ifname, char *err, size_t errlen)
{
	static const struct purge_set sets[] = {{"direct4", KEY_DIRECT4_LEN, true},
						{"direct6", KEY_DIRECT6_LEN, true}};

	return purge(n, sets, ARRAY_SIZE(sets), keep_other_if, (void *)ifname, err, errlen);
}

int netd_nft_destroy(struct netd_nft *n, char *err, size_t errlen)
{
	struct nftnl_table *t = nftnl_table_alloc();
	struct nlmsghdr *nlh;
	int rc;

	if (!t)
		return -ENOMEM;
	rc = nft_batch_begin(n);
	if (rc < 0) {
		nftnl_table_free(t);
		return rc;
	}
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, NETD_NFT_TABLE);
	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nlh = nft_batch_msg(n, NFT_MSG_DELTABLE, 0, "delete table inet sluice");
	if (nlh) {
		nftnl_table_nlmsg_build_payload(nlh, t);
		nft_batch_next(n);
	}
	nftnl_table_free(t);
	return nft_batch_talk(n, err, errlen);
}
