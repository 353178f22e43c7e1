/* sluice-cni's reading of what a CNI runtime hands it (CNI spec 1.0.0): the network configuration on
 * stdin (JSON) and CNI_ARGS ("K=V;K=V"). Pure parsing, no file or socket access, so it can be fuzzed
 * (tests/fuzz/fuzz_cni_conf.c). Trust boundary: the configuration is written by the administrator but
 * runtimeConfig and CNI_ARGS carry per-container values (e.g. from a pod's annotations), which may only
 * pick one of the network's named policies (not another than the one "namespaces" holds the pod's
 * namespace to) and add deny rules: they never widen what the administrator assigned.
 *
 * Errors carry a CNI error code (the spec's well-known codes, below) and a one-line message. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct json_object;

/* Well-known error codes of the CNI spec (1.0.0, "Error"), and ours (100+). */
enum cni_code {
	CNI_E_VERSION = 1,      /* incompatible CNI version */
	CNI_E_FIELD = 2,        /* unsupported field in the network configuration */
	CNI_E_UNKNOWN = 3,      /* container unknown or does not exist */
	CNI_E_ENV = 4,          /* invalid necessary environment variables */
	CNI_E_IO = 5,           /* I/O failure */
	CNI_E_DECODE = 6,       /* failed to decode content */
	CNI_E_CONFIG = 7,       /* invalid network config */
	CNI_E_RETRY = 11,       /* try again later */
	CNI_E_DAEMON = 100,     /* sluiced is not running or refused the request */
	CNI_E_POLICY = 101,     /* the policy does not load or compile */
	CNI_E_CHECK = 102,      /* CHECK: the container's session is missing or differs */
};

#define CNI_MSG_MAX 1024
#define CNI_DENY_MAX 64 /* per-container deny rules */

struct cni_err {
	enum cni_code code;
	char msg[CNI_MSG_MAX];
};

/* How the network's policy (or one of its named policies) is given. */
enum cni_policy_kind {
	CNI_POLICY_NONE = 0,
	CNI_POLICY_PRESET, /* "registries": a preset name */
	CNI_POLICY_FILE,   /* "/etc/sluice/cni/web.json": an absolute path (JSON, or a .txt/.list domain list) */
	CNI_POLICY_INLINE, /* {...}: a policy object as in a policy file */
};

struct cni_policy_src {
	enum cni_policy_kind kind;
	char *text; /* owned: the preset name, the path, or the inline object as JSON text */
};

struct cni_conf {
	char *cni_version; /* owned */
	char *name;        /* owned: the network name */
	char *type;        /* owned */
	char *run_dir;     /* owned: sluiced's run directory ("runDir"), NULL = default */
	bool transparent;  /* "transparent" (default true): TCP 80/443 redirected to the proxy */
	struct cni_policy_src policy; /* "policy" (required for ADD) */
	struct json_object *policies; /* owned ref: "policies", name -> policy source, or NULL */
	struct json_object *namespaces; /* owned ref: "namespaces", pod namespace -> a name of "policies", or NULL */
	struct json_object *prev_result; /* owned ref: "prevResult", or NULL */
	/* runtimeConfig.sluice (capability "sluice"): the container's narrowing */
	char *rt_policy;   /* owned: a name of "policies", or NULL */
	char *rt_deny[CNI_DENY_MAX]; /* owned */
	size_t rt_ndeny;
};

/* CNI_ARGS: the keys sluice reads (others are ignored, as kubelet passes several). */
struct cni_args {
	char pod_namespace[254]; /* K8S_POD_NAMESPACE, "" when absent */
	char pod_name[254];      /* K8S_POD_NAME */
	char policy[64];         /* SLUICE_POLICY: a name of the network's "policies" */
	char *deny[CNI_DENY_MAX]; /* SLUICE_DENY=a.example,b.example: owned */
	size_t ndeny;
};

/* Parses the network configuration (len bytes, need not be NUL-terminated). 0, or -1 with e filled
 * (CNI_E_DECODE for bad JSON, CNI_E_CONFIG / CNI_E_FIELD / CNI_E_VERSION for bad content). The
 * version must be one this plugin supports (cni_supported_versions). c is cleared first; always
 * cni_conf_clear() it. */
int cni_conf_parse(const char *buf, size_t len, struct cni_conf *c, struct cni_err *e);
void cni_conf_clear(struct cni_conf *c);
/* Reads one policy source value (a string or an object) as "policy" does; where names the field. */
int cni_policy_src_parse(struct json_object *v, const char *where, struct cni_policy_src *out, struct cni_err *e);

/* The policy source a container gets (a copy, owned by the caller in *out): the network's policy named by
 * its pod namespace in "namespaces", else a named one it picked (runtimeConfig or CNI_ARGS; both must
 * agree), else the network's "policy". A pod of a namespace that "namespaces" lists may pick only that
 * namespace's policy (the pick comes from the pod's own spec; the mapping is the administrator's). 0, or
 * -1 with e (CNI_E_CONFIG). */
int cni_pick_policy(const struct cni_conf *c, const struct cni_args *a, struct cni_policy_src *out, struct cni_err *e);
/* Parses CNI_ARGS (NULL or "" is no arguments). 0, or -1 with e (CNI_E_ENV). Always cni_args_clear(). */
int cni_args_parse(const char *s, struct cni_args *a, struct cni_err *e);
void cni_args_clear(struct cni_args *a);

/* The JSON array of the versions this plugin speaks, for VERSION. */
extern const char *const cni_supported_versions[];
bool cni_version_supported(const char *v);

/* Formats e as the CNI error JSON ({"cniVersion", "code", "msg"}) into an owned string. */
char *cni_err_json(const char *cni_version, const struct cni_err *e);
/* Sets e; returns -1. */
int cni_fail(struct cni_err *e, enum cni_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
