/* sluice policy library: parse, layer, compile and match egress policies.
 *
 * A policy answers "may this session reach host H on port P (with method M)?". It is built from
 * layers, strongest first: organisation (/etc/sluice), user, project, command line. Any layer may
 * allow or deny; deny beats allow in every layer; an organisation `ceiling` caps what every layer
 * can allow, so a lower layer can only narrow what the organisation permits. Every decision names
 * the rule (file:line:col) that made it.
 *
 * Thread-safety: a compiled `struct policy` is immutable and may be shared read-only by any number
 * of threads and sessions; it is reference counted.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <netinet/in.h>

#define POLICY_HOST_MAX 253   /* canonical name, without trailing dot */
#define POLICY_LABEL_MAX 63
#define POLICY_WHERE_MAX 512  /* "file:line:col" of a rule */
#define POLICY_ERR_MAX 1024

enum policy_layer {
	POLICY_LAYER_ORG = 0,
	POLICY_LAYER_USER,
	POLICY_LAYER_PROJECT,
	POLICY_LAYER_CLI,
	POLICY_LAYER_COUNT,
};

enum policy_verdict {
	POLICY_DENY = 0,
	POLICY_ALLOW,
	POLICY_ASK, /* outside the policy, but the policy asks for interactive approval */
};

/* HTTP methods as a bit set; a rule with no methods matches every method. */
enum policy_method {
	POLICY_M_GET = 1u << 0,
	POLICY_M_HEAD = 1u << 1,
	POLICY_M_POST = 1u << 2,
	POLICY_M_PUT = 1u << 3,
	POLICY_M_DELETE = 1u << 4,
	POLICY_M_PATCH = 1u << 5,
	POLICY_M_OPTIONS = 1u << 6,
	POLICY_M_CONNECT = 1u << 7,
	POLICY_M_TRACE = 1u << 8,
	POLICY_M_OTHER = 1u << 9, /* any method not named above */
};

/* Transport protocols a rule may name ("protocol" in a rule object, "HOST:PORTS/udp" in a pattern);
 * the values are the IP protocol numbers (IPPROTO_TCP, IPPROTO_UDP). Everything through the proxy is
 * TCP; UDP is only ever reached directly (direct mode). Rules name TCP unless they say otherwise, except
 * deny rules, which cover both unless they name one. */
enum policy_proto {
	POLICY_PROTO_TCP = 6,
	POLICY_PROTO_UDP = 17,
};
/* "tcp", "udp" (NULL for another value). */
const char *policy_proto_name(enum policy_proto proto);

/* A load or parse error: where and what. `file` is empty for errors with no file. */
struct policy_error {
	char file[256];
	unsigned line, col; /* 1-based; 0 when unknown */
	char msg[POLICY_ERR_MAX];
};

/* Writes "file:line:col: msg" (or just msg) into buf; returns buf. */
const char *policy_error_format(const struct policy_error *err, char *buf, size_t len);

/* Options a policy may set. Across layers: a feature is on if any layer turns it on and no
 * organisation layer forbids it ("direct": false in /etc/sluice pins it off). */
struct policy_options {
	bool direct;      /* DNS-learned direct flows (see DESIGN.md) */
	bool transparent; /* redirect TCP 80/443 to the proxy */
	bool ask;         /* unmatched requests become POLICY_ASK instead of POLICY_DENY */
	unsigned ask_timeout_s;
	/* Learn mode (`sluice run --learn FILE`): requests no rule decides are allowed (POLICY_R_LEARN)
	 * instead of denied or held; deny rules, the organisation ceiling and the forbidden address
	 * ranges still refuse. Only the command line (and the serialised form) can turn it on; an
	 * organisation "learn": false forbids it, and compiling a policy that asks for it then fails. */
	bool learn;
};

struct policy_rule; /* opaque; owned by its policy */

enum policy_reason {
	POLICY_R_DEFAULT = 0,   /* no rule matched: default deny (or ask) */
	POLICY_R_ALLOW_RULE,    /* an allow rule matched */
	POLICY_R_DENY_RULE,     /* a deny rule matched */
	POLICY_R_CEILING,       /* outside the organisation ceiling */
	POLICY_R_NEAR_MISS,     /* a rule names the host but not this port or method */
	POLICY_R_ADDR_FORBIDDEN,/* address in a forbidden range, no cidr rule allows it */
	POLICY_R_ADDR_NAMED,    /* public address of an allowed name */
	POLICY_R_ADDR_LITERAL,  /* IP literal with no cidr rule */
	POLICY_R_ADDR_CEILING,  /* cidr allow outside the organisation ceiling */
	POLICY_R_LEARN,         /* no rule decided and the policy is in learn mode: allowed, to be recorded */
};

struct policy_decision {
	enum policy_verdict verdict;
	enum policy_reason why;
	const struct policy_rule *rule; /* borrowed from the policy; NULL when no rule decided */
	/* Private: what was asked, for policy_decision_reason(). */
	char host[POLICY_HOST_MAX + 1];
	uint16_t port;
	uint8_t proto; /* enum policy_proto */
	bool is_addr;
	struct sockaddr_storage addr;
	char reason_buf[POLICY_ERR_MAX];
};

/* The human-readable reason, formatted on first use (decisions themselves never format text):
 * "allowed by /etc/sluice/policy.json:12:5 (*.npmjs.org, ports 80,443)",
 * "denied: no rule allows example.com:443 (default deny)", ... Returns d->reason_buf. */
const char *policy_decision_reason(struct policy_decision *d);

/* ---- canonical host names ---- */

enum policy_canon_err {
	POLICY_CANON_OK = 0,
	POLICY_CANON_EMPTY,
	POLICY_CANON_TOO_LONG,       /* name over 253 bytes */
	POLICY_CANON_LABEL_TOO_LONG, /* a label over 63 bytes */
	POLICY_CANON_EMPTY_LABEL,    /* "a..b", leading dot, or more than one trailing dot */
	POLICY_CANON_BAD_CHAR,       /* NUL, control byte, space or punctuation */
	POLICY_CANON_BAD_HYPHEN,     /* label starts or ends with '-' */
	POLICY_CANON_BAD_IDNA,       /* invalid punycode (xn--) or unconvertible UTF-8 */
	POLICY_CANON_IP_LITERAL,     /* the name is an IPv4/IPv6 literal (in any spelling) */
};

const char *policy_canon_strerror(enum policy_canon_err e);

/* Canonicalises a host name of `len` bytes (which may contain NULs: they are rejected): lower
 * case, one trailing dot removed, UTF-8 converted to its IDNA A-label, xn-- labels checked to
 * round-trip, length limits enforced. Writes the canonical name to out (POLICY_HOST_MAX + 1 bytes).
 * Names that parse as an IPv4 address in any inet_aton spelling (127.1, 0x7f.1, 2130706433) or as
 * an IPv6 literal return POLICY_CANON_IP_LITERAL: callers handle addresses with policy_decide_addr. */
enum policy_canon_err policy_canon_host(const char *in, size_t len, char out[POLICY_HOST_MAX + 1]);

/* Parses an IP literal in any spelling the C library would accept (inet_aton forms for IPv4,
 * "[v6]" or bare v6). Returns 0 and fills *ss, or -EINVAL. */
int policy_parse_ip_literal(const char *in, size_t len, struct sockaddr_storage *ss);

/* Parses a method name; 0 if the name is not an HTTP token. */
unsigned policy_method_from_name(const char *name, size_t len);

/* ---- building a policy ---- */

struct policy_builder;

struct policy_builder *policy_builder_new(void);
void policy_builder_free(struct policy_builder *b); /* NULL is a no-op */

/* Directory searched for named presets (borrowed string). Default: $SLUICE_PRESET_DIR, else the
 * installed preset directory, else the source tree's policy/presets. */
void policy_builder_set_preset_dir(struct policy_builder *b, const char *dir);
/* From now on, a credential that names where its secret is (\"secret_env\", \"secret_file\") is refused: for
 * text a process compiles on behalf of someone else (sluiced, root, for a local user's session), where
 * reading its own environment or files would hand them to that user's sandbox. The serialised form, which
 * carries a secret its sender read, is still accepted. */
void policy_builder_forbid_secret_reads(struct policy_builder *b);
/* The directory presets are read from: the one set above, else the default it names (borrowed). */
const char *policy_builder_preset_dir(const struct policy_builder *b);

/* Adds a JSON (with comments) policy file or, for *.txt / *.list, a plain domain list. */
int policy_builder_add_file(struct policy_builder *b, enum policy_layer layer, const char *path,
			    struct policy_error *err);
/* Adds JSON text as if read from a file named `name`. */
int policy_builder_add_json(struct policy_builder *b, enum policy_layer layer, const char *name,
			    const char *text, size_t len, struct policy_error *err);
/* Adds a named preset (npm, pypi, crates, go, maven, rubygems, debian, github, registries). */
int policy_builder_add_preset(struct policy_builder *b, enum policy_layer layer, const char *name,
			      struct policy_error *err);
/* Adds what a `--policy ARG` names: a file when ARG contains '/' or ends in .json, .txt or .list,
 * else a preset name. */
int policy_builder_add_policy_arg(struct policy_builder *b, enum policy_layer layer, const char *arg,
				  struct policy_error *err);
/* Adds one allow (or deny) pattern "HOST[:PORT[,PORT...]]" from the command line; `origin`
 * (e.g. "--allow") is what decisions quote. */
int policy_builder_add_pattern(struct policy_builder *b, enum policy_layer layer, const char *pattern,
			       bool deny, const char *origin, struct policy_error *err);
/* Turns options on from the command line. */
void policy_builder_set_options(struct policy_builder *b, const struct policy_options *opts);

/* Compiles everything added so far. Returns a new policy (refcount 1) or NULL with *err set. */
struct policy *policy_builder_compile(struct policy_builder *b, struct policy_error *err);

/* Loads the standard layers for a user: /etc/sluice/policy.json and /etc/sluice/policy.d/\*.json
 * (org), $XDG_CONFIG_HOME/sluice/policy.json (user), PROJECT/.sluice/policy.json (project).
 * Missing files are skipped; `project_dir` and `home` may be NULL. Org files (checked on the open
 * descriptor, symlinks refused) and the org directories (sysconfdir, policy.d) that are not owned by
 * root or are group/world-writable are refused (an org policy anyone can edit or delete caps nothing). */
int policy_builder_add_standard_layers(struct policy_builder *b, const char *sysconfdir, const char *home,
				       const char *project_dir, struct policy_error *err);
/* The organisation layer alone (sysconfdir's policy.json and policy.d/\*.json, checked as above): what
 * sluiced loads under a client's policy. It reads nothing from the environment, so the daemon's own
 * $XDG_CONFIG_HOME or $HOME never becomes a layer of every user's sessions. */
int policy_builder_add_org_layers(struct policy_builder *b, const char *sysconfdir, struct policy_error *err);

struct policy *policy_ref(struct policy *p);
void policy_unref(struct policy *p); /* NULL is a no-op */

const struct policy_options *policy_get_options(const struct policy *p);
size_t policy_rule_count(const struct policy *p);

/* ---- decisions ---- */

/* Decides for a canonical host name (from policy_canon_host), a port and a method bit
 * (0 = unknown/none). With 0 or POLICY_M_CONNECT (methods the proxy cannot see), an allow rule with a
 * method list matches only if it lists that method, while a deny rule with a method list always
 * matches (fails closed). Port 0 asks whether the name is usable at all (DNS). O(length of host). */
void policy_decide(const struct policy *p, const char *canon_host, uint16_t port, unsigned method,
		   struct policy_decision *out);
/* The same for a protocol: policy_decide is POLICY_PROTO_TCP. For UDP, method is 0 and only rules that
 * name UDP allow (or cap, for a ceiling); deny rules that name no protocol deny UDP too. */
void policy_decide_proto(const struct policy *p, const char *canon_host, enum policy_proto proto, uint16_t port,
			 unsigned method, struct policy_decision *out);

/* Decides for a destination address after resolution (or an IP literal the client named).
 * Addresses in loopback, private, link-local (incl. 169.254.169.254), CGNAT, multicast,
 * unspecified, reserved, or IPv4-embedded-in-IPv6 ranges are denied unless a CIDR rule allows them;
 * other addresses are allowed when `named` is true (the name was already allowed), else only by a
 * CIDR rule. CIDR deny rules beat everything. */
void policy_decide_addr(const struct policy *p, const struct sockaddr *sa, uint16_t port, bool named,
			struct policy_decision *out);
/* The same for a protocol (policy_decide_addr is POLICY_PROTO_TCP): cidr rules match as above. */
void policy_decide_addr_proto(const struct policy *p, const struct sockaddr *sa, enum policy_proto proto,
			      uint16_t port, bool named, struct policy_decision *out);

/* Direct mode: the (protocol, port) pairs on which addresses that DNS answered for canon_host may be
 * reached without the proxy. Empty unless the policy has the `direct` option. Only ports an allow rule
 * for the name lists singly (no range, no "*", no method list), for each protocol the rule names (TCP
 * unless it says "udp"), other than port 53 (the DNS proxy's), TCP 80 and 443 (the proxy's) and UDP 80
 * and 443 (QUIC falls back to TCP), each pair allowed by policy_decide_proto (method unknown). Writes at most max
 * (<= POLICY_DIRECT_PORTS_MAX) pairs to out, TCP first, ports ascending; returns how many. */
#define POLICY_DIRECT_PORTS_MAX 16
struct policy_direct_port {
	uint8_t proto; /* enum policy_proto */
	uint16_t port;
};
size_t policy_direct_ports(const struct policy *p, const char *canon_host, struct policy_direct_port *out,
			   size_t max);
/* True if (proto, port) is among policy_direct_ports(p, canon_host). */
bool policy_direct_port_allowed(const struct policy *p, const char *canon_host, enum policy_proto proto,
				uint16_t port);

/* True if the address is in one of the forbidden ranges above (independent of any policy). */
bool policy_addr_is_forbidden(const struct sockaddr *sa);

/* "file:line:col" of a rule; "" for NULL. */
const char *policy_rule_where(const struct policy_rule *r);
/* What an audit record names as the deciding rule: the rule's "file:line:col", POLICY_LEARN_RULE for a
 * learn-mode allow, "" when nothing decided (default deny). */
#define POLICY_LEARN_RULE "learn mode"
const char *policy_decision_where(const struct policy_decision *d);
/* The rule's pattern as written, canonicalised ("*.npmjs.org", "10.0.0.0/8"). */
const char *policy_rule_pattern(const struct policy_rule *r);
bool policy_rule_is_deny(const struct policy_rule *r);
enum policy_layer policy_rule_layer(const struct policy_rule *r);

const char *policy_layer_name(enum policy_layer layer);
const char *policy_verdict_name(enum policy_verdict v); /* "allow", "deny", "ask" */

/* ---- learn mode: the policy a run needed (learn.c) ---- */

struct policy_learn;

struct policy_learn_summary {
	size_t destinations; /* distinct (host, port) pairs recorded */
	size_t presets;      /* presets named */
	char preset_names[256]; /* "npm, pypi" ("" when none; "..." at the end when cut) */
	size_t hosts;        /* "allow" entries (hosts and addresses) */
};

struct policy_learn *policy_learn_new(void);
void policy_learn_free(struct policy_learn *l); /* NULL is a no-op */
/* Records a destination the run was allowed to reach: a host name (canonicalised here) or an IP
 * literal, and a port (0: the name was only looked up in DNS). Duplicates cost nothing.
 * Returns 0, -EINVAL (neither a valid name nor an address), -E2BIG (too many) or -ENOMEM. */
int policy_learn_add(struct policy_learn *l, const char *host, uint16_t port);
/* Distinct destinations recorded so far. */
size_t policy_learn_count(struct policy_learn *l);
/* The smallest policy (JSON with comments, the policy file format) that allows every recorded
 * destination: a preset of `preset_dir` (NULL: the default directory) is named when it covers a
 * destination, the smallest that does and only if something still needs it; the rest are exact
 * "allow" entries, sorted, one per host ("host" when reached on 80/443 only, else "host:P,Q"), and
 * {"cidr": "ADDR/32"} for addresses. No wildcard is ever made up. `header` (may be NULL, lines
 * separated by '\n') opens the text as // comments. The text is compiled again and checked to
 * allow every destination. Returns it malloced, or NULL with *err set. */
char *policy_learn_render(struct policy_learn *l, const char *preset_dir, const char *header,
			  struct policy_learn_summary *sum, struct policy_error *err);

/* ---- serialisation (sluiced hands a compiled policy to the proxy engine) ---- */

/* Writes the policy as JSON that policy_builder_add_json reloads into an equal policy, each rule
 * keeping its original "file:line:col". Returns a malloced NUL-terminated string or NULL. */
char *policy_serialize(const struct policy *p);

/* ---- HTTPS inspection: HTTP rules and credentials (decided in http_rules.c, loaded in http_load.c) ---- */

/* Request paths are normalised before any rule sees them (and rules' patterns the same way at load):
 * percent escapes of unreserved characters decoded, the hex of other escapes upper-cased, dot segments
 * removed, runs of '/' made one; scheme and authority of an absolute-form target dropped (the host is
 * decided as a canonical name elsewhere). */
#define POLICY_PATH_MAX 8192
enum policy_path_err {
	POLICY_PATH_OK = 0,
	POLICY_PATH_EMPTY,
	POLICY_PATH_TOO_LONG,   /* over POLICY_PATH_MAX */
	POLICY_PATH_BAD_CHAR,   /* control byte, space, non-ASCII, backslash or '#' */
	POLICY_PATH_BAD_ESCAPE, /* '%' not followed by two hex digits, or %00 */
	POLICY_PATH_NOT_ORIGIN, /* neither "/...", "http(s)://..." nor "*" */
};
const char *policy_path_strerror(enum policy_path_err e);
/* Normalises the path of the request target (len bytes; "*" stays "*") into out (outlen bytes, NUL
 * terminated). *query_off: the offset of the query in target (after '?'), or len when there is none.
 * decode_all: every escape but %00 and control bytes decoded, '\' read as '/', each segment cut at its
 * first ';': what a lenient server may see; deny rules are tried on that form too, so an escape or a
 * parameter never slips past them. */
enum policy_path_err policy_path_normalize(const char *target, size_t len, bool decode_all, char *out,
					   size_t outlen, size_t *query_off);
/* Glob match of a normalised path: '*' matches within one segment (no '/'), '**' matches anything.
 * O(len(pattern) * len(path)). */
bool policy_path_glob(const char *pattern, const char *path);

/* True if the policy inspects canon_host (an "inspect" entry names it or a wildcard over it). */
bool policy_inspects(const struct policy *p, const char *canon_host);
/* True if it inspects any host (the session then needs its CA). */
bool policy_inspects_any(const struct policy *p);
/* True if audit records of canon_host's requests keep the query string ("log_query"). */
bool policy_inspect_log_query(const struct policy *p, const char *canon_host);

struct policy_http_decision {
	enum policy_verdict verdict;  /* POLICY_ALLOW or POLICY_DENY */
	char where[POLICY_WHERE_MAX]; /* the deciding HTTP rule (or inspect entry); "" when none */
	char reason[POLICY_ERR_MAX];  /* "denied by FILE:L:C (deny POST PATTERN)" */
	char path[POLICY_PATH_MAX];   /* the normalised path ("" when unreadable) */
};
/* Decides one request (method: mlen bytes; target: the request target, tlen bytes) to an inspected
 * host. Deny rules of every layer win (tried on the normalised and on the fully decoded path, in any
 * letter case); a path with a dot segment only the fully decoded form has is denied as ambiguous; then
 * every layer that has allow rules for the host must allow it with one of them. A host whose entries
 * have no allow rules allows every request not denied. An unreadable target is denied. */
void policy_decide_http(const struct policy *p, const char *canon_host, const char *method, size_t mlen,
			const char *target, size_t tlen, struct policy_http_decision *out);

/* A credential the proxy adds to requests to one host after inspection (never shown to the sandbox). */
#define POLICY_PLACEHOLDER_PREFIX "SLUICE-PLACEHOLDER-"
#define POLICY_PLACEHOLDER_LEN    (sizeof POLICY_PLACEHOLDER_PREFIX - 1 + 32) /* every placeholder's length */
struct policy_credential {
	const char *header;          /* field name ("Authorization"); NULL: no credential */
	const char *value;           /* field value with the secret in it (secret; never log it) */
	const char *placeholder;     /* what the sandbox sees instead: POLICY_PLACEHOLDER_PREFIX + 32 hex */
	const char *placeholder_env; /* the sandbox's environment variable holding the placeholder */
	const char *where;           /* the entry's "file:line:col" */
};
/* The credential for canon_host, or NULL. */
const struct policy_credential *policy_credential_for(const struct policy *p, const char *canon_host);
/* All credentials, for the launcher (placeholders into the environment) and the exfiltration check. */
size_t policy_credential_count(const struct policy *p);
const struct policy_credential *policy_credential_at(const struct policy *p, size_t i);
/* A credential other than own (NULL: any) whose placeholder appears in data (len bytes), or NULL: every
 * occurrence is looked at, so own's placeholder cannot hide another one after it. */
const struct policy_credential *policy_credential_find_placeholder(const struct policy *p,
								   const struct policy_credential *own,
								   const void *data, size_t len);
