/* `sluice run [options] -- CMD [ARGS...]`: the command line of the launcher. Parses options,
 * loads the layered configuration, applies the organisation's caps, resolves every host path,
 * and either runs the session (session.c) or, with the blunt bypass --no-sandbox-i-mean-it,
 * logs loudly and runs the command directly. Exit status: the command's; 124 on --timeout; 125,
 * 126, 127 for the launcher's own failures (like env(1)); 128+N when a signal N killed it. */
#include "session.h"

#include "config.h"
#if SB_HAVE_NETD && SB_HAVE_POLICY
#include "netns_cmd.h"
#endif
#include "log.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

enum {
	OPT_PROFILE = 256,
	OPT_PROJECT,
	OPT_PROJECT_MODE,
	OPT_SAVE,
	OPT_APPLY,
	OPT_APPLY_PROTECTED,
	OPT_BIND,
	OPT_RO_BIND,
	OPT_ENV,
	OPT_ALLOW_NETWORK,
	OPT_POLICY,
	OPT_ALLOW,
	OPT_CPU,
	OPT_MEMORY,
	OPT_PIDS,
	OPT_IO_READ,
	OPT_IO_WRITE,
	OPT_TIMEOUT,
	OPT_HOSTNAME,
	OPT_AUDIT_LOG,
	OPT_NO_SANDBOX,
	OPT_VERSION,
	OPT_SANDBOX_TYPE,
	OPT_LEARN,
	OPT_ASK,
	OPT_ASK_TIMEOUT,
	OPT_KEEP_ROOT_UID,
	OPT_DISK,
	OPT_FS,
	OPT_IMAGE,
	OPT_ALLOW_CONTAINERS,
	OPT_ALLOW_KVM,
	OPT_VM_ACCEL,
};

static const struct option sb_options[] = {
        {"profile", required_argument, NULL, OPT_PROFILE},
        {"project", required_argument, NULL, OPT_PROJECT},
        {"project-mode", required_argument, NULL, OPT_PROJECT_MODE},
        {"save", no_argument, NULL, OPT_SAVE},
        {"apply", no_argument, NULL, OPT_APPLY},
        {"apply-protected", no_argument, NULL, OPT_APPLY_PROTECTED},
        {"bind", required_argument, NULL, OPT_BIND},
        {"ro-bind", required_argument, NULL, OPT_RO_BIND},
        {"env", required_argument, NULL, OPT_ENV},
        {"allow-network", no_argument, NULL, OPT_ALLOW_NETWORK},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"allow", required_argument, NULL, OPT_ALLOW},
        {"learn", required_argument, NULL, OPT_LEARN},
        {"ask", no_argument, NULL, OPT_ASK},
        {"ask-timeout", required_argument, NULL, OPT_ASK_TIMEOUT},
        {"keep-root-uid", no_argument, NULL, OPT_KEEP_ROOT_UID},
        {"fs", required_argument, NULL, OPT_FS},
        {"allow-kvm", no_argument, NULL, OPT_ALLOW_KVM},
        {"vm-accel", required_argument, NULL, OPT_VM_ACCEL},
        {"cpu", required_argument, NULL, OPT_CPU},
        {"memory", required_argument, NULL, OPT_MEMORY},
        {"pids", required_argument, NULL, OPT_PIDS},
        {"disk", required_argument, NULL, OPT_DISK},
        {"io-read-bps", required_argument, NULL, OPT_IO_READ},
        {"io-write-bps", required_argument, NULL, OPT_IO_WRITE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"hostname", required_argument, NULL, OPT_HOSTNAME},
        {"audit-log", required_argument, NULL, OPT_AUDIT_LOG},
        {"sandbox-type", required_argument, NULL, OPT_SANDBOX_TYPE},
        {"image", required_argument, NULL, OPT_IMAGE},
        {"allow-containers", no_argument, NULL, OPT_ALLOW_CONTAINERS},
        {"no-sandbox-i-mean-it", no_argument, NULL, OPT_NO_SANDBOX},
        {"verbose", no_argument, NULL, 'v'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: sluice run [options] -- COMMAND [ARGS...]\n"
	           "       sluice netns create [--name N] [--policy P]... [--allow HOST[:PORT]]...  (see sluicectl)\n"
	           "       sluice netns delete ID|NAME\n"
	           "  --profile base|plugin|unsafe   filesystem visibility (default: base)\n"
	           "  --fs ask|relaxed               ask: the host read-only behind a gate; the first open\n"
	           "                                 outside the read allow-list waits for `sluicectl approve`\n"
	           "                                 (denied after --ask-timeout); relaxed: only the profile's\n"
	           "                                 view (default: ask with a terminal, relaxed without or CI)\n"
	           "  --project DIR                  project directory (default: the current directory)\n"
	           "  --project-mode overlay|rw|ro   how the project is mounted (default: overlay)\n"
	           "  --save                         keep the overlay changes: SESSION/changes.patch\n"
	           "  --apply                        apply the overlay changes to the project at exit\n"
	           "                                 (protected ones: listed and kept, see --apply-protected)\n"
	           "  --apply-protected              with --apply: apply protected changes too (.sluice/,\n"
	           "                                 .git/, build and rc files; docs/sandbox.md)\n"
	           "  --bind SRC[:DST]               bind a host path read-write (repeatable)\n"
	           "  --ro-bind SRC[:DST]            bind a host path read-only (repeatable)\n"
	           "  --env NAME[=VALUE]             pass NAME through, or set it (repeatable)\n"
	           "  --allow-network                egress through sluiced's proxy (see --policy, --allow)\n"
	           "  --policy NAME|FILE             add a preset or policy file (repeatable)\n"
	           "  --allow HOST[:PORT[/udp]]      allow one host (repeatable; /udp: direct mode only)\n"
	           "  --learn FILE                   learn mode (implies --allow-network): allow what no rule\n"
	           "                                 allows (not forbidden addresses, not organisation denials)\n"
	           "                                 and write the policy the run needed to FILE (a new file)\n"
	           "  --ask                          hold requests no rule allows until `sluicectl approve ID`\n"
	           "                                 (or deny ID) decides; needs sluiced\n"
	           "  --ask-timeout SECONDS          deny a held request (or open) after this long (default: 60)\n"
	           "  --allow-kvm                    /dev/kvm usable inside (nested VMs; without it, absent)\n"
	           "  --cpu CORES --memory SIZE --pids N --timeout SECONDS\n"
	           "  --io-read-bps DEV:RATE --io-write-bps DEV:RATE   (DEV is MAJ:MIN or /dev/NAME)\n"
	           "  --disk SIZE                    what the session may write outside the project and binds\n"
	           "                                 (overlay changes, /tmp, /run, ...; default: 2G or half\n"
	           "                                 the memory; one file per 4 KiB)\n"
	           "  --hostname NAME                UTS host name (default: sluice)\n"
	           "  --keep-root-uid                as root: run the command as host uid 0 (no capabilities)\n"
	           "                                 instead of a per-session unprivileged uid\n"
	           "  --audit-log PATH               audit log of an embedded netd session (sluiced keeps its\n"
	           "                                 own); also where the bypass is logged (default: syslog)\n"
	           "  --allow-containers             local: rootless Podman and Buildah work inside (own\n"
	           "                                 storage in the session; their network is the session's)\n"
	           "  --sandbox-type TYPE            who sandboxes the command, in the same network session:\n"
	           "                                 local      sluice's namespaces (default)\n"
	           "                                 firejail   firejail (root)\n"
	           "                                 container  a Podman container of --image (root)\n"
	           "                                 devcontainer  Podman, from .devcontainer/devcontainer.json\n"
	           "                                 (root)\n"
	           "                                 vm         a QEMU/KVM virtual machine inside the local\n"
	           "                                 sandbox (docs/sandbox.md compares them)\n"
	           "  --image IMAGE                  the image of --sandbox-type container (local images only:\n"
	           "                                 `podman pull` or `podman build` it first)\n"
	           "  --vm-accel kvm|tcg             vm: KVM (default, required) or emulation (slow, warned)\n"
	           "  --no-sandbox-i-mean-it         run COMMAND with no sandbox at all (logged)\n"
	           "  -v, --verbose                  setup steps and the session id (twice: debug)\n"
	           "  -q, --quiet                    no messages of sluice's own (errors still print)\n"
	           "At exit, a session with --allow-network lists what it was denied and how to allow it.\n");
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;
	fputs("sluice: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return SB_EXIT_FAIL;
}

static char *resolve_home(void)
{
	const char *h = getenv("HOME");
	struct passwd *pw;
	char real[PATH_MAX];

	if (!h || h[0] != '/') {
		pw = getpwuid(getuid());
		h = pw ? pw->pw_dir : NULL;
	}
	if (!h || h[0] != '/')
		return NULL;
	if (realpath(h, real))
		return strdup(real);
	return strdup(h);
}

/* Normalises an absolute path lexically ("//", "/./"); refuses "..". */
static int clean_abs(const char *in, char *out, size_t len)
{
	size_t o = 0;
	if (in[0] != '/')
		return -EINVAL;
	for (const char *p = in; *p;) {
		while (*p == '/')
			p++;
		const char *e = p;
		while (*e && *e != '/')
			e++;
		size_t n = (size_t)(e - p);
		if (n == 0)
			break;
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (!(n == 1 && p[0] == '.')) {
			if (o + 1 + n + 1 > len)
				return -ENAMETOOLONG;
			out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p = e;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return 0;
}

/* --bind SRC[:DST]: SRC is kept as written (made absolute): it is opened exactly once, when the
 * session mounts it (binds.c), so nothing can swap it between a check here and the mount. */
static int add_bind(struct sb_config *c, const char *arg, bool rw)
{
	char src[PATH_MAX], abs[PATH_MAX], dst[PATH_MAX], cwd[PATH_MAX];
	const char *colon = strchr(arg, ':');
	size_t sl = colon ? (size_t)(colon - arg) : strlen(arg);
	const char *opt = rw ? "bind" : "ro-bind";

	if (sl == 0 || sl >= sizeof src)
		return fail("--%s %s: want SRC[:DST]", opt, arg);
	memcpy(src, arg, sl);
	src[sl] = '\0';
	if (src[0] != '/' && !getcwd(cwd, sizeof cwd))
		return fail("--%s %s: cannot tell the current directory: %s", opt, src, strerror(errno));
	if ((size_t)snprintf(abs, sizeof abs, "%s%s%s", src[0] == '/' ? "" : cwd, src[0] == '/' ? "" : "/", src) >=
	    sizeof abs)
		return fail("--%s %s: path too long", opt, src);
	if (access(abs, F_OK) < 0)
		return fail("--%s: %s: %s", opt, src, strerror(errno));
	if (colon && (clean_abs(colon + 1, dst, sizeof dst) < 0 || strcmp(dst, "/") == 0))
		return fail("--%s %s: the destination must be an absolute path without '..' (and not /)", opt, arg);
	struct sb_bind *nb = realloc(c->binds, (c->n_binds + 1) * sizeof *nb);
	if (!nb)
		return fail("out of memory");
	c->binds = nb;
	nb[c->n_binds].src = strdup(abs);
	nb[c->n_binds].dst = colon ? strdup(dst) : NULL;
	nb[c->n_binds].rw = rw;
	nb[c->n_binds].literal = false; /* a path a person wrote: symlinks on it are followed */
	if (!nb[c->n_binds].src || (colon && !nb[c->n_binds].dst))
		return fail("out of memory");
	c->n_binds++;
	return 0;
}

static void json_escape(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
}

/* The bypass: loud on stderr, and recorded (audit log if given, else syslog). */
static int run_unsandboxed(const struct sb_config *c, char *const *argv)
{
	char cmd[1024] = "";
	size_t o = 0;

	for (size_t i = 0; argv[i] && o < sizeof cmd - 2; i++)
		o += (size_t)snprintf(cmd + o, sizeof cmd - o, "%s%s", i ? " " : "", argv[i]);
	fprintf(stderr,
	        "sluice: !!! WARNING: --no-sandbox-i-mean-it: running WITHOUT ANY SANDBOX: no namespaces, no\n"
	        "sluice: !!! filesystem, network, process or resource isolation. Command: %s\n",
	        cmd);
	if (c->audit_log) {
		FILE *f = fopen(c->audit_log, "ae");
		if (!f)
			return fail("cannot open the audit log %s: %s (refusing to bypass unlogged)", c->audit_log,
			            strerror(errno));
		struct timespec ts;
		struct tm tm;
		char t[32];
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(f, "{\"time\":\"%s.%03ldZ\",\"event\":\"no-sandbox\",\"uid\":%u,\"command\":\"", t,
		        ts.tv_nsec / 1000000, (unsigned)c->uid);
		json_escape(f, cmd);
		fputs("\"}\n", f);
		if (fclose(f) != 0)
			return fail("cannot write the audit log %s: %s (refusing to bypass unlogged)", c->audit_log,
			            strerror(errno));
	} else {
		openlog("sluice", LOG_PID, LOG_AUTH);
		syslog(LOG_WARNING, "uid %u ran a command with --no-sandbox-i-mean-it (no sandbox): %s",
		       (unsigned)c->uid, cmd);
		closelog();
	}
	execvp(argv[0], argv);
	int e = errno;
	fail("cannot run %s: %s", argv[0], strerror(e));
	return e == ENOENT ? SB_EXIT_NOENT : SB_EXIT_NOEXEC;
}

/* --learn FILE: made absolute now (the session changes nothing about the launcher's directory, but
 * the message at exit should name the file as the user meant it), refused at once when it exists or
 * cannot be written, so that a long run does not end in a policy that cannot be saved. */
static int set_learn_file(struct sb_config *c, const char *arg)
{
	char cwd[PATH_MAX], abs[PATH_MAX], err[SB_ERR_MAX];
	int dirfd;

	if (!*arg)
		return fail("--learn: want a file name for the learned policy");
	if (arg[0] != '/') {
		if (!getcwd(cwd, sizeof cwd))
			return fail("--learn %s: cannot tell the current directory: %s", arg, strerror(errno));
		if ((size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, arg) >= sizeof abs)
			return fail("--learn %s: path too long", arg);
	} else if ((size_t)snprintf(abs, sizeof abs, "%s", arg) >= sizeof abs) {
		return fail("--learn %s: path too long", arg);
	}
	if (sb_learn_check(abs, &dirfd, err, sizeof err) < 0)
		return fail("--learn %s", err);
	free(c->learn_file);
	if (c->learn_dirfd >= 0)
		close(c->learn_dirfd);
	c->learn_dirfd = dirfd;
	if (!(c->learn_file = strdup(abs)))
		return fail("out of memory");
	return 0;
}

/* Command-line limits may not exceed the organisation's. */
static int check_cap(const char *what, uint64_t v, uint64_t cap)
{
	if (cap && v > cap)
		return fail("%s exceeds the organisation's maximum (%llu) set in %s/policy.json", what,
		            (unsigned long long)cap, SLUICE_SYSCONFDIR);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	struct sb_config c;
	struct sb_limits cli = {0};
	const char *profile = NULL, *project = NULL, *mode = NULL, *fs = NULL;
	bool no_sandbox = false, vm_accel = false, set_cpu = false, set_mem = false, set_pids = false,
	     set_timeout = false, set_disk = false;
	char err[SB_ERR_MAX] = "", real[PATH_MAX];
	int opt, rc = SB_EXIT_FAIL;

	sb_config_init(&c);
	c.home = resolve_home();
	optind = 1;
	static char prog[] = "sluice run";
	argv[0] = prog; /* getopt's own messages name it: "sluice run: unrecognized option" */
	int li = -1;
	while ((opt = getopt_long(argc, argv, "+vqh", sb_options, &li)) != -1) {
		uint64_t v;
		unsigned maj, min;
		/* "--env -- cmd": getopt took the "--" that ends the options as the value, and the command's
		 * first word would become an option's or the command */
		if (optarg && strcmp(optarg, "--") == 0 && li >= 0) {
			fail("--%s wants a value, and \"--\" ends the options: write --%s %s ... -- COMMAND",
			     sb_options[li].name, sb_options[li].name, opt == OPT_ENV ? "NAME[=VALUE]" : "VALUE");
			goto out;
		}
		li = -1;
		switch (opt) {
		case OPT_PROFILE: profile = optarg; break;
		case OPT_PROJECT: project = optarg; break;
		case OPT_PROJECT_MODE: mode = optarg; break;
		case OPT_SAVE: c.save = SB_SAVE_PATCH; break;
		case OPT_APPLY: c.save = SB_SAVE_APPLY; break;
		case OPT_APPLY_PROTECTED: c.apply_protected = true; break;
		case OPT_BIND:
		case OPT_RO_BIND:
			if (add_bind(&c, optarg, opt == OPT_BIND))
				goto out;
			break;
		case OPT_ENV: {
			size_t nl = strcspn(optarg, "=");
			if (nl == 0 ||
			    strspn(optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != nl) {
				fail("--env %s: want NAME or NAME=VALUE with NAME made of letters, digits and _",
				     optarg);
				goto out;
			}
			if (sb_strv_add(optarg[nl] ? &c.env_set : &c.env_keep, optarg) < 0)
				goto out;
			/* the word that holds the VALUE (argv[optind - 1], "--env=NAME=VALUE" too): the exit
			 * note repeats the options but not it (`--env TOKEN="$TOKEN"` in a CI script) */
			if (optarg[nl] && !c.run_opt_secret && !(c.run_opt_secret = calloc((size_t)argc, sizeof(bool)))) {
				fail("out of memory");
				goto out;
			}
			if (optarg[nl])
				c.run_opt_secret[optind - 2] = true;
			break;
		}
		case OPT_ALLOW_NETWORK: c.allow_network = true; break;
		case OPT_POLICY:
			if (sb_strv_add(&c.policies, optarg) < 0)
				goto out;
			break;
		case OPT_ALLOW:
			if (sb_strv_add(&c.allows, optarg) < 0)
				goto out;
			break;
		case OPT_LEARN:
			if (set_learn_file(&c, optarg) != 0)
				goto out;
			c.allow_network = true;
			break;
		case OPT_ASK: c.ask = true; break;
		case OPT_KEEP_ROOT_UID: c.keep_root_uid = true; break;
		case OPT_FS: fs = optarg; break;
		case OPT_ALLOW_KVM: c.allow_kvm = true; break;
		case OPT_VM_ACCEL:
			if (strcmp(optarg, "kvm") == 0 || strcmp(optarg, "tcg") == 0) {
				c.vm_tcg = strcmp(optarg, "tcg") == 0;
				vm_accel = true;
			} else {
				fail("--vm-accel %s: want kvm or tcg", optarg);
				goto out;
			}
			break;
		case OPT_ASK_TIMEOUT: {
			char *end;
			errno = 0;
			unsigned long t = strtoul(optarg, &end, 10);
			if (errno || *end || t == 0 || t > 3600) {
				fail("--ask-timeout %s: want a number of seconds from 1 to 3600", optarg);
				goto out;
			}
			c.ask_timeout_s = (unsigned)t;
			break;
		}
		case OPT_CPU:
			if (sb_parse_cpu(optarg, &cli.cpu_millicores) < 0) {
				fail("--cpu %s: want a number of cores between 0.01 and 4096 (e.g. 2 or 0.5)", optarg);
				goto out;
			}
			set_cpu = true;
			break;
		case OPT_MEMORY:
			if (sb_parse_size(optarg, &cli.memory_bytes) < 0 || cli.memory_bytes < 4096 * 256) {
				fail("--memory %s: want a size of at least 1M (e.g. 512M, 4G)", optarg);
				goto out;
			}
			set_mem = true;
			break;
		case OPT_DISK:
			if (sb_parse_size(optarg, &cli.disk_bytes) < 0 || cli.disk_bytes < SB_DISK_MIN) {
				fail("--disk %s: want a size of at least 1M (e.g. 512M, 4G)", optarg);
				goto out;
			}
			set_disk = true;
			break;
		case OPT_PIDS: {
			char *end;
			errno = 0;
			cli.pids = strtoull(optarg, &end, 10);
			if (errno || *end || cli.pids == 0 || cli.pids > 4194304) {
				fail("--pids %s: want a count between 1 and 4194304", optarg);
				goto out;
			}
			set_pids = true;
			break;
		}
		case OPT_TIMEOUT: {
			char *end;
			errno = 0;
			unsigned long t = strtoul(optarg, &end, 10);
			if (errno || *end || t == 0 || t > UINT_MAX) {
				fail("--timeout %s: want a positive number of seconds", optarg);
				goto out;
			}
			cli.timeout_s = (unsigned)t;
			set_timeout = true;
			break;
		}
		case OPT_IO_READ:
		case OPT_IO_WRITE: {
			int r = sb_parse_io(optarg, &maj, &min, &v);
			if (r < 0) {
				fail("--io-%s-bps %s: want MAJ:MIN:RATE or /dev/NAME:RATE (e.g. 8:0:10M): %s",
				     opt == OPT_IO_READ ? "read" : "write", optarg, strerror(-r));
				goto out;
			}
			size_t i;
			for (i = 0; i < cli.n_io; i++)
				if (cli.io[i].maj == maj && cli.io[i].min == min)
					break;
			if (i == cli.n_io) {
				if (cli.n_io == SB_IO_MAX) {
					fail("at most %d devices can be throttled", SB_IO_MAX);
					goto out;
				}
				cli.io[cli.n_io++] = (struct sb_io_limit){.maj = maj, .min = min};
			}
			if (opt == OPT_IO_READ)
				cli.io[i].read_bps = v;
			else
				cli.io[i].write_bps = v;
			break;
		}
		case OPT_HOSTNAME:
			if (!*optarg || strlen(optarg) > 64) {
				fail("--hostname: want 1 to 64 bytes");
				goto out;
			}
			free(c.hostname);
			c.hostname = strdup(optarg);
			break;
		case OPT_AUDIT_LOG:
			free(c.audit_log);
			c.audit_log = strdup(optarg);
			break;
		case OPT_NO_SANDBOX: no_sandbox = true; break;
		case OPT_SANDBOX_TYPE:
			if (strcmp(optarg, "local") == 0)
				c.type = SB_TYPE_LOCAL;
			else if (strcmp(optarg, "firejail") == 0)
				c.type = SB_TYPE_FIREJAIL;
			else if (strcmp(optarg, "container") == 0)
				c.type = SB_TYPE_CONTAINER;
			else if (strcmp(optarg, "devcontainer") == 0)
				c.type = SB_TYPE_DEVCONTAINER;
			else if (strcmp(optarg, "vm") == 0)
				c.type = SB_TYPE_VM;
			else {
				fail("--sandbox-type %s: want local, firejail, container, devcontainer or vm", optarg);
				goto out;
			}
			break;
		case OPT_IMAGE:
			/* a single argv entry for podman; no option look-alike, no control bytes */
			if (!*optarg || optarg[0] == '-' || strlen(optarg) > 255 || strpbrk(optarg, " \t\n\r")) {
				fail("--image %s: want an image name such as localhost/dev:1 (no spaces, at most 255 "
				     "bytes)",
				     optarg);
				goto out;
			}
			free(c.ctr.image);
			if (!(c.ctr.image = strdup(optarg)))
				goto out;
			break;
		case OPT_ALLOW_CONTAINERS: c.allow_containers = true; break;
		case 'v': c.verbose++; break;
		case 'q': c.quiet = true; break;
		case 'h':
			usage(stdout);
			rc = 0;
			goto out;
		case OPT_VERSION:
			printf("sluice %s\n", SLUICE_VERSION);
			rc = 0;
			goto out;
		default: /* getopt said what; the whole usage would bury that line */
			fprintf(stderr, "sluice run: the options are in `sluice run --help` and sluice(1)\n");
			goto out;
		}
	}
	c.run_opts = argv + 1; /* as given, for the exit note's command (discard.c); no "--" */
	c.run_nopts = (size_t)optind - 1 - (optind > 1 && strcmp(argv[optind - 1], "--") == 0);
	if (c.quiet && c.verbose) {
		fail("--quiet and --verbose contradict each other");
		goto out;
	}
	/* --quiet: errors only, here and in an embedded netd (it inherits the level). */
	log_init("sluice", c.verbose > 1 ? LOG_LEVEL_DEBUG
	                   : c.verbose   ? LOG_LEVEL_INFO
	                   : c.quiet     ? LOG_LEVEL_ERROR
	                                 : LOG_LEVEL_WARN);
	if (optind >= argc) {
		fail("no command given (usage: sluice run [options] -- COMMAND [ARGS...])");
		goto out;
	}

	/* The project directory decides which project config layer applies. */
	if (!realpath(project ? project : ".", real)) {
		fail("project directory %s: %s", project ? project : ".", strerror(errno));
		goto out;
	}
	if (!(c.project_dir = strdup(real)))
		goto out;
	if (sb_config_load_layers(&c, SLUICE_SYSCONFDIR, err, sizeof err) < 0) {
		fail("%s", err);
		goto out;
	}

	if (no_sandbox) {
		if (c.org_forbid_no_sandbox) {
			fail("--no-sandbox-i-mean-it is forbidden by the organisation policy (%s/policy.json)",
			     SLUICE_SYSCONFDIR);
			goto out;
		}
		if (c.learn_file) {
			fail("--learn needs the sandbox (its network goes through the proxy that records it); "
			     "it cannot be used with --no-sandbox-i-mean-it");
			goto out;
		}
		rc = run_unsandboxed(&c, argv + optind);
		goto out;
	}

	if (profile) {
		if (strcmp(profile, "base") == 0)
			c.profile = SB_PROFILE_BASE;
		else if (strcmp(profile, "plugin") == 0)
			c.profile = SB_PROFILE_PLUGIN;
		else if (strcmp(profile, "unsafe") == 0)
			c.profile = SB_PROFILE_UNSAFE;
		else {
			fail("--profile %s: want base, plugin or unsafe (the bypass is --no-sandbox-i-mean-it, "
			     "never a profile)",
			     profile);
			goto out;
		}
	}
	if (c.profile == SB_PROFILE_UNSAFE && c.org_forbid_unsafe) {
		fail("the unsafe profile is forbidden by the organisation policy (%s/policy.json)", SLUICE_SYSCONFDIR);
		goto out;
	}
	if (mode) {
		if (strcmp(mode, "overlay") == 0)
			c.project_mode = SB_PROJECT_OVERLAY;
		else if (strcmp(mode, "rw") == 0)
			c.project_mode = SB_PROJECT_RW;
		else if (strcmp(mode, "ro") == 0)
			c.project_mode = SB_PROJECT_RO;
		else {
			fail("--project-mode %s: want overlay, rw or ro", mode);
			goto out;
		}
	}
	/* a policy file an earlier session could have written is not used without the user's word */
	if (sb_writes_check(&c, err, sizeof err) < 0) {
		fail("%s", err);
		goto out;
	}
	if (strcmp(c.project_dir, "/") == 0) {
		fail("the project directory is /; cd into a project or pass --project DIR");
		goto out;
	}
	if (c.project_mode == SB_PROJECT_OVERLAY && strpbrk(c.project_dir, ",:\\")) {
		fail("overlayfs cannot use %s (',', ':' or '\\' in the path); use --project-mode rw or ro",
		     c.project_dir);
		goto out;
	}
	if (c.apply_protected && c.save != SB_SAVE_APPLY) {
		fail("--apply-protected goes with --apply (for --save: `sluicectl session save --protected ID`)");
		goto out;
	}
	if (c.save != SB_SAVE_NONE && c.project_mode != SB_PROJECT_OVERLAY) {
		fail("--save and --apply need --project-mode overlay (rw writes directly, ro writes nothing)");
		goto out;
	}
	if (fs) {
		enum sb_fs_mode m = strcmp(fs, "ask") == 0 ? SB_FS_ASK : strcmp(fs, "relaxed") == 0 ? SB_FS_RELAXED : SB_FS_AUTO;
		if (m == SB_FS_AUTO) {
			fail("--fs %s: want ask or relaxed", fs);
			goto out;
		}
		if (c.fs_mode_org && m != c.fs_mode) {
			fail("--fs %s: the organisation policy (%s/policy.json) sets \"fs\": \"%s\"", fs, SLUICE_SYSCONFDIR,
			     c.fs_mode == SB_FS_ASK ? "ask" : "relaxed");
			goto out;
		}
		c.fs_mode = m;
	}
	if (sb_fsmode_resolve(&c, fs != NULL, err, sizeof err) < 0) {
		fail("%s", err);
		goto out;
	}
	if (c.ask && !c.allow_network) {
		fail("--ask needs --allow-network (without it there is no network to ask about)");
		goto out;
	}
	if (c.ask_timeout_s && !c.allow_network && c.fs_mode != SB_FS_ASK) {
		fail("--ask-timeout needs --ask (with --allow-network) or --fs ask: there is nothing to ask about");
		goto out;
	}
	if (c.learn_file && c.ask) {
		fail("--learn and --ask contradict each other (learn mode allows what --ask would hold)");
		goto out;
	}
	if ((c.policies.n || c.allows.n) && !c.allow_network) {
		fail("--policy and --allow only apply with --allow-network");
		goto out;
	}
	if (c.allow_network && c.org_forbid_network) {
		fail("%s is forbidden by the organisation policy (%s/policy.json)",
		     c.learn_file ? "--learn (which needs --allow-network)" : "--allow-network", SLUICE_SYSCONFDIR);
		goto out;
	}

	/* Command-line limits override the config, within the organisation's maxima. */
	const struct sb_limits *caps = sb_config_org_caps();
	if ((set_cpu && check_cap("--cpu (millicores)", cli.cpu_millicores, caps->cpu_millicores)) ||
	    (set_mem && check_cap("--memory (bytes)", cli.memory_bytes, caps->memory_bytes)) ||
	    (set_pids && check_cap("--pids", cli.pids, caps->pids)) ||
	    (set_timeout && check_cap("--timeout (seconds)", cli.timeout_s, caps->timeout_s)) ||
	    (set_disk && check_cap("--disk (bytes)", cli.disk_bytes, caps->disk_bytes)))
		goto out;
	if (set_cpu)
		c.limits.cpu_millicores = cli.cpu_millicores;
	if (set_mem)
		c.limits.memory_bytes = cli.memory_bytes;
	if (set_pids)
		c.limits.pids = cli.pids;
	if (set_timeout)
		c.limits.timeout_s = cli.timeout_s;
	if (set_disk)
		c.limits.disk_bytes = cli.disk_bytes;
	if (cli.n_io) {
		memcpy(c.limits.io, cli.io, sizeof cli.io);
		c.limits.n_io = cli.n_io;
	}

	/* Cache carve-outs: created when missing (as the user) so they persist, then resolved. */
	for (size_t i = 0; i < c.writable_paths.n; i++) {
		char *p = c.writable_paths.v[i];
		for (char *s = p + 1;; s++) {
			if (*s == '/' || !*s) {
				char sv = *s;
				*s = '\0';
				if (mkdir(p, 0700) < 0 && errno != EEXIST) {
					fail("writable path %s: cannot create %s: %s", c.writable_paths.v[i], p,
					     strerror(errno));
					goto out;
				}
				*s = sv;
				if (!sv)
					break;
			}
		}
		/* Opened (without following any symlink) when the session mounts it: binds.c. */
	}
	if (c.keep_root_uid && (getuid() != 0 || geteuid() != 0)) {
		fail("--keep-root-uid is for root launches (an unprivileged user's command runs as that user)");
		goto out;
	}
	if (c.keep_root_uid && c.org_forbid_keep_root_uid) {
		fail("--keep-root-uid is forbidden by the organisation policy (%s/policy.json)", SLUICE_SYSCONFDIR);
		goto out;
	}
	if (c.type == SB_TYPE_CONTAINER || c.type == SB_TYPE_DEVCONTAINER) {
		const char *t = c.type == SB_TYPE_CONTAINER ? "container" : "devcontainer";
		if (profile || c.allow_containers || c.allow_kvm || c.keep_root_uid || c.project_mode == SB_PROJECT_RW) {
			fail("--sandbox-type %s: the image is the container's filesystem and Podman its sandbox; "
			     "--profile, --allow-containers, --allow-kvm, --keep-root-uid and --project-mode rw apply "
			     "to --sandbox-type local only",
			     t);
			goto out;
		}
		if (c.type == SB_TYPE_CONTAINER && !c.ctr.image) {
			fail("--sandbox-type container needs --image IMAGE (a local image: `podman images` lists "
			     "them)");
			goto out;
		}
		if (c.type == SB_TYPE_DEVCONTAINER && c.ctr.image) {
			fail("--image goes with --sandbox-type container (a devcontainer names its image in "
			     ".devcontainer/devcontainer.json)");
			goto out;
		}
		if (c.type == SB_TYPE_DEVCONTAINER && sb_devcontainer_load(&c, err, sizeof err) < 0) {
			fail("%s", err);
			goto out;
		}
		if (sb_container_check(&c, err, sizeof err) < 0) {
			fail("%s", err);
			goto out;
		}
	} else if (c.ctr.image) {
		fail("--image goes with --sandbox-type container");
		goto out;
	}
	if (c.allow_containers && c.type != SB_TYPE_LOCAL) {
		fail("--allow-containers is for --sandbox-type local");
		goto out;
	}
	if (c.allow_containers && c.keep_root_uid) {
		fail("--allow-containers and --keep-root-uid contradict each other: nested containers run as the "
		     "session's unprivileged uid");
		goto out;
	}
	if (vm_accel && c.type != SB_TYPE_VM) {
		fail("--vm-accel goes with --sandbox-type vm");
		goto out;
	}
	if (c.type == SB_TYPE_VM && sb_vm_prepare(&c, err, sizeof err) < 0) {
		fail("%s", err);
		goto out;
	}
	if (c.allow_kvm && c.type == SB_TYPE_FIREJAIL) {
		fail("--allow-kvm applies to --sandbox-type local and vm (firejail builds its own /dev)");
		goto out;
	}
	if (c.allow_kvm && sb_kvm_check(&c, "--allow-kvm", err, sizeof err) < 0) {
		fail("%s", err);
		goto out;
	}
	if (c.type == SB_TYPE_FIREJAIL) {
		if (profile || c.n_binds || mode || c.save != SB_SAVE_NONE || set_cpu || set_mem || set_pids ||
		    set_timeout || set_disk || cli.n_io) {
			fail("--sandbox-type firejail: firejail does the filesystem and resource sandbox; --profile, "
			     "--project-mode, --save/--apply, --bind and limits apply to --sandbox-type local only");
			goto out;
		}
		rc = sb_firejail_run(&c, argv + optind);
		goto out;
	}
	rc = sb_session_run(&c, argv + optind);
out:
	sb_config_clear(&c);
	return rc;
}

int main(int argc, char **argv)
{
	log_init("sluice", LOG_LEVEL_WARN);
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? SB_EXIT_FAIL : 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("sluice %s\n", SLUICE_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "run") == 0)
		return cmd_run(argc - 1, argv + 1);
#if SB_HAVE_NETD && SB_HAVE_POLICY
	if (strcmp(argv[1], "netns") == 0)
		return netd_netns_cmd(argc - 1, argv + 1, "sluice");
#endif
	fprintf(stderr, "sluice: unknown command '%s' (try: sluice run -- COMMAND)\n", argv[1]);
	return SB_EXIT_FAIL;
}
