/* Test driver for netd/client.h (what the launcher does), used by the netd lab tests and the
 * benchmark:
 *   netd-testclient policy ID POLICY_FILE   replace session ID's policy over a new connection (root only)
 *   netd-testclient attach NETNS_PATH POLICY_FILE [COMMAND [NEW_POLICY_FILE]]  open a session, print its
 *       reply (SIGUSR2: replace its policy with NEW_POLICY_FILE and print policy=replaced or
 *       policy_error=...) as
 *       key=value lines, keep it until SIGTERM/SIGINT/SIGUSR1, then close it; with NETD_TEST_RECORDS set,
 *       first ask for its records as a launcher does at its end (print records=ok or records_error=...),
 *       and with NETD_TEST_RECORDS=hold close only at the next signal
 *   netd-testclient many N NETNS_DIR POLICY_FILE             open sessions for N netns files named
 *       NETNS_DIR/n0..n{N-1}, print "setup_us=..." per session, hold until a signal as above, close
 *       all and print "close_us=..." per session
 *   netd-testclient bench LIVE SAMPLES NETNS_DIR POLICY_FILE    open LIVE sessions (netns n0..), then
 *       SAMPLES times open one more and end it (END is answered after teardown), printing
 *       "live=LIVE setup_us=... teardown_us=..." per sample; with NETD_BENCH_PIDS="PID..." (sluiced and
 *       its engine) also "cpu_us_per_sample=..." for the samples alone: the CPU time those processes spent
 *       (user + system, all threads, from /proc/PID/stat) per sample, setup and teardown
 *   netd-testclient create NAME POLICY_FILE | list | end ID */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "policy.h"

/* The policy file compiled and serialised as the launcher does; with NETD_TEST_RAW_POLICY set, the file's
 * bytes as they are (to check that sluiced re-validates what a client sends). */
static char *load_policy(const char *file)
{
	if (getenv("NETD_TEST_RAW_POLICY")) {
		FILE *f = fopen(file, "re");
		size_t max = 64u << 20;
		char *buf = calloc(1, max + 1);

		if (f && buf && fread(buf, 1, max, f) > 0) {
			fclose(f);
			return buf;
		}
		if (f)
			fclose(f);
		free(buf);
		return NULL;
	}
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy *p = NULL;
	char *json = NULL, buf[2048];

	if (b && policy_builder_add_file(b, POLICY_LAYER_CLI, file, &pe) == 0)
		p = policy_builder_compile(b, &pe);
	if (!p)
		fprintf(stderr, "netd-testclient: %s\n", policy_error_format(&pe, buf, sizeof buf));
	else
		json = policy_serialize(p);
	policy_unref(p);
	policy_builder_free(b);
	return json;
}

static void print_reply(const struct netd_session_reply *r)
{
	printf("id=%s\naddr4=%s\ngw4=%s\naddr6=%s\ngw6=%s\nproxy_port=%u\n", r->id, r->addr4, r->gw4, r->addr6,
	       r->gw6, r->proxy_port);
	fflush(stdout);
}

static volatile sig_atomic_t stop, replace;

static void on_signal(int sig)
{
	if (sig == SIGUSR2)
		replace = 1;
	else
		stop = 1;
}

/* Holds until one of the signals installed in main arrives. */
static void hold(void)
{
	sigset_t none;

	sigemptyset(&none);
	while (!stop && !replace)
		sigsuspend(&none);
}

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* User + system clock ticks of the processes in pids ("PID PID ..."), 0 for any unreadable. */
static long long cpu_ticks(const char *pids)
{
	long long total = 0;
	char buf[64];

	for (const char *p = pids; p && *p;) {
		char path[64], stat[1024], *q;
		unsigned long long ut, st;
		size_t n = strcspn(p, " ");
		FILE *f;

		if (n > 0 && n < sizeof buf) {
			memcpy(buf, p, n);
			buf[n] = '\0';
			snprintf(path, sizeof path, "/proc/%s/stat", buf);
			if ((f = fopen(path, "re"))) {
				/* after the command's closing parenthesis: state, then fields 4..; utime, stime are 14, 15 */
				if (fgets(stat, sizeof stat, f) && (q = strrchr(stat, ')')) &&
				    sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
					total += (long long)(ut + st);
				fclose(f);
			}
		}
		p += n;
		p += strspn(p, " ");
	}
	return total;
}

static void list_cb(const struct netd_session_entry *e, void *arg)
{
	printf("%s %s %s %s uid=%u %s %s\n", e->id, e->ifname, e->addr4, e->addr6[0] ? e->addr6 : "-", e->uid,
	       e->netns_path[0] ? e->netns_path : "-", e->command);
}

int main(int argc, char **argv)
{
	char err[1024];
	struct sigaction sa = {.sa_handler = on_signal};
	sigset_t block;
	struct rlimit rl;

	/* a session is one connection: many sessions need many fds */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	/* block the stop signals outside sigsuspend so none is lost between the check and the wait */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGUSR2);
	sigprocmask(SIG_BLOCK, &block, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	if (argc >= 4 && strcmp(argv[1], "attach") == 0) {
		struct netd_session_request req = {0};
		struct netd_session_reply rep;
		struct netd_session *s;
		char *json = load_policy(argv[3]);

		req.netns_fd = open(argv[2], O_RDONLY | O_CLOEXEC);
		if (req.netns_fd < 0 || !json) {
			fprintf(stderr, "netd-testclient: cannot open %s or its policy\n", argv[2]);
			return 1;
		}
		req.command = argc > 4 ? argv[4] : "netd-testclient";
		req.policy_json = json;
		req.audit_log = getenv("NETD_TEST_AUDIT_LOG"); /* embedded mode only */
		long long t0 = now_us();
		s = netd_session_open(&req, &rep, err, sizeof err);
		long long t1 = now_us();
		close(req.netns_fd);
		free(json);
		if (!s) {
			fprintf(stderr, "netd-testclient: %s\nsetup_us=%lld\n", err, t1 - t0);
			return 1;
		}
		printf("setup_us=%lld\n", t1 - t0);
		print_reply(&rep);
		/* SIGUSR2: replace the session's policy with NEW_POLICY_FILE (argv[5]), print the outcome */
		for (hold(); !stop; hold()) {
			char *np = argc > 5 ? load_policy(argv[5]) : NULL;

			replace = 0;
			if (np && netd_session_set_policy(s, rep.id, np, err, sizeof err) == 0)
				printf("policy=replaced\n");
			else
				printf("policy_error=%s\n", np ? err : "no new policy file");
			fflush(stdout);
			free(np);
		}
		if (getenv("NETD_TEST_RECORDS")) {
			int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

			if (fd >= 0 && netd_session_records(s, fd, err, sizeof err) == 0)
				printf("records=ok\n");
			else
				printf("records_error=%s\n", fd >= 0 ? err : "no /dev/null");
			fflush(stdout);
			if (fd >= 0)
				close(fd);
			if (strcmp(getenv("NETD_TEST_RECORDS"), "hold") == 0)
				for (stop = 0; !stop;)
					hold();
		}
		netd_session_close(s);
		return 0;
	}
	if (argc == 5 && strcmp(argv[1], "many") == 0) {
		int n = atoi(argv[2]);
		struct netd_session **ss = calloc((size_t)n, sizeof *ss);
		char *json = load_policy(argv[4]);
		int ok = 0;

		if (!ss || !json || n <= 0)
			return 1;
		for (int i = 0; i < n; i++) {
			struct netd_session_request req = {0};
			struct netd_session_reply rep;
			char path[4096];
			long long t0;

			snprintf(path, sizeof path, "%s/n%d", argv[3], i);
			req.netns_fd = open(path, O_RDONLY | O_CLOEXEC);
			if (req.netns_fd < 0) {
				fprintf(stderr, "netd-testclient: %s: %s\n", path, strerror(errno));
				break;
			}
			req.command = "bench";
			req.policy_json = json;
			t0 = now_us();
			ss[i] = netd_session_open(&req, &rep, err, sizeof err);
			printf("setup_us=%lld live=%d id=%s addr4=%s\n", now_us() - t0, i, ss[i] ? rep.id : "-",
			       ss[i] ? rep.addr4 : "-");
			close(req.netns_fd);
			if (!ss[i]) {
				fprintf(stderr, "netd-testclient: session %d: %s\n", i, err);
				break;
			}
			ok++;
		}
		fflush(stdout);
		hold();
		for (int i = ok - 1; i >= 0; i--) {
			long long t0 = now_us();
			char e2[256];
			/* closing returns at once in daemon mode; time until sluiced confirms with a list */
			netd_session_close(ss[i]);
			(void)e2;
			printf("close_us=%lld live=%d\n", now_us() - t0, i);
		}
		free(json);
		free(ss);
		return ok == n ? 0 : 1;
	}
	if (argc == 6 && strcmp(argv[1], "bench") == 0) {
		int live = atoi(argv[2]), samples = atoi(argv[3]);
		struct netd_session **ss = calloc((size_t)live + 1, sizeof *ss);
		char *json = load_policy(argv[5]);

		const char *pids = getenv("NETD_BENCH_PIDS");
		long long ticks0 = live == 0 ? cpu_ticks(pids) : 0;

		if (!ss || !json || live < 0 || samples <= 0)
			return 1;
		for (int i = 0; i < live + samples; i++) {
			struct netd_session_request req = {0};
			struct netd_session_reply rep;
			struct netd_session *s;
			char path[4096];
			long long t0, t1, t2;

			snprintf(path, sizeof path, "%s/n%d", argv[4], i);
			req.netns_fd = open(path, O_RDONLY | O_CLOEXEC);
			if (req.netns_fd < 0) {
				fprintf(stderr, "netd-testclient: %s: %s\n", path, strerror(errno));
				return 1;
			}
			req.command = "bench";
			req.policy_json = json;
			t0 = now_us();
			s = netd_session_open(&req, &rep, err, sizeof err);
			t1 = now_us();
			close(req.netns_fd);
			if (!s) {
				fprintf(stderr, "netd-testclient: session %d: %s\n", i, err);
				return 1;
			}
			if (i < live) {
				ss[i] = s;
				if (i == live - 1)
					ticks0 = cpu_ticks(pids);
				continue;
			}
			if (netd_session_end(rep.id, err, sizeof err) < 0) {
				fprintf(stderr, "netd-testclient: end: %s\n", err);
				return 1;
			}
			t2 = now_us();
			netd_session_close(s);
			printf("live=%d setup_us=%lld teardown_us=%lld\n", live, t1 - t0, t2 - t1);
		}
		if (pids)
			printf("cpu_us_per_sample=%lld\n", (cpu_ticks(pids) - ticks0) * 1000000 / sysconf(_SC_CLK_TCK) / samples);
		fflush(stdout);
		for (int i = 0; i < live; i++)
			netd_session_close(ss[i]);
		free(ss);
		free(json);
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "create") == 0) {
		struct netd_session_reply rep;
		char path[4096];
		char *json = load_policy(argv[3]);
		int r = json ? netd_netns_create(argv[2], "netd-testclient create", json, &rep, path, sizeof path, err,
					       sizeof err)
			     : -EINVAL;

		free(json);
		if (r < 0) {
			fprintf(stderr, "netd-testclient: %s\n", err);
			return 1;
		}
		print_reply(&rep);
		printf("netns=%s\n", path);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "list") == 0) {
		if (netd_sessions_list(list_cb, NULL, err, sizeof err) < 0) {
			fprintf(stderr, "netd-testclient: %s\n", err);
			return 1;
		}
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "end") == 0) {
		if (netd_session_end(argv[2], err, sizeof err) < 0) {
			fprintf(stderr, "netd-testclient: %s\n", err);
			return 1;
		}
		return 0;
	}
	if (argc == 4 && strcmp(argv[1], "policy") == 0) { /* policy ID FILE: replace over a new connection */
		char *json = load_policy(argv[3]);

		if (!json || netd_session_set_policy_by_id(argv[2], json, err, sizeof err) < 0) {
			fprintf(stderr, "netd-testclient: %s\n", json ? err : "cannot read the policy");
			free(json);
			return 1;
		}
		free(json);
		printf("policy=replaced\n");
		return 0;
	}
	fprintf(stderr, "usage: netd-testclient attach NETNS POLICY [CMD [NEW_POLICY]] | many N DIR POLICY | "
			"create NAME POLICY | list | end ID | policy ID POLICY\n");
	return 2;
}
