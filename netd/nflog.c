/* NFLOG listener: sluiced binds the configured log group, reads the packets nftables dropped, and
 * forwards them to the engine's audit log (proxy_engine_audit_drop) through the engine channel. */
#include "netd.h"

#include <errno.h>
#include <event2/event.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include "log.h"
#include "nflog_parse.h"

struct netd_nflog {
	struct mnl_socket *nl; /* owned */
	struct event *ev;      /* owned */
	struct netd *d;        /* borrowed */
};

static int nflog_cfg(struct mnl_socket *nl, uint16_t group, int attr, const void *data, size_t len)
{
	char buf[8192];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nfgenmsg *nfg;
	uint32_t seq = (uint32_t)random();
	ssize_t n;

	nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nlh->nlmsg_seq = seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof *nfg);
	nfg->nfgen_family = AF_UNSPEC;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = htons(group);
	mnl_attr_put(nlh, (uint16_t)attr, len, data);
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	n = mnl_socket_recvfrom(nl, buf, sizeof buf);
	if (n < 0)
		return -errno;
	if (mnl_cb_run(buf, (size_t)n, seq, mnl_socket_get_portid(nl), NULL, NULL) < 0)
		return -errno;
	return 0;
}

static void nflog_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd_nflog *n = arg;
	char buf[65536];

	for (int i = 0; i < 64; i++) {
		ssize_t len = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
		const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;
		int rem;

		if (len < 0) {
			if (errno == ENOBUFS)
				log_warnx("NFLOG: the kernel dropped log messages (socket buffer full)");
			return;
		}
		rem = (int)len;
		while (mnl_nlmsg_ok(nlh, rem)) {
			struct netd_drop d;

			if (netd_nflog_parse_msg(nlh, (size_t)rem, &d) == 0)
				netd_engine_audit_drop(n->d, d.src, d.sport, d.dst, d.dport, d.proto);
			nlh = mnl_nlmsg_next(nlh, &rem);
		}
	}
}

int netd_nflog_start(struct netd *d, char *err, size_t errlen)
{
	struct netd_nflog *n = calloc(1, sizeof *n);
	struct nfulnl_msg_config_cmd cmd = {NFULNL_CFG_CMD_BIND};
	struct nfulnl_msg_config_mode mode = {htonl(128), NFULNL_COPY_PACKET, 0};
	int bufsz = 1 << 20, r;

	if (!n)
		return -ENOMEM;
	n->d = d;
	n->nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	if (!n->nl || mnl_socket_bind(n->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		r = -errno;
		snprintf(err, errlen, "NFLOG socket: %s", strerror(-r));
		goto fail;
	}
	setsockopt(mnl_socket_get_fd(n->nl), SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof bufsz);
	r = nflog_cfg(n->nl, (uint16_t)d->cfg.nflog_group, NFULA_CFG_CMD, &cmd, sizeof cmd);
	if (r == 0)
		r = nflog_cfg(n->nl, (uint16_t)d->cfg.nflog_group, NFULA_CFG_MODE, &mode, sizeof mode);
	if (r < 0) {
		snprintf(err, errlen, "binding NFLOG group %u: %s%s", d->cfg.nflog_group, strerror(-r),
			 r == -EBUSY ? " (another program listens on it: choose another with --nflog-group)" : "");
		goto fail;
	}
	n->ev = event_new(d->base, mnl_socket_get_fd(n->nl), EV_READ | EV_PERSIST, nflog_read_cb, n);
	if (!n->ev || event_add(n->ev, NULL) < 0) {
		r = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	d->nflog = n;
	return 0;
fail:
	netd_nflog_free(n);
	return r;
}

void netd_nflog_free(struct netd_nflog *n)
{
	if (!n)
		return;
	if (n->ev)
		event_free(n->ev);
	if (n->nl)
		mnl_socket_close(n->nl);
	if (n->d && n->d->nflog == n)
		n->d->nflog = NULL;
	free(n);
}
