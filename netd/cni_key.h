/* The names a CNI runtime gives sluice (spec 1.0.0, "Parameters"): the container id and the interface
 * name, checked the same way by the plugin (cni/) and again by sluiced, which keys a CNI session by
 * "CONTAINERID/IFNAME". Untrusted on both sides: they come from the runtime's environment. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define NETD_CNI_ID_MAX 256 /* a container id longer than this is refused */

/* Container id: not empty, at most NETD_CNI_ID_MAX bytes, [A-Za-z0-9] first, then [A-Za-z0-9_.-]. */
bool netd_cni_id_valid(const char *id);
/* Interface name: 1-15 bytes, not "." or "..", no '/', ':', whitespace or control byte. */
bool netd_cni_ifname_valid(const char *ifname);
/* A key "ID/IFNAME" made of a valid id and a valid interface name. */
bool netd_cni_key_valid(const char *key);
