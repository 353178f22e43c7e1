/* libnl-route-3 wiring of session links, addresses and routes; named network namespaces. */
#include "link.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/inet6.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "log.h"
#include "nft.h"
#include "util.h"

static int nlerr(int e)
{
	/* libnl returns its own codes; map the ones callers act on */
	switch (-e) {
	case NLE_EXIST: return -EEXIST;
	case NLE_OBJ_NOTFOUND: case NLE_NODEV: return -ENODEV;
	case NLE_PERM: return -EPERM;
	case NLE_NOMEM: return -ENOMEM;
	case NLE_BUSY: return -EBUSY;
	case NLE_INVAL: return -EINVAL;
	case NLE_AF_NOSUPPORT: return -EAFNOSUPPORT;
	default: return -EIO;
	}
}

struct nl_sock *netd_rtnl_open(int *err)
{
	struct nl_sock *sk = nl_socket_alloc();
	int r;

	if (!sk) {
		*err = -ENOMEM;
		return NULL;
	}
	r = nl_connect(sk, NETLINK_ROUTE);
	if (r < 0) {
		*err = nlerr(r);
		nl_socket_free(sk);
		return NULL;
	}
	/* nl_connect does not set CLOEXEC */
	fcntl(nl_socket_get_fd(sk), F_SETFD, FD_CLOEXEC);
	return sk;
}

struct nl_sock *netd_rtnl_open_in(int netns_fd, int host_netns_fd, int *err)
{
	struct nl_sock *sk;

	if (setns(netns_fd, CLONE_NEWNET) < 0) {
		*err = -errno;
		return NULL;
	}
	sk = netd_rtnl_open(err);
	if (setns(host_netns_fd, CLONE_NEWNET) < 0)
		fatal("cannot return to the host network namespace: %s", strerror(errno));
	return sk;
}

void netd_rtnl_close(struct nl_sock *sk)
{
	if (sk)
		nl_socket_free(sk);
}

static int fail(char *err, size_t errlen, int r, const char *what, const char *on)
{
	snprintf(err, errlen, "%s on %s: %s", what, on, strerror(-r));
	return r;
}

int netd_link_create(struct nl_sock *host, const struct netd_link_cfg *c, char *err, size_t errlen)
{
	struct rtnl_link *veth = rtnl_link_veth_alloc(), *peer;
	int r;

	if (!veth)
		return -ENOMEM;
	rtnl_link_set_name(veth, c->host_if);
	peer = rtnl_link_veth_get_peer(veth);
	rtnl_link_set_name(peer, c->sess_if ? c->sess_if : "eth0");
	rtnl_link_set_ns_fd(peer, c->netns_fd);
	/* One queue each way on both ends, said up front: left out, the kernel makes one per possible CPU
	 * and then cuts the transmit queues back to one after registering each end, which waits for an RCU
	 * grace period under the RTNL lock (two per session; 5.0 -> 2.8 ms median per pair, docs/netd.md) */
	rtnl_link_set_num_tx_queues(veth, 1);
	rtnl_link_set_num_rx_queues(veth, 1);
	rtnl_link_set_num_tx_queues(peer, 1);
	rtnl_link_set_num_rx_queues(peer, 1);
	rtnl_link_put(peer);
	r = rtnl_link_add(host, veth, NLM_F_CREATE | NLM_F_EXCL);
	rtnl_link_veth_release(veth);
	if (r < 0)
		return fail(err, errlen, nlerr(r), "creating veth pair", c->host_if);
	return 0;
}

/* The index of link `name` and, for a veth end, of its peer in the peer's namespace (IFLA_LINK; 0 when
 * the link names none). */
static int link_index(struct nl_sock *sk, const char *name, int *peer)
{
	struct rtnl_link *l = NULL;
	int r = rtnl_link_get_kernel(sk, 0, name, &l);

	if (r < 0)
		return nlerr(r);
	r = rtnl_link_get_ifindex(l);
	if (peer)
		*peer = (int)rtnl_link_get_link(l);
	rtnl_link_put(l);
	return r;
}

/* A side's requests, sent in one sendmsg and acknowledged one by one in order. The kernel handles them
 * one after the other as if sent apart (each under the RTNL lock, each acknowledged, a failed one not
 * stopping the next), so the order still carries the dependencies (an address before the route through
 * it); what goes is two system calls and a wake-up per request (a setup's ~15 requests, docs/netd.md). */
#define BATCH_MAX 10
struct batch {
	struct nl_msg *m[BATCH_MAX];
	const char *what[BATCH_MAX]; /* for the error message */
	unsigned n;
	int r; /* a request that could not be built */
	const char *rwhat;
};

static void batch_add(struct batch *b, int r, struct nl_msg *m, const char *what)
{
	if (r == 0 && (!m || b->n == BATCH_MAX))
		r = m ? -E2BIG : -ENOMEM;
	if (r < 0) {
		if (m)
			nlmsg_free(m);
		if (!b->r) {
			b->r = r;
			b->rwhat = what;
		}
		return;
	}
	b->m[b->n] = m;
	b->what[b->n++] = what;
}

/* Sends the batch and reads every acknowledgement: 0, or the first failure (-errno, *what saying which). */
static int batch_run(struct nl_sock *sk, struct batch *b, const char **what)
{
	size_t len = 0, off = 0;
	char *buf = NULL;
	int r = b->r, e;

	*what = b->rwhat;
	for (unsigned i = 0; r == 0 && i < b->n; i++) {
		nl_complete_msg(sk, b->m[i]); /* sequence number, NLM_F_REQUEST | NLM_F_ACK */
		len += NLMSG_ALIGN(nlmsg_hdr(b->m[i])->nlmsg_len);
	}
	if (r == 0 && b->n && !(buf = calloc(1, len)))
		r = -ENOMEM;
	for (unsigned i = 0; r == 0 && i < b->n; i++) {
		struct nlmsghdr *h = nlmsg_hdr(b->m[i]);

		memcpy(buf + off, h, h->nlmsg_len);
		off += NLMSG_ALIGN(h->nlmsg_len);
	}
	if (r == 0 && b->n && (e = nl_sendto(sk, buf, len)) < 0) {
		r = nlerr(e);
		*what = b->what[0];
	}
	/* one acknowledgement (or error) a request, in order; libnl checks their sequence numbers */
	for (unsigned i = 0; r == 0 && i < b->n; i++)
		if ((e = nl_wait_for_ack(sk)) < 0 && r == 0) {
			r = nlerr(e);
			*what = b->what[i];
			/* the ones after it are acknowledged too: read them, the socket stays in step */
			for (unsigned j = i + 1; j < b->n; j++)
				(void)nl_wait_for_ack(sk);
		}
	free(buf);
	for (unsigned i = 0; i < b->n; i++)
		nlmsg_free(b->m[i]);
	b->n = 0;
	return r;
}

static void req_link_up(struct batch *b, int ifindex, const char *what)
{
	struct rtnl_link *orig = rtnl_link_alloc(), *chg = rtnl_link_alloc();
	struct nl_msg *m = NULL;
	int r = -NLE_NOMEM;

	if (orig && chg) {
		rtnl_link_set_ifindex(orig, ifindex);
		rtnl_link_set_flags(chg, IFF_UP);
		r = rtnl_link_build_change_request(orig, chg, 0, &m);
	}
	rtnl_link_put(orig);
	rtnl_link_put(chg);
	batch_add(b, r < 0 ? nlerr(r) : 0, m, what);
}

/* No IPv6 link-local address on a host-side link (the session's end keeps its own): nothing on the host
 * talks link-local to a session (neighbour discovery answers from the gateway address), and each one was
 * two more routes per session in the host's one IPv6 table, which the kernel walks whole at every link
 * deletion, under the RTNL lock that setups wait for. Set before the link is up (it cannot be given at
 * creation: the link has no IPv6 state yet). */
static void req_no_ll6(struct batch *b, int ifindex, const char *what)
{
	struct rtnl_link *orig = rtnl_link_alloc(), *chg = rtnl_link_alloc();
	struct nl_msg *m = NULL;
	int r = -NLE_NOMEM;

	if (orig && chg) {
		rtnl_link_set_ifindex(orig, ifindex);
		r = rtnl_link_inet6_set_addr_gen_mode(chg, IN6_ADDR_GEN_MODE_NONE);
		if (r == 0)
			r = rtnl_link_build_change_request(orig, chg, 0, &m);
	}
	rtnl_link_put(orig);
	rtnl_link_put(chg);
	batch_add(b, r < 0 ? nlerr(r) : 0, m, what);
}

static void req_addr(struct batch *b, int ifindex, int family, const void *a, unsigned plen, unsigned flags6,
                     const char *what)
{
	struct rtnl_addr *ra = rtnl_addr_alloc();
	struct nl_addr *na = nl_addr_build(family, a, family == AF_INET ? 4 : 16);
	struct nl_msg *m = NULL;
	int r = -NLE_NOMEM;

	if (ra && na) {
		nl_addr_set_prefixlen(na, (int)plen);
		rtnl_addr_set_ifindex(ra, ifindex);
		rtnl_addr_set_family(ra, family);
		rtnl_addr_set_local(ra, na);
		if (family == AF_INET6)
			rtnl_addr_set_flags(ra, IFA_F_NODAD | flags6);
		r = rtnl_addr_build_add_request(ra, 0, &m);
	}
	nl_addr_put(na);
	rtnl_addr_put(ra);
	batch_add(b, r < 0 ? nlerr(r) : 0, m, what);
}

static void req_route(struct batch *b, int ifindex, int family, const void *dst, unsigned plen, const void *gw,
                      const char *what)
{
	struct rtnl_route *rt = rtnl_route_alloc();
	struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
	size_t alen = family == AF_INET ? 4 : 16;
	struct nl_addr *d = nl_addr_build(family, dst, alen), *g = gw ? nl_addr_build(family, gw, alen) : NULL;
	struct nl_msg *m = NULL;
	int r = -NLE_NOMEM;

	if (rt && nh && d && (!gw || g)) {
		nl_addr_set_prefixlen(d, (int)plen);
		rtnl_route_set_family(rt, (uint8_t)family);
		rtnl_route_set_table(rt, RT_TABLE_MAIN);
		rtnl_route_set_protocol(rt, NETD_ROUTE_PROTO);
		rtnl_route_set_dst(rt, d);
		rtnl_route_set_scope(rt, gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK);
		rtnl_route_nh_set_ifindex(nh, ifindex);
		if (g)
			rtnl_route_nh_set_gateway(nh, g);
		rtnl_route_add_nexthop(rt, nh);
		nh = NULL; /* the route owns it */
		r = rtnl_route_build_add_request(rt, NLM_F_EXCL, &m);
	}
	if (nh)
		rtnl_route_nh_free(nh);
	nl_addr_put(d);
	nl_addr_put(g);
	rtnl_route_put(rt);
	batch_add(b, r < 0 ? nlerr(r) : 0, m, what);
}

int netd_link_host_up(struct nl_sock *host, struct netd_link_cfg *c, char *err, size_t errlen)
{
	struct batch b = {0};
	const char *what;
	int idx = link_index(host, c->host_if, &c->sess_index), r;

	if (idx < 0)
		return fail(err, errlen, idx, "finding link", c->host_if);
	if (c->has6)
		req_no_ll6(&b, idx, "turning IPv6 link-local addresses off");
	if (c->has4)
		req_addr(&b, idx, AF_INET, &c->gw4, 32, 0, "adding gateway IPv4 address");
	/* no prefix route for the gateway's /128: the session's own /128 route is the one used, and with the
	 * same gateway address on every link the kernel inserted a thousandth sibling of the same route for
	 * the thousandth session (fib6_add_rt2node in the profile) */
	if (c->has6)
		req_addr(&b, idx, AF_INET6, &c->gw6, 128, IFA_F_NOPREFIXROUTE, "adding gateway IPv6 address");
	req_link_up(&b, idx, "bringing up");
	if (c->has4)
		req_route(&b, idx, AF_INET, &c->addr4, 32, NULL, "adding route to the session's IPv4 address");
	if (c->has6)
		req_route(&b, idx, AF_INET6, &c->addr6, 128, NULL, "adding route to the session's IPv6 address");
	if ((r = batch_run(host, &b, &what)) < 0)
		return fail(err, errlen, r, what, c->host_if);
	return 0;
}

/* Every network namespace's loopback has index 1 (the kernel's LOOPBACK_IFINDEX, since Linux 3.7). */
#define LO_IFINDEX 1

int netd_link_session_up(struct nl_sock *sess, const struct netd_link_cfg *c, char *err, size_t errlen)
{
	static const unsigned char any[16];
	const char *ifn = c->sess_if ? c->sess_if : "eth0", *what;
	struct batch b = {0};
	int idx = c->sess_index > 0 ? c->sess_index : link_index(sess, ifn, NULL), r;

	if (idx < 0)
		return fail(err, errlen, idx, "finding the session interface", ifn);
	/* nothing but acknowledgements is read here: no need to peek at each message's size first */
	nl_socket_disable_msg_peek(sess);
	req_link_up(&b, LO_IFINDEX, "bringing up lo");
	if (c->has4)
		req_addr(&b, idx, AF_INET, &c->addr4, 32, 0, "adding IPv4 address");
	if (c->has6)
		req_addr(&b, idx, AF_INET6, &c->addr6, 128, 0, "adding IPv6 address");
	req_link_up(&b, idx, "bringing up");
	if (c->has4) {
		req_route(&b, idx, AF_INET, &c->gw4, 32, NULL, "adding IPv4 routes");
		req_route(&b, idx, AF_INET, any, 0, &c->gw4, "adding IPv4 routes");
	}
	if (c->has6) {
		req_route(&b, idx, AF_INET6, &c->gw6, 128, NULL, "adding IPv6 routes");
		req_route(&b, idx, AF_INET6, any, 0, &c->gw6, "adding IPv6 routes");
	}
	if ((r = batch_run(sess, &b, &what)) < 0)
		return fail(err, errlen, r, what, ifn);
	return 0;
}

int netd_link_delete(struct nl_sock *host, const char *name)
{
	struct rtnl_link *l = rtnl_link_alloc();
	int r;

	if (!l)
		return -ENOMEM;
	rtnl_link_set_name(l, name);
	r = rtnl_link_delete(host, l);
	rtnl_link_put(l);
	return r < 0 ? nlerr(r) : 0;
}

/* RTM_NEWLINK/RTM_DELLINK addressed by name or by group, built by hand: libnl's link API insists on an
 * ifindex or name for deletion, and group deletion is what batches the kernel's grace periods. */
static int link_msg(struct nl_sock *sk, int type, const char *name, uint32_t group)
{
	struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
	struct nl_msg *m = nlmsg_alloc_simple(type, NLM_F_REQUEST | NLM_F_ACK);
	int r = -ENOMEM;

	if (!m)
		return r;
	if (nlmsg_append(m, &ifi, sizeof ifi, NLMSG_ALIGNTO) < 0 || (name && nla_put_string(m, IFLA_IFNAME, name) < 0) ||
	    nla_put_u32(m, IFLA_GROUP, group) < 0)
		goto out;
	r = nl_send_auto(sk, m);
	if (r >= 0)
		r = nl_wait_for_ack(sk);
	r = r < 0 ? nlerr(r) : 0;
out:
	nlmsg_free(m);
	return r;
}

int netd_link_set_group(struct nl_sock *host, const char *name, uint32_t group)
{
	return link_msg(host, RTM_NEWLINK, name, group);
}

int netd_link_delete_group(struct nl_sock *host, uint32_t group)
{
	return link_msg(host, RTM_DELLINK, NULL, group);
}

struct prefix_walk {
	const char *prefix;
	void (*fn)(const char *name, void *arg);
	void *arg;
};

static void prefix_cb(struct nl_object *o, void *arg)
{
	struct prefix_walk *w = arg;
	const char *name = rtnl_link_get_name((struct rtnl_link *)o);

	if (name && strncmp(name, w->prefix, strlen(w->prefix)) == 0)
		w->fn(name, w->arg);
}

int netd_link_foreach_prefix(struct nl_sock *host, const char *prefix,
			     void (*fn)(const char *name, void *arg), void *arg)
{
	struct nl_cache *cache = NULL;
	struct prefix_walk w = {prefix, fn, arg};
	int r = rtnl_link_alloc_cache(host, AF_UNSPEC, &cache);

	if (r < 0)
		return nlerr(r);
	nl_cache_foreach(cache, prefix_cb, &w);
	nl_cache_free(cache);
	return 0;
}

/* ---- pool collision check ---- */

static bool prefix_overlap(const unsigned char *a, unsigned alen, const unsigned char *b, unsigned blen)
{
	unsigned n = alen < blen ? alen : blen;

	for (unsigned i = 0; i < n / 8; i++)
		if (a[i] != b[i])
			return false;
	if (n % 8) {
		unsigned char m = (unsigned char)(0xff << (8 - n % 8));
		if ((a[n / 8] & m) != (b[n / 8] & m))
			return false;
	}
	return true;
}

struct pool_walk {
	struct nl_cache *links;
	const struct in_addr *p4;
	unsigned l4;
	const struct in6_addr *p6;
	unsigned l6;
	char *err;
	size_t errlen;
	int r;
};

static bool ours(struct pool_walk *w, int ifindex)
{
	char name[IFNAMSIZ];

	if (ifindex <= 0 || !rtnl_link_i2name(w->links, ifindex, name, sizeof name))
		return false;
	return strncmp(name, NETD_LINK_PREFIX, strlen(NETD_LINK_PREFIX)) == 0;
}

static void check_prefix(struct pool_walk *w, struct nl_addr *a, const char *what, int ifindex)
{
	int fam;
	unsigned plen;
	char buf[128];

	if (!a || w->r)
		return;
	fam = nl_addr_get_family(a);
	plen = (unsigned)nl_addr_get_prefixlen(a);
	if (plen == 0 || ours(w, ifindex))
		return; /* default routes overlap everything; sl-* interfaces are sluice's own */
	if ((fam == AF_INET && w->p4 && nl_addr_get_len(a) == 4 &&
	     prefix_overlap(nl_addr_get_binary_addr(a), plen, (const unsigned char *)w->p4, w->l4)) ||
	    (fam == AF_INET6 && w->p6 && nl_addr_get_len(a) == 16 &&
	     prefix_overlap(nl_addr_get_binary_addr(a), plen, (const unsigned char *)w->p6, w->l6))) {
		char ifn[IFNAMSIZ] = "?";

		rtnl_link_i2name(w->links, ifindex, ifn, sizeof ifn);
		snprintf(w->err, w->errlen,
			 "address pool collides with %s %s on %s: choose a free range with --pool4/--pool6", what,
			 nl_addr2str(a, buf, sizeof buf), ifn);
		w->r = -EADDRINUSE;
	}
}

static void route_cb(struct nl_object *o, void *arg)
{
	struct rtnl_route *rt = (struct rtnl_route *)o;
	struct rtnl_nexthop *nh = rtnl_route_nexthop_n(rt, 0);

	check_prefix(arg, rtnl_route_get_dst(rt), "route", nh ? rtnl_route_nh_get_ifindex(nh) : 0);
}

static void addr_cb(struct nl_object *o, void *arg)
{
	struct rtnl_addr *a = (struct rtnl_addr *)o;

	check_prefix(arg, rtnl_addr_get_local(a), "address", rtnl_addr_get_ifindex(a));
}

int netd_pool_check(struct nl_sock *host, const struct in_addr *pool4, unsigned len4,
		    const struct in6_addr *pool6, unsigned len6, char *err, size_t errlen)
{
	struct nl_cache *routes = NULL, *addrs = NULL;
	struct pool_walk w = {.p4 = pool4, .l4 = len4, .p6 = pool6, .l6 = len6, .err = err, .errlen = errlen};
	int r;

	r = rtnl_link_alloc_cache(host, AF_UNSPEC, &w.links);
	if (r == 0)
		r = rtnl_route_alloc_cache(host, AF_UNSPEC, 0, &routes);
	if (r == 0)
		r = rtnl_addr_alloc_cache(host, &addrs);
	if (r < 0) {
		r = nlerr(r);
		snprintf(err, errlen, "listing routes and addresses: %s", strerror(-r));
		goto out;
	}
	nl_cache_foreach(routes, route_cb, &w);
	nl_cache_foreach(addrs, addr_cb, &w);
	r = w.r;
out:
	if (routes)
		nl_cache_free(routes);
	if (addrs)
		nl_cache_free(addrs);
	if (w.links)
		nl_cache_free(w.links);
	return r;
}

/* ---- named network namespaces ---- */

static int make_shared_dir(const char *dir)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	/* like `ip netns`: the directory must be a shared mount point so bind mounts made here
	 * propagate to other mount namespaces (firejail, podman) */
	if (mount("", dir, "none", MS_SHARED | MS_REC, NULL) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	if (mount(dir, dir, "none", MS_BIND | MS_REC, NULL) < 0)
		return -errno;
	if (mount("", dir, "none", MS_SHARED | MS_REC, NULL) < 0)
		return -errno;
	return 0;
}

int netd_ns_bind_create(const char *dir, const char *path, int host_netns_fd, char *err, size_t errlen)
{
	int fd, r;

	r = make_shared_dir(dir);
	if (r < 0) {
		snprintf(err, errlen, "preparing %s: %s", dir, strerror(-r));
		return r;
	}
	fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (fd < 0) {
		r = -errno;
		snprintf(err, errlen, "creating %s: %s", path, strerror(-r));
		return r;
	}
	close(fd);
	if (unshare(CLONE_NEWNET) < 0) {
		r = -errno;
		snprintf(err, errlen, "creating a network namespace: %s", strerror(-r));
		unlink(path);
		return r;
	}
	r = mount("/proc/thread-self/ns/net", path, "none", MS_BIND, NULL) < 0 ? -errno : 0;
	if (setns(host_netns_fd, CLONE_NEWNET) < 0)
		fatal("cannot return to the host network namespace: %s", strerror(errno));
	if (r < 0) {
		snprintf(err, errlen, "binding the namespace to %s: %s", path, strerror(-r));
		unlink(path);
	}
	return r;
}

int netd_ns_bind_remove(const char *path)
{
	int r = 0;

	if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		r = -errno;
	if (unlink(path) < 0 && errno != ENOENT && !r)
		r = -errno;
	return r;
}
