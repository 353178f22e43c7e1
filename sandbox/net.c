/* The network step (launcher side). Without --allow-network the session's network namespace
 * keeps only `lo` and nothing happens here. With it, the policy is compiled from the standard
 * layers plus --policy/--allow (policy/ library), and netd wires the namespace: it gets the
 * namespace fd and the serialised policy and returns the gateway, proxy port and resolv.conf.
 * This file is the only place the launcher talks to netd (netd/client.h). */
#include "session.h"

#include "config.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if SB_HAVE_POLICY
#include "policy.h"
#endif
#if SB_HAVE_NETD
#include "client.h"
#endif

struct sb_netsess {
#if SB_HAVE_NETD
	struct netd_session *ns; /* owned */
#endif
	char id[64];
	char audit_log[4096]; /* where this session's records go ("" = unknown) */
	long long audit_from; /* the log's size when the session started */
	bool embedded;        /* served by an embedded helper (else sluiced) */
	bool inspects;        /* the policy inspects HTTPS: sluiced sends a CA for the sandbox's trust */
	char *policy_json;    /* owned: compiled, not sent yet (sb_net_compile to sb_net_send) */
	bool wired;           /* sluiced answered: the namespace is wired and policed */
#if SB_HAVE_NETD
	bool watching; /* --ask: a thread announces held requests on stderr */
	int watch_fd;  /* owned while watching: sluiced's WATCH connection */
	pthread_t watch_thread;
#endif
};

/* The audit log sluiced writes by default; SLUICE_AUDIT_LOG names another (as for sluicectl). */
static const char *daemon_audit_log(void)
{
	const char *e = getenv("SLUICE_AUDIT_LOG");
	return e && e[0] == '/' ? e : "/var/log/sluice/audit.log";
}

#if SB_HAVE_POLICY
static bool looks_like_file(const char *p)
{
	size_t n = strlen(p);
	return strchr(p, '/') || (n > 5 && strcmp(p + n - 5, ".json") == 0) ||
	       (n > 4 && strcmp(p + n - 4, ".txt") == 0) || (n > 5 && strcmp(p + n - 5, ".list") == 0);
}

/* Compiles the session's policy and returns policy_serialize() output (malloced). */
static char *build_policy(const struct sb_config *c, struct sb_go *go, bool *inspects, char *err, size_t errlen)
{
	struct policy_builder *b = policy_builder_new();
	struct policy *p = NULL;
	struct policy_error pe;
	char buf[POLICY_ERR_MAX + 300];
	char *json = NULL;
	int r;

	memset(&pe, 0, sizeof pe);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if ((r = policy_builder_add_standard_layers(b, SLUICE_SYSCONFDIR, c->home, c->project_dir, &pe)) < 0)
		goto fail;
	for (size_t i = 0; i < c->policies.n; i++) {
		const char *v = c->policies.v[i];
		r = looks_like_file(v) ? policy_builder_add_file(b, POLICY_LAYER_CLI, v, &pe)
		                       : policy_builder_add_preset(b, POLICY_LAYER_CLI, v, &pe);
		if (r < 0)
			goto fail;
	}
	for (size_t i = 0; i < c->allows.n; i++)
		if ((r = policy_builder_add_pattern(b, POLICY_LAYER_CLI, c->allows.v[i], false, "--allow", &pe)) < 0)
			goto fail;
	if (c->ask || c->ask_timeout_s) {
		struct policy_options o = {.ask = c->ask, .ask_timeout_s = c->ask_timeout_s};
		policy_builder_set_options(b, &o);
	}
	if (c->learn_file) {
		/* learn mode: the compile fails when the organisation forbids it (never a silent downgrade) */
		struct policy_options lo = {.learn = true};
		policy_builder_set_options(b, &lo);
	}
	if (!(p = policy_builder_compile(b, &pe)))
		goto fail;
	if (c->ask && !policy_get_options(p)->ask) {
		snprintf(err, errlen, "--ask is turned off by the organisation policy (%s/policy.json: \"ask\": false)",
		         SLUICE_SYSCONFDIR);
		policy_unref(p);
		policy_builder_free(b);
		return NULL;
	}
	/* HTTPS inspection's credentials: the sandbox sees placeholders, the secrets stay with the proxy */
	go->cred_env[0] = '\0';
	for (size_t i = 0, o = 0; i < policy_credential_count(p); i++) {
		const struct policy_credential *cr = policy_credential_at(p, i);
		int n = snprintf(go->cred_env + o, sizeof go->cred_env - o, "%s=%s\n", cr->placeholder_env, cr->placeholder);
		if (n < 0 || (size_t)n >= sizeof go->cred_env - o) {
			snprintf(err, errlen, "too many credentials in the policy (their placeholders do not fit)");
			policy_unref(p);
			policy_builder_free(b);
			return NULL;
		}
		o += (size_t)n;
	}
	*inspects = policy_inspects_any(p);
	json = policy_serialize(p);
	if (!json)
		snprintf(err, errlen, "cannot serialise the policy (out of memory)");
	policy_unref(p);
	policy_builder_free(b);
	return json;
fail:
	snprintf(err, errlen, "policy: %s", policy_error_format(&pe, buf, sizeof buf));
	policy_builder_free(b);
	return NULL;
}
#endif

#if SB_HAVE_NETD
/* --ask: one line on stderr per request sluiced reports held, so the user at the terminal knows what
 * waits and how to decide it. Runs on its own thread (the launcher's main thread sleeps in
 * sigwaitinfo) and writes with write(2) only, taking no stdio lock a fork could inherit. */
static void *watch_main(void *arg)
{
	struct sb_netsess *n = arg;
	struct netd_ask_entry e;

	while (netd_ask_watch_next(n->watch_fd, &e) == 0) {
		char line[600];
		int len = snprintf(
		        line, sizeof line,
		        "sluice: held for approval: %s %s:%u; `sluicectl approve %s` (or deny %s) within %u s\n",
		        e.method, e.host, e.port, e.id, e.id, e.timeout_s);
		if (len <= 0)
			continue;
		if ((size_t)len >= sizeof line)
			len = (int)sizeof line - 1;
		for (int i = 0; i < len - 1; i++) /* sluiced checked them; still, nothing raw reaches the terminal */
			if ((unsigned char)line[i] < 0x20)
				line[i] = '?';
		(void)!write(STDERR_FILENO, line, (size_t)len);
	}
	return NULL;
}

static void watch_start(struct sb_netsess *n)
{
	char err[512];

	n->watch_fd = netd_ask_watch(n->id, err, sizeof err);
	if (n->watch_fd < 0) {
		fprintf(stderr, "sluice: held requests will not be announced here (%s); `sluicectl asks` lists them\n",
		        err);
		return;
	}
	if (pthread_create(&n->watch_thread, NULL, watch_main, n) != 0) {
		close(n->watch_fd);
		return;
	}
	n->watching = true;
}

static void watch_stop(struct sb_netsess *n)
{
	if (!n->watching)
		return;
	shutdown(n->watch_fd, SHUT_RDWR); /* the thread's recv returns */
	pthread_join(n->watch_thread, NULL);
	close(n->watch_fd);
	n->watching = false;
}
#endif

/* SESSION/resolv.conf: made (flags with O_CREAT | O_EXCL), or filled in (the placeholder, already bound
 * over the sandbox's /etc/resolv.conf: the same inode, so the content shows there). */
static int put_resolv(const struct sb_session *s, int flags, const char *content, char *err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/resolv.conf", s->dir);
	cleanup_fd int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | flags, 0644);
	size_t len = strlen(content);
	if (fd < 0 || write(fd, content, len) != (ssize_t)len) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
		return -EIO;
	}
	return 0;
}

static int write_resolv(const struct sb_session *s, const char *content, char *err, size_t errlen)
{
	return put_resolv(s, O_CREAT | O_EXCL, content, err, errlen);
}

static int fill_resolv(const struct sb_session *s, const char *content, char *err, size_t errlen)
{
	return put_resolv(s, O_TRUNC, content, err, errlen);
}

int sb_net_compile(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;

	if (!c->allow_network || s->net)
		return 0;
	if (c->org_forbid_network) {
		snprintf(err, errlen, "--allow-network is forbidden by the organisation policy (%s/policy.json)",
		         SLUICE_SYSCONFDIR);
		return -EPERM;
	}
#if SB_HAVE_NETD && SB_HAVE_POLICY
	struct sb_netsess *n = calloc(1, sizeof *n);
	if (!n) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (!(n->policy_json = build_policy(c, go, &n->inspects, err, errlen))) {
		free(n);
		return -EINVAL;
	}
	s->net = n;
	return 0;
#else
	(void)go;
	(void)write_resolv;
	snprintf(err, errlen,
	         "--allow-network is not available in this build: the netd client (netd/client.h) is not "
	         "built in yet; run without --allow-network (no network) or update sluice");
	return -ENOSYS;
#endif
}

int sb_net_send(struct sb_session *s, int netns_fd, char *err, size_t errlen)
{
#if SB_HAVE_NETD && SB_HAVE_POLICY
	const struct sb_config *c = s->cfg;
	struct sb_netsess *n = s->net;

	if (!n || n->ns || !n->policy_json)
		return 0;
	struct netd_session_request req = {
	        .netns_fd = netns_fd,
	        .command = s->argv[0],
	        .sandbox = sb_sandbox_type_name(c->type),
	        .policy_json = n->policy_json,
	        .audit_log = c->audit_log,
	};
	n->ns = netd_session_send(&req, err, errlen);
	free(n->policy_json); /* sent: sluiced has its copy */
	n->policy_json = NULL;
	return n->ns ? 0 : -ECONNREFUSED;
#else
	(void)s;
	(void)netns_fd;
	(void)err;
	(void)errlen;
	return 0;
#endif
}

bool sb_net_can_finish_late(const struct sb_session *s)
{
	/* HTTPS inspection's CA bundle is mounted with the filesystem, and a VM's tap is wired before it */
	return s->net && !s->net->inspects && s->cfg->type == SB_TYPE_LOCAL;
}

int sb_net_placeholder(const struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
	int r = write_resolv(s, "", err, errlen);
	if (r == 0)
		go->have_resolv = 1;
	return r;
}

int sb_net_finish(struct sb_session *s, struct sb_go *go, char *err, size_t errlen)
{
#if SB_HAVE_NETD && SB_HAVE_POLICY
	const struct sb_config *c = s->cfg;
	struct sb_netsess *n = s->net;
	struct netd_session_reply reply;
	int r;

	bool late = go->have_resolv; /* the filesystem is built already, on the placeholder */

	if (!n || !n->ns || n->wired)
		return 0;
	memset(&reply, 0, sizeof reply);
	if (netd_session_wait(n->ns, &reply, err, errlen) < 0)
		return -ECONNREFUSED;
	n->wired = true;
	util_strlcpy(n->id, reply.id, sizeof n->id);
	n->id[strspn(n->id, "0123456789abcdefABCDEF-_")] = '\0'; /* printed and matched: keep it plain */
	n->embedded = netd_session_is_embedded(n->ns);
	/* Embedded: the log is ours (--audit-log, else the default path); with sluiced it is the
	 * daemon's, and --audit-log does not move it. */
	util_strlcpy(n->audit_log, n->embedded && c->audit_log ? c->audit_log : daemon_audit_log(),
	             sizeof n->audit_log);
	/* The records of a session come after this point. Taken after the open: the records the
	 * engine writes about earlier sessions are already in the log by then. */
	n->audit_from = sb_summary_mark(n->audit_log);
	if (!n->embedded && c->audit_log && !c->quiet)
		fprintf(stderr, "sluice: --audit-log %s is ignored: sluiced writes its own audit log (%s)\n",
		        c->audit_log, n->audit_log);
	if (c->verbose)
		fprintf(stderr, "sluice: network session %s (%s): address %s, gateway %s, proxy port %u, audit log %s\n",
		        n->id, n->embedded ? "embedded netd" : "sluiced", reply.addr4, reply.gw4,
		        (unsigned)reply.proxy_port, n->audit_log);
	/* The reply comes from sluiced: bound what we copy and refuse a malformed gateway. */
	reply.resolv_conf[sizeof reply.resolv_conf - 1] = '\0';
	reply.gw4[sizeof reply.gw4 - 1] = '\0';
	reply.gw6[sizeof reply.gw6 - 1] = '\0';
	if (reply.gw4[0] && strspn(reply.gw4, "0123456789.") == strlen(reply.gw4)) {
		snprintf(go->proxy_url, sizeof go->proxy_url, "http://%s:%u", reply.gw4, (unsigned)reply.proxy_port);
		if (reply.socks_port)
			snprintf(go->socks_url, sizeof go->socks_url, "socks5h://%s:%u", reply.gw4,
			         (unsigned)reply.socks_port);
	} else if (reply.gw6[0] && strspn(reply.gw6, "0123456789abcdefABCDEF:") == strlen(reply.gw6)) {
		snprintf(go->proxy_url, sizeof go->proxy_url, "http://[%s]:%u", reply.gw6, (unsigned)reply.proxy_port);
		if (reply.socks_port)
			snprintf(go->socks_url, sizeof go->socks_url, "socks5h://[%s]:%u", reply.gw6,
			         (unsigned)reply.socks_port);
	} else {
		snprintf(err, errlen, "netd returned no usable gateway address");
		return -EPROTO;
	}
	/* sb_net_placeholder made the file already when the filesystem was built before this answer */
	if ((r = late ? fill_resolv(s, reply.resolv_conf, err, errlen)
	                         : write_resolv(s, reply.resolv_conf, err, errlen)) < 0)
		return r;
	go->have_resolv = 1;
	reply.ca_cert[sizeof reply.ca_cert - 1] = '\0';
	if (reply.ca_cert[0]) {
		if (late) { /* the trust store is mounted already: sluiced's organisation layer inspects */
			snprintf(err, errlen, "sluiced inspects HTTPS in this session, but the policy the launcher "
			         "compiled does not (is sluiced's --sysconfdir another than %s?)", SLUICE_SYSCONFDIR);
			return -EPROTO;
		}
		if ((r = sb_ca_bundle_write(s, reply.ca_cert, err, errlen)) < 0)
			return r;
		go->have_ca = 1;
	}
	if (c->ask && !c->quiet && !n->embedded)
		watch_start(n);
	return 0;
#else
	(void)s;
	(void)go;
	(void)err;
	(void)errlen;
	return 0;
#endif
}

int sb_net_open(struct sb_session *s, int netns_fd, struct sb_go *go, char *err, size_t errlen)
{
	int r;

	if (!s->cfg->allow_network)
		return 0;
	if ((r = sb_net_compile(s, go, err, errlen)) < 0 || (r = sb_net_send(s, netns_fd, err, errlen)) < 0)
		return r;
	return sb_net_finish(s, go, err, errlen);
}

/* At exit: what this session was denied, and how to allow it (unless --quiet). */
static void print_summary(const struct sb_session *s, const struct sb_netsess *n)
{
	if (s->cfg->quiet || !n->id[0] || !n->audit_log[0])
		return;
	int r = sb_summary_print(stderr, n->id, n->audit_log, n->audit_from);
	if (r == -EACCES || r == -EPERM)
		fprintf(stderr,
		        "sluice: cannot read the audit log %s to summarise denials; see them with `sluicectl log "
		        "--session %s --denied`\n",
		        n->audit_log, n->id);
	else if (r < 0 && r != -ENOENT)
		fprintf(stderr, "sluice: cannot read the audit log %s: %s\n", n->audit_log, strerror(-r));
}

/* Whether the session's records are asked of sluiced at its end (fetch_records). */
static bool wants_records(const struct sb_session *s, const struct sb_netsess *n)
{
	return !n->embedded && n->id[0] && (!s->cfg->quiet || s->cfg->learn_file);
}

void sb_net_records_ask(struct sb_session *s)
{
#if SB_HAVE_NETD
	if (s->net && s->net->ns && wants_records(s, s->net))
		netd_session_records_ask(s->net->ns);
#else
	(void)s;
#endif
}

/* A session of sluiced: its records, which sluiced reads from its own log (root's, unreadable to an
 * unprivileged user), into a memfd that the summary and learn mode then read like the log itself.
 * -1 when sluiced could not send them (the log is then read directly, if it can be). */
static int fetch_records(const struct sb_session *s, struct sb_netsess *n)
{
#if SB_HAVE_NETD
	char err[256];
	int fd, r;

	if (!wants_records(s, n))
		return -1;
	fd = memfd_create("sluice-records", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	r = netd_session_records(n->ns, fd, err, sizeof err);
	if (r < 0) {
		if (s->cfg->verbose)
			fprintf(stderr, "sluice: the session's records from sluiced: %s; reading %s instead\n", err,
			        n->audit_log);
		close(fd);
		return -1;
	}
	snprintf(n->audit_log, sizeof n->audit_log, "/proc/self/fd/%d", fd);
	n->audit_from = 0;
	return fd;
#else
	(void)s;
	(void)n;
	return -1;
#endif
}

void sb_net_prepare(const struct sb_session *s)
{
#if SB_HAVE_NETD && SB_HAVE_POLICY
	if (s->cfg->allow_network && !s->cfg->org_forbid_network)
		netd_session_prepare(s->cfg->audit_log);
#else
	(void)s;
#endif
}

#if SB_HAVE_NETD
static struct netd_session *lingering; /* owned: a sluiced session's connection, until sb_net_release */
#endif

void sb_net_release(void)
{
#if SB_HAVE_NETD
	netd_session_close(lingering);
	lingering = NULL;
#endif
}

void sb_net_close(struct sb_session *s)
{
	struct timespec t0, t1;
	int records_fd;

#if SB_HAVE_NETD && SB_HAVE_POLICY
	netd_session_unprepare(); /* a prepared connection no session took */
#endif
	if (!s->net)
		return;
#if SB_HAVE_NETD
	watch_stop(s->net);
#endif
	/* Before the connection closes: the command has ended, and sluiced hands over its records
	 * (asked for at the start of the teardown, sb_net_records_ask). */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	records_fd = fetch_records(s, s->net);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (records_fd >= 0)
		log_info("launcher: the session's records from sluiced: %ld us",
		         (long)((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000));
#if SB_HAVE_NETD
	/* Closing waits until an embedded helper has written the log (netd/embedded.c). A connection to
	 * sluiced, whose records are read by now, is closed last (sb_net_release): its close wakes sluiced to
	 * end the session, which on 2 CPUs took the launcher's CPU in the middle of its teardown (a launch
	 * ~2-4 % slower, docs/sandbox.md). */
	if (netd_session_is_embedded(s->net->ns)) {
		netd_session_close(s->net->ns);
	} else {
		sb_net_release();
		lingering = s->net->ns;
	}
	s->net->ns = NULL;
#endif
	print_summary(s, s->net);
	/* After the summary: what learn mode could not allow (forbidden addresses, organisation
	 * denials) is listed first, then where the policy went. Records from sluiced are complete
	 * (the engine let go of the session first); a log read directly may still be settling. */
	if (s->cfg->learn_file && s->net->id[0] && s->net->audit_log[0])
		(void)sb_learn_write(s, s->net->id, s->net->audit_log, s->net->audit_from,
		                     !s->net->embedded && records_fd < 0);
	if (records_fd >= 0)
		close(records_fd);
	free(s->net->policy_json);
	free(s->net);
	s->net = NULL;
}
