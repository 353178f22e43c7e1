/* sluiced: the privileged network daemon of sluice. Parses options, starts the core (which
 * reconciles what a crashed instance left), listens on the control socket and runs the event
 * loop until SIGTERM/SIGINT; SIGHUP reopens the audit log and reloads the organisation policy. */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "audit_ship.h"
#include "netd.h"
#include "netd_metrics.h"
#include "util.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sluiced [options]\n"
		"  --run-dir DIR        state directory (default " NETD_DEFAULT_RUN_DIR ")\n"
		"  --audit-log PATH     audit log (default " NETD_DEFAULT_AUDIT_LOG ")\n"
		"  --pool4 CIDR         IPv4 session pool (default " NETD_DEFAULT_POOL4 ")\n"
		"  --pool6 CIDR|none    IPv6 session pool (default " NETD_DEFAULT_POOL6 ")\n"
		"  --proxy-port N       proxy port on the gateway (default 3128)\n"
		"  --dns-port N         DNS port on the gateway (default 53)\n"
		"  --socks-port N       SOCKS5 port on the gateway (default 1080; 0: none)\n"
		"  --upstream-dns A[#P] resolver the engine uses (default: first nameserver of /etc/resolv.conf)\n"
		"  --nflog-group N      NFLOG group for dropped packets (default 2110)\n"
		"  --user USER          unprivileged user of the proxy engine (default sluice, else nobody)\n"
		"  --max-per-uid N      sessions per unprivileged user (default 64)\n"
		"  --compile-timeout MS a session's policy compiles within MS or is refused (default 30000)\n"
		"  --dns-cache N        keep up to N DNS answers, filtered per session policy (default 0: none)\n"
		"  --sysconfdir DIR     organisation policy directory (default /etc/sluice)\n"
		"  --audit-ship syslog|journald  also send every audit record to syslog (RFC 5424) or journald\n"
		"  --audit-ship-socket PATH      syslog's socket (default /dev/log)\n"
		"  --metrics-listen A:P also serve Prometheus metrics on this loopback address (127.0.0.1:9477);\n"
		"                       they are always on RUN_DIR/metrics.sock\n"
		"  -v, --verbose        more logging (twice: debug)\n"
		"  -h, --help, --version\n");
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return errno || !*s || *end || *out > max ? -EINVAL : 0;
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
	struct netd *d = arg;

	if (sig == SIGHUP) {
		log_info("SIGHUP: reopening the audit log and reloading the organisation policy");
		netd_engine_reopen_log(d);
		netd_reload_org(d);
		return;
	}
	log_info("signal %d: stopping", (int)sig);
	event_base_loopexit(d->base, NULL);
}

/* `sluiced --embedded FD LEVEL [AUDIT_LOG]`: the embedded helper of a root `sluice run` (netd/client.c
 * execs it; not for people). FD is the launcher's end of a socketpair, already authenticated: the
 * launcher is the parent. Not a way in: whoever runs it has only their own privileges. */
/* The fd table sized once, at start, while sluiced has a single thread. Grown later, as sessions come
 * (each holds its connection, namespace and lease), it doubles at every power of two, and a table that
 * threads share (the reaper's, the policy compilers') is replaced only after an RCU grace period, which
 * the loop waits for: 10-200 ms each on the way to 1000 sessions (docs/netd.md). Growing it here, before
 * any thread exists, waits for nothing; the kernel never shrinks it. 8192 slots (64 KiB) cover ~2500
 * sessions; RLIMIT_NOFILE caps it. */
#define NETD_FD_TABLE 8192
static void fd_table_presize(void)
{
	struct rlimit rl;
	int want = NETD_FD_TABLE, fd;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)want)
		want = (int)rl.rlim_cur;
	if ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
		return; /* only slower then */
	if (fd < want - 1 && dup3(fd, want - 1, O_CLOEXEC) == want - 1)
		close(want - 1);
	close(fd);
}

static int embedded(int argc, char **argv)
{
	unsigned long fd, lvl;
	int type;
	socklen_t len = sizeof type;

	if (argc < 4 || argc > 5 || parse_uint(argv[2], 1024, &fd) < 0 || parse_uint(argv[3], LOG_LEVEL_DEBUG, &lvl) < 0 ||
	    (argc == 5 && !argv[4][0])) {
		fprintf(stderr, "sluiced: --embedded is started by sluice run, not by hand\n");
		return 2;
	}
	if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET) {
		fprintf(stderr, "sluiced: --embedded %lu: not the launcher's socket\n", fd);
		return 2;
	}
	(void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	log_set_level((enum log_level)lvl);
	return netd_embedded_main((int)fd, argc == 5 ? argv[4] : NULL);
}

/* `sluiced --engine-child LEVEL`: a restarted proxy engine (engine.c execs sluiced so; not for people).
 * Its end of the socketpair to sluiced is fd 3. Not a way in: whoever runs it has only their own
 * privileges, and it serves only what arrives on fd 3. */
static int engine_child(int argc, char **argv)
{
	unsigned long lvl;
	int type;
	socklen_t len = sizeof type;

	if (argc != 3 || parse_uint(argv[2], LOG_LEVEL_DEBUG, &lvl) < 0) {
		fprintf(stderr, "sluiced: --engine-child is started by sluiced, not by hand\n");
		return 2;
	}
	if (getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET) {
		fprintf(stderr, "sluiced: --engine-child: fd 3 is not sluiced's socket\n");
		return 2;
	}
	(void)fcntl(3, F_SETFD, FD_CLOEXEC);
	log_init("sluiced", (enum log_level)lvl);
	return netd_engine_child_main(3);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"run-dir", required_argument, NULL, 'r'}, {"audit-log", required_argument, NULL, 'a'},
		{"pool4", required_argument, NULL, '4'},   {"pool6", required_argument, NULL, '6'},
		{"proxy-port", required_argument, NULL, 'p'}, {"dns-port", required_argument, NULL, 'd'},
		{"socks-port", required_argument, NULL, 's'},
		{"upstream-dns", required_argument, NULL, 'u'}, {"nflog-group", required_argument, NULL, 'g'},
		{"user", required_argument, NULL, 'U'},    {"max-per-uid", required_argument, NULL, 'm'},
		{"compile-timeout", required_argument, NULL, 'T'}, {"dns-cache", required_argument, NULL, 'C'},
		{"sysconfdir", required_argument, NULL, 'c'}, {"verbose", no_argument, NULL, 'v'},
		{"metrics-listen", required_argument, NULL, 'M'}, {"audit-ship", required_argument, NULL, 'S'},
		{"audit-ship-socket", required_argument, NULL, 'O'},
		{"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}};
	struct netd_config cfg;
	const char *metrics_listen = NULL, *ship_socket = NULL;
	enum netd_ship_kind ship = NETD_SHIP_NONE;
	struct netd *d = NULL;
	struct event *sigs[4] = {0};
	enum log_level lvl = LOG_LEVEL_INFO;
	char err[1024];
	unsigned long v;
	int c, r;

	if (argc >= 2 && strcmp(argv[1], "--embedded") == 0)
		return embedded(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--engine-child") == 0)
		return engine_child(argc, argv);
	log_init("sluiced", lvl);
	netd_config_defaults(&cfg);
	while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			if (util_strlcpy(cfg.run_dir, optarg, sizeof cfg.run_dir) >= sizeof cfg.run_dir || optarg[0] != '/')
				goto bad;
			break;
		case 'a':
			if (util_strlcpy(cfg.audit_log, optarg, sizeof cfg.audit_log) >= sizeof cfg.audit_log ||
			    optarg[0] != '/')
				goto bad;
			break;
		case '4':
			if (netd_config_pool4(&cfg, optarg, err, sizeof err) < 0) {
				fprintf(stderr, "sluiced: %s\n", err);
				return 2;
			}
			break;
		case '6':
			if (strcmp(optarg, "none") == 0)
				cfg.v6 = false;
			else if (netd_config_pool6(&cfg, optarg, err, sizeof err) < 0) {
				fprintf(stderr, "sluiced: %s\n", err);
				return 2;
			}
			break;
		case 's':
			if (parse_uint(optarg, 65535, &v) < 0) /* 0: no SOCKS5 listener */
				goto bad;
			cfg.socks_port = (uint16_t)v;
			break;
		case 'p':
		case 'd':
			if (parse_uint(optarg, 65535, &v) < 0 || v == 0)
				goto bad;
			*(c == 'p' ? &cfg.proxy_port : &cfg.dns_port) = (uint16_t)v;
			break;
		case 'u':
			if (util_strlcpy(cfg.upstream_dns, optarg, sizeof cfg.upstream_dns) >= sizeof cfg.upstream_dns)
				goto bad;
			break;
		case 'g':
			if (parse_uint(optarg, 65535, &v) < 0)
				goto bad;
			cfg.nflog_group = (uint32_t)v;
			break;
		case 'U': {
			struct passwd *pw = getpwnam(optarg);
			if (!pw || pw->pw_uid == 0) {
				fprintf(stderr, "sluiced: --user %s: no such unprivileged user\n", optarg);
				return 2;
			}
			cfg.engine_uid = pw->pw_uid;
			cfg.engine_gid = pw->pw_gid;
			break;
		}
		case 'm':
			if (parse_uint(optarg, 100000, &v) < 0)
				goto bad;
			cfg.max_per_uid = (unsigned)v;
			break;
		case 'T':
			if (parse_uint(optarg, 600000, &v) < 0 || v == 0)
				goto bad;
			cfg.compile_timeout_ms = (unsigned)v;
			break;
		case 'C':
			if (parse_uint(optarg, 1000000, &v) < 0) {
				fprintf(stderr, "sluiced: --dns-cache %s: want a number of answers from 0 (no cache) to 1000000\n",
				        optarg);
				return 2;
			}
			cfg.dns_cache_entries = (unsigned)v;
			break;
		case 'c':
			util_strlcpy(cfg.sysconfdir, optarg, sizeof cfg.sysconfdir);
			break;
		case 'M':
			metrics_listen = optarg;
			break;
		case 'S':
			if (netd_ship_kind_parse(optarg, &ship) < 0) {
				fprintf(stderr, "sluiced: --audit-ship %s: want syslog or journald\n", optarg);
				return 2;
			}
			break;
		case 'O':
			if (optarg[0] != '/')
				goto bad;
			ship_socket = optarg;
			break;
		case 'v':
			lvl = lvl == LOG_LEVEL_INFO ? LOG_LEVEL_DEBUG : lvl;
			log_set_level(lvl);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("sluiced %s\n", SLUICE_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		continue;
bad:
		fprintf(stderr, "sluiced: bad value for --%s: %s\n", opts[0].name ? "option" : "", optarg);
		usage(stderr);
		return 2;
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	{
		/* each session holds a connection, a namespace and a lease fd */
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	fd_table_presize();
	r = netd_new(&d, &cfg, true, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "sluiced: %s\n", err);
		return 1;
	}
	r = netd_control_listen(d, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "sluiced: %s\n", err);
		netd_free(d);
		return 1;
	}
	if (ship_socket && ship != NETD_SHIP_SYSLOG) {
		fprintf(stderr, "sluiced: --audit-ship-socket goes with --audit-ship syslog\n");
		netd_free(d);
		return 2;
	}
	if (ship && (r = netd_ship_start(&d->ship, ship, cfg.audit_log, ship_socket, err, sizeof err)) < 0) {
		fprintf(stderr, "sluiced: %s\n", err);
		netd_free(d);
		return 1;
	}
	r = netd_metrics_start(d, metrics_listen, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "sluiced: %s\n", err);
		netd_free(d);
		return 1;
	}
	sigs[0] = evsignal_new(d->base, SIGTERM, signal_cb, d);
	sigs[1] = evsignal_new(d->base, SIGINT, signal_cb, d);
	sigs[2] = evsignal_new(d->base, SIGHUP, signal_cb, d);
	for (int i = 0; i < 3; i++)
		if (!sigs[i] || event_add(sigs[i], NULL) < 0)
			fatal("cannot install signal handlers");
	log_info("ready: %s/control.sock", cfg.run_dir);
	event_base_dispatch(d->base);
	for (int i = 0; i < 3; i++)
		event_free(sigs[i]);
	netd_free(d);
	return 0;
}
