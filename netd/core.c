/* sluiced's core: configuration, startup in order (namespace, netlink, reconciliation, gateway
 * lease, nftables, listeners, engine, NFLOG), and session setup/teardown. Setup order matters for
 * safety: the session's nftables elements exist before its link does, and the link is brought up
 * only after that; every sl-* interface is filtered by the ruleset even before its elements exist. */
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

#include "config.h"
#include "lease.h"
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

/* The host's first resolver from /etc/resolv.conf (the engine resolves for the sessions like the host
 * does); 127.0.0.53 when there is none. */
static void default_upstream(char *buf, size_t len)
{
	FILE *f = fopen("/etc/resolv.conf", "re");
	char line[256], addr[64];
	struct in6_addr a6;
	struct in_addr a4;

	util_strlcpy(buf, "127.0.0.53", len);
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, " nameserver %63s", addr) != 1)
			continue;
		addr[strcspn(addr, "%")] = '\0'; /* no scoped link-local resolvers */
		if (inet_pton(AF_INET, addr, &a4) == 1 || inet_pton(AF_INET6, addr, &a6) == 1) {
			util_strlcpy(buf, addr, len);
			break;
		}
	}
	fclose(f);
}

void netd_config_defaults(struct netd_config *c)
{
	struct passwd *pw;
	char err[128];

	memset(c, 0, sizeof *c);
	util_strlcpy(c->run_dir, NETD_DEFAULT_RUN_DIR, sizeof c->run_dir);
	util_strlcpy(c->audit_log, NETD_DEFAULT_AUDIT_LOG, sizeof c->audit_log);
	default_upstream(c->upstream_dns, sizeof c->upstream_dns);
	util_strlcpy(c->sysconfdir, SLUICE_SYSCONFDIR, sizeof c->sysconfdir);
	netd_config_pool4(c, NETD_DEFAULT_POOL4, err, sizeof err);
	netd_config_pool6(c, NETD_DEFAULT_POOL6, err, sizeof err);
	c->v6 = true;
	c->proxy_port = NETD_DEFAULT_PROXY_PORT;
	c->transparent_port = NETD_DEFAULT_TRANSPARENT_PORT;
	c->dns_port = 53;
	c->nflog_group = NETD_DEFAULT_NFLOG_GROUP;
	c->max_per_uid = NETD_DEFAULT_MAX_PER_UID;
	pw = getpwnam("sluice");
	if (!pw)
		pw = getpwnam("nobody");
	c->engine_uid = pw ? pw->pw_uid : 65534;
	c->engine_gid = pw ? pw->pw_gid : 65534;
}

static int parse_prefix(const char *s, int fam, void *addr, unsigned *len, unsigned minlen, unsigned maxlen)
{
	char buf[64], *slash, *end;
	unsigned long l;

	if (util_strlcpy(buf, s, sizeof buf) >= sizeof buf)
		return -EINVAL;
	slash = strchr(buf, '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	errno = 0;
	l = strtoul(slash + 1, &end, 10);
	if (errno || *end || slash[1] == '\0' || l < minlen || l > maxlen)
		return -EINVAL;
	if (inet_pton(fam, buf, addr) != 1)
		return -EINVAL;
	*len = (unsigned)l;
	return 0;
}

int netd_config_pool4(struct netd_config *c, const char *s, char *err, size_t errlen)
{
	if (parse_prefix(s, AF_INET, &c->pool4, &c->len4, 8, 28) < 0) {
		snprintf(err, errlen, "bad IPv4 pool \"%s\": expected ADDRESS/LEN with LEN 8..28", s);
		return -EINVAL;
	}
	c->pool4.s_addr &= htonl(~0u << (32 - c->len4));
	return 0;
}

int netd_config_pool6(struct netd_config *c, const char *s, char *err, size_t errlen)
{
	if (parse_prefix(s, AF_INET6, &c->pool6, &c->len6, 48, 120) < 0) {
		snprintf(err, errlen, "bad IPv6 pool \"%s\": expected ADDRESS/LEN with LEN 48..120", s);
		return -EINVAL;
	}
	for (unsigned i = c->len6; i < 128; i++)
		c->pool6.s6_addr[i / 8] &= (unsigned char)~(0x80u >> (i % 8));
	return 0;
}

static struct in_addr slot_addr4(const struct netd *d, unsigned slot)
{
	struct in_addr a = {htonl(ntohl(d->cfg.pool4.s_addr) + slot)};
	return a;
}

static struct in6_addr slot_addr6(const struct netd *d, unsigned slot)
{
	struct in6_addr a = d->cfg.pool6;
	uint32_t lo;

	memcpy(&lo, &a.s6_addr[12], 4);
	lo = htonl(ntohl(lo) + slot);
	memcpy(&a.s6_addr[12], &lo, 4);
	return a;
}

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

struct netd_sess *netd_sess_find(struct netd *d, const char *id)
{
	for (struct netd_sess *s = d->sessions; s; s = s->next)
		if (strcmp(s->id, id) == 0)
			return s;
	return NULL;
}

/* ---- reconciliation ---- */

struct recon {
	struct netd *d;
	char (*live)[16]; /* interfaces of live leases (other instances) */
	size_t nlive, cap;
	unsigned removed;
};

static bool valid_ifname(const char *s)
{
	size_t n = strlen(s);

	if (n <= strlen(NETD_LINK_PREFIX) || n > 15 || strncmp(s, NETD_LINK_PREFIX, strlen(NETD_LINK_PREFIX)))
		return false;
	for (size_t i = strlen(NETD_LINK_PREFIX); i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* a netns path in a record must be a plain file in our netns directory */
static bool valid_netns_path(const struct netd *d, const char *p)
{
	size_t n = strlen(d->netns_dir);

	return strncmp(p, d->netns_dir, n) == 0 && p[n] == '/' && p[n + 1] && !strchr(p + n + 1, '/') &&
	       strcmp(p + n + 1, "..") != 0 && strcmp(p + n + 1, ".") != 0;
}

/* record: "session ID IFNAME NETNS|-" or "gateway" */
static void recon_dead(unsigned slot, const char *rec, void *arg)
{
	struct recon *rc = arg;
	struct netd *d = rc->d;
	char id[32], ifn[32], ns[PATH_MAX];

	if (strcmp(rec, "gateway") == 0) {
		struct in_addr g4 = slot_addr4(d, slot);
		struct in6_addr g6 = slot_addr6(d, slot);
		char err[256];

		if (netd_nft_gateway_del(d->nft, &g4, d->cfg.v6 ? &g6 : NULL, err, sizeof err) < 0)
			log_debug("stale gateway of slot %u: %s", slot, err);
		rc->removed++;
		return;
	}
	if (sscanf(rec, "session %31s %31s %4095s", id, ifn, ns) != 3 || !valid_ifname(ifn)) {
		log_warnx("ignoring malformed lease record of slot %u", slot);
		return;
	}
	if (netd_link_delete(d->rtnl, ifn) == 0)
		log_info("removed stale link %s (session %s)", ifn, id);
	if (strcmp(ns, "-") != 0 && valid_netns_path(d, ns) && netd_ns_bind_remove(ns) == 0)
		log_info("removed stale network namespace %s", ns);
	rc->removed++;
}

static void recon_live(unsigned slot, const char *rec, void *arg)
{
	struct recon *rc = arg;
	char id[32], ifn[32];

	if (sscanf(rec, "session %31s %31s", id, ifn) != 2 || !valid_ifname(ifn))
		return;
	if (rc->nlive == rc->cap) {
		size_t nc = rc->cap ? rc->cap * 2 : 16;
		void *p = realloc(rc->live, nc * sizeof *rc->live);
		if (!p)
			return;
		rc->live = p;
		rc->cap = nc;
	}
	util_strlcpy(rc->live[rc->nlive++], ifn, 16);
}

static bool recon_is_live(const char *ifname, void *arg)
{
	struct recon *rc = arg;

	for (size_t i = 0; i < rc->nlive; i++)
		if (strcmp(rc->live[i], ifname) == 0)
			return true;
	return false;
}

static void recon_link(const char *name, void *arg)
{
	struct recon *rc = arg;

	if (!recon_is_live(name, rc) && netd_link_delete(rc->d->rtnl, name) == 0) {
		log_info("removed stale link %s", name);
		rc->removed++;
	}
}

/* Removes everything a crashed instance left: dead leases' links and netns, sl-* links and set
 * elements no live lease accounts for, and unreferenced files in the netns directory. */
static int netd_reconcile(struct netd *d, char *err, size_t errlen)
{
	struct recon rc = {.d = d};
	int r;

	r = netd_lease_scan(d->lease_dir, recon_dead, recon_live, &rc);
	if (r < 0) {
		snprintf(err, errlen, "scanning %s: %s", d->lease_dir, strerror(-r));
		goto out;
	}
	netd_link_foreach_prefix(d->rtnl, NETD_LINK_PREFIX, recon_link, &rc);
	r = netd_nft_prune(d->nft, recon_is_live, &rc, err, errlen);
	if (r < 0)
		goto out;
	rc.removed += (unsigned)r;
	{
		/* only sluiced creates named namespaces and only one sluiced runs (it holds the gateway
		 * lease of slot 1), so at its start every entry here is stale */
		DIR *dir = opendir(d->netns_dir);
		struct dirent *de;

		while (dir && (de = readdir(dir))) {
			char p[PATH_MAX];

			if (de->d_name[0] == '.')
				continue;
			snprintf(p, sizeof p, "%s/%s", d->netns_dir, de->d_name);
			if (netd_ns_bind_remove(p) == 0) {
				log_info("removed stale network namespace %s", p);
				rc.removed++;
			}
		}
		if (dir)
			closedir(dir);
	}
	if (rc.removed)
		log_info("reconciliation removed %u stale objects", rc.removed);
	r = 0;
out:
	free(rc.live);
	return r;
}

/* ---- startup ---- */

static int bind_listener(int fam, int type, const void *addr, uint16_t port, int *out)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	int one = 1, fd, r;

	if (fam == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		memcpy(&s4->sin_addr, addr, 4);
		sl = sizeof *s4;
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		memcpy(&s6->sin6_addr, addr, 16);
		sl = sizeof *s6;
	}
	fd = socket(fam, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* the gateway address lives on the session links, so it may not exist yet (no session) */
	if (fam == AF_INET)
		r = setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof one);
	else
		r = setsockopt(fd, IPPROTO_IPV6, IPV6_FREEBIND, &one, sizeof one);
	if (r == 0 && fam == AF_INET6)
		r = setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
	if (r == 0 && type == SOCK_STREAM)
		r = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (r == 0)
		r = bind(fd, (struct sockaddr *)&ss, sl);
	if (r == 0 && type == SOCK_STREAM)
		r = listen(fd, 4096);
	if (r < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	*out = fd;
	return 0;
}

static int open_listeners(struct netd *d, char *err, size_t errlen)
{
	static const struct { int type; int port; const char *what; } kinds[4] = {
		{SOCK_STREAM, 0, "proxy (TCP)"}, {SOCK_DGRAM, 1, "DNS (UDP)"}, {SOCK_STREAM, 1, "DNS (TCP)"},
		{SOCK_STREAM, 2, "transparent (TCP)"}};

	for (int i = 0; i < 4; i++) {
		uint16_t port = kinds[i].port == 0 ? d->cfg.proxy_port :
				kinds[i].port == 1 ? d->cfg.dns_port : d->cfg.transparent_port;
		int r = bind_listener(AF_INET, kinds[i].type, &d->gw4, port, &d->listen_fds[i]);

		if (r == 0 && d->cfg.v6)
			r = bind_listener(AF_INET6, kinds[i].type, &d->gw6, port, &d->listen_fds6[i]);
		if (r < 0) {
			snprintf(err, errlen, "binding the %s listener on port %u: %s", kinds[i].what, port, strerror(-r));
			return r;
		}
	}
	d->nlisten = 4;
	return 0;
}

static int mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];

	if (util_strlcpy(tmp, path, sizeof tmp) >= sizeof tmp)
		return -ENAMETOOLONG;
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int netd_new(struct netd **out, const struct netd_config *cfg, bool reconcile, char *err, size_t errlen)
{
	struct netd *d = calloc(1, sizeof *d);
	struct stat st;
	int r, e = 0;

	*out = NULL;
	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	d->host_netns_fd = d->gw_lease_fd = -1;
	for (int i = 0; i < 4; i++)
		d->listen_fds[i] = d->listen_fds6[i] = -1;
	d->slot_first = 2;
	d->slot_last = (cfg->len4 >= 31 ? 2 : (1u << (32 - cfg->len4)) - 2);
	if (d->cfg.v6 && 128 - cfg->len6 < 32 && d->slot_last > (1u << (128 - cfg->len6)) - 2)
		d->slot_last = (1u << (128 - cfg->len6)) - 2;
	d->slot_hint = d->slot_first;
	d->base = event_base_new();
	if (!d->base) {
		r = -ENOMEM;
		snprintf(err, errlen, "cannot create the event loop");
		goto fail;
	}
	d->host_netns_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (d->host_netns_fd < 0 || fstat(d->host_netns_fd, &st) < 0) {
		r = -errno;
		snprintf(err, errlen, "opening the host network namespace: %s", strerror(-r));
		goto fail;
	}
	d->host_ns_dev = st.st_dev;
	d->host_ns_ino = st.st_ino;
	snprintf(d->lease_dir, sizeof d->lease_dir, "%s/leases", cfg->run_dir);
	snprintf(d->netns_dir, sizeof d->netns_dir, "%s/netns", cfg->run_dir);
	if ((r = mkdir_p(cfg->run_dir, 0755)) < 0 || (r = mkdir_p(d->lease_dir, 0700)) < 0) {
		snprintf(err, errlen, "creating %s: %s", d->lease_dir, strerror(-r));
		goto fail;
	}
	d->rtnl = netd_rtnl_open(&e);
	if (!d->rtnl) {
		r = e;
		snprintf(err, errlen, "opening route netlink: %s", strerror(-r));
		goto fail;
	}
	d->reaper = netd_reaper_new(d->lease_dir, &e);
	if (!d->reaper) {
		r = e;
		snprintf(err, errlen, "starting the link reaper: %s", strerror(-r));
		goto fail;
	}
	d->nft = netd_nft_new(&e);
	if (!d->nft) {
		r = e;
		snprintf(err, errlen, "opening netfilter netlink: %s", strerror(-r));
		goto fail;
	}
	/* the gateway lease: slot 1 is sluiced's (and proves it is the only one); an embedded helper
	 * takes any free slot for its own gateway */
	if (!cfg->embedded) {
		r = netd_lease_take(d->lease_dir, 1, "gateway");
		if (r == -EBUSY) {
			snprintf(err, errlen, "another sluiced is already running (it holds %s/1)", d->lease_dir);
			goto fail;
		}
		if (r >= 0) {
			d->gw_lease_fd = r;
			d->gw_slot = 1;
		}
	} else {
		r = netd_lease_alloc(d->lease_dir, d->slot_first, d->slot_last, &d->slot_hint, "gateway", NULL, NULL,
				     &d->gw_slot);
		if (r >= 0)
			d->gw_lease_fd = r;
	}
	if (r < 0) {
		snprintf(err, errlen, "taking the gateway lease in %s: %s", d->lease_dir, strerror(-r));
		goto fail;
	}
	d->gw4 = slot_addr4(d, d->gw_slot);
	d->gw6 = slot_addr6(d, d->gw_slot);
	if (reconcile && (r = netd_reconcile(d, err, errlen)) < 0)
		goto fail;
	r = netd_pool_check(d->rtnl, &cfg->pool4, cfg->len4, cfg->v6 ? &cfg->pool6 : NULL, cfg->len6, err, errlen);
	if (r < 0)
		goto fail;
	r = netd_nft_setup(d->nft, cfg->nflog_group, &d->gw4, cfg->v6 ? &d->gw6 : NULL, err, errlen);
	if (r < 0)
		goto fail;
	if ((r = open_listeners(d, err, errlen)) < 0)
		goto fail;
	if ((r = netd_engine_start(d, err, errlen)) < 0)
		goto fail;
	if ((r = netd_nflog_start(d, err, errlen)) < 0) {
		if (!cfg->embedded)
			goto fail;
		/* another instance owns the NFLOG group: drops are still dropped, just not logged here */
		log_warnx("%s: dropped packets of this session are not audited", err);
	}
	*out = d;
	return 0;
fail:
	netd_free(d);
	return r;
}

/* True when another instance (an embedded helper) still holds a lease. */
static void count_live(unsigned slot, const char *rec, void *arg)
{
	(*(unsigned *)arg)++;
}

void netd_free(struct netd *d)
{
	char err[256];
	unsigned others = 0;

	if (!d)
		return;
	d->stopping = true;
	netd_control_free(d);
	while (d->sessions)
		netd_sess_close(d, d->sessions);
	netd_reaper_free(d->reaper); /* every link of an ended session is gone after this */
	d->reaper = NULL;
	netd_nflog_free(d->nflog);
	netd_engine_free(d->engine);
	netd_asks_drop_session(d, NULL);
	for (int i = 0; i < 4; i++) {
		if (d->listen_fds[i] >= 0)
			close(d->listen_fds[i]);
		if (d->listen_fds6[i] >= 0)
			close(d->listen_fds6[i]);
	}
	if (d->nft && d->gw_lease_fd >= 0) {
		netd_lease_release(d->lease_dir, d->gw_slot, d->gw_lease_fd);
		d->gw_lease_fd = -1;
		netd_lease_scan(d->lease_dir, NULL, count_live, &others);
		if (netd_nft_gateway_del(d->nft, &d->gw4, d->cfg.v6 ? &d->gw6 : NULL, err, sizeof err) < 0)
			log_warnx("%s", err);
		if (others == 0) {
			/* the last instance leaves nothing behind: table, state directories, the netns mount.
			 * Last by the table too: an instance with another run directory (its own leases) may
			 * share it, and its sessions' drop rules must stay (fail closed). */
			int gws = netd_nft_gateways_count(d->nft);

			if (gws > 0)
				log_info("nftables table kept: %d other instance(s) use it", gws);
			else if (gws < 0 && gws != -ENOENT)
				log_warnx("nftables table kept: cannot tell whether another instance uses it: %s",
					  strerror(-gws));
			else if (netd_nft_destroy(d->nft, err, sizeof err) < 0)
				log_warnx("%s", err);
			if (!d->cfg.embedded) {
				umount2(d->netns_dir, MNT_DETACH);
				rmdir(d->netns_dir);
			}
			rmdir(d->lease_dir);
		}
	}
	if (d->gw_lease_fd >= 0)
		close(d->gw_lease_fd);
	netd_nft_free(d->nft);
	netd_rtnl_close(d->rtnl);
	if (d->host_netns_fd >= 0)
		close(d->host_netns_fd);
	if (d->base)
		event_base_free(d->base);
	free(d);
}

/* ---- sessions ---- */

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
	for (struct netd_sess *s = d->sessions; s; s = s->next)
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

/* Re-validates the client's policy by compiling it under the organisation layer; returns the
 * compiled policy's serialisation (what the engine gets). */
static char *compile_policy(struct netd *d, const char *json, uid_t uid, bool *transparent,
			    struct policy **compiled, char *err, size_t errlen)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy *p = NULL;
	char *out = NULL, buf[POLICY_ERR_MAX + 300];

	if (!b) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	/* the organisation layer is read by sluiced itself; the client's policy is loaded at the user
	 * layer below it (docs/policy.md), so it can narrow but never widen what /etc/sluice allows */
	if (policy_builder_add_standard_layers(b, d->cfg.sysconfdir, NULL, NULL, &pe) < 0 ||
	    policy_builder_add_json(b, POLICY_LAYER_USER, "session policy", json,
				    strlen(json), &pe) < 0 ||
	    !(p = policy_builder_compile(b, &pe))) {
		snprintf(err, errlen, "policy rejected: %s", policy_error_format(&pe, buf, sizeof buf));
		goto out;
	}
	*transparent = policy_get_options(p)->transparent;
	if (policy_get_options(p)->ask && d->cfg.embedded) {
		/* nobody could reach an embedded helper to decide: fail closed and say what works */
		snprintf(err, errlen, "interactive approval (--ask, option \"ask\") needs sluiced, which decides "
			 "through `sluicectl approve`: start it with `sudo systemctl start sluiced`");
		goto out;
	}
	out = policy_serialize(p);
	if (!out)
		snprintf(err, errlen, "out of memory serialising the policy");
	else
		*compiled = policy_ref(p);
out:
	policy_unref(p);
	policy_builder_free(b);
	return out;
}

int netd_ask_check_org(struct netd *d, const struct netd_ask *a, char *err, size_t errlen)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy_decision dec;
	struct policy *p = NULL;
	char buf[POLICY_ERR_MAX + 300];
	unsigned method = strcmp(a->protocol, "connect") == 0 ? POLICY_M_CONNECT
	                  : policy_method_from_name(a->method, strlen(a->method));
	int r = -EPERM;

	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* The organisation layer as it is now (it may have changed since the session started): an
	 * approval never reaches past a deny rule or the ceiling of /etc/sluice. */
	if (policy_builder_add_standard_layers(b, d->cfg.sysconfdir, NULL, NULL, &pe) < 0 ||
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
	free(s->command);
	free(s->policy_json);
	free(s->client_policy);
	if (s->ca_key_pem)
		explicit_bzero(s->ca_key_pem, strlen(s->ca_key_pem));
	free(s->ca_key_pem);
	free(s->ca_cert_pem);
	policy_unref(s->policy);
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
	v->direct = s->policy && policy_get_options(s->policy)->direct;
}

/* Undoes whatever of the wiring exists (each step tolerates "already gone"). The set elements go first:
 * from then on the interface only drops (every sl-* interface is filtered). The link deletion, which
 * costs the kernel RCU grace periods, then runs on the reaper thread, which releases the lease after it. */
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
	if (s->netns_path) {
		close(s->netns_fd);
		s->netns_fd = -1;
		if ((r = netd_ns_bind_remove(s->netns_path)) < 0)
			log_warnx("removing %s: %s", s->netns_path, strerror(-r));
	}
	if (s->lease_fd >= 0 && d->reaper && netd_reaper_push(d->reaper, s->ifname, s->slot, s->lease_fd) == 0) {
		s->lease_fd = -1;
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
	bool nft_added = false;
	int r, e = 0, lease;

	*out = NULL;
	if (!s) {
		if (req->netns_fd >= 0)
			close(req->netns_fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->netns_fd = req->netns_fd;
	s->lease_fd = -1;
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
	s->command = strdup(req->command);
	s->policy_json = compile_policy(d, req->policy_json, req->uid, &s->transparent, &s->policy, err, errlen);
	s->client_policy = strdup(req->policy_json);
	if (!s->command || !s->policy_json || !s->client_policy) {
		if (s->policy_json)
			snprintf(err, errlen, "out of memory");
		r = -EINVAL;
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
	s->addr4 = slot_addr4(d, s->slot);
	s->addr6 = slot_addr6(d, s->slot);
	netd_test_stop_at("lease");

	/* 1. filter state first, 2. the link (down), 3. host side up, 4. session side up */
	session_nft_view(d, s, &v);
	if ((r = netd_nft_session_add(d->nft, &v, err, errlen)) < 0)
		goto fail;
	nft_added = true;
	netd_test_stop_at("nft");
	lc.host_if = s->ifname;
	lc.netns_fd = s->netns_fd;
	lc.has4 = true;
	lc.has6 = d->cfg.v6;
	lc.addr4 = s->addr4;
	lc.gw4 = d->gw4;
	lc.addr6 = s->addr6;
	lc.gw6 = d->gw6;
	if ((r = netd_link_create(d->rtnl, &lc, err, errlen)) < 0)
		goto fail;
	netd_test_stop_at("link");
	if ((r = netd_link_host_up(d->rtnl, &lc, err, errlen)) < 0)
		goto fail;
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
	s->wired = true;
	netd_test_stop_at("session-up");
	s->owner = req->owner;
	s->next = d->sessions;
	if (d->sessions)
		d->sessions->prev = s;
	d->sessions = s;
	d->nsessions++;
	netd_engine_session_add(d, s);
	netd_test_stop_at("engine");
	log_info("session %s: uid %u, %s, %s", s->id, (unsigned)s->uid, s->ifname, s->command);
	*out = s;
	return 0;
fail:
	session_unwire(d, s, nft_added);
fail_early:
	session_free(s);
	return r;
}

int netd_sess_set_policy(struct netd *d, struct netd_sess *s, const char *json, char *err, size_t errlen)
{
	struct policy *p = NULL;
	bool transparent = false;
	char *out;
	int r;

	if (s->policy_seq) {
		snprintf(err, errlen, "a policy change of session %s is already in progress", s->id);
		return -EBUSY;
	}
	out = compile_policy(d, json, s->uid, &transparent, &p, err, errlen);
	if (!out)
		return -EINVAL;
	if (transparent != s->transparent) {
		snprintf(err, errlen, "the transparent option cannot change on a live session (start a new one)");
		free(out);
		policy_unref(p);
		return -EINVAL;
	}
	free(s->policy_json);
	s->policy_json = out;
	if (json != s->client_policy) {
		char *copy = strdup(json);
		if (copy) {
			free(s->client_policy);
			s->client_policy = copy;
		}
	}
	policy_unref(s->policy);
	s->policy = p;
	/* every direct-mode element goes (what the new policy still allows, the engine offers again and we
	 * check against the new policy); from here on the engine's grants are checked against it */
	if ((r = netd_nft_direct_flush(d->nft, s->ifname, err, errlen)) < 0) {
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

void netd_reload_org(struct netd *d)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy *p = NULL;
	char err[NETD_ERRMSG_MAX + 1], buf[POLICY_ERR_MAX + 300];
	unsigned n = 0, ended = 0;

	/* the organisation layer alone first: an administrator's typo must not end every session */
	if (!b || policy_builder_add_standard_layers(b, d->cfg.sysconfdir, NULL, NULL, &pe) < 0 ||
	    !(p = policy_builder_compile(b, &pe))) {
		log_warnx("organisation policy not reloaded, sessions keep the policy they have: %s",
			  b ? policy_error_format(&pe, buf, sizeof buf) : "out of memory");
		goto out;
	}
	for (struct netd_sess *s = d->sessions, *next; s; s = next) {
		next = s->next;
		if (!s->client_policy)
			continue;
		if (netd_sess_set_policy(d, s, s->client_policy, err, sizeof err) == 0) {
			n++;
			continue;
		}
		if (strstr(err, "already in progress")) {
			log_warnx("session %s: %s; it keeps its policy until it is changed again", s->id, err);
			continue;
		}
		/* what the session runs on is no longer allowed: fail closed */
		log_warnx("session %s ended: its policy does not hold under the reloaded organisation policy: %s", s->id,
			  err);
		netd_conn_session_ending(d, s);
		netd_sess_close(d, s);
		ended++;
	}
	log_info("organisation policy reloaded from %s: %u sessions re-applied, %u ended", d->cfg.sysconfdir, n, ended);
out:
	policy_unref(p);
	policy_builder_free(b);
}

void netd_sess_close(struct netd *d, struct netd_sess *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		d->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	d->nsessions--;
	netd_asks_drop_session(d, s->id);
	netd_engine_session_remove(d, s);
	session_unwire(d, s, true);
	log_info("session %s ended", s->id);
	session_free(s);
}
