/* Client side of sluiced's CNI requests (used by cni/sluice-cni): a session for a container's network
 * namespace that outlives the request, keyed by "CONTAINERID/IFNAME" (netd/cni_key.h), ended by DEL.
 * Root only: sluiced refuses these from any other uid. Daemon only (no embedded fallback: the plugin
 * exits right after ADD). Each returns 0 or -errno with a one-line message in err; -ENOENT or
 * -ECONNREFUSED from the connection mean that sluiced is not running. */
#pragma once

#include <stddef.h>

#include "client.h"

/* ADD: wires netns_fd (borrowed; sent with SCM_RIGHTS) with a session-side interface sess_if (NULL =
 * eth0) under policy_json (compiled again by sluiced under the organisation layer); command names the
 * container in `sluicectl sessions` and in every audit record. */
int netd_cni_add(const char *key, int netns_fd, const char *sess_if, const char *command, const char *policy_json,
		 struct netd_session_reply *reply, char *err, size_t errlen);
/* DEL: ends the key's session; 0 also when it has none. */
int netd_cni_del(const char *key, char *err, size_t errlen);
/* CHECK: 0 with *reply filled when the key's session is wired into netns_fd (borrowed) and served;
 * -ENOENT (no session), -ESTALE (another namespace), -EHOSTDOWN (no proxy engine). */
int netd_cni_check(const char *key, int netns_fd, struct netd_session_reply *reply, char *err, size_t errlen);
