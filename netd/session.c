/* sluiced's session table: a session's setup in a fixed order, its teardown, policy changes and the
 * organisation layer's reload. Setup order matters for safety: the session's nftables elements exist
 * before its link does, and the link is brought up only after that; every sl-* interface is filtered by
 * the ruleset even before its elements exist. */
#include "netd.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cni_key.h"
#include "config.h"
#include "lease.h"
#include "netd_metrics.h"
#include "reaper.h"
#include "testhook.h"
#include "link.h"
#include "log.h"
#include "mitm_ca.h"
#include "policy.h"
#include "util.h"

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

void netd_sess_addrs(const struct netd *d, const struct netd_sess *s, char a4[46], char g4[46], char a6[46],
			char g6[46])
{
	inet_ntop(AF_INET, &s->addr4, a4, 46);
	inet_ntop(AF_INET, &d->gw4, g4, 46);
	a6[0] = g6[0] = '\0';
	if (d->cfg.v6) {
		inet_ntop(AF_INET6, &s->addr6, a6, 46);
		inet_ntop(AF_INET6, &d->gw6, g6, 46);
	}
}

void netd_sess_resolv(const struct netd *d, char *buf, size_t len)
{
	char g4[46];

	inet_ntop(AF_INET, &d->gw4, g4, sizeof g4);
	/* one resolver: the gateway's DNS proxy; no search domains, so nothing leaks by suffixing */
	snprintf(buf, len, "# written by sluice: the session's DNS proxy\nnameserver %s\noptions edns0 trust-ad\n", g4);
}

struct netd_sess *netd_sess_find_cni(struct netd *d, const char *key)
{
	for (struct netd_sess *s = d->sessions; s; s = s->next)
		if (s->cni_key && strcmp(s->cni_key, key) == 0)
			return s;
	return NULL;
}

struct netd_sess *netd_sess_find(struct netd *d, const char *id)
{
	for (struct netd_sess *s = d->sessions; s; s = s->next)
		if (strcmp(s->id, id) == 0)
			return s;
	return NULL;
}

/* ---- sessions ---- */

static unsigned ns_bucket(dev_t dev, ino_t ino)
{
	uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)ino * 0xc2b2ae3d27d4eb4full);

	return (unsigned)((h >> 32) % NETD_NS_BUCKETS);
}

static unsigned count_uid(const struct netd *d, uid_t uid)
{
	unsigned n = 0;

	for (const struct netd_sess *s = d->sessions; s; s = s->next)
		n += s->uid == uid;
	return n;
}

/* Trust boundary: the netns fd comes from the client. It must be a network namespace, not ours,
 * not already wired, and (for non-root callers, uid != 0) owned by the caller's user namespace: a
 * user can only have sluiced wire a namespace the user created. */
static int check_netns(struct netd *d, int fd, uid_t uid, struct stat *st, char *err, size_t errlen)
{
	struct statfs sfs;
	int type;

	/* nsfs first: an ioctl number means something else on a device or socket */
	if (fstatfs(fd, &sfs) < 0 || sfs.f_type != NSFS_MAGIC || fstat(fd, st) < 0 ||
	    (type = ioctl(fd, NS_GET_NSTYPE)) < 0) {
		snprintf(err, errlen, "the fd passed is not a namespace");
		return -EINVAL;
	}
	if (type != CLONE_NEWNET) {
		snprintf(err, errlen, "the fd passed is not a network namespace");
		return -EINVAL;
	}
	if (st->st_dev == d->host_ns_dev && st->st_ino == d->host_ns_ino) {
		snprintf(err, errlen, "refusing to wire the host's own network namespace");
		return -EPERM;
	}
	for (struct netd_sess *s = d->by_ns[ns_bucket(st->st_dev, st->st_ino)]; s; s = s->ns_next)
		if (s->ns_dev == st->st_dev && s->ns_ino == st->st_ino) {
			snprintf(err, errlen, "that network namespace already has session %s", s->id);
			return -EBUSY;
		}
	if (uid != 0) {
		uid_t owner = (uid_t)-1;
		int ufd = ioctl(fd, NS_GET_USERNS);

		if (ufd < 0 || ioctl(ufd, NS_GET_OWNER_UID, &owner) < 0 || owner != uid) {
			if (ufd >= 0)
				close(ufd);
			snprintf(err, errlen, "the network namespace does not belong to a user namespace of uid %u",
				 (unsigned)uid);
			return -EPERM;
		}
		close(ufd);
	}
	return 0;
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > NETD_NAME_MAX || s[0] == '.' || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '-' || s[i] == '_' || s[i] == '.'))
			return false;
	return true;
}

int netd_ask_check_org(struct netd *d, const struct netd_ask *a, char *err, size_t errlen)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy_decision dec;
	struct policy *p = NULL;
	char buf[POLICY_ERR_MAX + 300];
	unsigned method = strcmp(a->protocol, "connect") == 0 || strcmp(a->protocol, "socks5") == 0
	                          ? POLICY_M_CONNECT
	                          : policy_method_from_name(a->method, strlen(a->method));
	int r = -EPERM;

	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* The organisation layer as it is now (it may have changed since the session started): an
	 * approval never reaches past a deny rule or the ceiling of /etc/sluice. */
	if (policy_builder_add_org_layers(b, d->cfg.sysconfdir, &pe) < 0 ||
	    !(p = policy_builder_compile(b, &pe))) {
		snprintf(err, errlen, "cannot read the organisation policy: %s", policy_error_format(&pe, buf, sizeof buf));
		goto out;
	}
	policy_decide(p, a->host, a->port, method, &dec);
	if (dec.verdict == POLICY_DENY && (dec.why == POLICY_R_DENY_RULE || dec.why == POLICY_R_CEILING)) {
		snprintf(err, errlen, "not approved: the organisation policy forbids it: %s", policy_decision_reason(&dec));
		goto out;
	}
	r = 0;
out:
	policy_unref(p);
	policy_builder_free(b);
	return r;
}

static void session_free(struct netd_sess *s)
{
	if (!s)
		return;
	if (s->netns_fd >= 0)
		close(s->netns_fd);
	free(s->netns_path);
	free(s->cni_key);
	free(s->command);
	free(s->policy_json);
	free(s->client_policy);
	if (s->ca_key_pem)
		explicit_bzero(s->ca_key_pem, strlen(s->ca_key_pem));
	free(s->ca_key_pem);
	free(s->ca_cert_pem);
	free(s->client_extra);
	free(s->grants);
	policy_unref(s->policy);
	netd_compile_cancel(s->policy_job);
	free(s);
}

static void session_nft_view(const struct netd *d, const struct netd_sess *s, struct netd_nft_session *v)
{
	v->ifname = s->ifname;
	v->addr4 = &s->addr4;
	v->gw4 = &d->gw4;
	v->addr6 = d->cfg.v6 ? &s->addr6 : NULL;
	v->gw6 = d->cfg.v6 ? &d->gw6 : NULL;
	v->proxy_port = d->cfg.proxy_port;
	v->dns_port = d->cfg.dns_port;
	v->transparent_port = s->transparent ? d->cfg.transparent_port : 0;
	v->socks_port = d->cfg.socks_port;
	v->direct = s->policy && policy_get_options(s->policy)->direct;
}

/* Undoes whatever of the wiring exists (each step tolerates "already gone"). The set elements go first:
 * from then on the interface only drops (every sl-* interface is filtered). The link deletion, which
 * costs the kernel RCU grace periods, then runs on the reaper thread when no setup is under way
 * (reaper.h), which releases the lease after it and only then closes our reference to the namespace
 * (whose teardown, when that was the last, costs the same). */
static void session_unwire(struct netd *d, struct netd_sess *s, bool nft_added)
{
	struct netd_nft_session v;
	char err[256];
	int r;

	if (nft_added) {
		session_nft_view(d, s, &v);
		if (netd_nft_session_del(d->nft, &v, err, sizeof err) < 0)
			log_warnx("session %s: %s", s->id, err);
	}
	if (s->netns_path && (r = netd_ns_bind_remove(s->netns_path)) < 0)
		log_warnx("removing %s: %s", s->netns_path, strerror(-r));
	if (s->lease_fd >= 0 && d->reaper &&
	    netd_reaper_push(d->reaper, s->ifname, s->slot, s->lease_fd, s->netns_fd, s->ns_dev, s->ns_ino) == 0) {
		s->lease_fd = s->netns_fd = -1;
		return;
	}
	r = netd_link_delete(d->rtnl, s->ifname);
	if (r < 0 && r != -ENODEV)
		log_warnx("deleting link %s: %s", s->ifname, strerror(-r));
	netd_lease_release(d->lease_dir, s->slot, s->lease_fd);
	s->lease_fd = -1;
}

int netd_sess_open(struct netd *d, const struct netd_sess_req *req, struct netd_sess **out, char *err,
		      size_t errlen)
{
	struct netd_sess *s = calloc(1, sizeof *s);
	struct netd_nft_session v;
	struct netd_link_cfg lc = {0};
	struct nl_sock *sess_nl = NULL;
	unsigned char rnd[5];
	char rec[NETD_LEASE_RECORD_MAX];
	struct stat st;
	bool nft_added = false, linking = false, engine_told = false;
	double t[4] = {0};
	int r, e = 0, lease;

	*out = NULL;
	if (!s) {
		netd_compiled_clear(req->policy);
		if (req->netns_fd >= 0)
			close(req->netns_fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->netns_fd = req->netns_fd;
	s->lease_fd = -1;
	s->setup_start = req->requested > 0 ? req->requested : netd_metrics_now();
	s->uid = req->uid;
	s->pid = req->pid;
	s->created = time(NULL);
	s->audit_from = netd_records_mark(d->cfg.audit_log);
	if (req->uid != 0 && count_uid(d, req->uid) >= d->cfg.max_per_uid) {
		snprintf(err, errlen, "uid %u already has %u sessions (the limit)", (unsigned)req->uid,
			 d->cfg.max_per_uid);
		r = -EUSERS;
		goto fail_early;
	}
	if (req->command[0] == '\0') {
		snprintf(err, errlen, "empty command");
		r = -EINVAL;
		goto fail_early;
	}
	/* A label the client chose: kept only when it is a plain word (it is printed by sluicectl). */
	if (req->sandbox) {
		size_t n = strlen(req->sandbox);
		if (n == 0 || n > NETD_SANDBOX_MAX || strspn(req->sandbox, "abcdefghijklmnopqrstuvwxyz0123456789-") != n) {
			snprintf(err, errlen, "bad sandbox type (want up to %d of a-z, 0-9, -)", NETD_SANDBOX_MAX);
			r = -EINVAL;
			goto fail_early;
		}
		memcpy(s->sandbox, req->sandbox, n + 1);
	}
	/* CNI_ADD: the runtime's names, checked again here (the plugin is a client like any other) */
	if (req->cni_key && (!netd_cni_key_valid(req->cni_key) || netd_sess_find_cni(d, req->cni_key))) {
		snprintf(err, errlen, netd_cni_key_valid(req->cni_key)
			 ? "container %s already has a sluice session (DEL it first)"
			 : "bad CNI container id or interface name \"%s\"", req->cni_key);
		r = netd_cni_key_valid(req->cni_key) ? -EEXIST : -EINVAL;
		goto fail_early;
	}
	if (req->sess_if && !netd_cni_ifname_valid(req->sess_if)) {
		snprintf(err, errlen, "bad interface name \"%s\"", req->sess_if);
		r = -EINVAL;
		goto fail_early;
	}
	util_strlcpy(s->sess_if, req->sess_if ? req->sess_if : "eth0", sizeof s->sess_if);
	if (req->cni_key && !(s->cni_key = strdup(req->cni_key))) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto fail_early;
	}
	s->command = strdup(req->command);
	/* compiled under the organisation layer off the loop (compile.c, control.c) */
	s->policy_json = steal_pointer(&req->policy->json);
	s->client_policy = steal_pointer(&req->policy->client);
	s->client_extra = steal_pointer(&req->policy->extra);
	s->policy_version = 1;
	s->policy = steal_pointer(&req->policy->policy);
	s->transparent = req->policy->transparent;
	if (!s->command || !s->policy_json || !s->client_policy || !s->policy) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto fail_early;
	}
	if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd) {
		r = -EIO;
		snprintf(err, errlen, "no randomness for a session id");
		goto fail_early;
	}
	snprintf(s->id, sizeof s->id, "%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4]);
	snprintf(s->ifname, sizeof s->ifname, NETD_LINK_PREFIX "%s", s->id);
	/* HTTPS inspection: the session's CA is made here, outside the sandbox; its key goes to the engine
	 * only, its certificate to the launcher (the sandbox's trust) */
	if (policy_inspects_any(s->policy) &&
	    (r = proxy_mitm_ca_make(s->id, &s->ca_key_pem, &s->ca_cert_pem, err, errlen)) < 0)
		goto fail_early;
	if (s->netns_fd < 0) { /* CREATE: a named netns for other backends */
		char path[PATH_MAX];
		const char *name = req->name ? req->name : s->ifname;

		if (!valid_name(name)) {
			snprintf(err, errlen, "bad namespace name \"%s\": use up to %d of [A-Za-z0-9._-]", name,
				 NETD_NAME_MAX);
			r = -EINVAL;
			goto fail_early;
		}
		snprintf(path, sizeof path, "%s/%s", d->netns_dir, name);
		if ((r = netd_ns_bind_create(d->netns_dir, path, d->host_netns_fd, err, errlen)) < 0)
			goto fail_early;
		s->netns_path = strdup(path);
		s->netns_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (!s->netns_path || s->netns_fd < 0) {
			r = -errno ? -errno : -ENOMEM;
			snprintf(err, errlen, "opening %s: %s", path, strerror(-r));
			if (!s->netns_path) {
				netd_ns_bind_remove(path);
				goto fail_early;
			}
			goto fail;
		}
	}
	/* A namespace sluiced made itself (CREATE) is trusted: it belongs to no user namespace of the
	 * caller's, so the owner check is skipped (uid 0) for it; the per-uid session limit above still
	 * holds, and s->uid records the caller, so only they or root can list and END it. */
	if (s->netns_path)
		netd_test_stop_at("netns");
	if ((r = check_netns(d, s->netns_fd, s->netns_path ? 0 : req->uid, &st, err, errlen)) < 0)
		goto fail;
	s->ns_dev = st.st_dev;
	s->ns_ino = st.st_ino;
	netd_reaper_wait_ns(d->reaper, s->ns_dev, s->ns_ino);
	snprintf(rec, sizeof rec, "session %s %s %s\n", s->id, s->ifname, s->netns_path ? s->netns_path : "-");
	lease = netd_lease_alloc(d->lease_dir, d->slot_first, d->slot_last, &d->slot_hint, rec, NULL, NULL, &s->slot);
	if (lease == -ENOSPC && d->reaper) {
		/* ended sessions' slots come free only once the reaper deleted their links: at the pool's
		 * limit, wait for it (milliseconds) rather than refuse a slot that is about to be free */
		netd_reaper_drain(d->reaper);
		lease = netd_lease_alloc(d->lease_dir, d->slot_first, d->slot_last, &d->slot_hint, rec, NULL, NULL,
					 &s->slot);
	}
	if (lease < 0) {
		r = lease;
		snprintf(err, errlen, lease == -ENOSPC ? "the address pool is exhausted" : "taking an address lease: %s",
			 strerror(-r));
		goto fail;
	}
	s->lease_fd = lease;
	s->addr4 = netd_slot_addr4(d, s->slot);
	s->addr6 = netd_slot_addr6(d, s->slot);
	netd_test_stop_at("lease");
	t[0] = netd_metrics_now();

	/* The engine is told now (its id, addresses and policy), so that it compiles the policy on its
	 * worker while the link is made: the reply to the client still waits for both (open_compiled,
	 * netd_conn_session_ready). Nothing reaches the engine from the session's address before its link
	 * exists; a setup that fails below removes the session from the engine again (its answer then
	 * finds no session and is dropped). */
	netd_engine_session_add(d, s);
	engine_told = true;
	/* 1. filter state first, 2. the link (down), 3. host side up, 4. session side up */
	session_nft_view(d, s, &v);
	if ((r = netd_nft_session_add(d->nft, &v, err, errlen)) < 0)
		goto fail;
	nft_added = true;
	t[1] = netd_metrics_now();
	netd_test_stop_at("nft");
	lc.host_if = s->ifname;
	lc.netns_fd = s->netns_fd;
	lc.sess_if = s->sess_if;
	lc.has4 = true;
	lc.has6 = d->cfg.v6;
	lc.addr4 = s->addr4;
	lc.gw4 = d->gw4;
	lc.addr6 = s->addr6;
	lc.gw6 = d->gw6;
	/* the reaper starts no link deletion from here to the session side's routes (reaper.h) */
	netd_reaper_setup_begin(d->reaper);
	linking = true;
	if ((r = netd_link_create(d->rtnl, &lc, err, errlen)) < 0)
		goto fail;
	t[2] = netd_metrics_now();
	netd_test_stop_at("link");
	if ((r = netd_link_host_up(d->rtnl, &lc, err, errlen)) < 0)
		goto fail;
	t[3] = netd_metrics_now();
	netd_test_stop_at("host-up");
	sess_nl = netd_rtnl_open_in(s->netns_fd, d->host_netns_fd, &e);
	if (!sess_nl) {
		r = e;
		snprintf(err, errlen, "entering the session namespace: %s", strerror(-r));
		goto fail;
	}
	r = netd_link_session_up(sess_nl, &lc, err, errlen);
	netd_rtnl_close(sess_nl);
	if (r < 0)
		goto fail;
	netd_reaper_setup_end(d->reaper);
	linking = false;
	s->wired = true;
	s->wired_at = netd_metrics_now();
	/* sluiced -v: where a setup's time goes (docs/netd.md) */
	log_debug("session %s: wired %.0f us after the request: policy and lease %.0f, nft %.0f, veth %.0f, host side "
	          "%.0f, session side %.0f us",
	          s->id, (s->wired_at - s->setup_start) * 1e6, (t[0] - s->setup_start) * 1e6, (t[1] - t[0]) * 1e6,
	          (t[2] - t[1]) * 1e6, (t[3] - t[2]) * 1e6, (s->wired_at - t[3]) * 1e6);
	netd_test_stop_at("session-up");
	s->owner = req->owner;
	s->next = d->sessions;
	if (d->sessions)
		d->sessions->prev = s;
	d->sessions = s;
	d->nsessions++;
	s->ns_next = d->by_ns[ns_bucket(s->ns_dev, s->ns_ino)];
	d->by_ns[ns_bucket(s->ns_dev, s->ns_ino)] = s;
	netd_test_stop_at("engine");
	log_info("session %s: uid %u, %s, %s", s->id, (unsigned)s->uid, s->ifname, s->command);
	*out = s;
	return 0;
fail:
	if (linking)
		netd_reaper_setup_end(d->reaper);
	if (engine_told)
		netd_engine_session_remove(d, s);
	session_unwire(d, s, nft_added);
fail_early:
	netd_compiled_clear(req->policy); /* what session_free does not own yet */
	session_free(s);
	netd_metrics_session_failed(d);
	return r;
}

void netd_sess_grant(struct netd_sess *s, const char *host, uint16_t port, bool allow, uid_t by)
{
	struct netd_grant *g = NULL;

	for (unsigned i = 0; i < s->ngrants; i++)
		if (s->grants[i].port == port && strcmp(s->grants[i].host, host) == 0)
			g = &s->grants[i];
	if (!g) {
		struct netd_grant *n;
		if (s->ngrants >= NETD_GRANTS_MAX || !(n = realloc(s->grants, (s->ngrants + 1) * sizeof *n)))
			return; /* the engine keeps it for its own life still */
		s->grants = n;
		g = &s->grants[s->ngrants++];
		util_strlcpy(g->host, host, sizeof g->host);
		g->port = port;
	}
	g->allow = allow;
	g->by = by;
}

int netd_sess_apply_policy(struct netd *d, struct netd_sess *s, struct netd_compiled *c, char *err, size_t errlen)
{
	bool same; /* the same policy again (a SIGHUP with the organisation layer unchanged): nothing narrows */
	int r;

	if (s->policy_seq) {
		netd_compiled_clear(c);
		snprintf(err, errlen, "a policy change of session %s is already in progress", s->id);
		return -EBUSY;
	}
	if (c->transparent != s->transparent) {
		netd_compiled_clear(c);
		snprintf(err, errlen, "the transparent option cannot change on a live session (start a new one)");
		return -EINVAL;
	}
	same = s->policy_json && c->json && strcmp(s->policy_json, c->json) == 0;
	free(s->policy_json);
	s->policy_json = steal_pointer(&c->json);
	if (c->client) {
		free(s->client_policy);
		s->client_policy = steal_pointer(&c->client);
	}
	/* the live-added rules the new policy was compiled with (NULL: none, a replacement drops them) */
	free(s->client_extra);
	s->client_extra = steal_pointer(&c->extra);
	s->policy_version++;
	policy_unref(s->policy);
	s->policy = steal_pointer(&c->policy);
	netd_compiled_clear(c);
	/* every direct-mode element goes (what the new policy still allows, the engine offers again and we
	 * check against the new policy); from here on the engine's grants are checked against it. The flows
	 * the engine revokes are those it granted: those of an engine that died since end here, all of them,
	 * after the flush (a packet of a flow ended meets no element), unless the policy is the same */
	r = netd_nft_direct_flush(d->nft, s->ifname, err, errlen);
	if (!same)
		netd_direct_end_orphans(d, s);
	if (r < 0) {
		/* the engine must still get the new policy: both sides decide by it from now on */
		log_warnx("session %s: %s", s->id, err);
		netd_engine_session_policy(d, s);
		return r;
	}
	log_info("session %s: policy replaced (%d direct-mode elements flushed)", s->id, r);
	r = netd_engine_session_policy(d, s);
	if (r == -EHOSTDOWN)
		return 0; /* the engine is down (the session fails closed); it gets the new policy with the session */
	if (r < 0)
		snprintf(err, errlen, "telling the proxy engine: %s", strerror(-r));
	return r;
}

/* ---- SIGHUP: every session's policy compiled again under the reloaded organisation layer ----
 * On workers (compile.c), NETD_RELOAD_PARALLEL at a time so that clients keep compile slots of their own:
 * a thousand sessions, or one with a huge policy, no longer stall sluiced's loop for the whole reload. A
 * session keeps the policy it has until its turn (milliseconds a session; seconds for a huge policy); one
 * busy with a POLICY change gets its turn when that ends (netd_conn_policy_done). */

static void reload_end_session(struct netd *d, struct netd_sess *s, const char *why)
{
	/* what the session runs on is no longer allowed: fail closed */
	log_warnx("session %s ended: its policy does not hold under the reloaded organisation policy: %s", s->id, why);
	d->reload_ended++;
	netd_conn_session_ending(d, s);
	netd_sess_close(d, s);
}

static void reload_done_one(struct netd *d, struct netd_sess *s)
{
	s->reload_pending = false;
	d->nreload_pending--;
}

static void reload_compiled(struct netd *d, int r, struct netd_compiled *res, const char *cerr, void *arg)
{
	struct netd_sess *s = arg;
	char err[NETD_ERRMSG_MAX + 1];

	s->policy_job = NULL;
	s->reload_running = false;
	d->reloads_running--;
	if (r == -EAGAIN && d->org_gen != s->reload_gen) {
		/* compiled under a layer another SIGHUP replaced meanwhile: it stays pending, for the newest */
	} else if (r < 0) {
		reload_done_one(d, s);
		reload_end_session(d, s, cerr ? cerr : strerror(-r));
	} else {
		reload_done_one(d, s);
		if (netd_sess_apply_policy(d, s, res, err, sizeof err) < 0)
			reload_end_session(d, s, err);
		else
			d->reload_applied++;
	}
	netd_reload_pump(d);
}

void netd_reload_pump(struct netd *d)
{
	char err[NETD_ERRMSG_MAX + 1];

	for (struct netd_sess *s = d->sessions, *next; s && d->nreload_pending; s = next) {
		char *json, *extra = NULL;
		int r;

		next = s->next;
		if (d->reloads_running >= NETD_RELOAD_PARALLEL)
			return;
		if (!s->reload_pending || s->policy_job || s->policy_seq || s->policy_replier)
			continue; /* nothing to do, or its POLICY change first */
		if (!(json = strdup(s->client_policy)) || (s->client_extra && !(extra = strdup(s->client_extra)))) {
			free(json);
			reload_done_one(d, s);
			reload_end_session(d, s, "out of memory");
			continue;
		}
		s->reload_gen = d->org_gen;
		r = netd_compile_start2(d, json, extra, 0, reload_compiled, s, &s->policy_job, err, sizeof err);
		if (r == -EAGAIN)
			return; /* every compile slot is taken: again when one comes free (compile.c) */
		if (r < 0) {
			reload_done_one(d, s);
			reload_end_session(d, s, err);
			continue;
		}
		s->reload_running = true;
		d->reloads_running++;
	}
	if (!d->nreload_pending && !d->reloads_running && d->reload_reported != d->org_gen) {
		d->reload_reported = d->org_gen;
		log_info("organisation policy reloaded from %s: %u sessions re-applied, %u ended", d->cfg.sysconfdir,
			 d->reload_applied, d->reload_ended);
	}
}

static void reload_pump_cb(evutil_socket_t fd, short what, void *arg)
{
	netd_reload_pump(arg);
}

void netd_reload_pump_soon(struct netd *d)
{
	static const struct timeval now = {0, 0};

	if (!d->stopping && (d->nreload_pending || d->reload_reported != d->org_gen) &&
	    event_base_once(d->base, -1, EV_TIMEOUT, reload_pump_cb, d, &now) < 0)
		log_warnx("reload: scheduling the next compiles failed; they start when the next compile ends");
}

void netd_reload_org(struct netd *d)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy *p = NULL;
	char buf[POLICY_ERR_MAX + 300];

	/* the organisation layer alone first: an administrator's typo must not end every session */
	if (!b || policy_builder_add_org_layers(b, d->cfg.sysconfdir, &pe) < 0 ||
	    !(p = policy_builder_compile(b, &pe))) {
		log_warnx("organisation policy not reloaded, sessions keep the policy they have: %s",
			  b ? policy_error_format(&pe, buf, sizeof buf) : "out of memory");
		goto out;
	}
	/* compiles on workers that began before this reload are refused when they end (compile.c) */
	d->org_gen++;
	d->reload_applied = d->reload_ended = 0;
	d->compile_slot_freed = netd_reload_pump_soon;
	for (struct netd_sess *s = d->sessions; s; s = s->next) {
		if (!s->client_policy || s->reload_pending)
			continue;
		s->reload_pending = true;
		d->nreload_pending++;
	}
	log_info("organisation policy loaded from %s: compiling %u sessions' policies again on workers",
		 d->cfg.sysconfdir, d->nreload_pending);
	netd_reload_pump(d);
out:
	policy_unref(p);
	policy_builder_free(b);
}

void netd_sess_close(struct netd *d, struct netd_sess *s)
{
	double t0 = netd_metrics_now();

	if (s->prev)
		s->prev->next = s->next;
	else
		d->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	d->nsessions--;
	if (s->reload_pending)
		d->nreload_pending--;
	if (s->reload_running) /* its compile is cancelled with it (session_free): the slot is free */
		d->reloads_running--;
	if (s->reload_pending || s->reload_running)
		netd_reload_pump_soon(d); /* the reload goes on without it (and says when it is done) */
	for (struct netd_sess **pp = &d->by_ns[ns_bucket(s->ns_dev, s->ns_ino)]; *pp; pp = &(*pp)->ns_next)
		if (*pp == s) {
			*pp = s->ns_next;
			break;
		}
	netd_asks_drop_session(d, s->id);
	if (s->policy_replier) /* a policy change still compiling or waiting for the engine: never in force */
		netd_conn_policy_done(d, s, -ESRCH, "the session ended before its new policy took effect");
	/* after RECORDS the engine let go of it already: a second SESSION_REMOVE would only wake it */
	if (!s->engine_released)
		netd_engine_session_remove(d, s);
	session_unwire(d, s, true);
	log_info("session %s ended", s->id);
	session_free(s);
	netd_metrics_session_closed(d, netd_metrics_now() - t0);
}
