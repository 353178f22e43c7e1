/* The CNI result of sluice-cni (spec 1.0.0, "Success"): the previous plugin's result (prevResult) with
 * the session's interfaces, addresses, default routes and DNS added; and CHECK's comparison of a result
 * with the live session. */
#pragma once

#include "client.h"
#include "cni_conf.h"

struct json_object;

/* A new result (owned by the caller): a deep copy of prev (borrowed, may be NULL) plus the host-side
 * interface (sl-ID), the container interface ifname in sandbox netns, its IPv4 (and IPv6) address with
 * the gateway, default routes via the gateway, the interfaces' MACs (host_mac, mac; "" = unknown, left
 * out), and the gateway as the only nameserver (sluice's DNS
 * proxy is the only resolver a session can reach). NULL with e set on a malformed prev. */
struct json_object *cni_result_build(const char *cni_version, struct json_object *prev,
				     const struct netd_session_reply *r, const char *ifname, const char *netns,
				     const char *host_mac, const char *mac, struct cni_err *e);
/* CHECK: 0 when result (the prevResult CHECK got) lists ifname in netns with the session's addresses;
 * else -1 with e (CNI_E_CHECK). */
int cni_result_check(struct json_object *result, const struct netd_session_reply *r, const char *ifname,
		     const char *netns, struct cni_err *e);
