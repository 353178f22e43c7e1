/* --sandbox-type vm, in the command's process inside the sandbox (contained like any local command):
 * writes the request for the guest's init (vm-spec.h) into the sandbox's /tmp, which the guest reads
 * over the root share, runs QEMU (microvm; the sandbox's / shared read-only and its writable places
 * read-write over virtio-9p; the tap from vm-net.c as fd 3), relays the guest's stdout and stderr
 * ports to its own and exits with the status the guest reports on the status port. */
#include "session.h"
#include "vm-spec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SB_VM_MAC "52:54:00:5c:1c:01"

/* Appends one record of the request. */
static int spec_add(FILE *f, char tag, const char *v)
{
	return fputc(tag, f) == EOF || fputs(v, f) == EOF || fputc('\0', f) == EOF ? -EIO : 0;
}

struct sb_vm_share {
	const char *path; /* borrowed from the config: where it is in the sandbox */
	bool ro;
};

static int by_length(const void *a, const void *b)
{
	size_t la = strlen(((const struct sb_vm_share *)a)->path), lb = strlen(((const struct sb_vm_share *)b)->path);
	return la < lb ? -1 : la > lb;
}

static void share_add(struct sb_vm_share *out, size_t *n, size_t max, const char *path, bool ro)
{
	struct stat st;
	/* 9p exports directories; a file bound on its own stays visible through the root share unless
	 * the guest's fresh /tmp or home covers it. */
	if (*n < max && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		out[(*n)++] = (struct sb_vm_share){path, ro};
}

/* The directories the sandbox mounted on its own (project, caches, plugin paths, binds), parents
 * first: the guest's fresh /tmp and home would hide those beneath them. Paths as the sandbox sees
 * them (this runs inside it). */
static size_t sandbox_shares(const struct sb_session *s, struct sb_vm_share *out, size_t max)
{
	const struct sb_config *c = s->cfg;
	size_t n = 0;
	if (c->project_dir)
		share_add(out, &n, max, c->project_dir, c->project_mode == SB_PROJECT_RO);
	for (size_t i = 0; i < c->writable_paths.n; i++)
		share_add(out, &n, max, c->writable_paths.v[i], false);
	if (c->profile != SB_PROFILE_BASE)
		for (size_t i = 0; i < c->plugin_paths.n; i++)
			share_add(out, &n, max, c->plugin_paths.v[i], true);
	for (size_t i = 0; i < c->n_binds; i++)
		share_add(out, &n, max, c->binds[i].dst ? c->binds[i].dst : c->binds[i].src, !c->binds[i].rw);
	qsort(out, n, sizeof *out, by_length);
	return n;
}

static void fail_exit(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail_exit(const char *fmt, ...)
{
	va_list ap;
	fputs("sluice: --sandbox-type vm: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(SB_EXIT_FAIL);
}

/* A QEMU option value with its commas doubled (QEMU's escape). */
static char *qemu_escape(const char *s)
{
	size_t n = 0;
	for (const char *p = s; *p; p++)
		n += *p == ',' ? 2 : 1;
	char *o = malloc(n + 1), *q = o;
	if (!o)
		return NULL;
	for (const char *p = s; *p; p++) {
		*q++ = *p;
		if (*p == ',')
			*q++ = ',';
	}
	*q = '\0';
	return o;
}

/* The host's TSC frequency in kHz for the emulated guest (0: unknown). Under TCG the guest's TSC runs
 * at the host's rate, and calibrating it against the emulated PIT fails when the host is busy (the
 * kernel then marks the TSC unstable and can hang): tsc_early_khz skips that calibration. */
static unsigned long tsc_khz(void)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[256];
	double mhz = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "cpu MHz : %lf", &mhz) == 1)
			break;
	fclose(f);
	return mhz > 1 && mhz < 100000 ? (unsigned long)(mhz * 1000) : 0;
}

struct sb_argv {
	char *v[160];
	size_t n;
};

static void arg(struct sb_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(struct sb_argv *a, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int r = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (r < 0 || a->n + 1 >= sizeof a->v / sizeof a->v[0])
		fail_exit("too many QEMU arguments");
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

void sb_vm_exec(const struct sb_session *s, char **env)
{
	const struct sb_config *c = s->cfg;
	char dir[] = "/tmp/sluice-vm.XXXXXX", spec_path[64], cwd[PATH_MAX], num[32];
	struct sb_vm_share shares[SB_VM_SHARES_MAX];
	int out[2], errp[2], st[2], con[2] = {-1, -1};
	bool verbose = c->verbose > 0;

	if (!mkdtemp(dir))
		fail_exit("cannot create a directory in /tmp: %s", strerror(errno));
	snprintf(spec_path, sizeof spec_path, "%s/spec", dir);
	FILE *f = fopen(spec_path, "we");
	if (!f)
		fail_exit("%s: %s", spec_path, strerror(errno));
	if (!getcwd(cwd, sizeof cwd))
		snprintf(cwd, sizeof cwd, "/");
	int r = 0;
	snprintf(num, sizeof num, "%u", (unsigned)getuid());
	r |= spec_add(f, 'u', num);
	snprintf(num, sizeof num, "%u", (unsigned)getgid());
	r |= spec_add(f, 'g', num);
	r |= spec_add(f, 'c', cwd);
	/* base and plugin: an empty home, as in the sandbox (unsafe shows the real one read-only) */
	if (c->home && c->home[0] == '/' && c->profile != SB_PROFILE_UNSAFE)
		r |= spec_add(f, 'h', c->home);
	for (size_t i = 0; s->argv[i]; i++)
		r |= spec_add(f, 'a', s->argv[i]);
	for (size_t i = 0; env[i]; i++)
		r |= spec_add(f, 'e', env[i]);
	size_t n_shares = sandbox_shares(s, shares, SB_VM_SHARES_MAX);
	for (size_t i = 0; i < n_shares; i++)
		r |= spec_add(f, shares[i].ro ? 'r' : 'w', shares[i].path);
	if (fclose(f) != 0 || r)
		fail_exit("cannot write %s", spec_path);

	if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0 ||
	    (verbose && pipe2(con, O_CLOEXEC) < 0))
		fail_exit("pipe: %s", strerror(errno));

	struct sb_argv a = {0};
	arg(&a, "%s", SB_VM_QEMU);
	arg(&a, "-M");
	arg(&a, "microvm,x-option-roms=off");
	arg(&a, "-accel");
	arg(&a, "%s", c->vm_tcg ? "tcg" : "kvm");
	arg(&a, "-cpu");
	/* ARCH_CAPABILITIES: some nested hosts refuse to set it (QEMU then aborts); without it the
	 * guest assumes the worst and enables every mitigation. */
	arg(&a, "%s", c->vm_tcg ? "max" : "host,-arch-capabilities");
	unsigned long long mem = 512;
	if (c->limits.memory_bytes)
		mem = c->limits.memory_bytes / 2 / (1024 * 1024) < 128 ? 128 : c->limits.memory_bytes / 2 / (1024 * 1024);
	if (mem > 512 && !c->limits.memory_bytes)
		mem = 512;
	arg(&a, "-m");
	arg(&a, "%lluM", mem);
	arg(&a, "-smp");
	arg(&a, "%llu", c->limits.cpu_millicores ? (unsigned long long)(c->limits.cpu_millicores + 999) / 1000 : 1ull);
	arg(&a, "-nodefaults");
	arg(&a, "-no-user-config");
	arg(&a, "-display");
	arg(&a, "none");
	arg(&a, "-no-reboot");
	arg(&a, "-kernel");
	arg(&a, "%s", c->vm_kernel);
	arg(&a, "-initrd");
	arg(&a, "%s", c->vm_initrd);
	char tsc[48] = "";
	unsigned long khz = c->vm_tcg ? tsc_khz() : 0;
	if (khz)
		snprintf(tsc, sizeof tsc, "tsc_early_khz=%lu ", khz);
	arg(&a, "-append");
	arg(&a, "console=ttyS0 %s%sreboot=t panic=-1 i8042.noaux i8042.nomux i8042.nopnp i8042.dumbkbd "
	        "sluice.spec=%s%s%s",
	    verbose ? "" : "quiet ", tsc, spec_path, s->vm_net[0] ? " sluice.net=" : "", s->vm_net);
	arg(&a, "-chardev");
	if (verbose)
		arg(&a, "file,id=con,path=/dev/fd/%d,append=on", con[1]);
	else
		arg(&a, "null,id=con");
	arg(&a, "-serial");
	arg(&a, "chardev:con");
	arg(&a, "-device");
	arg(&a, "virtio-serial-device,max_ports=4");
	const struct {
		const char *id, *name;
		int fd;
	} ports[] = {{"so", "sluice.stdout", out[1]}, {"se", "sluice.stderr", errp[1]}, {"st", "sluice.status", st[1]}};
	for (size_t i = 0; i < 3; i++) {
		arg(&a, "-chardev");
		arg(&a, "file,id=%s,path=/dev/fd/%d,append=on", ports[i].id, ports[i].fd);
		arg(&a, "-device");
		arg(&a, "virtserialport,chardev=%s,name=%s", ports[i].id, ports[i].name);
	}
	arg(&a, "-fsdev");
	arg(&a, "local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap");
	arg(&a, "-device");
	arg(&a, "virtio-9p-device,fsdev=fsroot,mount_tag=sluice.root");
	for (size_t i = 0; i < n_shares; i++) {
		char *e = qemu_escape(shares[i].path);
		if (!e)
			fail_exit("out of memory");
		arg(&a, "-fsdev");
		arg(&a, "local,id=fs%zu,path=%s,security_model=none,multidevs=remap%s", i, e,
		    shares[i].ro ? ",readonly=on" : "");
		arg(&a, "-device");
		arg(&a, "virtio-9p-device,fsdev=fs%zu,mount_tag=sluice.share%zu", i, i);
		free(e);
	}
	if (s->vm_net[0]) {
		arg(&a, "-netdev");
		arg(&a, "tap,id=net0,fd=%d", SB_VM_TAP_FD);
		arg(&a, "-device");
		arg(&a, "virtio-net-device,netdev=net0,mac=%s", SB_VM_MAC);
	}

	pid_t q = fork();
	if (q < 0)
		fail_exit("fork: %s", strerror(errno));
	if (q == 0) {
		int keep[] = {out[1], errp[1], st[1], con[1]};
		for (size_t i = 0; i < 4; i++)
			if (keep[i] >= 0 && fcntl(keep[i], F_SETFD, 0) < 0)
				_exit(SB_EXIT_FAIL);
		int dn = open("/dev/null", O_RDONLY);
		if (dn < 0 || dup2(dn, 0) < 0)
			_exit(SB_EXIT_FAIL);
		execve("/usr/bin/" SB_VM_QEMU, a.v, env);
		execvpe(SB_VM_QEMU, a.v, env);
		fprintf(stderr, "sluice: --sandbox-type vm: cannot run %s: %s\n", SB_VM_QEMU, strerror(errno));
		_exit(SB_EXIT_NOEXEC);
	}
	close(out[1]);
	close(errp[1]);
	close(st[1]);
	if (con[1] >= 0)
		close(con[1]);
	if (s->vm_tap >= 0)
		close(SB_VM_TAP_FD);

	/* Relay until QEMU has closed every port. */
	char status[128] = "";
	size_t slen = 0;
	struct pollfd p[4] = {{out[0], POLLIN, 0}, {errp[0], POLLIN, 0}, {st[0], POLLIN, 0}, {con[0], POLLIN, 0}};
	const int to[4] = {1, 2, -1, 2};
	size_t open_n = con[0] >= 0 ? 4 : 3;
	for (size_t left = open_n; left;) {
		if (poll(p, open_n, -1) < 0) {
			if (errno == EINTR)
				continue;
			fail_exit("poll: %s", strerror(errno));
		}
		for (size_t i = 0; i < open_n; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char buf[65536];
			ssize_t n = read(p[i].fd, buf, sizeof buf);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				left--;
				continue;
			}
			if (to[i] < 0) {
				size_t k = (size_t)n < sizeof status - 1 - slen ? (size_t)n : sizeof status - 1 - slen;
				memcpy(status + slen, buf, k);
				slen += k;
				status[slen] = '\0';
				continue;
			}
			for (ssize_t w = 0; w < n;) {
				ssize_t m = write(to[i], buf + w, (size_t)(n - w));
				if (m < 0 && errno == EINTR)
					continue;
				if (m <= 0)
					break; /* the reader went away: keep draining so QEMU is not blocked */
				w += m;
			}
		}
	}
	int qs;
	while (waitpid(q, &qs, 0) < 0 && errno == EINTR)
		;
	unlink(spec_path);
	rmdir(dir);
	int code;
	if (sscanf(status, "exit %d", &code) == 1 && code >= 0 && code <= 255)
		_exit(code);
	if (strncmp(status, "error: ", 7) == 0) {
		status[strcspn(status, "\n")] = '\0';
		fail_exit("the guest: %s", status + 7);
	}
	fail_exit("the VM ended without the command's exit status (QEMU %s %d)%s",
	          WIFEXITED(qs) ? "exit status" : "killed by signal", WIFEXITED(qs) ? WEXITSTATUS(qs) : WTERMSIG(qs),
	          verbose ? "" : "; run with -v to see its console");
}
