/* NFLOG listener: sluiced binds the configured log group, reads the packets nftables dropped, and
 * forwards them to the engine's audit log (proxy_engine_audit_drop) through the engine channel.
 *
 * At most NFLOG_AUDIT_RATE drops a second are audited, so that a session flooding dropped packets
 * cannot flood the audit log or stall the engine, and at most half of them from one interface (the
 * session's veth, which a session cannot forge as it can a source address), so that one flooding
 * session cannot keep another's drops out of the audit log. Nothing is lost without a word: the drops
 * over the rate, the messages the kernel lost (a gap in the group's sequence numbers,
 * NFULNL_CFG_F_SEQ: its socket buffer was full) and those the engine's socket did not take are
 * counted, and a second after the first of them, even when no packet follows, one line in sluiced's log
 * and "drop-summary" records in the audit log (through the engine, which writes them) report them: one per
 * session whose interface drops came in on over the rate (the session's own count), one for the rest (the
 * kernel's and the engine socket's losses, drops of no session's interface). What the engine did not take
 * of a summary is owed: it goes with the next one of no session, offered again each second. */
#include "netd.h"

#include <errno.h>
#include <event2/event.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <arpa/inet.h>

#include "log.h"
#include "nflog_parse.h"

#define NFLOG_AUDIT_RATE 1000 /* drops audited per second at most */
#define NFLOG_IF_SHARE   (NFLOG_AUDIT_RATE / 2) /* ... of them from one incoming interface */
#define NFLOG_IF_SLOTS   256 /* interfaces counted per second (open addressing); beyond, the total alone */

struct netd_nflog {
	struct mnl_socket *nl; /* owned */
	struct event *ev;      /* owned */
	struct event *report;  /* owned: reports what was not audited */
	struct netd *d;        /* borrowed */
	time_t window;         /* the second in_window and ifs count */
	unsigned in_window;
	struct nflog_if {
		uint32_t ifindex; /* 0: a free slot */
		unsigned n;
	} ifs[NFLOG_IF_SLOTS];
	/* not audited since the last report; over_ifs: over_rate by incoming interface (those it could hold) */
	unsigned over_rate, lost, unsent;
	struct nflog_if over_ifs[NFLOG_IF_SLOTS];
	/* not in an audit summary yet (the engine did not take the last): joins the next */
	uint32_t owed_over_rate, owed_lost, owed_unsent;
	bool buffer_full; /* recv said ENOBUFS since the last report */
	bool seq_known;
	uint32_t next_seq; /* the sequence number the next message should carry */
};

static const struct timeval nflog_report_delay = {1, 0};

static uint32_t add_sat(uint32_t a, unsigned b)
{
	return b > UINT32_MAX - a ? UINT32_MAX : a + (uint32_t)b;
}

/* The session whose host-side interface has index ifindex, or NULL. */
static const struct netd_sess *sess_by_ifindex(struct netd *d, uint32_t ifindex)
{
	char name[IF_NAMESIZE];

	if (!if_indextoname(ifindex, name))
		return NULL;
	for (const struct netd_sess *s = d->sessions; s; s = s->next)
		if (strcmp(s->ifname, name) == 0)
			return s;
	return NULL;
}

static void report_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd_nflog *n = arg;
	unsigned total = n->over_rate + n->lost + n->unsent, attributed = 0;

	if (total)
		log_warnx("NFLOG: %u dropped packets not audited (%u over the limit of %d/s, %d/s from one interface, "
			  "%u lost by the kernel%s, %u not taken by the engine)",
			  total, n->over_rate, NFLOG_AUDIT_RATE, NFLOG_IF_SHARE, n->lost,
			  n->buffer_full ? ": its socket buffer was full" : "", n->unsent);
	/* the audit log, which companies keep as the egress trail, gets the same counts as records: a
	 * session's drops over the rate in a record of that session, the rest in one of none */
	for (size_t i = 0; i < NFLOG_IF_SLOTS; i++) {
		const struct nflog_if *o = &n->over_ifs[i];
		const struct netd_sess *s = o->ifindex && o->n ? sess_by_ifindex(n->d, o->ifindex) : NULL;
		if (s && netd_engine_drop_summary(n->d, s->id, o->n, 0, 0) == 0)
			attributed += o->n;
	}
	memset(n->over_ifs, 0, sizeof n->over_ifs);
	n->owed_over_rate = add_sat(n->owed_over_rate, n->over_rate - attributed);
	n->owed_lost = add_sat(n->owed_lost, n->lost);
	n->owed_unsent = add_sat(n->owed_unsent, n->unsent);
	if (n->owed_over_rate || n->owed_lost || n->owed_unsent) {
		if (netd_engine_drop_summary(n->d, NULL, n->owed_over_rate, n->owed_lost, n->owed_unsent) == 0)
			n->owed_over_rate = n->owed_lost = n->owed_unsent = 0;
		else if (what & EV_TIMEOUT) /* the engine is away (restarting, or its socket full): again later */
			evtimer_add(n->report, &nflog_report_delay);
	}
	n->over_rate = n->lost = n->unsent = 0;
	n->buffer_full = false;
}

/* Something was not audited: the report comes a second later (what follows meanwhile joins it). */
static void report_soon(struct netd_nflog *n)
{
	if (!evtimer_pending(n->report, NULL))
		evtimer_add(n->report, &nflog_report_delay);
}

/* The count of IFINDEX (0: not said) in the table tab (NFLOG_IF_SLOTS: this second's drops, or the drops
 * over the rate since the last report), or NULL when the table is full. */
static unsigned *if_count(struct nflog_if *tab, uint32_t ifindex)
{
	size_t i = (ifindex * 2654435761u) % NFLOG_IF_SLOTS;

	if (!ifindex)
		return NULL;
	for (size_t k = 0; k < NFLOG_IF_SLOTS; k++, i = (i + 1) % NFLOG_IF_SLOTS) {
		if (tab[i].ifindex == ifindex)
			return &tab[i].n;
		if (!tab[i].ifindex) {
			tab[i].ifindex = ifindex;
			return &tab[i].n;
		}
	}
	return NULL;
}

/* One message of the group: its sequence number (a gap is messages the kernel lost), then the drop,
 * audited unless over the rate (in all, or its interface's share). */
static void drop_seen(struct netd_nflog *n, const struct netd_drop *dr, bool parsed)
{
	time_t now = time(NULL);

	if (dr->has_seq) {
		uint32_t gap = dr->seq - n->next_seq;

		/* a huge gap is no loss but a restarted count (the group was bound again) */
		if (n->seq_known && gap && gap < (1u << 24)) {
			n->lost += gap;
			report_soon(n);
		}
		n->seq_known = true;
		n->next_seq = dr->seq + 1;
	}
	if (!parsed)
		return;
	if (now != n->window) {
		n->window = now;
		n->in_window = 0;
		memset(n->ifs, 0, sizeof n->ifs);
	}
	unsigned *mine = if_count(n->ifs, dr->indev);
	if (n->in_window >= NFLOG_AUDIT_RATE || (mine && *mine >= NFLOG_IF_SHARE)) {
		unsigned *over = if_count(n->over_ifs, dr->indev);
		n->over_rate++;
		if (over)
			(*over)++;
		report_soon(n);
		return;
	}
	n->in_window++;
	if (mine)
		(*mine)++;
	if (netd_engine_audit_drop(n->d, dr->src, dr->sport, dr->dst, dr->dport, dr->proto) < 0) {
		n->unsent++;
		report_soon(n);
	}
}

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
			if (errno == ENOBUFS) { /* counted by the gap in the sequence numbers */
				n->buffer_full = true;
				report_soon(n);
				continue;
			}
			return;
		}
		rem = (int)len;
		while (mnl_nlmsg_ok(nlh, rem)) {
			struct netd_drop d;

			drop_seen(n, &d, netd_nflog_parse_msg(nlh, (size_t)rem, &d) == 0);
			nlh = mnl_nlmsg_next(nlh, &rem);
		}
	}
}

int netd_nflog_start(struct netd *d, char *err, size_t errlen)
{
	struct netd_nflog *n = calloc(1, sizeof *n);
	struct nfulnl_msg_config_cmd cmd = {NFULNL_CFG_CMD_BIND};
	struct nfulnl_msg_config_mode mode = {htonl(128), NFULNL_COPY_PACKET, 0};
	uint16_t flags = htons(NFULNL_CFG_F_SEQ);
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
	if (r == 0)
		r = nflog_cfg(n->nl, (uint16_t)d->cfg.nflog_group, NFULA_CFG_FLAGS, &flags, sizeof flags);
	if (r < 0) {
		snprintf(err, errlen, "binding NFLOG group %u: %s%s", d->cfg.nflog_group, strerror(-r),
			 r == -EBUSY ? " (another program listens on it: choose another with --nflog-group)" : "");
		goto fail;
	}
	n->ev = event_new(d->base, mnl_socket_get_fd(n->nl), EV_READ | EV_PERSIST, nflog_read_cb, n);
	n->report = evtimer_new(d->base, report_cb, n);
	if (!n->ev || !n->report || event_add(n->ev, NULL) < 0) {
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
	if (n->report) {
		report_cb(-1, 0, n); /* what was not reported yet */
		event_free(n->report);
	}
	if (n->nl)
		mnl_socket_close(n->nl);
	if (n->d && n->d->nflog == n)
		n->d->nflog = NULL;
	free(n);
}
