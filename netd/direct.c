/* Direct mode, sluiced's side: the engine reports that DNS answered an allowed name with an address
 * (DIRECT_ADD) and sluiced, which trusts the engine less than itself, checks everything again before
 * it lets the session open TCP or UDP flows to that address without the proxy: the session exists and
 * its policy (sluiced's own compiled copy) has the direct option, the name is canonical and allowed, the
 * protocol is TCP or UDP and every port is one the policy allows directly for that name over that
 * protocol (policy_direct_ports: a UDP port only where a rule names UDP), the address is one the
 * policy allows for a name (forbidden ranges need a cidr rule), the TTL is clamped, and a session gets
 * at most NETD_DIRECT_RATE grants a second. What it cannot check is that the address really is the
 * name's (the engine did the DNS): a subverted engine could open the allowed ports of a name towards
 * another public address, never other ports, protocols, names or ranges.
 *
 * DIRECT_REVOKE (a policy change) only narrows: the session's conntrack entries towards that address,
 * protocol and port are deleted, so the next packet of such a flow is a new flow and meets the (flushed) set.
 * Only the engine that made a grant can revoke it: once that engine died (a restarted one knows none of its
 * grants, and revocations it had not sent yet died with it), the session's next policy change ends all
 * its direct flows instead (netd_direct_end_orphans), and those still allowed open again with the next
 * DNS answer. */
#include "netd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "policy.h"
#include "testhook.h"
#include "util.h"

#define DIRECT_TTL_MIN 5
#define DIRECT_TTL_MAX 3600

static int parse_addr(const char *s, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (s && inet_pton(AF_INET, s, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		ss->ss_family = AF_INET;
		return 0;
	}
	if (s && inet_pton(AF_INET6, s, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		ss->ss_family = AF_INET6;
		if (IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)ss)->sin6_addr))
			return -EINVAL; /* one spelling per address */
		return 0;
	}
	return -EINVAL;
}

void netd_direct_add(struct netd *d, const struct ipc_msg *m)
{
	const char *id = ipc_get_str(m, NETD_A_ID), *host = ipc_get_str(m, NETD_A_HOST);
	const char *dst = ipc_get_str(m, NETD_A_DST);
	struct netd_sess *s = netd_sess_find(d, id);
	uint16_t ports[NETD_NFT_DIRECT_PORTS_MAX];
	uint8_t proto = ipc_get_u8(m, NETD_A_PROTO, 0);
	char canon[POLICY_HOST_MAX + 1], err[512];
	struct sockaddr_storage ss;
	const uint8_t *raw;
	size_t rawlen = 0, nports;
	uint32_t ttl = ipc_get_u32(m, NETD_A_TTL, 0);
	time_t now = time(NULL);
	int r;

	if (!s || !s->wired || !s->policy || !policy_get_options(s->policy)->direct) {
		log_warnx("engine: direct-mode grant for %s, which has no direct mode; ignored", id ? id : "?");
		return;
	}
	raw = ipc_get_bytes(m, NETD_A_PORTS, &rawlen);
	if (!raw || rawlen % 2 || rawlen / 2 > NETD_NFT_DIRECT_PORTS_MAX || parse_addr(dst, &ss) < 0 ||
	    (proto != POLICY_PROTO_TCP && proto != POLICY_PROTO_UDP) ||
	    policy_canon_host(host, strlen(host), canon) != POLICY_CANON_OK || strcmp(canon, host) != 0) {
		log_warnx("engine: malformed direct-mode grant for session %s; ignored", s->id);
		return;
	}
	nports = rawlen / 2;
	for (size_t i = 0; i < nports; i++) {
		struct policy_decision dec;
		bool ok;

		memcpy(&ports[i], raw + 2 * i, 2);
		ports[i] = ntohs(ports[i]);
		ok = policy_direct_port_allowed(s->policy, host, (enum policy_proto)proto, ports[i]);
		if (ok) {
			policy_decide_addr_proto(s->policy, (struct sockaddr *)&ss, (enum policy_proto)proto, ports[i],
						 true, &dec);
			ok = dec.verdict == POLICY_ALLOW;
		}
		if (!ok) {
			log_warnx("engine: direct-mode grant %s %s port %u for %s in session %s is not allowed by its "
				  "policy; refused", dst, policy_proto_name((enum policy_proto)proto), ports[i], host, s->id);
			return;
		}
	}
	if (now != s->direct_window) {
		s->direct_window = now;
		s->direct_in_window = 0;
	}
	if (++s->direct_in_window > NETD_DIRECT_RATE) {
		if (s->direct_in_window == NETD_DIRECT_RATE + 1)
			log_warnx("session %s: more than %d direct-mode grants in a second; the rest are refused", s->id,
				  NETD_DIRECT_RATE);
		return;
	}
	if (ttl < DIRECT_TTL_MIN)
		ttl = DIRECT_TTL_MIN;
	if (ttl > DIRECT_TTL_MAX)
		ttl = DIRECT_TTL_MAX;
	if (ss.ss_family == AF_INET6 && !d->cfg.v6)
		return; /* the session has no IPv6 route: nothing to open */
	netd_test_direct_delay();
	r = netd_nft_direct_add(d->nft, s->ifname, (struct sockaddr *)&ss, proto, ports, nports,
				(uint64_t)ttl * 1000, err, sizeof err);
	if (r < 0) {
		log_warnx("session %s: direct-mode grant %s for %s: %s", s->id, dst, host, err);
		return;
	}
	s->direct_granted = true;
	log_debug("session %s: direct %s flows to %s (%s), %zu port(s), %u s", s->id,
		  policy_proto_name((enum policy_proto)proto), dst, host, nports, ttl);
}

/* ---- conntrack: end a session's flows to one address and port ---- */

struct ct_tuple {
	int family;
	uint8_t src[16], dst[16];
	uint8_t proto;
	uint16_t dport; /* network order */
	bool all_but_dst; /* every flow from src (any protocol and port) but those to dst: proto, dport unused */
};

struct ct_dump {
	const struct ct_tuple *want; /* src: the session's address */
	unsigned char (*found)[512]; /* malloced: CTA_TUPLE_ORIG attributes to delete */
	size_t *found_len;
	size_t n, cap;
};

static int ct_ip_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	int t = mnl_attr_get_type(a);

	if (t <= CTA_IP_V6_DST)
		tb[t] = a;
	return MNL_CB_OK;
}

static int ct_proto_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	int t = mnl_attr_get_type(a);

	if (t <= CTA_PROTO_DST_PORT)
		tb[t] = a;
	return MNL_CB_OK;
}

static int ct_tuple_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	int t = mnl_attr_get_type(a);

	if (t <= CTA_TUPLE_PROTO)
		tb[t] = a;
	return MNL_CB_OK;
}

static int ct_top_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;

	if (mnl_attr_get_type(a) == CTA_TUPLE_ORIG)
		tb[0] = a;
	else if (mnl_attr_get_type(a) == CTA_STATUS)
		tb[1] = a;
	return MNL_CB_OK;
}

static int ct_msg_cb(const struct nlmsghdr *nlh, void *data)
{
	struct ct_dump *st = data;
	const struct nlattr *top[2] = {NULL}, *tup[CTA_TUPLE_PROTO + 1] = {NULL};
	const struct nlattr *ip[CTA_IP_V6_DST + 1] = {NULL}, *pr[CTA_PROTO_DST_PORT + 1] = {NULL};
	const struct ct_tuple *w = st->want;
	size_t alen = w->family == AF_INET6 ? 16 : 4;
	int sa = w->family == AF_INET6 ? CTA_IP_V6_SRC : CTA_IP_V4_SRC;
	int da = w->family == AF_INET6 ? CTA_IP_V6_DST : CTA_IP_V4_DST;

	mnl_attr_parse(nlh, sizeof(struct nfgenmsg), ct_top_cb, top);
	if (!top[0] || mnl_attr_parse_nested(top[0], ct_tuple_cb, tup) < 0 || !tup[CTA_TUPLE_IP] ||
	    !tup[CTA_TUPLE_PROTO] || mnl_attr_parse_nested(tup[CTA_TUPLE_IP], ct_ip_cb, ip) < 0 ||
	    mnl_attr_parse_nested(tup[CTA_TUPLE_PROTO], ct_proto_cb, pr) < 0)
		return MNL_CB_OK;
	if (!ip[sa] || !ip[da] || mnl_attr_get_payload_len(ip[sa]) != alen || mnl_attr_get_payload_len(ip[da]) != alen ||
	    memcmp(mnl_attr_get_payload(ip[sa]), w->src, alen) != 0)
		return MNL_CB_OK;
	if (w->all_but_dst) {
		/* (a flow redirected to the engine, transparent mode, is the engine's, not a direct one) */
		if (memcmp(mnl_attr_get_payload(ip[da]), w->dst, alen) == 0 ||
		    (top[1] && mnl_attr_get_payload_len(top[1]) >= 4 && (ntohl(mnl_attr_get_u32(top[1])) & IPS_DST_NAT)))
			return MNL_CB_OK;
	} else if (!pr[CTA_PROTO_NUM] || !pr[CTA_PROTO_DST_PORT] || mnl_attr_get_payload_len(pr[CTA_PROTO_NUM]) < 1 ||
	           mnl_attr_get_payload_len(pr[CTA_PROTO_DST_PORT]) < 2 ||
	           memcmp(mnl_attr_get_payload(ip[da]), w->dst, alen) != 0 ||
	           mnl_attr_get_u8(pr[CTA_PROTO_NUM]) != w->proto || mnl_attr_get_u16(pr[CTA_PROTO_DST_PORT]) != w->dport) {
		return MNL_CB_OK;
	}
	if (top[0]->nla_len > 512)
		return MNL_CB_OK;
	if (st->n == st->cap) {
		size_t nc = st->cap ? st->cap * 2 : 8;
		void *nf = realloc(st->found, nc * sizeof *st->found), *nl;

		if (!nf)
			return MNL_CB_ERROR;
		st->found = nf;
		nl = realloc(st->found_len, nc * sizeof *st->found_len);
		if (!nl)
			return MNL_CB_ERROR;
		st->found_len = nl;
		st->cap = nc;
	}
	memcpy(st->found[st->n], top[0], top[0]->nla_len);
	st->found_len[st->n++] = top[0]->nla_len;
	return MNL_CB_OK;
}

/* Deletes the conntrack entries whose original tuple is w (any source port; with all_but_dst, every one from
 * w's source but those to its dst and those redirected to the engine). Returns how many. */
static int ct_kill(const struct ct_tuple *w, char *err, size_t errlen)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	char *buf = malloc(MNL_SOCKET_BUFFER_SIZE);
	struct ct_dump st = {.want = w};
	struct nlmsghdr *nlh;
	struct nfgenmsg *nfg;
	uint32_t seq = (uint32_t)time(NULL), portid;
	int r = 0, killed = 0;

	if (!nl || !buf || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		r = -errno ? -errno : -ENOMEM;
		snprintf(err, errlen, "conntrack socket: %s", strerror(-r));
		goto out;
	}
	portid = mnl_socket_get_portid(nl);
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof *nfg);
	nfg->nfgen_family = (uint8_t)w->family;
	nfg->version = NFNETLINK_V0;
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
		r = -errno;
		snprintf(err, errlen, "listing conntrack: %s", strerror(-r));
		goto out;
	}
	for (;;) {
		ssize_t len = mnl_socket_recvfrom(nl, buf, MNL_SOCKET_BUFFER_SIZE);

		if (len < 0) {
			r = -errno;
			snprintf(err, errlen, "listing conntrack: %s", strerror(-r));
			goto out;
		}
		r = mnl_cb_run(buf, (size_t)len, seq, portid, ct_msg_cb, &st);
		if (r == MNL_CB_STOP)
			break;
		if (r < 0) {
			r = -errno ? -errno : -EPROTO;
			snprintf(err, errlen, "listing conntrack: %s", strerror(-r));
			goto out;
		}
	}
	r = 0;
	for (size_t i = 0; i < st.n; i++) {
		nlh = mnl_nlmsg_put_header(buf);
		nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;
		nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
		nlh->nlmsg_seq = ++seq;
		nfg = mnl_nlmsg_put_extra_header(nlh, sizeof *nfg);
		nfg->nfgen_family = (uint8_t)w->family;
		nfg->version = NFNETLINK_V0;
		memcpy(mnl_nlmsg_get_payload_tail(nlh), st.found[i], st.found_len[i]);
		nlh->nlmsg_len += MNL_ALIGN(st.found_len[i]);
		if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
			continue;
		ssize_t len = mnl_socket_recvfrom(nl, buf, MNL_SOCKET_BUFFER_SIZE);
		/* ENOENT: the flow ended on its own meanwhile */
		if (len > 0 && mnl_cb_run(buf, (size_t)len, seq, portid, NULL, NULL) >= 0)
			killed++;
	}
	r = killed;
out:
	free(st.found);
	free(st.found_len);
	free(buf);
	if (nl)
		mnl_socket_close(nl);
	return r;
}

void netd_direct_revoke(struct netd *d, const struct ipc_msg *m)
{
	const char *id = ipc_get_str(m, NETD_A_ID), *dst = ipc_get_str(m, NETD_A_DST);
	struct netd_sess *s = netd_sess_find(d, id);
	struct sockaddr_storage ss;
	struct ct_tuple w = {0};
	uint8_t proto = ipc_get_u8(m, NETD_A_PROTO, 0);
	char err[256];
	int r;

	if (!s || parse_addr(dst, &ss) < 0 || (proto != IPPROTO_TCP && proto != IPPROTO_UDP))
		return;
	w.family = ss.ss_family;
	w.proto = proto;
	w.dport = htons(ipc_get_u16(m, NETD_A_DPORT, 0));
	if (ss.ss_family == AF_INET) {
		memcpy(w.src, &s->addr4, 4);
		memcpy(w.dst, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	} else {
		if (!d->cfg.v6)
			return;
		memcpy(w.src, &s->addr6, 16);
		memcpy(w.dst, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	}
	r = ct_kill(&w, err, sizeof err);
	if (r < 0)
		log_warnx("session %s: ending direct flows to %s %s port %u: %s", s->id, dst,
			  proto == IPPROTO_UDP ? "udp" : "tcp", ntohs(w.dport), err);
	else
		log_info("session %s: direct flows to %s %s port %u no longer allowed: %d ended", s->id, dst,
			 proto == IPPROTO_UDP ? "udp" : "tcp", ntohs(w.dport), r);
}

void netd_direct_end_orphans(struct netd *d, struct netd_sess *s)
{
	struct ct_tuple w = {.all_but_dst = true};
	char err[256];
	int r, n = 0;

	if (!s->direct_orphaned)
		return;
	s->direct_orphaned = s->direct_granted = false;
	w.family = AF_INET;
	memcpy(w.src, &s->addr4, 4);
	memcpy(w.dst, &d->gw4, 4);
	r = ct_kill(&w, err, sizeof err);
	if (r >= 0 && d->cfg.v6) {
		n = r;
		memset(&w, 0, sizeof w);
		w.all_but_dst = true;
		w.family = AF_INET6;
		memcpy(w.src, &s->addr6, 16);
		memcpy(w.dst, &d->gw6, 16);
		r = ct_kill(&w, err, sizeof err);
	}
	if (r < 0)
		log_warnx("session %s: ending the direct flows that no engine can revoke: %s", s->id, err);
	else
		log_info("session %s: its policy changed after the engine that granted its direct flows died: all its "
		         "direct flows ended (%d), those still allowed open again with the next DNS answer",
		         s->id, n + r);
	if (r > 0 || n > 0) /* the engine audits them with the session's next SESSION_POLICY or SESSION_ADD */
		s->direct_ended += (uint32_t)(n + (r > 0 ? r : 0));
}

/* the protocol travels as its IP protocol number, which nftables and conntrack key on */
_Static_assert((int)POLICY_PROTO_TCP == (int)IPPROTO_TCP && (int)POLICY_PROTO_UDP == (int)IPPROTO_UDP, "policy_proto is the IP protocol");
