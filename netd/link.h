/* Network namespace and interface wiring through libnl-route-3 (no `ip` process): veth pairs,
 * addresses, routes, loopback, named network namespaces, and the address-pool collision check. */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nl_sock;

#define NETD_ROUTE_PROTO 0x5c /* rtm_protocol of sluice's routes, so they are recognisable */

/* A route-netlink socket in the current network namespace (NULL with *err = -errno). */
struct nl_sock *netd_rtnl_open(int *err);
/* A route-netlink socket inside the namespace netns_fd: setns there, connect, setns back to
 * host_netns_fd. Aborts the process if it cannot return to the host namespace (a privileged
 * parent stranded in a session namespace must not carry on). */
struct nl_sock *netd_rtnl_open_in(int netns_fd, int host_netns_fd, int *err);
void netd_rtnl_close(struct nl_sock *sk); /* NULL no-op */

/* The addresses of one session. */
struct netd_link_cfg {
	const char *host_if;  /* borrowed: host-side name (sl-...) */
	int netns_fd;         /* borrowed: the session's netns */
	const char *sess_if;  /* borrowed: the session-side name; NULL = "eth0" (a CNI runtime may ask another) */
	bool has4, has6;
	struct in_addr addr4, gw4;
	struct in6_addr addr6, gw6;
	int sess_index; /* set by netd_link_host_up: the session end's index in its namespace (0: look it up) */
};

/* Creates the veth pair, host end `host_if` here, peer `sess_if` (eth0) directly inside the session
 * namespace; both ends down. */
int netd_link_create(struct nl_sock *host, const struct netd_link_cfg *c, char *err, size_t errlen);
/* Host side: gateway addresses, up, routes to the session's addresses (one batch of requests); learns
 * c->sess_index. */
int netd_link_host_up(struct nl_sock *host, struct netd_link_cfg *c, char *err, size_t errlen);
/* Session side (socket opened in the session netns): lo up, eth0 addresses, up, routes (one batch). */
int netd_link_session_up(struct nl_sock *sess, const struct netd_link_cfg *c, char *err, size_t errlen);
/* Deletes a link by name; -ENODEV if absent. Deleting one veth end deletes both. */
int netd_link_delete(struct nl_sock *host, const char *name);
/* Moves a link into interface group `group`; deletes every link of a group in one request (the kernel
 * then waits for one set of RCU grace periods for all of them). */
#define NETD_DOOMED_GROUP 0x5c1ce0u
int netd_link_set_group(struct nl_sock *host, const char *name, uint32_t group);
int netd_link_delete_group(struct nl_sock *host, uint32_t group);
/* Calls fn for every link whose name starts with prefix. */
int netd_link_foreach_prefix(struct nl_sock *host, const char *prefix,
			     void (*fn)(const char *name, void *arg), void *arg);

/* Fails (with a message naming the route or address) when a route or address outside sluice's own
 * interfaces overlaps pool4/len4 or pool6/len6. */
int netd_pool_check(struct nl_sock *host, const struct in_addr *pool4, unsigned len4,
		    const struct in6_addr *pool6, unsigned len6, char *err, size_t errlen);

/* Named network namespaces: `path` becomes a bind mount of a fresh netns (like `ip netns add`);
 * the directory is made a shared mount point first. */
int netd_ns_bind_create(const char *dir, const char *path, int host_netns_fd, char *err, size_t errlen);
int netd_ns_bind_remove(const char *path);
