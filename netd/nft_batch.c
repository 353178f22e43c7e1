/* The netfilter netlink transport of nft.c (see nft_int.h): the socket, one batch per change, every
 * ACK read and mapped back to the command that caused it (as nftables' mnl_batch_talk does). */
#include "nft_int.h"

#include <errno.h>
#include <libnftnl/common.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "util.h"

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif

struct netd_nft *netd_nft_new(int *err)
{
	struct netd_nft *n = calloc(1, sizeof *n);
	int one = 1;

	if (!n) {
		*err = -ENOMEM;
		return NULL;
	}
	n->nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	if (!n->nl || mnl_socket_bind(n->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		*err = -errno;
		netd_nft_free(n);
		return NULL;
	}
	mnl_socket_setsockopt(n->nl, NETLINK_EXT_ACK, &one, sizeof one);
	mnl_socket_setsockopt(n->nl, NETLINK_CAP_ACK, &one, sizeof one);
	n->portid = mnl_socket_get_portid(n->nl);
	n->seq = (uint32_t)time(NULL);
	return n;
}

void netd_nft_free(struct netd_nft *n)
{
	if (!n)
		return;
	if (n->batch)
		nftnl_batch_free(n->batch);
	if (n->nl)
		mnl_socket_close(n->nl);
	free(n);
}

/* ---- batches ---- */

int nft_batch_begin(struct netd_nft *n)
{
	n->batch = nftnl_batch_alloc(MNL_SOCKET_BUFFER_SIZE * 4, MNL_SOCKET_BUFFER_SIZE);
	if (!n->batch)
		return -ENOMEM;
	n->ncmds = 0;
	n->overflow = false;
	nftnl_batch_begin(nftnl_batch_buffer(n->batch), n->seq++);
	nftnl_batch_update(n->batch);
	n->first_seq = n->seq;
	return 0;
}

/* Starts the next command's message; records what it does for error mapping. */
struct nlmsghdr *nft_batch_msg(struct netd_nft *n, uint16_t type, uint16_t flags, const char *what)
{
	struct nlmsghdr *nlh;

	if (n->ncmds >= NFT_MAX_CMDS) {
		n->overflow = true;
		return NULL;
	}
	n->what[n->ncmds++] = what;
	nlh = nftnl_nlmsg_build_hdr(nftnl_batch_buffer(n->batch), type, NFPROTO_INET, flags | NLM_F_ACK,
				    n->seq++);
	return nlh;
}

void nft_batch_next(struct netd_nft *n)
{
	if (nftnl_batch_update(n->batch) < 0)
		n->overflow = true;
}

void nft_batch_drop(struct netd_nft *n)
{
	if (n->batch)
		nftnl_batch_free(n->batch);
	n->batch = NULL;
}

struct ack_state {
	struct netd_nft *n;
	unsigned acked;
	int err;          /* first error */
	const char *what; /* its command */
	char ext[256];    /* kernel's extended ack message, if any */
};

static int ack_cb(const struct nlmsghdr *nlh, void *data)
{
	struct ack_state *st = data;
	const struct nlmsgerr *e;
	uint32_t idx;

	if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(struct nlmsgerr))) {
		if (!st->err)
			st->err = -EBADMSG;
		return MNL_CB_OK;
	}
	e = mnl_nlmsg_get_payload(nlh);
	idx = e->msg.nlmsg_seq - st->n->first_seq;
	if (e->error == 0) {
		st->acked++;
		return MNL_CB_OK;
	}
	if (!st->err) {
		st->err = e->error < 0 ? e->error : -e->error;
		st->what = idx < st->n->ncmds ? st->n->what[idx] : "batch";
		if (nlh->nlmsg_flags & NLM_F_ACK_TLVS) {
			const struct nlattr *a;
			size_t off = sizeof(*e);

			if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
				off += mnl_nlmsg_get_payload_len(&e->msg);
			mnl_attr_for_each(a, nlh, off) {
				if (mnl_attr_get_type(a) == NLMSGERR_ATTR_MSG &&
				    mnl_attr_validate(a, MNL_TYPE_NUL_STRING) == 0)
					util_strlcpy(st->ext, mnl_attr_get_str(a), sizeof st->ext);
			}
		}
	}
	return MNL_CB_OK;
}

/* Sends the batch and reads every ACK. The kernel processes a batch inside sendmsg, so all
 * answers are queued when it returns; we read until the socket is empty. */
int nft_batch_talk(struct netd_nft *n, char *err, size_t errlen)
{
	static mnl_cb_t ctl_cb[NLMSG_MIN_TYPE] = {[NLMSG_ERROR] = ack_cb};
	struct ack_state st = {.n = n};
	char buf[NFT_RECV_BUF];
	int fd = mnl_socket_get_fd(n->nl);
	int r = 0;

	if (n->overflow) {
		r = -E2BIG;
		snprintf(err, errlen, "nftables batch too large");
		goto out;
	}
	nftnl_batch_end(nftnl_batch_buffer(n->batch), n->seq++);
	nftnl_batch_update(n->batch);
	/* drain stale messages from an earlier, failed exchange */
	while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
		;
	{
		int iovn = nftnl_batch_iovec_len(n->batch);
		struct iovec *iov = calloc((size_t)iovn, sizeof *iov);
		struct sockaddr_nl snl = {.nl_family = AF_NETLINK};
		struct msghdr msg = {.msg_name = &snl, .msg_namelen = sizeof snl};

		if (!iov) {
			r = -ENOMEM;
			goto out;
		}
		nftnl_batch_iovec(n->batch, iov, iovn);
		msg.msg_iov = iov;
		msg.msg_iovlen = (size_t)iovn;
		if (sendmsg(fd, &msg, 0) < 0) {
			r = -errno;
			free(iov);
			snprintf(err, errlen, "sending nftables batch: %s", strerror(-r));
			goto out;
		}
		free(iov);
	}
	for (;;) {
		ssize_t len = recv(fd, buf, sizeof buf, MSG_DONTWAIT);

		if (len < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			r = -errno;
			snprintf(err, errlen, "reading nftables acknowledgements: %s", strerror(-r));
			goto out;
		}
		mnl_cb_run2(buf, (size_t)len, 0, n->portid, NULL, &st, ctl_cb, MNL_ARRAY_SIZE(ctl_cb));
	}
	if (st.err) {
		r = st.err;
		snprintf(err, errlen, "nftables: %s: %s%s%s", st.what ? st.what : "batch", strerror(-r),
			 st.ext[0] ? ": " : "", st.ext);
	} else if (st.acked != n->ncmds) {
		r = -EPROTO;
		snprintf(err, errlen, "nftables: %u of %u commands acknowledged", st.acked, n->ncmds);
	}
out:
	nft_batch_drop(n);
	return r;
}

int nft_dump(struct netd_nft *n, const struct nlmsghdr *req, mnl_cb_t cb, void *arg)
{
	char buf[NFT_RECV_BUF];
	uint32_t seq = req->nlmsg_seq;

	if (mnl_socket_sendto(n->nl, req, req->nlmsg_len) < 0)
		return -errno;
	for (;;) {
		ssize_t len = mnl_socket_recvfrom(n->nl, buf, sizeof buf);
		int r;

		if (len < 0)
			return -errno;
		r = mnl_cb_run(buf, (size_t)len, seq, n->portid, cb, arg);
		if (r == MNL_CB_STOP)
			return 0;
		if (r < 0)
			return errno ? -errno : -EIO;
	}
}
