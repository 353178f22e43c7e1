/* Internal to netd/nft*.c: the netfilter netlink transport of nft.c's ruleset (nft_batch.c). A change is
 * one batch: nft_batch_begin, per command nft_batch_msg (with what it does, for the error message) +
 * the libnftnl payload + nft_batch_next, then nft_batch_talk sends it and reads every ACK, mapping an
 * error back to its command (struct nlmsgerr and the kernel's extended ack message). */
#pragma once

#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nft.h"

#define NFT_MAX_CMDS 64
#define NFT_RECV_BUF 65536

struct netd_nft {
	struct mnl_socket *nl; /* owned */
	uint32_t seq;
	uint32_t portid;
	/* the batch being built: seq -> what it does, for error messages */
	struct nftnl_batch *batch; /* owned while building */
	uint32_t first_seq;
	unsigned ncmds;
	const char *what[NFT_MAX_CMDS];
	bool overflow;
};

/* 0 or -ENOMEM. */
int nft_batch_begin(struct netd_nft *n);
/* Starts the next command's message; what (static) names it in errors. NULL: the batch is full
 * (nft_batch_talk then fails with -E2BIG). */
struct nlmsghdr *nft_batch_msg(struct netd_nft *n, uint16_t type, uint16_t flags, const char *what);
/* Ends the current command's message. */
void nft_batch_next(struct netd_nft *n);
/* Frees the batch being built (NULL ok). */
void nft_batch_drop(struct netd_nft *n);
/* Sends the batch, reads every ACK, frees the batch. 0, or -errno with "nftables: WHAT: why" in err. */
int nft_batch_talk(struct netd_nft *n, char *err, size_t errlen);
/* Sends one dump request (its nlmsg_seq taken from n->seq by the caller) and runs cb(arg) on every reply
 * message until the dump ends. 0 or -errno (cb's MNL_CB_ERROR: -errno, else -EIO). */
int nft_dump(struct netd_nft *n, const struct nlmsghdr *req, mnl_cb_t cb, void *arg);
