/* Direct mode (DESIGN.md): on which (protocol, port) pairs a DNS-learned address of an allowed name may
 * be reached directly, without the proxy. Only ports that an allow rule for the name lists one by one
 * count (a rule "git.example.org:22", or {"host": ..., "ports": [7], "protocol": "udp"}), for the
 * protocols that rule names (TCP unless it says UDP); every candidate is then decided with
 * policy_decide_proto like any request, so deny rules, the organisation ceiling (which caps UDP only
 * where a ceiling rule names it) and method-restricted rules (a direct flow has no method: it matches
 * only rules without one) apply exactly as for the proxy. TCP 80 and 443 are never direct: they go
 * through the proxy (or transparent mode); nor is port 53 over either protocol (the DNS proxy filters
 * names: a resolver reached directly would answer any name, and carry data out in them; a TCP rule for
 * 53 still serves CONNECT through the proxy), nor UDP 80 and 443 (QUIC: it falls back to TCP and the
 * proxy). The parser refuses allow rules that name those UDP ports; this is the second check. */
#include "policy_int.h"

#include <string.h>

struct ports_ctx {
	struct policy_direct_port cand[POLICY_DIRECT_PORTS_MAX];
	size_t n;
};

static bool never_direct(enum policy_proto proto, uint16_t port)
{
	(void)proto; /* the same ports for both: DNS over TCP would bypass the DNS proxy just as well */
	return port == 0 || port == 53 || port == 80 || port == 443;
}

static void add_cand(struct ports_ctx *c, enum policy_proto proto, uint16_t port)
{
	if (never_direct(proto, port))
		return;
	for (size_t i = 0; i < c->n; i++)
		if (c->cand[i].port == port && c->cand[i].proto == proto)
			return;
	if (c->n < POLICY_DIRECT_PORTS_MAX)
		c->cand[c->n++] = (struct policy_direct_port){.proto = (uint8_t)proto, .port = port};
}

static void ports_visit(const struct policy_rule *r, unsigned depth, void *vctx)
{
	unsigned protos = policy_rule_protos(r);

	(void)depth;
	if (r->kind != RULE_ALLOW || r->any_port || r->methods)
		return;
	/* single ports only: a range or "*" names no service, and would open thousands of flows */
	for (unsigned i = 0; i < r->nports; i++) {
		if (r->ports[i].lo != r->ports[i].hi)
			continue;
		if (protos & POLICY_PB_TCP)
			add_cand(vctx, POLICY_PROTO_TCP, r->ports[i].lo);
		if (protos & POLICY_PB_UDP)
			add_cand(vctx, POLICY_PROTO_UDP, r->ports[i].lo);
	}
}

static bool before(const struct policy_direct_port *a, const struct policy_direct_port *b)
{
	return a->proto != b->proto ? a->proto < b->proto : a->port < b->port;
}

size_t policy_direct_ports(const struct policy *p, const char *canon_host, struct policy_direct_port *out,
			   size_t max)
{
	struct ports_ctx c = {.n = 0};
	size_t n = 0;

	if (!p || !canon_host || !p->opts.direct)
		return 0;
	policy_trie_visit(p->trie, p->rules, canon_host, ports_visit, &c);
	for (size_t i = 0; i < c.n && n < max; i++) {
		struct policy_decision d;

		policy_decide_proto(p, canon_host, (enum policy_proto)c.cand[i].proto, c.cand[i].port, 0, &d);
		if (d.verdict == POLICY_ALLOW)
			out[n++] = c.cand[i];
	}
	/* TCP first, ports ascending, so callers and logs see a stable order */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && before(&out[j], &out[j - 1]); j--) {
			struct policy_direct_port t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

bool policy_direct_port_allowed(const struct policy *p, const char *canon_host, enum policy_proto proto,
				uint16_t port)
{
	struct policy_direct_port dp[POLICY_DIRECT_PORTS_MAX];
	size_t n = policy_direct_ports(p, canon_host, dp, POLICY_DIRECT_PORTS_MAX);

	for (size_t i = 0; i < n; i++)
		if (dp[i].proto == proto && dp[i].port == port)
			return true;
	return false;
}
