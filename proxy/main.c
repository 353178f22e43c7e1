/* sluice-proxy: the proxy engine as a standalone program (for tests and for running without netd).
 * Reads listeners, the upstream resolver, the audit log and sessions (addresses and policies) from a
 * JSON config, binds its sockets, drops root privileges, and serves until SIGTERM/SIGINT; SIGHUP
 * reopens the audit log. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <grp.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine.h"
#include "log.h"
#include "mitm_ca.h"
#include "parent.h"
#include "policy.h"
#include "util.h"

#define MAX_SESSIONS  4096
#define MAX_LISTENERS 64

static const char *cfg_path;

static void usage(FILE *f)
{
	fprintf(f, "usage: sluice-proxy --config FILE [--verbose] [--check]\n"
	           "  --config FILE  JSON configuration (see docs/proxy.md)\n"
	           "  --check        load and validate the configuration, then exit\n"
	           "  --verbose      debug logging (twice: more)\n");
}

static int cfg_err(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cfg_err(const char *where, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "sluice-proxy: %s: %s: ", cfg_path, where);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -EINVAL;
}

/* "1.2.3.4", "1.2.3.4:53", "::1", "[::1]:53" -> ss (port may be 0 when optional). */
static int parse_sockaddr(const char *s, bool need_port, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *port = NULL;
	unsigned long p = 0;

	memset(ss, 0, sizeof *ss);
	if (s[0] == '[') {
		const char *e = strchr(s, ']');
		if (!e || (size_t)(e - s - 1) >= sizeof host)
			return -EINVAL;
		memcpy(host, s + 1, (size_t)(e - s - 1));
		host[e - s - 1] = '\0';
		if (e[1] == ':')
			port = e + 2;
		else if (e[1])
			return -EINVAL;
	} else {
		const char *c = strchr(s, ':');
		if (c && strchr(c + 1, ':'))
			c = NULL; /* bare IPv6 */
		if (strlen(s) >= sizeof host)
			return -EINVAL;
		snprintf(host, sizeof host, "%s", s);
		if (c) {
			host[c - s] = '\0';
			port = c + 1;
		}
	}
	if (port) {
		char *end;
		errno = 0;
		p = strtoul(port, &end, 10);
		if (errno || *end || p == 0 || p > 65535)
			return -EINVAL;
	} else if (need_port) {
		return -EINVAL;
	}
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)p);
		*len = sizeof(struct sockaddr_in);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)p);
		*len = sizeof(struct sockaddr_in6);
		return 0;
	}
	return -EINVAL;
}

static const char *get_str(json_object *o, const char *key)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static int bind_listener(const char *addr, int type, struct sockaddr_storage *ss)
{
	socklen_t len;
	int on = 1;
	cleanup_fd int fd = -1;

	if (parse_sockaddr(addr, true, ss, &len) != 0)
		return -EINVAL;
	fd = socket(ss->ss_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
	if (ss->ss_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
	if (bind(fd, (struct sockaddr *)ss, len) != 0)
		return -errno;
	if (type == SOCK_STREAM && listen(fd, 4096) != 0)
		return -errno;
	return steal_fd(&fd);
}

static int add_listeners(struct proxy_engine *e, json_object *list, bool check)
{
	size_t n = json_object_array_length(list);
	if (n > MAX_LISTENERS) /* they were ignored past the limit, silently: say so instead */
		return cfg_err("listen", "%zu listeners; at most %d (sessions can share a gateway address)", n,
		               MAX_LISTENERS);
	for (size_t i = 0; i < n; i++) {
		json_object *l = json_object_array_get_idx(list, i);
		const char *kind = get_str(l, "kind"), *addr = get_str(l, "address");
		struct sockaddr_storage ss;
		char where[64];
		int kinds[2] = {-1, -1};

		snprintf(where, sizeof where, "listen[%zu]", i);
		if (!kind || !addr)
			return cfg_err(where, "needs \"kind\" and \"address\"");
		if (strcmp(kind, "http") == 0)
			kinds[0] = PROXY_LISTEN_HTTP;
		else if (strcmp(kind, "dns") == 0)
			kinds[0] = PROXY_LISTEN_DNS_UDP, kinds[1] = PROXY_LISTEN_DNS_TCP;
		else if (strcmp(kind, "dns-udp") == 0)
			kinds[0] = PROXY_LISTEN_DNS_UDP;
		else if (strcmp(kind, "dns-tcp") == 0)
			kinds[0] = PROXY_LISTEN_DNS_TCP;
		else if (strcmp(kind, "transparent") == 0)
			kinds[0] = PROXY_LISTEN_TRANSPARENT;
		else if (strcmp(kind, "socks5") == 0)
			kinds[0] = PROXY_LISTEN_SOCKS5;
		else
			return cfg_err(where, "unknown kind \"%s\" (http, dns, dns-udp, dns-tcp, transparent, socks5)",
			               kind);
		if (check) {
			socklen_t len;
			if (parse_sockaddr(addr, true, &ss, &len) != 0)
				return cfg_err(where, "bad address \"%s\" (want IP:PORT or [IPv6]:PORT)", addr);
			continue;
		}
		for (int k = 0; k < 2 && kinds[k] >= 0; k++) {
			int fd = bind_listener(addr, kinds[k] == PROXY_LISTEN_DNS_UDP ? SOCK_DGRAM : SOCK_STREAM, &ss);
			int r;
			if (fd == -EINVAL)
				return cfg_err(where, "bad address \"%s\" (want IP:PORT or [IPv6]:PORT)", addr);
			if (fd < 0) {
				fprintf(stderr, "sluice-proxy: cannot listen on %s (%s): %s\n", addr, kind,
				        strerror(-fd));
				return fd;
			}
			r = proxy_engine_add_listener(e, fd, (enum proxy_listener_kind)kinds[k]);
			if (r) {
				fprintf(stderr, "sluice-proxy: listener %s: %s\n", addr, strerror(-r));
				return r;
			}
		}
	}
	return 0;
}

static int str_array(json_object *pol, const char *key, json_object **arr)
{
	*arr = NULL;
	if (!json_object_object_get_ex(pol, key, arr))
		return 0;
	if (!json_object_is_type(*arr, json_type_array))
		return -EINVAL;
	for (size_t i = 0; i < json_object_array_length(*arr); i++)
		if (!json_object_is_type(json_object_array_get_idx(*arr, i), json_type_string))
			return -EINVAL;
	return 0;
}

static struct policy *build_policy(json_object *pol, const char *where)
{
	static const struct {
		const char *key;
		enum policy_layer layer;
		int what; /* 0 file, 1 preset, 2 allow, 3 deny */
	} parts[] = {
	        {"org_files", POLICY_LAYER_ORG, 0},   {"files", POLICY_LAYER_PROJECT, 0},
	        {"presets", POLICY_LAYER_PROJECT, 1}, {"allow", POLICY_LAYER_CLI, 2},
	        {"deny", POLICY_LAYER_CLI, 3},
	};
	struct policy_builder *b = policy_builder_new();
	struct policy_error perr;
	struct policy *p = NULL;
	char msg[POLICY_ERR_MAX + 300];

	if (!b)
		return NULL;
	memset(&perr, 0, sizeof perr);
	for (size_t k = 0; k < ARRAY_SIZE(parts); k++) {
		json_object *arr;
		if (str_array(pol, parts[k].key, &arr) != 0) {
			cfg_err(where, "policy.%s must be an array of strings", parts[k].key);
			goto out;
		}
		for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
			const char *v = json_object_get_string(json_object_array_get_idx(arr, i));
			int r;
			if (parts[k].what == 0)
				r = policy_builder_add_file(b, parts[k].layer, v, &perr);
			else if (parts[k].what == 1)
				r = policy_builder_add_preset(b, parts[k].layer, v, &perr);
			else
				r = policy_builder_add_pattern(b, parts[k].layer, v, parts[k].what == 3,
				                               parts[k].what == 3 ? "config deny" : "config allow",
				                               &perr);
			if (r) {
				cfg_err(where, "policy: %s", policy_error_format(&perr, msg, sizeof msg));
				goto out;
			}
		}
	}
	p = policy_builder_compile(b, &perr);
	if (!p)
		cfg_err(where, "policy: %s", policy_error_format(&perr, msg, sizeof msg));
out:
	policy_builder_free(b);
	return p;
}

static int add_sessions(struct proxy_engine *e, json_object *list)
{
	size_t n = json_object_array_length(list);
	for (size_t i = 0; i < n && i < MAX_SESSIONS; i++) {
		json_object *so = json_object_array_get_idx(list, i), *pol, *uid;
		struct proxy_session_info info;
		static const char *const addr_keys[] = {"addr4", "addr6", "gw4", "gw6"};
		char where[64];
		socklen_t len;
		int r;

		memset(&info, 0, sizeof info);
		snprintf(where, sizeof where, "sessions[%zu]", i);
		info.id = get_str(so, "id");
		info.command = get_str(so, "command");
		if (!info.id)
			return cfg_err(where, "needs an \"id\"");
		if (json_object_object_get_ex(so, "uid", &uid))
			info.uid = (uid_t)json_object_get_int64(uid);
		for (int k = 0; k < 4; k++) {
			const char *a = get_str(so, addr_keys[k]);
			struct sockaddr_storage *dst = k == 0   ? &info.addr4
			                               : k == 1 ? &info.addr6
			                               : k == 2 ? &info.gw4
			                                        : &info.gw6;
			if (a && parse_sockaddr(a, false, dst, &len) != 0)
				return cfg_err(where, "\"%s\" is not an IP address", a);
		}
		if (!json_object_object_get_ex(so, "policy", &pol) || !json_object_is_type(pol, json_type_object))
			return cfg_err(where, "needs a \"policy\" object (files, presets, allow, deny)");
		info.policy = build_policy(pol, where);
		if (!info.policy)
			return -EINVAL;
		/* HTTPS inspection: the session's CA is made here (sluiced does it for its sessions); its
		 * certificate goes to "ca_cert" (a path) for the session's clients to trust */
		char *ca_key = NULL, *ca_cert = NULL;
		if (policy_inspects_any(info.policy)) {
			char err[300];
			const char *out = get_str(so, "ca_cert");
			FILE *f;
			if (proxy_mitm_ca_make(info.id, &ca_key, &ca_cert, err, sizeof err) < 0) {
				policy_unref(info.policy);
				return cfg_err(where, "%s", err);
			}
			if (out && (!(f = fopen(out, "we")) || fputs(ca_cert, f) < 0 || fclose(f) != 0)) {
				policy_unref(info.policy);
				free(ca_key);
				free(ca_cert);
				return cfg_err(where, "cannot write the session CA's certificate to %s", out);
			}
			info.ca_key_pem = ca_key;
			info.ca_cert_pem = ca_cert;
		}
		r = proxy_engine_session_add(e, &info);
		policy_unref(info.policy);
		if (ca_key)
			explicit_bzero(ca_key, strlen(ca_key));
		free(ca_key);
		free(ca_cert);
		if (r)
			return cfg_err(where, "cannot add the session: %s", strerror(-r));
	}
	return 0;
}

static void set_limit(json_object *limits, const char *key, unsigned *out)
{
	json_object *v;
	if (limits && json_object_object_get_ex(limits, key, &v))
		*out = (unsigned)json_object_get_int64(v);
}

/* Raises the fd limit while still privileged, then gives up root for good. */
static int drop_privileges(const char *user)
{
	struct rlimit rl;
	struct passwd *pw;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (geteuid() != 0)
		return 0;
	if (strcmp(user, "root") == 0) {
		log_warnx("running as root (\"user\": \"root\" in the config)");
		return 0;
	}
	pw = getpwnam(user);
	if (!pw) {
		fprintf(stderr, "sluice-proxy: user \"%s\" does not exist (set \"user\" in the config)\n", user);
		return -ENOENT;
	}
	if (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
		fprintf(stderr, "sluice-proxy: cannot drop privileges to %s: %s\n", user, strerror(errno));
		return -EPERM;
	}
	if (setuid(0) == 0) {
		fprintf(stderr, "sluice-proxy: could regain root after dropping privileges; refusing to run\n");
		return -EPERM;
	}
	return 0;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct proxy_engine **e = arg;
	int r;
	(void)what;
	(void)sig;
	r = proxy_engine_reopen_log(*e);
	if (r)
		log_warnx("SIGHUP: cannot reopen the audit log: %s", strerror(-r));
	else
		log_info("SIGHUP: audit log reopened");
}

static struct event_base *g_base;

static void on_term(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	(void)arg;
	log_info("signal %d: exiting", (int)sig);
	event_base_loopbreak(g_base);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"config", required_argument, NULL, 'c'},
	        {"check", no_argument, NULL, 'C'},
	        {"verbose", no_argument, NULL, 'v'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	struct proxy_config cfg;
	struct proxy_engine *e = NULL;
	json_object *root = NULL, *v, *limits = NULL;
	struct event *sigs[4] = {NULL, NULL, NULL, NULL};
	char err[512];
	const char *user = "nobody", *audit;
	bool check = false;
	int verbose = 0, c, rc = 1;

	while ((c = getopt_long(argc, argv, "c:vh", opts, NULL)) != -1) {
		switch (c) {
		case 'c': cfg_path = optarg; break;
		case 'C': check = true; break;
		case 'v': verbose++; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!cfg_path || optind != argc) {
		usage(stderr);
		return 2;
	}
	log_init("sluice-proxy", verbose ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO);
	signal(SIGPIPE, SIG_IGN);
	root = json_object_from_file(cfg_path);
	if (!root || !json_object_is_type(root, json_type_object)) {
		fprintf(stderr, "sluice-proxy: %s: cannot read or parse the JSON config: %s\n", cfg_path,
		        json_util_get_last_err() ? json_util_get_last_err() : "not an object");
		goto out;
	}
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = -1;
	audit = get_str(root, "audit_log");
	if (!audit) {
		cfg_err("audit_log", "missing (path of the audit log)");
		goto out;
	}
	cfg.audit_path = audit;
	if (!get_str(root, "upstream_dns") ||
	    parse_sockaddr(get_str(root, "upstream_dns"), false, &cfg.upstream_dns, &cfg.upstream_dns_len) != 0) {
		cfg_err("upstream_dns", "missing or not an address (e.g. \"192.0.2.53\" or \"192.0.2.53:53\")");
		goto out;
	}
	if (cfg.upstream_dns.ss_family == AF_INET && !((struct sockaddr_in *)&cfg.upstream_dns)->sin_port)
		((struct sockaddr_in *)&cfg.upstream_dns)->sin_port = htons(53);
	if (cfg.upstream_dns.ss_family == AF_INET6 && !((struct sockaddr_in6 *)&cfg.upstream_dns)->sin6_port)
		((struct sockaddr_in6 *)&cfg.upstream_dns)->sin6_port = htons(53);
	if (get_str(root, "user"))
		user = get_str(root, "user");
	json_object_object_get_ex(root, "limits", &limits);
	set_limit(limits, "max_conns_per_session", &cfg.max_conns_per_session);
	set_limit(limits, "header_timeout_ms", &cfg.header_timeout_ms);
	set_limit(limits, "idle_timeout_ms", &cfg.idle_timeout_ms);
	set_limit(limits, "connect_timeout_ms", &cfg.connect_timeout_ms);
	if (limits && json_object_object_get_ex(limits, "dns_cache_entries", &v)) {
		int64_t n = json_object_get_int64(v);
		if (!json_object_is_type(v, json_type_int) || n < 0 || n > 1000000) {
			cfg_err("limits.dns_cache_entries", "not a number from 0 (no cache) to 1000000");
			goto out;
		}
		cfg.dns_cache_entries = (unsigned)n;
	}
	if (json_object_object_get_ex(root, "upstream_proxy", &v)) {
		/* read now, before privileges are dropped: its auth_file is root's (parent.h) */
		cfg.parent = proxy_parent_parse(v, "upstream_proxy", err, sizeof err);
		if (!cfg.parent) {
			fprintf(stderr, "sluice-proxy: %s: %s\n", cfg_path, err);
			goto out;
		}
	}

	g_base = proxy_event_base_new();
	if (!g_base) {
		fprintf(stderr, "sluice-proxy: cannot create the event loop\n");
		goto out;
	}
	e = proxy_engine_new(g_base, &cfg, err, sizeof err);
	if (!e) {
		fprintf(stderr, "sluice-proxy: %s\n", err);
		goto out;
	}
	if (!json_object_object_get_ex(root, "sessions", &v) || !json_object_is_type(v, json_type_array)) {
		cfg_err("sessions", "missing (an array of sessions)");
		goto out;
	}
	if (add_sessions(e, v) != 0)
		goto out;
	if (!json_object_object_get_ex(root, "listen", &v) || !json_object_is_type(v, json_type_array)) {
		cfg_err("listen", "missing (an array of listeners)");
		goto out;
	}
	if (add_listeners(e, v, check) != 0)
		goto out;
	if (check) {
		printf("sluice-proxy: %s: configuration is valid\n", cfg_path);
		rc = 0;
		goto out;
	}
	if (drop_privileges(user) != 0)
		goto out;
	sigs[0] = evsignal_new(g_base, SIGHUP, on_signal, &e);
	sigs[1] = evsignal_new(g_base, SIGTERM, on_term, NULL);
	sigs[2] = evsignal_new(g_base, SIGINT, on_term, NULL);
	for (int i = 0; i < 3; i++)
		if (!sigs[i] || event_add(sigs[i], NULL) != 0) {
			fprintf(stderr, "sluice-proxy: cannot install signal handlers\n");
			goto out;
		}
	log_info("ready (uid %u)", (unsigned)getuid());
	event_base_dispatch(g_base);
	rc = 0;
out:
	for (int i = 0; i < 4; i++)
		if (sigs[i])
			event_free(sigs[i]);
	proxy_engine_free(e);
	if (g_base)
		event_base_free(g_base);
	json_object_put(root);
	return rc;
}
