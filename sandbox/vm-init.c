/* sluice-vm-init: pid 1 of a `--sandbox-type vm` guest (built static, packed into the initramfs by
 * vm.c). It mounts /dev, /proc, /sys, loads the modules the initramfs carries (m/00.ko, m/01.ko, ...
 * in dependency order), mounts the sandbox's root (9p tag sluice.root, read-only) on /newroot with
 * fresh /proc, /sys, /dev, /tmp, /var/tmp, /run and home on top and the other shares (tags
 * sluice.shareN: the project, caches, binds) at their paths, configures eth0 from the kernel command line (sluice.net=ADDR/PREFIX,GW),
 * reads the request (sluice.spec=PATH on the root share, vm-spec.h), and runs the command as the
 * request's uid with no capabilities, its stdout and stderr on the virtio ports sluice.stdout and
 * sluice.stderr. When the command exits it writes "exit N" (or "error: WHY") to the port
 * sluice.status, syncs and reboots, which ends QEMU (-no-reboot). Everything on the guest's side of
 * the VM boundary is the command's to break: this init trusts nothing it did not mount itself. */
#include "vm-spec.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/reboot.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NEWROOT "/newroot"

static int status_fd = -1;
static char spec_buf[SB_VM_SPEC_MAX];
static struct sb_vm_spec spec;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* the console (visible with sluice -v) */
	dprintf(2, "sluice-vm-init: %s\n", line);
}

/* Reports to the host and powers off: the end of every path. */
__attribute__((noreturn)) static void finish(int code, const char *error)
{
	if (status_fd >= 0) {
		if (error)
			dprintf(status_fd, "error: %s\n", error);
		else
			dprintf(status_fd, "exit %d\n", code);
	}
	sync();
	reboot(RB_AUTOBOOT);
	for (;;)
		pause();
}

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	say("%s", line);
	finish(125, line);
}

static void xmount(const char *src, const char *dst, const char *type, unsigned long flags, const char *data)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, flags, data) < 0)
		die("mount %s on %s: %s", type, dst, strerror(errno));
}

static void load_modules(void)
{
	for (int i = 0; i < 100; i++) {
		char path[32];
		snprintf(path, sizeof path, "/m/%02d.ko", i);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
		if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
			die("loading %s: %s", path, strerror(errno));
		close(fd);
	}
}

/* The value of NAME= on the kernel command line, copied into out. */
static bool cmdline_get(const char *name, char *out, size_t outlen)
{
	static char cmd[4096];
	static bool read_once;
	if (!read_once) {
		int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, cmd, sizeof cmd - 1) : -1;
		cmd[n > 0 ? n : 0] = '\0';
		if (fd >= 0)
			close(fd);
		read_once = true;
	}
	size_t nl = strlen(name);
	for (const char *p = cmd; (p = strstr(p, name)) != NULL; p += nl) {
		if ((p != cmd && p[-1] != ' ') || p[nl] != '=')
			continue;
		const char *v = p + nl + 1;
		size_t vl = strcspn(v, " \n");
		if (vl >= outlen)
			return false;
		memcpy(out, v, vl);
		out[vl] = '\0';
		return true;
	}
	return false;
}

/* /dev/vportNpM of the virtio port called name, opened for writing. */
static int open_port(const char *name)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	struct dirent *e;
	int fd = -1;
	if (!d)
		return -1;
	while ((e = readdir(d)) && fd < 0) {
		char path[300], got[64];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
		int nf = open(path, O_RDONLY | O_CLOEXEC);
		if (nf < 0)
			continue;
		ssize_t n = read(nf, got, sizeof got - 1);
		close(nf);
		if (n <= 0)
			continue;
		got[n] = '\0';
		got[strcspn(got, "\n")] = '\0';
		if (strcmp(got, name) != 0)
			continue;
		snprintf(path, sizeof path, "/dev/%s", e->d_name);
		fd = open(path, O_WRONLY | O_CLOEXEC);
	}
	closedir(d);
	return fd;
}

static void if_up(int sk, const char *name)
{
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	if (ioctl(sk, SIOCGIFFLAGS, &ifr) < 0)
		die("%s: %s", name, strerror(errno));
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sk, SIOCSIFFLAGS, &ifr) < 0)
		die("%s up: %s", name, strerror(errno));
}

/* sluice.net=ADDR/PREFIX,GW: the session's address and gateway, as the sandbox's eth0 had them. */
static void network(void)
{
	char net[64], *slash, *comma;
	int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sk < 0)
		die("socket: %s", strerror(errno));
	if_up(sk, "lo");
	if (!cmdline_get("sluice.net", net, sizeof net)) {
		close(sk);
		return; /* no --allow-network: only lo */
	}
	slash = strchr(net, '/');
	comma = strchr(net, ',');
	if (!slash || !comma || comma < slash)
		die("sluice.net=%s: want ADDR/PREFIX,GW", net);
	*slash = *comma = '\0';
	long prefix = strtol(slash + 1, NULL, 10);
	struct in_addr addr, gw;
	if (inet_pton(AF_INET, net, &addr) != 1 || inet_pton(AF_INET, comma + 1, &gw) != 1 || prefix < 1 ||
	    prefix > 32)
		die("sluice.net: a bad address, prefix or gateway");
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "eth0");
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	sin->sin_family = AF_INET;
	sin->sin_addr = addr;
	if (ioctl(sk, SIOCSIFADDR, &ifr) < 0)
		die("eth0 address: %s", strerror(errno));
	sin->sin_addr.s_addr = htonl(prefix == 32 ? 0xffffffffu : ~((1u << (32 - prefix)) - 1));
	if (ioctl(sk, SIOCSIFNETMASK, &ifr) < 0)
		die("eth0 netmask: %s", strerror(errno));
	if_up(sk, "eth0");
	/* The session's address is a /32 with a link route to the gateway (netd's scheme); a wider
	 * prefix has the gateway on link already, and the same host route does no harm. */
	struct rtentry rt = {0};
	struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst, *gwa = (struct sockaddr_in *)&rt.rt_gateway,
	                   *mask = (struct sockaddr_in *)&rt.rt_genmask;
	dst->sin_family = gwa->sin_family = mask->sin_family = AF_INET;
	dst->sin_addr = gw;
	mask->sin_addr.s_addr = 0xffffffffu;
	rt.rt_flags = RTF_UP | RTF_HOST;
	rt.rt_dev = (char *)"eth0";
	if (ioctl(sk, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		die("route to the gateway %s: %s", comma + 1, strerror(errno));
	dst->sin_addr.s_addr = 0;
	mask->sin_addr.s_addr = 0;
	gwa->sin_addr = gw;
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	if (ioctl(sk, SIOCADDRT, &rt) < 0)
		die("default route via %s: %s", comma + 1, strerror(errno));
	close(sk);
}

static void read_spec(void)
{
	char path[512], full[600];
	const char *bad;
	if (!cmdline_get("sluice.spec", path, sizeof path) || path[0] != '/')
		die("no sluice.spec= on the kernel command line");
	snprintf(full, sizeof full, NEWROOT "%s", path);
	int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, spec_buf + len, sizeof spec_buf - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("reading %s: %s", path, strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == sizeof spec_buf)
			die("%s: too long", path);
	}
	close(fd);
	if (sb_vm_spec_parse(spec_buf, len, &spec, &bad) < 0)
		die("%s: %s", path, bad);
}

/* A path under /newroot for a spec path (already checked absolute), created when missing (a share
 * under /tmp lies on the guest's fresh tmpfs; elsewhere the read-only root already has it). */
static void under_root(const char *p, char *out, size_t outlen)
{
	snprintf(out, outlen, NEWROOT "%s", p);
	for (char *s = out + sizeof NEWROOT;; s++) {
		if (*s == '/' || !*s) {
			char sv = *s;
			*s = '\0';
			mkdir(out, 0755); /* EEXIST or EROFS: the mount below says what is wrong */
			*s = sv;
			if (!sv)
				break;
		}
	}
}

static void mount_tree(void)
{
	char path[4200], opts[128];
	xmount("sluice.root", NEWROOT, "9p", MS_RDONLY | MS_NOSUID | MS_NODEV,
	       "trans=virtio,version=9p2000.L,msize=262144,cache=loose");
	read_spec();
	xmount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	/* The local sandbox shows no /sys (and its root cannot get one here: it is read-only). */
	if (access(NEWROOT "/sys", F_OK) == 0)
		xmount("sysfs", NEWROOT "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	xmount("devtmpfs", NEWROOT "/dev", "devtmpfs", MS_NOSUID | MS_NOEXEC, NULL);
	xmount("devpts", NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
	xmount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	xmount("tmpfs", NEWROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	xmount("tmpfs", NEWROOT "/var/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	snprintf(opts, sizeof opts, "mode=0755,uid=%u,gid=%u", (unsigned)spec.uid, (unsigned)spec.gid);
	xmount("tmpfs", NEWROOT "/run", "tmpfs", MS_NOSUID | MS_NODEV, opts);
	if (spec.home && strcmp(spec.home, "/") != 0) {
		snprintf(opts, sizeof opts, "mode=0700,uid=%u,gid=%u", (unsigned)spec.uid, (unsigned)spec.gid);
		under_root(spec.home, path, sizeof path);
		if (mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
			die("mount tmpfs on %s: %s", spec.home, strerror(errno));
	}
	/* The shares in the order given (vm-run.c sorts parents before children). cache=none: every
	 * write reaches the sandbox at once, so nothing is lost when the VM powers off. */
	for (size_t i = 0; i < spec.n_shares; i++) {
		char tag[32];
		snprintf(tag, sizeof tag, "sluice.share%zu", i);
		under_root(spec.shares[i], path, sizeof path);
		if (mount(tag, path, "9p", MS_NOSUID | MS_NODEV | (spec.share_ro[i] ? MS_RDONLY : 0),
		          "trans=virtio,version=9p2000.L,msize=262144") < 0)
			die("mount share %s on %s: %s", tag, spec.shares[i], strerror(errno));
	}
}

/* The command: no capabilities at all, even as uid 0 (a root launch's sandbox uid is 0 in its user
 * namespace and owns the files as 0 on the shares; in the guest it stays without privilege). */
static void drop_privileges(void)
{
	if (setgroups(0, NULL) < 0 || setresgid(spec.gid, spec.gid, spec.gid) < 0)
		die("setgid %u: %s", (unsigned)spec.gid, strerror(errno));
	if (spec.uid == 0 && prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
	                                                      SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED) < 0)
		die("securebits: %s", strerror(errno));
	for (int c = 0; c <= CAP_LAST_CAP; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			die("dropping capability %d: %s", c, strerror(errno));
	if (setresuid(spec.uid, spec.uid, spec.uid) < 0)
		die("setuid %u: %s", (unsigned)spec.uid, strerror(errno));
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {{0}};
	if (syscall(SYS_capset, &h, d) < 0)
		die("capset: %s", strerror(errno));
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("no_new_privs: %s", strerror(errno));
}

/* execvpe with the command's PATH. */
static void exec_command(void)
{
	const char *path = "/usr/local/bin:/usr/bin:/bin";
	for (size_t i = 0; i < spec.envc; i++)
		if (strncmp(spec.envp[i], "PATH=", 5) == 0)
			path = spec.envp[i] + 5;
	const char *cmd = spec.argv[0];
	int e = ENOENT;
	if (strchr(cmd, '/')) {
		execve(cmd, (char *const *)spec.argv, (char *const *)spec.envp);
		e = errno;
	} else {
		for (const char *p = path; *p;) {
			size_t n = strcspn(p, ":");
			char full[4200];
			snprintf(full, sizeof full, "%.*s/%s", (int)n, n ? p : ".", cmd);
			execve(full, (char *const *)spec.argv, (char *const *)spec.envp);
			if (errno != ENOENT && errno != ENOTDIR)
				e = errno;
			p += n;
			if (*p == ':')
				p++;
		}
	}
	dprintf(2, "sluice: cannot run %s: %s\n", cmd, strerror(e));
	_exit(e == ENOENT ? 127 : 126);
}

int main(void)
{
	mkdir("/dev", 0755);
	mkdir("/proc", 0755);
	mkdir("/sys", 0755);
	if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, NULL) < 0 && errno != EBUSY)
		return 1;
	int con = open("/dev/console", O_RDWR | O_CLOEXEC);
	if (con >= 0) {
		dup2(con, 1);
		dup2(con, 2);
	}
	xmount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	xmount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	load_modules();
	status_fd = open_port("sluice.status");
	if (status_fd < 0)
		die("no virtio port sluice.status (virtio_console not loaded?)");
	int out = open_port("sluice.stdout"), err = open_port("sluice.stderr");
	if (out < 0 || err < 0)
		die("no virtio ports sluice.stdout and sluice.stderr");
	mount_tree();
	network();

	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		if (in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
			die("stdio: %s", strerror(errno));
		setsid();
		if (chroot(NEWROOT) < 0 || chdir("/") < 0)
			die("chroot: %s", strerror(errno));
		drop_privileges();
		if (spec.cwd && chdir(spec.cwd) < 0)
			dprintf(2, "sluice: cannot enter %s in the VM: %s (starting in /)\n", spec.cwd, strerror(errno));
		exec_command();
	}
	/* Reap everything; the command's own status decides. */
	for (;;) {
		int st;
		pid_t p = wait(&st);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			die("wait: %s", strerror(errno));
		if (p == pid)
			finish(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), NULL);
	}
}
