/* Direct mode (policy option "direct", DESIGN.md): addresses the DNS proxy relayed for an allowed name
 * may be reached without the proxy, over TCP or UDP, on the (protocol, port) pairs the policy names for
 * that name (e.g. ssh to a git host on TCP 22, a game or VoIP server on a UDP port), for the answer's TTL. The engine only remembers what it granted and tells its
 * parent (direct_notify), which checks the grant again and puts it into nftables: the engine opens
 * nothing itself. The decision is made on the name the session asked for; a CNAME target's addresses
 * count because they answer that name, but the target never becomes an allowed name.
 *
 * Grants are kept for the session's life (at most PROXY_DIRECT_MAX_PER_SESSION (address, port) pairs,
 * further ones are refused and logged), so that a policy change can revoke flows still running after
 * their element expired. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "proxy_int.h"

struct proxy_direct_grant {
	struct sockaddr_storage addr; /* port 0 */
	uint8_t proto;                /* enum policy_proto */
	uint16_t port;
	char *host;          /* owned: the allowed name whose answer gave addr */
	uint64_t expires_ms; /* proxy_mono_ms() clock */
};

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return memcmp(&((const struct sockaddr_in *)a)->sin_addr, &((const struct sockaddr_in *)b)->sin_addr,
		              4) == 0;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16) ==
	       0;
}

static struct proxy_direct_grant *find(struct proxy_session *s, const struct sockaddr_storage *a, uint8_t proto,
				       uint16_t port)
{
	for (size_t i = 0; i < s->ndirect; i++)
		if (s->direct[i].port == port && s->direct[i].proto == proto && same_addr(&s->direct[i].addr, a))
			return &s->direct[i];
	return NULL;
}

/* 0, or -errno when the parent could not be told (the flows stay shut: see proxy_direct_notify_fn). */
static int notify(struct proxy_session *s, const char *host, const struct sockaddr_storage *a, uint8_t proto,
                  const uint16_t *ports, size_t nports, uint32_t ttl, bool revoke, uint32_t seq)
{
	struct proxy_direct_event ev = {
	        .session_id = s->id,
	        .host = host,
	        .addr = (const struct sockaddr *)a,
	        .proto = proto,
	        .ports = ports,
	        .nports = nports,
	        .ttl_s = ttl,
	        .revoke = revoke,
	        .seq = seq,
	};
	return s->engine->direct_notify(&ev, s->engine->direct_arg);
}

static void audit_grant(struct proxy_session *s, const char *host, const struct sockaddr_storage *a, uint8_t proto,
                        uint16_t port, const char *decision, const char *rule, const char *reason, const char *error)
{
	struct audit_record r;
	char addr[PROXY_ADDRSTR_MAX];
	struct sockaddr_storage withport = *a;

	if (withport.ss_family == AF_INET)
		((struct sockaddr_in *)&withport)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)&withport)->sin6_port = htons(port);
	memset(&r, 0, sizeof r);
	clock_gettime(CLOCK_REALTIME, &r.start);
	r.protocol = "direct";
	r.host = host;
	r.port = port;
	r.method = proto == POLICY_PROTO_UDP ? "udp" : "tcp"; /* the transport of a direct flow */
	r.decision = decision;
	r.rule = rule;
	r.reason = reason;
	r.address = proxy_addr_str((const struct sockaddr *)&withport, addr, true);
	r.error = error;
	proxy_session_audit(s, &r);
}

/* The audit records' error when the parent could not be told of grants (r < 0). */
static void not_opened(int r, char *buf, size_t len)
{
	if (r == -ENOBUFS) /* netd: sluiced has taken none of the engine's reports for a while */
		snprintf(buf, len,
		         "direct flows not opened: sluiced takes none of the engine's reports (they stay "
		         "dropped until a later answer for the name)");
	else
		snprintf(buf, len, "direct flows not opened: the parent could not be told (%s)", strerror(-r));
}

unsigned proxy_direct_learn(struct proxy_session *s, const char *host, const struct dns_filter_result *fr, uint32_t seq,
                            char *err, size_t errlen)
{
	struct policy_direct_port dp[POLICY_DIRECT_PORTS_MAX];
	size_t ndp;
	uint64_t now = proxy_mono_ms();
	unsigned sent = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!s->engine->direct_notify || !policy_get_options(s->policy)->direct || !fr->naddrs)
		return 0;
	ndp = policy_direct_ports(s->policy, host, dp, POLICY_DIRECT_PORTS_MAX);
	if (ndp == 0)
		return 0;
	for (unsigned i = 0; i < fr->naddrs; i++) {
		const struct sockaddr_storage *a = &fr->addrs[i].addr;
		uint32_t ttl = fr->addrs[i].ttl;
		struct {
			uint8_t proto;
			uint16_t port;
			char *host; /* owned: a new grant's name; NULL: the grant exists (refreshed) */
		} w[POLICY_DIRECT_PORTS_MAX];
		uint16_t ok[2][POLICY_DIRECT_PORTS_MAX]; /* [0] TCP, [1] UDP: one event per protocol */
		size_t nok[2] = {0, 0}, nw = 0, nnew = 0;
		int rc[2] = {0, 0};
		char error[192];

		if (ttl < PROXY_DIRECT_TTL_MIN)
			ttl = PROXY_DIRECT_TTL_MIN;
		if (ttl > PROXY_DIRECT_TTL_MAX)
			ttl = PROXY_DIRECT_TTL_MAX;
		/* what the policy allows for this address, and room for the new grants, before the parent is
		 * told: a grant it was told of is remembered (a policy change must be able to revoke it) */
		for (size_t k = 0; k < ndp; k++) {
			struct policy_decision d;
			enum policy_proto proto = (enum policy_proto)dp[k].proto;
			uint16_t port = dp[k].port;
			char *h = NULL;

			/* the address itself: forbidden ranges (private, loopback, metadata...) need a cidr rule,
			 * exactly as for a connection through the proxy (the DNS filter already removed them) */
			policy_decide_addr_proto(s->policy, (const struct sockaddr *)a, proto, port, true, &d);
			if (d.verdict != POLICY_ALLOW)
				continue;
			if (!find(s, a, dp[k].proto, port)) {
				if (s->ndirect + nnew >= PROXY_DIRECT_MAX_PER_SESSION) {
					audit_grant(s, host, a, dp[k].proto, port, "deny", NULL,
					            "direct mode: the session has too many direct destinations (1024)",
					            NULL);
					continue;
				}
				if (!(h = strdup(host))) {
					log_warnx("session %s: out of memory for a direct-mode grant", s->id);
					continue;
				}
				nnew++;
			}
			w[nw].proto = dp[k].proto;
			w[nw].port = port;
			w[nw++].host = h;
			ok[proto == POLICY_PROTO_UDP][nok[proto == POLICY_PROTO_UDP]++] = port;
		}
		if (nnew) {
			struct proxy_direct_grant *ng = realloc(s->direct, (s->ndirect + nnew) * sizeof *s->direct);
			if (!ng) {
				log_warnx("session %s: out of memory for a direct-mode grant", s->id);
				for (size_t k = 0; k < nw; k++)
					free(w[k].host);
				continue;
			}
			s->direct = ng;
		}
		for (int u = 0; u < 2; u++)
			if (nok[u]) {
				rc[u] = notify(s, host, a, u ? POLICY_PROTO_UDP : POLICY_PROTO_TCP, ok[u], nok[u], ttl,
				               false, seq);
				if (rc[u] == 0)
					sent++;
			}
		for (size_t k = 0; k < nw; k++) {
			struct policy_decision dn;
			struct proxy_direct_grant *g;
			int u = w[k].proto == POLICY_PROTO_UDP;
			char reason[128];

			policy_decide_proto(s->policy, host, (enum policy_proto)w[k].proto, w[k].port, 0, &dn);
			snprintf(reason, sizeof reason, "direct %s flows allowed for %u s (DNS answer for %s)",
			         u ? "UDP" : "TCP", ttl, host);
			if (rc[u] < 0) {
				/* the parent was not told: nothing is open, nothing to remember; the record says so */
				free(w[k].host);
				not_opened(rc[u], error, sizeof error);
				if (err && errlen && !err[0])
					snprintf(err, errlen, "%s", error);
				audit_grant(s, host, a, w[k].proto, w[k].port, "allow", policy_rule_where(dn.rule),
				            reason, error);
				continue;
			}
			if (w[k].host) {
				g = &s->direct[s->ndirect++];
				memset(g, 0, sizeof *g);
				g->addr = *a;
				g->proto = w[k].proto;
				g->port = w[k].port;
				g->host = w[k].host;
			} else {
				g = find(s, a, w[k].proto, w[k].port);
				if (strcmp(g->host, host) != 0) {
					char *h = strdup(host);
					if (h) {
						free(g->host);
						g->host = h;
					}
				}
			}
			g->expires_ms = now + (uint64_t)ttl * 1000;
			audit_grant(s, host, a, w[k].proto, w[k].port, "allow", policy_rule_where(dn.rule), reason,
			            NULL);
		}
	}
	return sent;
}

void proxy_direct_policy_changed(struct proxy_session *s)
{
	uint64_t now = proxy_mono_ms();
	size_t w = 0;

	if (!s->engine->direct_notify) {
		proxy_direct_session_free(s);
		return;
	}
	for (size_t i = 0; i < s->ndirect; i++) {
		struct proxy_direct_grant *g = &s->direct[i];
		enum policy_proto proto = (enum policy_proto)g->proto;
		struct policy_decision d;
		bool still = policy_direct_port_allowed(s->policy, g->host, proto, g->port);

		if (still) {
			policy_decide_addr_proto(s->policy, (const struct sockaddr *)&g->addr, proto, g->port, true, &d);
			still = d.verdict == POLICY_ALLOW;
		}
		if (!still) {
			(void)notify(s, g->host, &g->addr, g->proto, &g->port, 1, 0, true, 0); /* (always queued) */
			audit_grant(s, g->host, &g->addr, g->proto, g->port, "deny", NULL,
			            "direct mode: the session's new policy no longer allows this; its flows were ended",
			            NULL);
			free(g->host);
			continue;
		}
		if (g->expires_ms > now) /* offered again for the time it has left (not opened: the parent logs it) */
			(void)notify(s, g->host, &g->addr, g->proto, &g->port, 1,
			             (uint32_t)((g->expires_ms - now + 999) / 1000), false, 0);
		s->direct[w++] = *g;
	}
	s->ndirect = w;
}

int proxy_engine_direct_ended(struct proxy_engine *e, const char *id, uint32_t n)
{
	struct proxy_session *s = proxy_session_by_id(e, id);
	struct audit_record r;
	char reason[256];

	if (!s)
		return -ENOENT;
	if (!n)
		return -EINVAL;
	memset(&r, 0, sizeof r);
	clock_gettime(CLOCK_REALTIME, &r.start);
	r.protocol = "direct";
	r.decision = "deny";
	snprintf(reason, sizeof reason,
	         "direct mode: the engine that granted the session's direct flows died and its policy changed since: "
	         "all %u of them were ended (those still allowed open again with the next DNS answer)",
	         n);
	r.reason = reason;
	proxy_session_audit(s, &r);
	return 0;
}

void proxy_direct_session_free(struct proxy_session *s)
{
	for (size_t i = 0; i < s->ndirect; i++)
		free(s->direct[i].host);
	free(s->direct);
	s->direct = NULL;
	s->ndirect = 0;
}
