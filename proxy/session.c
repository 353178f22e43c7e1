/* Sessions: registration, lookup by a connection's source address (never by a token), the per-session
 * connection cap, and the list of live connections closed when the session goes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mitm_ca.h"
#include "proxy_int.h"

/* Normalises an address for comparison: IPv4-mapped IPv6 becomes IPv4. Port ignored. */
static void norm_addr(const struct sockaddr *sa, int *family, uint8_t bytes[16])
{
	memset(bytes, 0, 16);
	*family = 0;
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		*family = AF_INET;
		memcpy(bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a)) {
			*family = AF_INET;
			memcpy(bytes, a->s6_addr + 12, 4);
		} else {
			*family = AF_INET6;
			memcpy(bytes, a->s6_addr, 16);
		}
	}
}

static bool addr_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	int fa, fb;
	uint8_t ba[16], bb[16];
	norm_addr(a, &fa, ba);
	norm_addr(b, &fb, bb);
	return fa && fa == fb && memcmp(ba, bb, 16) == 0;
}

static bool has_addr(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET || ss->ss_family == AF_INET6;
}

static unsigned addr_hash(int family, const uint8_t bytes[16])
{
	uint32_t h = 2166136261u ^ (uint32_t)family; /* FNV-1a */

	for (int i = 0; i < 16; i++)
		h = (h ^ bytes[i]) * 16777619u;
	return h % PROXY_ADDR_BUCKETS;
}

/* The session whose address (normalised) this is, or NULL. */
static struct proxy_session *addr_lookup(const struct proxy_engine *e, int family, const uint8_t bytes[16])
{
	for (const struct proxy_addr_node *n = e->by_addr[addr_hash(family, bytes)]; n; n = n->next)
		if (n->family == family && memcmp(n->bytes, bytes, 16) == 0)
			return n->session;
	return NULL;
}

static void addr_index_add(struct proxy_engine *e, struct proxy_session *s)
{
	const struct sockaddr_storage *a[2] = {&s->addr4, &s->addr6};

	for (int i = 0; i < 2; i++) {
		struct proxy_addr_node *n = &s->by_addr[i];
		unsigned h;

		norm_addr(has_addr(a[i]) ? (const struct sockaddr *)a[i] : NULL, &n->family, n->bytes);
		if (!n->family)
			continue;
		n->session = s;
		h = addr_hash(n->family, n->bytes);
		n->next = e->by_addr[h];
		e->by_addr[h] = n;
	}
}

static void addr_index_del(struct proxy_engine *e, struct proxy_session *s)
{
	for (int i = 0; i < 2; i++) {
		struct proxy_addr_node *n = &s->by_addr[i], **pp;

		if (!n->family)
			continue;
		for (pp = &e->by_addr[addr_hash(n->family, n->bytes)]; *pp && *pp != n; pp = &(*pp)->next)
			;
		if (*pp)
			*pp = n->next;
		n->family = 0;
	}
}

/* Is a (when it is an address) already some session's? */
static bool addr_taken(const struct proxy_engine *e, const struct sockaddr_storage *a)
{
	int family;
	uint8_t b[16];

	if (!has_addr(a))
		return false;
	norm_addr((const struct sockaddr *)a, &family, b);
	return family && addr_lookup(e, family, b);
}

/* A fresh policy generation (proxy_session.policy_gen). Engines are single-threaded and a process runs one
 * outside unit tests; 2^64 never wraps. */
static uint64_t next_policy_gen(void)
{
	static uint64_t last;
	return ++last;
}

static struct proxy_session *find_by_id(struct proxy_engine *e, const char *id)
{
	struct proxy_session *s;
	TAILQ_FOREACH(s, &e->sessions, entry)
	if (strcmp(s->id, id) == 0)
		return s;
	return NULL;
}

int proxy_session_add(struct proxy_engine *e, const struct proxy_session_info *info)
{
	struct proxy_session *s;

	if (!info || !info->id || !*info->id || !info->policy || (!has_addr(&info->addr4) && !has_addr(&info->addr6)))
		return -EINVAL;
	if (find_by_id(e, info->id) || addr_taken(e, &info->addr4) || addr_taken(e, &info->addr6))
		return -EEXIST;
	s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->engine = e;
	s->id = strdup(info->id);
	s->command = strdup(info->command ? info->command : "");
	if (!s->id || !s->command) {
		free(s->id);
		free(s->command);
		free(s);
		return -ENOMEM;
	}
	s->uid = info->uid;
	s->addr4 = info->addr4;
	s->addr6 = info->addr6;
	s->gw4 = info->gw4;
	s->gw6 = info->gw6;
	if (info->ca_key_pem && info->ca_cert_pem) {
		char err[256];
		s->ca = proxy_mitm_ca_new(info->ca_key_pem, info->ca_cert_pem, err, sizeof err);
		if (!s->ca)
			log_warnx("session %s: %s", info->id, err);
	}
	if (policy_inspects_any(info->policy) && !s->ca) {
		free(s->id);
		free(s->command);
		free(s);
		return -EINVAL; /* inspecting without a CA could only fail every connection: say so at once */
	}
	s->policy = policy_ref(info->policy);
	s->policy_version = info->policy_version;
	s->policy_gen = next_policy_gen();
	TAILQ_INIT(&s->conns);
	TAILQ_INIT(&s->asks);
	TAILQ_INSERT_TAIL(&e->sessions, s, entry);
	addr_index_add(e, s);
	log_info("session %s added (uid %u, %s)", s->id, (unsigned)s->uid, s->command);
	return 0;
}

static void session_free(struct proxy_session *s)
{
	struct proxy_conn *c;
	/* Each close() writes the connection's audit record and detaches it. */
	while ((c = TAILQ_FIRST(&s->conns)) != NULL)
		c->close(c);
	proxy_ask_session_free(s);
	proxy_direct_session_free(s);
	proxy_addr_cache_session_free(s);
	proxy_up_pool_session_free(s); /* (after the connections: a closing one may have offered its upstream) */
	TAILQ_REMOVE(&s->engine->sessions, s, entry);
	addr_index_del(s->engine, s);
	policy_unref(s->policy);
	proxy_mitm_ca_free(s->ca);
	free(s->id);
	free(s->command);
	free(s);
}

int proxy_session_remove(struct proxy_engine *e, const char *id)
{
	struct proxy_session *s = id ? find_by_id(e, id) : NULL;
	if (!s)
		return -ENOENT;
	log_info("session %s removed", id);
	session_free(s);
	return 0;
}

struct proxy_session *proxy_session_by_id(struct proxy_engine *e, const char *id)
{
	return id ? find_by_id(e, id) : NULL;
}

int proxy_session_set_policy(struct proxy_engine *e, const char *id, struct policy *p, uint32_t version)
{
	struct proxy_session *s = id ? find_by_id(e, id) : NULL;
	struct policy *old;
	struct proxy_conn *c, *next;

	if (!s)
		return -ENOENT;
	if (!p)
		return -EINVAL;
	old = s->policy;
	s->policy = policy_ref(p);
	s->policy_version = version;
	s->policy_gen = next_policy_gen(); /* answers the DNS cache filtered for the old policy no longer match */
	policy_unref(old);
	log_info("session %s: policy replaced", s->id);
	/* idle upstream connections were kept under the old policy: none serves a request decided by the new one
	 * (a take checks the address again anyway) */
	proxy_up_pool_flush(s);
	/* live connections whose destination the new policy no longer allows end now (each close writes
	 * its audit record), and requests held for approval are decided again: still undecided they stay
	 * held, allowed they go on, denied they are refused (relay.c); every later request is decided by the
	 * new policy anyway */
	for (c = TAILQ_FIRST(&s->conns); c; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (c->still_allowed && !c->still_allowed(c, s->policy))
			c->close(c);
	}
	proxy_direct_policy_changed(s);
	return 0;
}

void proxy_session_free_all(struct proxy_engine *e)
{
	struct proxy_session *s;
	while ((s = TAILQ_FIRST(&e->sessions)) != NULL)
		session_free(s);
}

struct proxy_session *proxy_session_find(struct proxy_engine *e, const struct sockaddr *peer,
                                         const struct sockaddr *local)
{
	const struct sockaddr_storage *gw;
	struct proxy_session *s;
	int fam;
	uint8_t b[16];

	norm_addr(peer, &fam, b);
	if (!fam || !(s = addr_lookup(e, fam, b)))
		return NULL;
	/* the entry of the address matched says which gateway is the session's for it */
	gw = s->by_addr[0].family == fam && memcmp(s->by_addr[0].bytes, b, 16) == 0 ? &s->gw4 : &s->gw6;
	/* A session must talk to its own gateway: a connection to another session's gateway address (or a
	 * host address) is not this session's traffic. */
	if (local && has_addr(gw) && !addr_eq(local, (const struct sockaddr *)gw)) {
		log_warnx("session %s: connection to an address that is not its gateway; refused", s->id);
		return NULL;
	}
	return s;
}

int proxy_session_admit(struct proxy_session *s)
{
	struct proxy_engine *e = s->engine;
	if (!proxy_audit_writable(e))
		return -EIO;
	if (s->nconns >= e->max_conns)
		return -EMFILE;
	return 0;
}

void proxy_session_attach(struct proxy_session *s, struct proxy_conn *c, bool counted)
{
	c->session = s;
	c->counted = counted;
	if (counted)
		s->nconns++;
	TAILQ_INSERT_TAIL(&s->conns, c, entry);
}

void proxy_session_detach(struct proxy_conn *c)
{
	struct proxy_session *s = c->session;
	if (!s)
		return;
	TAILQ_REMOVE(&s->conns, c, entry);
	if (c->counted)
		s->nconns--;
	c->session = NULL;
}

void proxy_session_audit(struct proxy_session *s, struct audit_record *r)
{
	int rc;

	r->session = s->id;
	r->uid = s->uid;
	r->has_uid = true;
	r->command = s->command;
	r->policy_version = s->policy_version;
	if (!r->flow)
		r->flow = proxy_flow_next(s->engine);
	rc = audit_log_write(s->engine->audit, r);
	proxy_metrics_note(&s->engine->metrics, r, rc);
	if (rc != 0)
		proxy_audit_failed(s->engine);
	proxy_audit_schedule(s->engine);
}
