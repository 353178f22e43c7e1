/* Direct mode (DESIGN.md): which ports a DNS-learned address of an allowed name may be reached on
 * directly, without the proxy. Only ports that an allow rule for the name lists one by one count
 * (a rule "git.example.org:22"); every candidate is then decided with policy_decide like any
 * request, so deny rules, the organisation ceiling and method-restricted rules (a direct flow has no
 * method: it matches only rules without one) apply exactly as for the proxy. 80 and 443 are never
 * direct: they go through the proxy (or transparent mode). */
#include "policy_int.h"

#include <string.h>

struct ports_ctx {
	uint16_t cand[POLICY_DIRECT_PORTS_MAX];
	size_t n;
};

static void add_cand(struct ports_ctx *c, uint16_t port)
{
	if (port == 0 || port == 80 || port == 443)
		return;
	for (size_t i = 0; i < c->n; i++)
		if (c->cand[i] == port)
			return;
	if (c->n < POLICY_DIRECT_PORTS_MAX)
		c->cand[c->n++] = port;
}

static void ports_visit(const struct policy_rule *r, unsigned depth, void *vctx)
{
	(void)depth;
	if (r->kind != RULE_ALLOW || r->any_port || r->methods)
		return;
	/* single ports only: a range or "*" names no service, and would open thousands of flows */
	for (unsigned i = 0; i < r->nports; i++)
		if (r->ports[i].lo == r->ports[i].hi)
			add_cand(vctx, r->ports[i].lo);
}

size_t policy_direct_ports(const struct policy *p, const char *canon_host, uint16_t *out, size_t max)
{
	struct ports_ctx c = {.n = 0};
	size_t n = 0;

	if (!p || !canon_host || !p->opts.direct)
		return 0;
	policy_trie_visit(p->trie, p->rules, canon_host, ports_visit, &c);
	for (size_t i = 0; i < c.n && n < max; i++) {
		struct policy_decision d;

		policy_decide(p, canon_host, c.cand[i], 0, &d);
		if (d.verdict == POLICY_ALLOW)
			out[n++] = c.cand[i];
	}
	/* ascending, so callers and logs see a stable order */
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
			uint16_t t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}
