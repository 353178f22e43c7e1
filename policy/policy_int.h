/* Internal structures of the policy library, shared by its source files only. */
#pragma once

#include "policy.h"

#include <json-c/json.h>
#include <stdarg.h>

/* A bump allocator: rules and their strings live here and are freed all at once with the policy. */
struct policy_arena {
	struct policy_arena_chunk *head; /* owned */
};
void *policy_arena_alloc(struct policy_arena *a, size_t size);
char *policy_arena_strndup(struct policy_arena *a, const char *s, size_t n);
void policy_arena_release(struct policy_arena *a);

/* Zeroed arrays that can grow to hundreds of MiB (the rule table and the trie at a million rules).
 * Large ones are mapped directly and asked for transparent huge pages: on a VM a page fault costs
 * microseconds, and filling a million-rule policy 4 KiB at a time was half of its compile time.
 * policy_bulk_free(NULL) is a no-op. */
void *policy_bulk_calloc(size_t n, size_t size);
/* Makes room for `more` rules at once (a loader that knows how many are coming: growing by doubling
 * copies and clears the table again each time). 0 or -ENOMEM/-E2BIG; nothing changes on error. */
int policy_builder_reserve(struct policy_builder *b, size_t more);
void policy_bulk_free(void *p);

struct policy_port_range {
	uint16_t lo, hi;
};

enum policy_rule_kind { RULE_ALLOW = 0, RULE_DENY, RULE_CEILING };
enum policy_pattern_kind { PAT_EXACT = 0, PAT_WILDCARD, PAT_CIDR };

#define POLICY_MAX_PORT_RANGES 8
#define POLICY_PB_TCP 1u
#define POLICY_PB_UDP 2u
#define POLICY_PATTERN_MAX 512 /* an HTTP rule's path pattern (http_load.c), and a glob's (http_rules.c) */
/* The protocols a rule covers (its kind's default when it names none). */
unsigned policy_rule_protos(const struct policy_rule *r);

struct policy_rule {
	const char *pattern; /* arena; canonical: "pypi.org", "*.npmjs.org", "10.0.0.0/8" */
	const char *suffix;  /* arena; the name part without "*." (names only) */
	const char *where;   /* arena; "file:line:col" */
	enum policy_layer layer;
	enum policy_rule_kind kind;
	enum policy_pattern_kind pat;
	uint8_t nports;    /* 0: the kind's default (allow/ceiling: 80,443; deny: every port) */
	bool any_port;     /* "ports": "*" */
	uint8_t protos;    /* POLICY_PB_* bits; 0: the kind's default (allow/ceiling: TCP; deny: TCP and UDP) */
	unsigned methods;  /* 0: every method */
	uint32_t seq;      /* insertion order, for deterministic tie-breaks */
	struct policy_port_range ports[POLICY_MAX_PORT_RANGES];
	/* CIDR rules */
	int family;
	uint8_t addr[16];
	unsigned prefix;
	uint32_t next; /* next rule index on the same trie node and list (UINT32_MAX = end) */
};

/* Options as layered: explicit values per layer kind. */
struct policy_opt_state {
	int direct, transparent, ask; /* -1 unset, 0/1 from a lower layer */
	bool org_forbids_direct, org_forbids_transparent, org_forbids_ask;
	unsigned ask_timeout_s;
	bool learn;                            /* asked for by the command line or a serialised policy */
	bool org_forbids_learn;
	char org_learn_where[POLICY_WHERE_MAX]; /* the org's "learn": false, for the error */
};

/* A preset already added at a layer (adding it again would only repeat its rules). */
struct policy_preset_seen {
	struct policy_preset_seen *next; /* arena */
	enum policy_layer layer;
	char name[];
};

/* ---- HTTPS inspection (http_rules.c: decisions; http_load.c: loading, serialisation) ---- */

/* One HTTP rule of an inspected host: methods and a path pattern, and optionally a query parameter. */
struct policy_http_rule {
	const char *where; /* arena: "file:line:col" */
	const char *path;  /* arena: normalised pattern */
	const char *query; /* arena: "name=value" or "name" one parameter must equal, or NULL */
	unsigned methods;  /* 0: every method */
	bool prefix;       /* path is a prefix (whole segments), else a glob ('*' in a segment, '**' across) */
	bool deny;
};

/* One "inspect" entry: a host (or wildcard) whose HTTPS the proxy opens, its HTTP rules and credential. */
struct policy_inspect {
	const char *pattern; /* arena: canonical "github.com" or "*.example.org" */
	const char *suffix;  /* arena: the name without "*." */
	bool wild;
	const char *where; /* arena */
	enum policy_layer layer;
	bool log_query; /* audit records keep the query string */
	struct policy_http_rule *rules; /* arena */
	size_t nrules;
	struct policy_credential cred; /* header == NULL: none; strings in the arena */
};

struct policy_builder {
	struct policy_arena arena;
	struct policy_inspect *inspects; /* owned array; strings in arena */
	size_t ninspects, capinspects;
	struct policy_preset_seen *presets_seen; /* arena; reset when the arena moves to a policy */
	struct policy_rule *rules; /* owned array */
	size_t nrules, caprules;
	struct policy_opt_state opts;
	const char *preset_dir; /* borrowed */
	int preset_depth;       /* recursion guard for presets naming presets */
	bool no_secret_reads;   /* a credential's secret_env/secret_file is refused (policy_builder_forbid_secret_reads) */
};

struct policy_trie; /* compiled name index, see match.c */

struct policy {
	int refs;
	struct policy_arena arena;   /* owned: rule strings */
	struct policy_rule *rules;   /* owned */
	size_t nrules;
	struct policy_trie *trie;    /* owned */
	uint32_t *cidr;              /* owned: indexes of CIDR rules */
	size_t ncidr;
	bool has_ceiling;
	struct policy_options opts;
	struct policy_inspect *inspects; /* owned array (http_load.c); strings in arena */
	size_t ninspects;
	unsigned org_pins; /* options the org layer pinned off: 1 direct, 2 transparent, 4 ask, 8 learn */
};

/* The JSON loader's context (parse.c), shared with the loaders of other sections (http_load.c). */
struct jpos;
struct jctx {
	struct policy_builder *b;
	enum policy_layer layer;
	const char *name;         /* file name for messages */
	struct jpos *pos;         /* positions of values */
	struct policy_error *err;
	bool compiled;            /* the policy_serialize() form */
};
/* Fails with the position of the value at path ("/inspect/0/allow/2"); returns -EINVAL. */
int policy_jfail(const struct jctx *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void policy_jwhere(const struct jctx *c, const char *path, unsigned *line, unsigned *col);
/* "file:line:col" of the value at path, in the arena (NULL: out of memory). */
const char *policy_json_where(const struct jctx *c, const char *path);
/* Loads the "inspect" list (http_load.c). */
int policy_inspect_load_json(const struct jctx *c, json_object *v);
/* Adds the "inspect" list of p to a serialised policy's root object; -ENOMEM. */
int policy_inspect_serialize(const struct policy *p, json_object *root);
/* A method set (POLICY_M_* bits) as a JSON array of method names, in bit order (http_load.c). */
json_object *policy_methods_json(unsigned methods);

/* Error helper: fills err (may be NULL) and returns -EINVAL. */
int policy_err(struct policy_error *err, const char *file, unsigned line, unsigned col, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Appends a rule (copied; strings must already be in b->arena). */
int policy_builder_push(struct policy_builder *b, const struct policy_rule *r);

/* Parses one pattern "HOST[:PORTS]" or "*.SUFFIX[:PORTS]" into r (names only; CIDR is separate). */
int policy_parse_pattern(struct policy_builder *b, const char *text, struct policy_rule *r, char *why,
			 size_t whylen);
/* Refuses what a rule may not say about UDP (r->kind set): an allow or ceiling rule that names UDP
 * lists its ports and no methods; an allow rule names single ports only, never 53, 80 or 443 (see
 * direct.c). 0 or -EINVAL with why set. */
int policy_rule_check_protos(const struct policy_rule *r, char *why, size_t whylen);
/* Parses "LO" or "LO-HI" or "*" port text into r. */
int policy_parse_ports_text(const char *text, struct policy_rule *r, char *why, size_t whylen);
/* Parses a CIDR "a.b.c.d/n" or an address (as a host route) into r. */
int policy_parse_cidr(const char *text, struct policy_rule *r, char *why, size_t whylen);

/* Loads a policy JSON document / plain-text list into the builder. `compiled_ok`: the document may be
 * policy_serialize() output (only through policy_builder_add_json, never from a file). */
int policy_load_json(struct policy_builder *b, enum policy_layer layer, const char *name, const char *text,
		     size_t len, bool compiled_ok, struct policy_error *err);
int policy_load_text(struct policy_builder *b, enum policy_layer layer, const char *name, const char *text,
		     size_t len, struct policy_error *err);

/* Keyed hash (SipHash-1-3, random per-process key; see hash.c) of data, with a tweak such as a parent
 * node id. Used for every hash table whose keys come from policy files or host names. */
uint32_t policy_hash(const void *data, size_t len, uint32_t tweak);

/* Compiled name index. At most this many rules may name one pattern ("a.example.org" or "*.example.org",
 * all layers and kinds together): a lookup visits every rule on the names it walks. */
#define POLICY_MAX_RULES_PER_NAME 64
/* Returns NULL with *err set (out of memory, or too many rules on one name). */
struct policy_trie *policy_trie_build(struct policy_rule *rules, size_t n, struct policy_error *err);
void policy_trie_free(struct policy_trie *t);
/* Calls back every name rule whose pattern matches host, deepest last. Returns nothing; see match.c. */
typedef void (*policy_trie_visit_fn)(const struct policy_rule *r, unsigned depth, void *ctx);
void policy_trie_visit(const struct policy_trie *t, const struct policy_rule *rules, const char *host,
		       policy_trie_visit_fn fn, void *ctx);

bool policy_rule_port_matches(const struct policy_rule *r, uint16_t port);
bool policy_cidr_contains(const struct policy_rule *r, const struct sockaddr *sa);
/* True if a CIDR rule's range overlaps one of the forbidden ranges. */
bool policy_cidr_touches_forbidden(const struct policy_rule *r);

/* The name of one method bit ("GET"), "OTHER", or NULL. */
const char *policy_method_name(unsigned bit);

/* Formats a rule's ports for messages ("443", "80,443", "any"). */
void policy_rule_ports_str(const struct policy_rule *r, char *buf, size_t len);
