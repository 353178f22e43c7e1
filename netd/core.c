/* sluiced's core: configuration, startup in order (namespace, netlink, reconciliation, gateway
 * lease, nftables, listeners, engine, NFLOG), reconciliation of what a crashed instance left, and
 * shutdown. The sessions themselves are in session.c. */
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
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "audit_ship.h"
#include "cni_key.h"
#include "config.h"
#include "engine.h"
#include "lease.h"
#include "netd_metrics.h"
#include "reaper.h"
#include "testhook.h"
#include "link.h"
#include "log.h"
#include "parent.h"
#include "policy.h"
#include "util.h"


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
	c->socks_port = NETD_DEFAULT_SOCKS_PORT;
	c->dns_port = 53;
	c->nflog_group = NETD_DEFAULT_NFLOG_GROUP;
	c->max_per_uid = NETD_DEFAULT_MAX_PER_UID;
	c->compile_timeout_ms = NETD_DEFAULT_COMPILE_TIMEOUT_MS;
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

struct in_addr netd_slot_addr4(const struct netd *d, unsigned slot)
{
	struct in_addr a = {htonl(ntohl(d->cfg.pool4.s_addr) + slot)};
	return a;
}

struct in6_addr netd_slot_addr6(const struct netd *d, unsigned slot)
{
	struct in6_addr a = d->cfg.pool6;
	uint32_t lo;

	memcpy(&lo, &a.s6_addr[12], 4);
	lo = htonl(ntohl(lo) + slot);
	memcpy(&a.s6_addr[12], &lo, 4);
	return a;
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
		struct in_addr g4 = netd_slot_addr4(d, slot);
		struct in6_addr g6 = netd_slot_addr6(d, slot);
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
	static const struct { int type; const char *what; } kinds[NETD_LISTENERS] = {
		{SOCK_STREAM, "proxy (TCP)"}, {SOCK_DGRAM, "DNS (UDP)"}, {SOCK_STREAM, "DNS (TCP)"},
		{SOCK_STREAM, "transparent (TCP)"}, {SOCK_STREAM, "SOCKS5 (TCP)"}};
	const uint16_t ports[NETD_LISTENERS] = {d->cfg.proxy_port, d->cfg.dns_port, d->cfg.dns_port,
	                                        d->cfg.transparent_port, d->cfg.socks_port};

	for (int i = 0; i < NETD_LISTENERS; i++) {
		uint16_t port = ports[i];
		int r;

		if (port == 0) /* a listener turned off (SOCKS5) */
			continue;
		r = bind_listener(AF_INET, kinds[i].type, &d->gw4, port, &d->listen_fds[i]);

		if (r == 0 && d->cfg.v6)
			r = bind_listener(AF_INET6, kinds[i].type, &d->gw6, port, &d->listen_fds6[i]);
		if (r < 0) {
			snprintf(err, errlen, "binding the %s listener on port %u: %s", kinds[i].what, port, strerror(-r));
			return r;
		}
	}
	d->nlisten = NETD_LISTENERS;
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
	for (int i = 0; i < NETD_LISTENERS; i++)
		d->listen_fds[i] = d->listen_fds6[i] = -1;
	d->slot_first = 2;
	d->slot_last = (cfg->len4 >= 31 ? 2 : (1u << (32 - cfg->len4)) - 2);
	if (d->cfg.v6 && 128 - cfg->len6 < 32 && d->slot_last > (1u << (128 - cfg->len6)) - 2)
		d->slot_last = (1u << (128 - cfg->len6)) - 2;
	d->slot_hint = d->slot_first;
	d->base = proxy_event_base_new(); /* (timers armed from a clock read: engine.h) */
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
	/* Instances in one network namespace share the nftables table and, with one run directory, the
	 * lease directory: the last to go deletes both (netd_free). A lock on the namespace itself (its
	 * nsfs inode, flock) orders that check and delete against a starting instance's directories, lease
	 * and table set-up, so nothing is deleted under an instance that is starting (or already holds a
	 * session). An embedded helper finishes that clean-up after its launcher has gone, so a new helper
	 * may well start meanwhile. */
	if (flock(d->host_netns_fd, LOCK_EX) < 0) {
		r = -errno;
		snprintf(err, errlen, "locking the network namespace's sluice state: %s", strerror(-r));
		goto fail;
	}
	{
		/* a parent proxy the organisation configured: checked now so a mistake stops sluiced with the
		 * file's name; the engine loads it again before it drops privileges (its auth_file is root's) */
		struct proxy_parent *parent = NULL;
		char path[PATH_MAX], perr[600];

		snprintf(path, sizeof path, "%s/upstream-proxy.json", cfg->sysconfdir);
		r = proxy_parent_load(path, &parent, perr, sizeof perr);
		free(parent);
		if (r < 0 && r != -ENOENT) {
			snprintf(err, errlen, "the parent proxy configuration: %s", perr);
			goto fail;
		}
		if (r == 0)
			util_strlcpy(d->upstream_proxy, path, sizeof d->upstream_proxy);
	}
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
	d->gw4 = netd_slot_addr4(d, d->gw_slot);
	d->gw6 = netd_slot_addr6(d, d->gw_slot);
	if (reconcile && (r = netd_reconcile(d, err, errlen)) < 0)
		goto fail;
	r = netd_pool_check(d->rtnl, &cfg->pool4, cfg->len4, cfg->v6 ? &cfg->pool6 : NULL, cfg->len6, err, errlen);
	if (r < 0)
		goto fail;
	r = netd_nft_setup(d->nft, cfg->nflog_group, &d->gw4, cfg->v6 ? &d->gw6 : NULL, err, errlen);
	if (r < 0)
		goto fail;
	flock(d->host_netns_fd, LOCK_UN); /* our lease and our gateway in the table keep the table */
	if ((r = open_listeners(d, err, errlen)) < 0)
		goto fail;
	if ((r = netd_engine_start(d, err, errlen)) < 0)
		goto fail;
	/* the first thread: the engine was forked while this process had only one (engine.c) */
	d->reaper = netd_reaper_new(d->lease_dir, &e);
	if (!d->reaper) {
		r = e;
		snprintf(err, errlen, "starting the link reaper: %s", strerror(-r));
		goto fail;
	}
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

void netd_audit_close(struct netd *d)
{
	netd_nflog_free(d->nflog);
	d->nflog = NULL;
	netd_engine_free(d->engine);
	netd_ship_free(d->ship); /* after the engine: what it wrote last is shipped too */
	d->ship = NULL;
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
	netd_metrics_free(d);
	netd_control_free(d); /* cancels the compiles its connections wait for */
	while (d->sessions)
		netd_sess_close(d, d->sessions); /* ... and those of POLICY changes */
	netd_compiler_free(d);
	netd_reaper_free(d->reaper); /* every link of an ended session is gone after this */
	d->reaper = NULL;
	netd_audit_close(d);
	netd_asks_drop_session(d, NULL);
	for (int i = 0; i < NETD_LISTENERS; i++) {
		if (d->listen_fds[i] >= 0)
			close(d->listen_fds[i]);
		if (d->listen_fds6[i] >= 0)
			close(d->listen_fds6[i]);
	}
	if (d->nft && d->gw_lease_fd >= 0) {
		/* netd_new's lock (a failed netd_new holds it already; flock converts it) */
		if (flock(d->host_netns_fd, LOCK_EX) < 0)
			log_warnx("locking the network namespace's nftables state: %s", strerror(errno));
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
		flock(d->host_netns_fd, LOCK_UN);
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
