/* The matcher: a compiled index of name rules and the decision functions.
 *
 * Name rules live in a trie of labels read right to left ("org" -> "npmjs" -> "registry"), stored as
 * one open-addressing hash table of edges keyed by (parent node, label). A lookup walks the host's
 * labels once, so its cost is O(length of the host name) whatever the number of rules. Exact rules
 * hang on the node of their full name; "*.suffix" rules hang on the suffix's node and match any name
 * with at least one more label. CIDR rules are few and scanned linearly. */
#include "policy_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define INLINE_LABEL 16

/* One edge of the trie, which also carries its child node's rule lists, so that a lookup touches
 * one cache line per label: labels up to 16 bytes are stored inline. */
struct trie_edge {
	const char *label; /* borrowed from a rule's suffix (policy arena); NULL = empty slot */
	uint32_t parent, child, hash;
	uint32_t exact, wild; /* heads of the child's rule lists through policy_rule.next */
	uint16_t len;
	char inl[INLINE_LABEL];
};

struct policy_trie {
	struct trie_edge *edges; /* owned, power-of-two size */
	size_t capedges, nedges;
	uint32_t nnodes;
};

/* Keyed: labels come from project files and from sandboxed programs (see hash.c). */
static uint32_t edge_hash(uint32_t parent, const char *s, size_t n)
{
	return policy_hash(s, n, parent);
}

static int trie_grow_edges(struct policy_trie *t, size_t want)
{
	size_t ncap = t->capedges ? t->capedges * 2 : 1024;
	while (ncap * 3 < want * 4)
		ncap *= 2;
	struct trie_edge *ne = policy_bulk_calloc(ncap, sizeof *ne);

	if (!ne)
		return -ENOMEM;
	for (size_t i = 0; i < t->capedges; i++) {
		if (!t->edges[i].label)
			continue;
		size_t j = t->edges[i].hash & (ncap - 1);
		while (ne[j].label)
			j = (j + 1) & (ncap - 1);
		ne[j] = t->edges[i];
	}
	policy_bulk_free(t->edges);
	t->edges = ne;
	t->capedges = ncap;
	return 0;
}

static const struct trie_edge *trie_find(const struct policy_trie *t, uint32_t parent, const char *s, size_t n,
					 uint32_t h)
{
	for (size_t j = h & (t->capedges - 1); t->edges[j].label; j = (j + 1) & (t->capedges - 1)) {
		const struct trie_edge *e = &t->edges[j];
		if (e->hash == h && e->parent == parent && e->len == n &&
		    memcmp(n <= INLINE_LABEL ? e->inl : e->label, s, n) == 0)
			return e;
	}
	return NULL;
}

/* The edge from parent for label s[0..n), created if missing; valid until the next insertion. */
static struct trie_edge *trie_child(struct policy_trie *t, uint32_t parent, const char *s, size_t n)
{
	uint32_t h = edge_hash(parent, s, n);
	const struct trie_edge *found = trie_find(t, parent, s, n, h);

	if (found)
		return (struct trie_edge *)found;
	if ((t->nedges + 1) * 4 > t->capedges * 3 && trie_grow_edges(t, 0) < 0)
		return NULL;
	size_t j = h & (t->capedges - 1);
	while (t->edges[j].label)
		j = (j + 1) & (t->capedges - 1);
	struct trie_edge *e = &t->edges[j];
	*e = (struct trie_edge){ .label = s, .parent = parent, .child = ++t->nnodes, .hash = h, .len = (uint16_t)n,
				 .exact = NONE, .wild = NONE };
	if (n <= INLINE_LABEL)
		memcpy(e->inl, s, n);
	t->nedges++;
	return e;
}

void policy_trie_free(struct policy_trie *t)
{
	if (!t)
		return;
	policy_bulk_free(t->edges);
	free(t);
}

struct policy_trie *policy_trie_build(struct policy_rule *rules, size_t n, struct policy_error *err)
{
	struct policy_trie *t = calloc(1, sizeof *t);

	/* Most rules add one new edge (their leftmost label): size for that and grow if needed. */
	if (!t || trie_grow_edges(t, n + 64) < 0)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		struct policy_rule *r = &rules[i];
		if (r->pat == PAT_CIDR)
			continue;
		const char *s = r->suffix;
		size_t end = strlen(s);
		uint32_t node = 0; /* the root */
		struct trie_edge *e = NULL;
		/* labels right to left */
		while (end > 0) {
			size_t start = end;
			while (start > 0 && s[start - 1] != '.')
				start--;
			e = trie_child(t, node, s + start, end - start);
			if (!e)
				goto fail;
			node = e->child;
			end = start ? start - 1 : 0;
		}
		if (!e)
			continue; /* empty name: refused by the parser, never indexed */
		uint32_t *head = r->pat == PAT_EXACT ? &e->exact : &e->wild;
		unsigned count = 0;
		for (uint32_t k = *head; k != NONE; k = rules[k].next)
			count++;
		if (count >= POLICY_MAX_RULES_PER_NAME) {
			/* keeps every lookup O(length of the name): a project file must not hang thousands of
			 * rules on one name for the proxy to walk on each request */
			policy_err(err, r->where, 0, 0, "too many rules for \"%s\" (at most %d per name across all layers: "
				   "merge their ports into one rule)", r->pattern, POLICY_MAX_RULES_PER_NAME);
			policy_trie_free(t);
			return NULL;
		}
		r->next = *head;
		*head = (uint32_t)i;
	}
	return t;
fail:
	policy_err(err, "", 0, 0, "out of memory");
	policy_trie_free(t);
	return NULL;
}

void policy_trie_visit(const struct policy_trie *t, const struct policy_rule *rules, const char *host,
		       policy_trie_visit_fn fn, void *ctx)
{
	size_t end = strlen(host);
	uint32_t node = 0;
	unsigned depth = 0;

	while (end > 0) {
		size_t start = end;
		while (start > 0 && host[start - 1] != '.')
			start--;
		size_t n = end - start;
		const struct trie_edge *e = trie_find(t, node, host + start, n, edge_hash(node, host + start, n));
		if (!e)
			return;
		node = e->child;
		depth++;
		bool more = start > 0; /* labels remain to the left */
		for (uint32_t i = more ? e->wild : e->exact; i != NONE; i = rules[i].next)
			fn(&rules[i], depth, ctx);
		end = start ? start - 1 : 0;
	}
}

bool policy_rule_port_matches(const struct policy_rule *r, uint16_t port)
{
	if (r->any_port)
		return true;
	if (r->nports == 0)
		return r->kind == RULE_DENY || port == 80 || port == 443;
	for (unsigned i = 0; i < r->nports; i++)
		if (port >= r->ports[i].lo && port <= r->ports[i].hi)
			return true;
	return false;
}

unsigned policy_rule_protos(const struct policy_rule *r)
{
	if (r->protos)
		return r->protos;
	return r->kind == RULE_DENY ? POLICY_PB_TCP | POLICY_PB_UDP : POLICY_PB_TCP;
}

const char *policy_proto_name(enum policy_proto proto)
{
	return proto == POLICY_PROTO_TCP ? "tcp" : proto == POLICY_PROTO_UDP ? "udp" : NULL;
}

/* Does rule r apply to (protocol bit, port, method)? Port 0 asks "is the name usable at all" (DNS): any
 * allow or ceiling rule answers yes, but only an unconditional deny (every port, protocol and method)
 * says no. */
static bool rule_applies(const struct policy_rule *r, unsigned pbit, uint16_t port, unsigned method)
{
	if (port == 0) {
		if (r->kind == RULE_DENY)
			return (r->any_port || r->nports == 0) && r->methods == 0 &&
			       policy_rule_protos(r) == (POLICY_PB_TCP | POLICY_PB_UDP);
		return true;
	}
	if (!(policy_rule_protos(r) & pbit) || !policy_rule_port_matches(r, port))
		return false;
	if (r->methods == 0 || (method & r->methods) != 0)
		return true;
	/* Inside a CONNECT tunnel or an opaque TLS stream (method 0) the denied methods may well be
	 * used, and the proxy cannot see them: a method-restricted deny covers those too. */
	return r->kind == RULE_DENY && (method == 0 || method == POLICY_M_CONNECT);
}

/* Is a better than b as the rule to quote? Deeper match, then exact over wildcard, then the stronger
 * layer, then the earlier rule. */
static bool rule_better(const struct policy_rule *a, unsigned da, const struct policy_rule *b, unsigned db)
{
	if (!b)
		return true;
	if (da != db)
		return da > db;
	if (a->pat != b->pat)
		return a->pat == PAT_EXACT;
	if (a->layer != b->layer)
		return a->layer < b->layer;
	return a->seq < b->seq;
}

struct decide_ctx {
	unsigned pbit; /* POLICY_PB_* */
	uint16_t port;
	unsigned method;
	const struct policy_rule *deny, *allow, *ceiling, *near; /* near: name matched, port/method not */
	unsigned deny_d, allow_d, ceiling_d, near_d;
};

static void decide_visit(const struct policy_rule *r, unsigned depth, void *vctx)
{
	struct decide_ctx *c = vctx;
	bool ok = rule_applies(r, c->pbit, c->port, c->method);

	switch (r->kind) {
	case RULE_DENY:
		if (ok && rule_better(r, depth, c->deny, c->deny_d)) {
			c->deny = r;
			c->deny_d = depth;
		}
		break;
	case RULE_ALLOW:
		if (ok && rule_better(r, depth, c->allow, c->allow_d)) {
			c->allow = r;
			c->allow_d = depth;
		} else if (!ok && rule_better(r, depth, c->near, c->near_d)) {
			c->near = r;
			c->near_d = depth;
		}
		break;
	case RULE_CEILING:
		if (ok && rule_better(r, depth, c->ceiling, c->ceiling_d)) {
			c->ceiling = r;
			c->ceiling_d = depth;
		}
		break;
	}
}

static void describe(const struct policy_rule *r, char *buf, size_t len)
{
	char ports[128];

	policy_rule_ports_str(r, ports, sizeof ports);
	size_t o = (size_t)snprintf(buf, len, "%s (%s, %s", r->where, r->pattern, ports);
	if (r->protos && o < len) /* named in the rule: say which, or a UDP rule reads as a TCP one */
		o += (size_t)snprintf(buf + o, len - o, ", %s",
				      r->protos == POLICY_PB_UDP ? "udp" : r->protos == POLICY_PB_TCP ? "tcp" : "tcp and udp");
	if (r->methods && o < len) {
		o += (size_t)snprintf(buf + o, len - o, ", methods");
		for (unsigned bit = 1; bit <= POLICY_M_TRACE && o < len; bit <<= 1)
			if (r->methods & bit)
				o += (size_t)snprintf(buf + o, len - o, " %s", policy_method_name(bit));
	}
	if (o < len)
		snprintf(buf + o, len - o, ")");
}

static unsigned proto_bit(enum policy_proto proto)
{
	return proto == POLICY_PROTO_UDP ? POLICY_PB_UDP : POLICY_PB_TCP;
}

static void decision_init(struct policy_decision *out, const char *host, const struct sockaddr *sa,
			  enum policy_proto proto, uint16_t port)
{
	out->verdict = POLICY_DENY;
	out->why = POLICY_R_DEFAULT;
	out->rule = NULL;
	out->port = port;
	out->proto = proto == POLICY_PROTO_UDP ? POLICY_PROTO_UDP : POLICY_PROTO_TCP;
	out->reason_buf[0] = '\0';
	out->is_addr = sa != NULL;
	if (host) {
		size_t n = strlen(host);
		if (n > POLICY_HOST_MAX)
			n = POLICY_HOST_MAX;
		memcpy(out->host, host, n);
		out->host[n] = '\0';
	} else {
		out->host[0] = '\0';
	}
	out->addr.ss_family = AF_UNSPEC; /* read by policy_decision_reason() for name decisions too */
	if (sa && sa->sa_family == AF_INET)
		memcpy(&out->addr, sa, sizeof(struct sockaddr_in));
	else if (sa && sa->sa_family == AF_INET6)
		memcpy(&out->addr, sa, sizeof(struct sockaddr_in6));
	else if (sa)
		out->addr.ss_family = AF_UNSPEC;
}

void policy_decide(const struct policy *p, const char *canon_host, uint16_t port, unsigned method,
		   struct policy_decision *out)
{
	policy_decide_proto(p, canon_host, POLICY_PROTO_TCP, port, method, out);
}

void policy_decide_proto(const struct policy *p, const char *canon_host, enum policy_proto proto, uint16_t port,
			 unsigned method, struct policy_decision *out)
{
	/* UDP carries no HTTP method: only rules without a method list can allow it */
	struct decide_ctx c = {.pbit = proto_bit(proto), .port = port, .method = proto == POLICY_PROTO_UDP ? 0 : method};

	decision_init(out, canon_host, NULL, proto, port);
	policy_trie_visit(p->trie, p->rules, canon_host, decide_visit, &c);
	if (c.deny) {
		out->why = POLICY_R_DENY_RULE;
		out->rule = c.deny;
		return;
	}
	if (p->has_ceiling && !c.ceiling) {
		out->why = POLICY_R_CEILING;
		return;
	}
	if (c.allow) {
		out->verdict = POLICY_ALLOW;
		out->why = POLICY_R_ALLOW_RULE;
		out->rule = c.allow;
		return;
	}
	if (p->opts.learn) {
		/* after deny rules and the ceiling: learn mode only widens the lower layers' default deny */
		out->verdict = POLICY_ALLOW;
		out->why = POLICY_R_LEARN;
		return;
	}
	out->verdict = p->opts.ask ? POLICY_ASK : POLICY_DENY;
	if (c.near) {
		out->why = POLICY_R_NEAR_MISS;
		out->rule = c.near;
	}
}

void policy_decide_addr(const struct policy *p, const struct sockaddr *sa, uint16_t port, bool named,
			struct policy_decision *out)
{
	policy_decide_addr_proto(p, sa, POLICY_PROTO_TCP, port, named, out);
}

void policy_decide_addr_proto(const struct policy *p, const struct sockaddr *sa, enum policy_proto proto,
			      uint16_t port, bool named, struct policy_decision *out)
{
	const struct policy_rule *deny = NULL, *allow = NULL, *ceiling = NULL;
	bool capped = false; /* an allow matched but the ceiling voids it */
	unsigned pbit = proto_bit(proto);

	decision_init(out, NULL, sa, proto, port);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < p->ncidr; i++) {
			const struct policy_rule *r = &p->rules[p->cidr[i]];
			if ((r->kind == RULE_ALLOW) != (pass == 1) || !policy_cidr_contains(r, sa) || !rule_applies(r, pbit, port, 0))
				continue;
			/* second pass: only allows the ceiling lets through, so that a narrower lower-layer
			 * allow outside it cannot hide an organisation allow */
			if (pass == 1 && p->has_ceiling && !ceiling && r->layer != POLICY_LAYER_ORG) {
				capped = true;
				continue;
			}
			const struct policy_rule **slot = r->kind == RULE_DENY ? &deny : r->kind == RULE_CEILING ? &ceiling : &allow;
			/* the most specific range wins, then the stronger layer */
			if (!*slot || r->prefix > (*slot)->prefix || (r->prefix == (*slot)->prefix && r->layer < (*slot)->layer))
				*slot = r;
		}
	}
	if (deny) {
		out->why = POLICY_R_DENY_RULE;
		out->rule = deny;
		return;
	}
	if (allow) {
		out->verdict = POLICY_ALLOW;
		out->why = POLICY_R_ALLOW_RULE;
		out->rule = allow;
		return;
	}
	if (policy_addr_is_forbidden(sa)) {
		out->why = POLICY_R_ADDR_FORBIDDEN;
		return;
	}
	if (named) {
		out->verdict = POLICY_ALLOW;
		out->why = POLICY_R_ADDR_NAMED;
		return;
	}
	/* A public IP literal in learn mode, unless the organisation's ceiling leaves it out. */
	if (p->opts.learn && !capped && !(p->has_ceiling && !ceiling)) {
		out->verdict = POLICY_ALLOW;
		out->why = POLICY_R_LEARN;
		return;
	}
	out->why = capped ? POLICY_R_ADDR_CEILING : POLICY_R_ADDR_LITERAL;
}

const char *policy_decision_reason(struct policy_decision *d)
{
	char rd[POLICY_ERR_MAX - 200], tgt[POLICY_HOST_MAX + 64], abuf[INET6_ADDRSTRLEN] = "?";
	const char *verb = d->verdict == POLICY_ASK ? "ask" : "denied";
	unsigned plen = d->addr.ss_family == AF_INET6 ? 128 : 32;

	if (d->reason_buf[0])
		return d->reason_buf;
	if (d->is_addr) {
		if (d->addr.ss_family == AF_INET)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)&d->addr)->sin_addr, abuf, sizeof abuf);
		else if (d->addr.ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&d->addr)->sin6_addr, abuf, sizeof abuf);
		snprintf(tgt, sizeof tgt, "address %s", abuf);
	} else if (d->port) {
		snprintf(tgt, sizeof tgt, "%s:%u%s", d->host, d->port, d->proto == POLICY_PROTO_UDP ? "/udp" : "");
	} else {
		snprintf(tgt, sizeof tgt, "%s", d->host);
	}
	if (d->rule)
		describe(d->rule, rd, sizeof rd);
	switch (d->why) {
	case POLICY_R_ALLOW_RULE:
		snprintf(d->reason_buf, sizeof d->reason_buf, "%s allowed by %s", tgt, rd);
		break;
	case POLICY_R_DENY_RULE:
		snprintf(d->reason_buf, sizeof d->reason_buf, "%s denied by %s", tgt, rd);
		break;
	case POLICY_R_CEILING:
		snprintf(d->reason_buf, sizeof d->reason_buf,
			 "denied: %s is outside the organisation's ceiling (no \"ceiling\" rule in the org policy "
			 "matches; only an administrator can widen it)", tgt);
		break;
	case POLICY_R_NEAR_MISS:
		snprintf(d->reason_buf, sizeof d->reason_buf, "%s: %s matches %s but not this port%s or method", verb,
			 d->host, rd, d->proto == POLICY_PROTO_UDP || d->rule->protos ? ", protocol" : "");
		break;
	case POLICY_R_ADDR_FORBIDDEN:
		snprintf(d->reason_buf, sizeof d->reason_buf,
			 "denied: %s is in a forbidden range (loopback, private, link-local/metadata, CGNAT, multicast, "
			 "reserved or IPv4-in-IPv6); allow it explicitly with {\"cidr\": \"%s/%u\"} if this is intended",
			 tgt, abuf, plen);
		break;
	case POLICY_R_LEARN:
		snprintf(d->reason_buf, sizeof d->reason_buf,
			 "%s allowed in learn mode: no rule allows it; `sluice run --learn` records it for the policy it writes",
			 tgt);
		break;
	case POLICY_R_ADDR_NAMED:
		snprintf(d->reason_buf, sizeof d->reason_buf, "%s is public and the name was allowed", tgt);
		break;
	case POLICY_R_ADDR_CEILING:
		snprintf(d->reason_buf, sizeof d->reason_buf, "denied: %s is outside the organisation's ceiling", tgt);
		break;
	case POLICY_R_ADDR_LITERAL:
		snprintf(d->reason_buf, sizeof d->reason_buf,
			 "denied: %s is an IP address and no \"cidr\" rule allows it (name the host instead, or add "
			 "{\"cidr\": \"%s/%u\"})", abuf, abuf, plen);
		break;
	case POLICY_R_DEFAULT:
	default:
		snprintf(d->reason_buf, sizeof d->reason_buf, "%s: no rule allows %s (default deny)", verb, tgt);
		break;
	}
	return d->reason_buf;
}
