/* The destination of a request: one canonical host name (the same for the decision, the connection
 * and the log) or an IP literal in any spelling, and the policy's decision on it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "proxy_int.h"

/* The human-readable reason is formatted for denials (the 403 body and the log quote it) and for
 * learn-mode allows (no rule to quote); an allow by a rule is logged with its rule, which says the
 * same without formatting text per request. */
static void set_reason(struct proxy_target *t)
{
	if (t->dec.verdict != POLICY_ALLOW || t->dec.why == POLICY_R_LEARN)
		snprintf(t->reason, sizeof t->reason, "%s", policy_decision_reason(&t->dec));
}

int proxy_target_decide(struct proxy_session *s, const char *host, size_t len, bool bracketed, uint16_t port,
                        unsigned method_bit, bool name_only, struct proxy_target *t)
{
	enum policy_canon_err ce = POLICY_CANON_IP_LITERAL;
	char lit[POLICY_HOST_MAX + 3];
	size_t ll;

	memset(t, 0, sizeof *t);
	t->port = port;
	if (!bracketed)
		ce = policy_canon_host(host, len, t->host);
	if (ce != POLICY_CANON_OK && name_only) {
		/* a TLS server name: an address or a bad name names nothing the policy could allow */
		t->host[0] = '\0';
		snprintf(t->why, sizeof t->why, "unusable server name: %s",
		         ce == POLICY_CANON_IP_LITERAL ? "an IP address" : policy_canon_strerror(ce));
		return -EINVAL;
	}
	if (ce == POLICY_CANON_OK) {
		policy_decide(s->policy, t->host, t->port, method_bit, &t->dec);
		/* a verdict given earlier in this session (sluicectl approve|deny) settles an "ask" */
		if (!proxy_ask_granted(s, t->host, t->port, &t->dec, t->reason, sizeof t->reason))
			set_reason(t);
		return 0;
	}
	if (ce != POLICY_CANON_IP_LITERAL) {
		snprintf(t->why, sizeof t->why, "bad host name: %s", policy_canon_strerror(ce));
		return -EINVAL;
	}
	/* An address, however it was spelled (127.1, 0x7f.1, 2130706433, [::ffff:127.0.0.1]). */
	ll = bracketed ? len + 2 : len;
	if (ll >= sizeof lit) {
		snprintf(t->why, sizeof t->why, "bad IP literal");
		return -EINVAL;
	}
	if (bracketed) {
		lit[0] = '[';
		memcpy(lit + 1, host, len);
		lit[ll - 1] = ']';
	} else {
		memcpy(lit, host, len);
	}
	lit[ll] = '\0';
	if (policy_parse_ip_literal(lit, ll, &t->addr) != 0) {
		snprintf(t->why, sizeof t->why, "bad IP literal");
		return -EINVAL;
	}
	t->literal = true;
	{
		char buf[PROXY_ADDRSTR_MAX];
		snprintf(t->host, sizeof t->host, "%s", proxy_addr_str((struct sockaddr *)&t->addr, buf, false));
	}
	if (t->addr.ss_family == AF_INET)
		((struct sockaddr_in *)&t->addr)->sin_port = htons(t->port);
	else
		((struct sockaddr_in6 *)&t->addr)->sin6_port = htons(t->port);
	policy_decide_addr(s->policy, (struct sockaddr *)&t->addr, t->port, false, &t->dec);
	set_reason(t);
	return 0;
}
