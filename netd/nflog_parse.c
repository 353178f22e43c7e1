/* Bounds-checked parsing of NFLOG messages and of the IP headers they carry. */
#include "nflog_parse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <string.h>

#include "util.h"

static bool has_ports(uint8_t proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP || proto == IPPROTO_UDPLITE;
}

static void ports(const uint8_t *p, size_t len, size_t off, struct netd_drop *d)
{
	if (!has_ports(d->proto) || off > len || len - off < 4)
		return;
	d->sport = (uint16_t)((p[off] << 8) | p[off + 1]);
	d->dport = (uint16_t)((p[off + 2] << 8) | p[off + 3]);
}

int netd_nflog_parse_packet(const uint8_t *p, size_t len, struct netd_drop *d)
{
	d->sport = d->dport = 0;
	if (len < 1)
		return -EBADMSG;
	if ((p[0] >> 4) == 4) {
		size_t ihl;
		uint16_t frag;

		if (len < 20)
			return -EBADMSG;
		ihl = (size_t)(p[0] & 0x0f) * 4;
		if (ihl < 20 || ihl > len)
			return -EBADMSG;
		d->family = AF_INET;
		d->proto = p[9];
		inet_ntop(AF_INET, p + 12, d->src, sizeof d->src);
		inet_ntop(AF_INET, p + 16, d->dst, sizeof d->dst);
		frag = (uint16_t)((p[6] << 8) | p[7]);
		if ((frag & 0x1fff) == 0) /* only the first fragment carries ports */
			ports(p, len, ihl, d);
		return 0;
	}
	if ((p[0] >> 4) == 6) {
		if (len < 40)
			return -EBADMSG;
		d->family = AF_INET6;
		d->proto = p[6]; /* next header; extension headers are not walked: ports stay 0 */
		inet_ntop(AF_INET6, p + 8, d->src, sizeof d->src);
		inet_ntop(AF_INET6, p + 24, d->dst, sizeof d->dst);
		ports(p, len, 40, d);
		return 0;
	}
	return -EBADMSG;
}

struct attrs {
	const struct nlattr *tb[NFULA_MAX + 1];
	const char *end; /* nlh + nlmsg_len: libmnl walks up to the *aligned* length, which can be past it */
};

static int attr_cb(const struct nlattr *a, void *data)
{
	struct attrs *at = data;
	uint16_t t;

	/* the header itself may start in the alignment padding past the message: check it fits first */
	if ((const char *)a + sizeof *a > at->end || (const char *)a + a->nla_len > at->end)
		return MNL_CB_ERROR;
	t = mnl_attr_get_type(a);
	if (t <= NFULA_MAX)
		at->tb[t] = a;
	return MNL_CB_OK;
}

int netd_nflog_parse_msg(const void *nlmsg, size_t len, struct netd_drop *d)
{
	const struct nlmsghdr *nlh = nlmsg;
	struct attrs at = {{0}};
	const struct nlattr *pl;
	int r;

	memset(d, 0, sizeof *d);
	if (len < sizeof *nlh || nlh->nlmsg_len < sizeof *nlh || nlh->nlmsg_len > len)
		return -EBADMSG;
	if (nlh->nlmsg_type != ((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET))
		return -ENOENT;
	if (nlh->nlmsg_len < MNL_NLMSG_HDRLEN + MNL_ALIGN(sizeof(struct nfgenmsg)))
		return -EBADMSG;
	at.end = (const char *)nlh + nlh->nlmsg_len;
	if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), attr_cb, &at) != MNL_CB_OK)
		return -EBADMSG;
	pl = at.tb[NFULA_PAYLOAD];
	if (!pl)
		return -EBADMSG;
	if (at.tb[NFULA_PREFIX]) {
		const char *s = mnl_attr_get_payload(at.tb[NFULA_PREFIX]);
		size_t n = mnl_attr_get_payload_len(at.tb[NFULA_PREFIX]);

		n = n < sizeof d->prefix - 1 ? n : sizeof d->prefix - 1;
		memcpy(d->prefix, s, n);
		d->prefix[n] = '\0';
		for (size_t i = 0; i < n; i++) /* stays a label: no control bytes reach a log */
			if ((unsigned char)d->prefix[i] < 0x20 || (unsigned char)d->prefix[i] > 0x7e)
				d->prefix[i] = d->prefix[i] ? '?' : '\0';
	}
	r = netd_nflog_parse_packet(mnl_attr_get_payload(pl), mnl_attr_get_payload_len(pl), d);
	if (at.tb[NFULA_IFINDEX_INDEV] && mnl_attr_get_payload_len(at.tb[NFULA_IFINDEX_INDEV]) >= sizeof(uint32_t)) {
		uint32_t be;

		memcpy(&be, mnl_attr_get_payload(at.tb[NFULA_IFINDEX_INDEV]), sizeof be);
		d->indev = ntohl(be);
	}
	if (at.tb[NFULA_SEQ] && mnl_attr_get_payload_len(at.tb[NFULA_SEQ]) >= sizeof(uint32_t)) {
		uint32_t be;

		memcpy(&be, mnl_attr_get_payload(at.tb[NFULA_SEQ]), sizeof be);
		d->seq = ntohl(be);
		d->has_seq = true;
	}
	return r;
}
