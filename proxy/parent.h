/* A parent (upstream, corporate) proxy that the engine reaches allowed destinations through, where the
 * machine may reach the internet only through it (docs/proxy.md, "Parent proxy"). sluice decides first:
 * the parent sees only what the session's policy allowed. Tunnels (CONNECT, SOCKS5, transparent TLS) are
 * chained with CONNECT host:port; plain HTTP requests go to it in absolute form. Basic credentials come
 * from a file only root can read and never reach a session or the audit log.
 *
 * Configuration (JSON, the organisation's /etc/sluice/upstream-proxy.json for sluiced, the key
 * "upstream_proxy" of a sluice-proxy config):
 *   {"url": "http://proxy.corp:3128", "auth_file": "/etc/sluice/proxy-auth", "no_proxy": ["corp.example"],
 *    "resolve": true}
 * url: http://HOST:PORT (HOST a name or address, resolved once when loaded). auth_file: one line
 * "user:password", owned by root and readable by no one else. no_proxy: names (and their subdomains) and
 * literal addresses reached directly. resolve (default true): sluice still resolves each name itself to
 * refuse forbidden address ranges before asking the parent; false when the parent is the only resolver
 * (names are then checked by policy only). */
#pragma once

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "policy.h"

#define PROXY_PARENT_NO_PROXY_MAX 256

struct proxy_parent {
	struct sockaddr_storage addr; /* where the parent listens */
	socklen_t addrlen;
	char where[300];              /* "HOST:PORT" as configured, for messages */
	char auth[600];               /* "Basic BASE64", or "" without credentials */
	bool resolve;
	size_t nno_proxy;
	char no_proxy[PROXY_PARENT_NO_PROXY_MAX][POLICY_HOST_MAX + 1]; /* canonical names or addresses */
};

/* Reads the object o (from `what`, for messages: a file name or a key). Returns a new parent (free with
 * free()) or NULL with a one-line reason in err. Reads auth_file now, so call it while the privileges
 * to read that file are held. */
struct proxy_parent *proxy_parent_parse(json_object *o, const char *what, char *err, size_t errlen);
/* Loads `path` ({"upstream_proxy": {...}}). -ENOENT when the file does not exist (no parent); other
 * errors with a reason in err. */
int proxy_parent_load(const char *path, struct proxy_parent **out, char *err, size_t errlen);
/* Whether canon_host (a canonical name, or an address in text) is reached directly (no_proxy). */
bool proxy_parent_bypass(const struct proxy_parent *p, const char *canon_host);
