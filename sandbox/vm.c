/* --sandbox-type vm: the command runs in a QEMU virtual machine that itself runs as the command of
 * an ordinary local session. So QEMU gets everything a local command gets (its own namespaces, the
 * read-only host view with secrets masked, the project overlay, the cgroup limits, seccomp, no
 * capabilities) and the guest sees exactly that view: QEMU shares the sandbox's root read-only
 * (virtio-9p, tag sluice.root) and the writable places (project, caches, --bind) read-write
 * (sluice.rwN), so --save and --apply work as in local mode. Debian's kernel boots with an
 * initramfs made here: sluice-vm-init (vm-init.c) and the modules it needs.
 *
 * Network: with --allow-network, pid 1 of the sandbox (still privileged over the session's network
 * namespace) takes the session's IPv4 address off eth0, bridges eth0 with a tap device and hands
 * the tap's fd to QEMU; the guest configures the same address and gateway (kernel command line), so
 * its packets leave through the session's veth and meet the same gateway, proxy, DNS, nftables and
 * audit log as a local command's. The namespace itself keeps no address: QEMU has no network.
 *
 * Acceleration: KVM, required by default (fails closed when /dev/kvm cannot be used);
 * --vm-accel tcg emulates instead, with a warning (slow, and QEMU does not treat TCG as a security
 * boundary). Parts: launcher (sb_vm_prepare), sandbox pid 1 (sb_vm_net_setup), the command's
 * process inside the sandbox (sb_vm_exec: writes the request, runs QEMU, relays output, returns
 * the guest command's exit status). */
#include "session.h"
#include "vm-spec.h"

#include "config.h"
#include "log.h"
#include "util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/if_tun.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SB_VM_QEMU     "qemu-system-x86_64"
#define SB_VM_INIT_BIN "sluice-vm-init"
#define SB_VM_TAP_FD   3 /* where the tap's fd sits in the command's process (contain.c) */
#define SB_VM_MAC      "52:54:00:5c:1c:01"

/* The modules the guest loads (with their dependencies, from modules.dep). */
static const char *const sb_vm_modules[] = {"virtio_mmio", "virtio_console", "9pnet_virtio", "9p", "virtio_net"};

/* ---- launcher: kernel, initramfs, checks ---- */

static int version_cmp(const struct dirent **a, const struct dirent **b)
{
	return strverscmp((*a)->d_name, (*b)->d_name);
}

static int only_vmlinuz(const struct dirent *d)
{
	return strncmp(d->d_name, "vmlinuz-", 8) == 0;
}

/* The newest /boot/vmlinuz-KVER that has /lib/modules/KVER/modules.dep. */
static int find_kernel(char *kernel, size_t klen, char *kver, size_t vlen, char *err, size_t errlen)
{
	struct dirent **list = NULL;
	int n = scandir("/boot", &list, only_vmlinuz, version_cmp), r = -ENOENT;
	for (int i = n - 1; i >= 0 && r < 0; i--) {
		char dep[PATH_MAX];
		const char *v = list[i]->d_name + 8;
		snprintf(dep, sizeof dep, "/lib/modules/%s/modules.dep", v);
		if (access(dep, R_OK) == 0) {
			snprintf(kernel, klen, "/boot/%s", list[i]->d_name);
			snprintf(kver, vlen, "%s", v);
			r = 0;
		}
	}
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
	if (r < 0)
		return sb_errc(err, errlen, ENOENT,
		               "--sandbox-type vm: no kernel in /boot with its modules in /lib/modules (install "
		               "linux-image-amd64)");
	return 0;
}

/* sluice-vm-init: next to this binary (the build directory), else where it is installed. */
static int find_init(char *out, size_t len, char *err, size_t errlen)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(out, len, "%s/%s", self, SB_VM_INIT_BIN);
			if (access(out, R_OK) == 0)
				return 0;
		}
	}
	snprintf(out, len, "%s/%s", SB_LIBEXECDIR, SB_VM_INIT_BIN);
	if (access(out, R_OK) == 0)
		return 0;
	return sb_errc(err, errlen, ENOENT, "--sandbox-type vm: %s is missing (reinstall sluice)", out);
}

/* The module list of modules.dep: one line per module ("kernel/.../NAME.ko: DEP DEP"). */
struct sb_moddep {
	char *text; /* owned; the file, lines cut at '\n' */
	char **lines;
	size_t n;
};

static int moddep_load(struct sb_moddep *m, const char *kver, char *err, size_t errlen)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "/lib/modules/%s/modules.dep", kver);
	cleanup_fd int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return sb_err(err, errlen, "%s: %s", path, strerror(errno));
	if (st.st_size <= 0 || st.st_size > (64 << 20))
		return sb_errc(err, errlen, EINVAL, "%s: unexpected size", path);
	if (!(m->text = malloc((size_t)st.st_size + 1)))
		return -ENOMEM;
	size_t len = 0;
	while (len < (size_t)st.st_size) {
		ssize_t r = read(fd, m->text + len, (size_t)st.st_size - len);
		if (r <= 0)
			return sb_err(err, errlen, "%s: %s", path, r < 0 ? strerror(errno) : "short read");
		len += (size_t)r;
	}
	m->text[len] = '\0';
	for (char *p = m->text; *p; p++)
		if (*p == '\n')
			m->n++;
	if (!(m->lines = calloc(m->n + 1, sizeof *m->lines)))
		return -ENOMEM;
	m->n = 0;
	for (char *p = m->text, *nl; *p; p = nl + 1) {
		nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		m->lines[m->n++] = p;
	}
	return 0;
}

static void moddep_free(struct sb_moddep *m)
{
	free(m->lines);
	free(m->text);
}

/* The line of module `name` (a '-' and a '_' are the same), or NULL. */
static char *moddep_find(const struct sb_moddep *m, const char *name, size_t nlen)
{
	for (size_t i = 0; i < m->n; i++) {
		char *l = m->lines[i], *colon = strchr(l, ':');
		if (!colon)
			continue;
		char *base = colon;
		while (base > l && base[-1] != '/')
			base--;
		if ((size_t)(colon - base) != nlen + 3 || memcmp(colon - 3, ".ko", 3) != 0)
			continue;
		bool same = true;
		for (size_t k = 0; k < nlen && same; k++)
			same = base[k] == name[k] || ((base[k] == '-' || base[k] == '_') && (name[k] == '-' || name[k] == '_'));
		if (same)
			return l;
	}
	return NULL;
}

/* Appends the path of module name (its dependencies first) to order, once. */
static int moddep_resolve(const struct sb_moddep *m, const char *name, size_t nlen, struct sb_strv *order,
                          int depth, char *err, size_t errlen)
{
	char *l = moddep_find(m, name, nlen);
	if (!l)
		return sb_errc(err, errlen, ENOENT, "--sandbox-type vm: module %.*s is not in modules.dep", (int)nlen,
		               name);
	if (depth > 32)
		return sb_errc(err, errlen, ELOOP, "--sandbox-type vm: module dependencies nest too deep");
	char *colon = strchr(l, ':');
	for (char *d = colon + 1; *d;) {
		while (*d == ' ')
			d++;
		size_t dl = strcspn(d, " ");
		if (!dl)
			break;
		/* "kernel/.../NAME.ko" -> NAME */
		const char *b = d + dl;
		while (b > d && b[-1] != '/')
			b--;
		size_t bl = (size_t)(d + dl - b);
		if (bl > 3) {
			int r = moddep_resolve(m, b, bl - 3, order, depth + 1, err, errlen);
			if (r < 0)
				return r;
		}
		d += dl;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%.*s", (int)(colon - l), l);
	if (!sb_strv_contains(order, path) && sb_strv_add(order, path) < 0)
		return -ENOMEM;
	return 0;
}

/* One newc cpio entry (header, name and data, each padded to 4 bytes). */
static int cpio_entry(FILE *f, const char *name, unsigned mode, unsigned rmaj, unsigned rmin, const void *data,
                      size_t len, unsigned ino)
{
	static const char zero[4] = {0};
	size_t nl = strlen(name) + 1, npad = (4 - (110 + nl) % 4) % 4, dpad = (4 - len % 4) % 4;
	if (fprintf(f, "070701%08X%08X%08X%08X%08X%08X%08zX%08X%08X%08X%08X%08zX%08X", ino, mode, 0u, 0u, 1u, 0u, len,
	            0u, 0u, rmaj, rmin, nl, 0u) < 0 ||
	    fwrite(name, 1, nl, f) != nl || fwrite(zero, 1, npad, f) != npad)
		return -EIO;
	if (len && (fwrite(data, 1, len, f) != len || fwrite(zero, 1, dpad, f) != dpad))
		return -EIO;
	return 0;
}

/* Reads a whole file (at most 64 MiB) into a malloced buffer. */
static int slurp(const char *path, char **out, size_t *len)
{
	cleanup_fd int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size > (64 << 20))
		return -EINVAL;
	char *b = malloc((size_t)st.st_size + 1);
	if (!b)
		return -ENOMEM;
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
		if (r <= 0) {
			free(b);
			return r < 0 ? -errno : -EIO;
		}
		got += (size_t)r;
	}
	*out = b;
	*len = got;
	return 0;
}

/* Writes the initramfs to path (through a temporary file, renamed into place). */
static int build_initramfs(const char *path, const char *kver, const char *init, char *err, size_t errlen)
{
	struct sb_moddep m = {0};
	struct sb_strv order = {0};
	char tmp[PATH_MAX];
	FILE *f = NULL;
	int r;

	if ((r = moddep_load(&m, kver, err, errlen)) < 0)
		goto out;
	for (size_t i = 0; i < sizeof sb_vm_modules / sizeof sb_vm_modules[0]; i++)
		if ((r = moddep_resolve(&m, sb_vm_modules[i], strlen(sb_vm_modules[i]), &order, 0, err, errlen)) < 0)
			goto out;
	snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		r = sb_err(err, errlen, "--sandbox-type vm: cannot write %s: %s", tmp, strerror(errno));
		if (fd >= 0)
			close(fd);
		goto out;
	}
	unsigned ino = 1;
	static const char *const dirs[] = {"dev", "proc", "sys", "newroot", "m"};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
		if ((r = cpio_entry(f, dirs[i], 040755, 0, 0, NULL, 0, ino++)) < 0)
			goto write_err;
	if ((r = cpio_entry(f, "dev/console", 020600, 5, 1, NULL, 0, ino++)) < 0)
		goto write_err;
	char *data;
	size_t len;
	if ((r = slurp(init, &data, &len)) < 0) {
		r = sb_errc(err, errlen, -r, "--sandbox-type vm: %s: %s", init, strerror(-r));
		goto out;
	}
	r = cpio_entry(f, "init", 0100755, 0, 0, data, len, ino++);
	free(data);
	if (r < 0)
		goto write_err;
	if (order.n > 100) {
		r = sb_errc(err, errlen, E2BIG, "--sandbox-type vm: too many modules");
		goto out;
	}
	for (size_t i = 0; i < order.n; i++) {
		char mp[PATH_MAX], name[16];
		snprintf(mp, sizeof mp, "/lib/modules/%s/%s", kver, order.v[i]);
		if ((r = slurp(mp, &data, &len)) < 0) {
			r = sb_errc(err, errlen, -r, "--sandbox-type vm: %s: %s", mp, strerror(-r));
			goto out;
		}
		snprintf(name, sizeof name, "m/%02zu.ko", i);
		r = cpio_entry(f, name, 0100644, 0, 0, data, len, ino++);
		free(data);
		if (r < 0)
			goto write_err;
	}
	if ((r = cpio_entry(f, "TRAILER!!!", 0, 0, 0, NULL, 0, 0)) < 0)
		goto write_err;
	if (fflush(f) != 0 || fsync(fileno(f)) != 0)
		goto write_err;
	if (fclose(f) != 0) {
		f = NULL;
		goto write_err;
	}
	f = NULL;
	if (rename(tmp, path) < 0) {
		r = sb_err(err, errlen, "--sandbox-type vm: cannot rename %s: %s", tmp, strerror(errno));
		unlink(tmp);
		goto out;
	}
	r = 0;
	goto out;
write_err:
	r = sb_errc(err, errlen, EIO, "--sandbox-type vm: cannot write %s: %s", tmp, strerror(errno ? errno : EIO));
	unlink(tmp);
out:
	if (f)
		fclose(f);
	sb_strv_clear(&order);
	moddep_free(&m);
	return r;
}

static int mkdirs(char *p, mode_t mode)
{
	for (char *s = p + 1;; s++) {
		if (*s == '/' || !*s) {
			char sv = *s;
			*s = '\0';
			int r = mkdir(p, mode);
			*s = sv;
			if (r < 0 && errno != EEXIST)
				return -errno;
			if (!sv)
				return 0;
		}
	}
}

/* The cache directory: $SLUICE_VM_CACHE, else $XDG_CACHE_HOME/sluice/vm, else ~/.cache/sluice/vm. */
static int cache_dir(const struct sb_config *c, char *dir, size_t len, char *err, size_t errlen)
{
	const char *e = getenv("SLUICE_VM_CACHE"), *x = getenv("XDG_CACHE_HOME");
	if (e && e[0] == '/')
		snprintf(dir, len, "%s", e);
	else if (x && x[0] == '/')
		snprintf(dir, len, "%s/sluice/vm", x);
	else if (c->home)
		snprintf(dir, len, "%s/.cache/sluice/vm", c->home);
	else
		return sb_errc(err, errlen, ENOENT, "--sandbox-type vm: no cache directory (set HOME or SLUICE_VM_CACHE)");
	int r = mkdirs(dir, 0700);
	if (r < 0)
		return sb_errc(err, errlen, -r, "--sandbox-type vm: cannot create %s: %s", dir, strerror(-r));
	return 0;
}

/* A cache file name for what `key` describes: DIR/PREFIX-KVER-HASH.EXT. */
static int cache_name(const char *dir, const char *prefix, const char *kver, const char *key, const char *ext,
                      char *out, size_t len, char *err, size_t errlen)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	if ((size_t)snprintf(out, len, "%s/%s-%s-%016llx.%s", dir, prefix, kver, (unsigned long long)h, ext) >= len)
		return sb_errc(err, errlen, ENAMETOOLONG, "--sandbox-type vm: %s: path too long", dir);
	return 0;
}

/* Removes the cache's other files of the same kind ("PREFIX-..."), left by earlier kernels or init
 * binaries, once `keep` has been made. */
static void cache_prune(const char *dir, const char *prefix, const char *keep)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	const char *base = strrchr(keep, '/');
	size_t pl = strlen(prefix);
	if (!d)
		return;
	base = base ? base + 1 : keep;
	while ((e = readdir(d)))
		if (strncmp(e->d_name, prefix, pl) == 0 && e->d_name[pl] == '-' && strcmp(e->d_name, base) != 0 &&
		    !strstr(e->d_name, ".tmp"))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

/* The initramfs for kver and this init binary, built once into the cache directory. */
static int cached_initramfs(const char *dir, const char *kver, const char *init, char *out, size_t len, char *err,
                            size_t errlen)
{
	char key[PATH_MAX + 128], dep[PATH_MAX];
	struct stat si, sd;
	int r;

	snprintf(dep, sizeof dep, "/lib/modules/%s/modules.dep", kver);
	if (stat(init, &si) < 0 || stat(dep, &sd) < 0)
		return sb_err(err, errlen, "--sandbox-type vm: %s: %s", init, strerror(errno));
	/* The key: kernel, init binary and module index, by identity and time. */
	snprintf(key, sizeof key, "%s|%s|%llu|%llu|%lld.%ld|%llu|%lld.%ld", kver, init, (unsigned long long)si.st_ino,
	         (unsigned long long)si.st_size, (long long)si.st_mtim.tv_sec, si.st_mtim.tv_nsec,
	         (unsigned long long)sd.st_size, (long long)sd.st_mtim.tv_sec, sd.st_mtim.tv_nsec);
	if ((r = cache_name(dir, "initramfs", kver, key, "cpio", out, len, err, errlen)) < 0)
		return r;
	if (access(out, R_OK) == 0)
		return 0;
	log_info("vm: building %s", out);
	if ((r = build_initramfs(out, kver, init, err, errlen)) == 0)
		cache_prune(dir, "initramfs", out);
	return r;
}

/* Whether /boot/config-KVER says the kernel has a PVH entry point (QEMU can boot its ELF directly). */
static bool kernel_has_pvh(const char *kver)
{
	char path[PATH_MAX], line[256];
	bool pvh = false;
	snprintf(path, sizeof path, "/boot/config-%s", kver);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (!pvh && fgets(line, sizeof line, f))
		pvh = strcmp(line, "CONFIG_PVH=y\n") == 0;
	fclose(f);
	return pvh;
}

/* The uncompressed kernel (ELF vmlinux) inside a bzImage, extracted once into the cache: QEMU boots
 * it through its PVH entry, which skips the decompressor (seconds under TCG). Only xz and gzip
 * payloads (Debian's is xz), decompressed by xz(1) or gzip(1). 0 with out set, or -errno (the
 * caller then boots the bzImage). */
static int cached_vmlinux(const char *dir, const char *kernel, const char *kver, char *out, size_t len)
{
	static const struct {
		const char *magic;
		size_t n;
		const char *tool;
		const char *const argv[4];
	} fmts[] = {
	        {"\xfd" "7zXZ\0", 6, "/usr/bin/xz", {"xz", "-dc", "--single-stream", NULL}},
	        {"\x1f\x8b\x08", 3, "/usr/bin/gzip", {"gzip", "-dc", NULL}},
	};
	char key[PATH_MAX + 64], tmp[PATH_MAX + 32], e[SB_ERR_MAX];
	struct stat st;
	char *img = NULL;
	size_t ilen = 0;
	int r;

	if (!kernel_has_pvh(kver) || stat(kernel, &st) < 0)
		return -ENOTSUP;
	snprintf(key, sizeof key, "%s|%llu|%llu|%lld", kernel, (unsigned long long)st.st_ino,
	         (unsigned long long)st.st_size, (long long)st.st_mtim.tv_sec);
	if (cache_name(dir, "vmlinux", kver, key, "elf", out, len, e, sizeof e) < 0)
		return -ENAMETOOLONG;
	if (access(out, R_OK) == 0)
		return 0;
	if ((r = slurp(kernel, &img, &ilen)) < 0)
		return r;
	size_t off = 0, f = 0;
	for (; f < sizeof fmts / sizeof fmts[0]; f++) {
		const char *m = memmem(img, ilen, fmts[f].magic, fmts[f].n);
		if (m) {
			off = (size_t)(m - img);
			break;
		}
	}
	if (f == sizeof fmts / sizeof fmts[0] || access(fmts[f].tool, X_OK) < 0) {
		free(img);
		return -ENOTSUP;
	}
	snprintf(tmp, sizeof tmp, "%s.%d.tmp", out, (int)getpid());
	int in = memfd_create("sluice-bzimage", MFD_CLOEXEC);
	int o = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	bool ok = in >= 0 && o >= 0 && write(in, img + off, ilen - off) == (ssize_t)(ilen - off) &&
	          lseek(in, 0, SEEK_SET) == 0;
	free(img);
	pid_t pid = ok ? fork() : -1;
	if (pid == 0) {
		if (dup2(in, 0) < 0 || dup2(o, 1) < 0)
			_exit(127);
		int dn = open("/dev/null", O_WRONLY);
		if (dn >= 0)
			dup2(dn, 2);
		execv(fmts[f].tool, (char *const *)fmts[f].argv);
		_exit(127);
	}
	int ws = -1;
	if (pid > 0)
		while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
			;
	if (in >= 0)
		close(in);
	if (o >= 0)
		close(o);
	/* gzip ends with status 2 ("trailing garbage ignored"): the result is judged by its header. */
	char hdr[4] = {0};
	int c = open(tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ok = ok && pid > 0 && WIFEXITED(ws) && WEXITSTATUS(ws) <= 2 && c >= 0 && read(c, hdr, 4) == 4 &&
	     memcmp(hdr, "\x7f" "ELF", 4) == 0;
	if (c >= 0)
		close(c);
	if (!ok || rename(tmp, out) < 0) {
		unlink(tmp);
		return -EIO;
	}
	cache_prune(dir, "vmlinux", out);
	return 0;
}

static int find_qemu(char *out, size_t len)
{
	static const char *const dirs[] = {"/usr/bin", "/usr/local/bin", "/bin"};
	for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
		snprintf(out, len, "%s/%s", dirs[i], SB_VM_QEMU);
		if (access(out, X_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

static int add_ro_bind(struct sb_config *c, const char *path)
{
	struct sb_bind *nb = realloc(c->binds, (c->n_binds + 1) * sizeof *nb);
	if (!nb)
		return -ENOMEM;
	c->binds = nb;
	nb[c->n_binds] = (struct sb_bind){.src = strdup(path), .dst = NULL, .rw = false};
	if (!nb[c->n_binds].src)
		return -ENOMEM;
	c->n_binds++;
	return 0;
}

int sb_vm_prepare(struct sb_config *c, char *err, size_t errlen)
{
	char kernel[PATH_MAX], kver[256], init[PATH_MAX], initrd[PATH_MAX], qemu[PATH_MAX], dir[PATH_MAX],
	        vmlinux[PATH_MAX];
	int r;

	if (find_qemu(qemu, sizeof qemu) < 0)
		return sb_errc(err, errlen, ENOENT, "--sandbox-type vm: %s not found (install qemu-system-x86)",
		               SB_VM_QEMU);
	if (c->vm_tcg) {
		fprintf(stderr, "sluice: warning: --vm-accel tcg: the VM is emulated, not accelerated: slow, and QEMU "
		                "does not treat TCG as a security boundary\n");
	} else {
		if ((r = sb_kvm_check(c, "--sandbox-type vm", err, errlen)) < 0) {
			size_t l = strlen(err);
			snprintf(err + l, errlen - l, "; the VM needs KVM, or --vm-accel tcg to emulate it");
			return r;
		}
		c->allow_kvm = true;
	}
	if ((r = find_kernel(kernel, sizeof kernel, kver, sizeof kver, err, errlen)) < 0 ||
	    (r = find_init(init, sizeof init, err, errlen)) < 0 || (r = cache_dir(c, dir, sizeof dir, err, errlen)) < 0 ||
	    (r = cached_initramfs(dir, kver, init, initrd, sizeof initrd, err, errlen)) < 0)
		return r;
	if ((r = cached_vmlinux(dir, kernel, kver, vmlinux, sizeof vmlinux)) == 0)
		snprintf(kernel, sizeof kernel, "%s", vmlinux);
	else
		log_info("vm: booting %s (no uncompressed kernel: %s)", kernel, strerror(-r));
	free(c->vm_kernel);
	free(c->vm_initrd);
	c->vm_kernel = strdup(kernel);
	c->vm_initrd = strdup(initrd);
	if (!c->vm_kernel || !c->vm_initrd || add_ro_bind(c, kernel) < 0 || add_ro_bind(c, initrd) < 0)
		return sb_errc(err, errlen, ENOMEM, "out of memory");
	return 0;
}

/* ---- sandbox pid 1: the session's network handed to the guest ---- */

/* The IPv4 default gateway of dev in this network namespace (/proc/self/net/route). */
static int default_gw(const char *dev, struct in_addr *gw)
{
	FILE *f = fopen("/proc/self/net/route", "re");
	char line[256], ifn[IFNAMSIZ + 1];
	unsigned dst, g, flags;
	int r = -ENOENT;
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%16s %x %x %x", ifn, &dst, &g, &flags) == 4 && strcmp(ifn, dev) == 0 && dst == 0 &&
		    g != 0) {
			gw->s_addr = g; /* the file shows the address in network order, as hex */
			r = 0;
			break;
		}
	fclose(f);
	return r;
}

static int set_up(int sk, const char *name, char *err, size_t errlen)
{
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	if (ioctl(sk, SIOCGIFFLAGS, &ifr) < 0)
		return sb_err(err, errlen, "vm network: %s: %s", name, strerror(errno));
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sk, SIOCSIFFLAGS, &ifr) < 0)
		return sb_err(err, errlen, "vm network: %s up: %s", name, strerror(errno));
	return 0;
}

int sb_vm_net_setup(struct sb_session *s, char *err, size_t errlen)
{
	struct ifreq ifr = {0};
	struct in_addr addr, mask, gw;
	char a[INET_ADDRSTRLEN], g[INET_ADDRSTRLEN];
	int r;

	if (!s->cfg->vm || !s->cfg->allow_network)
		return 0;
	cleanup_fd int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sk < 0)
		return sb_err(err, errlen, "vm network: socket: %s", strerror(errno));
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "eth0");
	if (ioctl(sk, SIOCGIFADDR, &ifr) < 0)
		return sb_err(err, errlen, "vm network: the session's eth0 has no IPv4 address: %s", strerror(errno));
	addr = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr;
	if (ioctl(sk, SIOCGIFNETMASK, &ifr) < 0)
		return sb_err(err, errlen, "vm network: eth0 netmask: %s", strerror(errno));
	mask = ((struct sockaddr_in *)&ifr.ifr_netmask)->sin_addr;
	if ((r = default_gw("eth0", &gw)) < 0)
		return sb_errc(err, errlen, -r, "vm network: the session has no default route on eth0");
	int prefix = __builtin_popcount(ntohl(mask.s_addr));
	inet_ntop(AF_INET, &addr, a, sizeof a);
	inet_ntop(AF_INET, &gw, g, sizeof g);
	snprintf(s->vm_net, sizeof s->vm_net, "%s/%d,%s", a, prefix, g);

	/* The guest takes the address over: the namespace keeps none (setting 0.0.0.0 deletes it). */
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	memset(&ifr.ifr_addr, 0, sizeof ifr.ifr_addr);
	sin->sin_family = AF_INET;
	if (ioctl(sk, SIOCSIFADDR, &ifr) < 0)
		return sb_err(err, errlen, "vm network: cannot take the address off eth0: %s", strerror(errno));

	cleanup_fd int tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (tap < 0)
		return sb_err(err, errlen, "vm network: /dev/net/tun: %s", strerror(errno));
	struct ifreq tr = {0};
	snprintf(tr.ifr_name, sizeof tr.ifr_name, "tap0");
	tr.ifr_flags = IFF_TAP | IFF_NO_PI;
	if (ioctl(tap, TUNSETIFF, &tr) < 0)
		return sb_err(err, errlen, "vm network: cannot create tap0: %s", strerror(errno));
	if (ioctl(sk, SIOCBRADDBR, "br0") < 0)
		return sb_err(err, errlen, "vm network: cannot create the bridge br0: %s", strerror(errno));
	static const char *const ports[] = {"eth0", "tap0"};
	for (size_t i = 0; i < 2; i++) {
		struct ifreq br = {0};
		snprintf(br.ifr_name, sizeof br.ifr_name, "br0");
		br.ifr_ifindex = (int)if_nametoindex(ports[i]);
		if (!br.ifr_ifindex || ioctl(sk, SIOCBRADDIF, &br) < 0)
			return sb_err(err, errlen, "vm network: cannot add %s to br0: %s", ports[i], strerror(errno));
	}
	if ((r = set_up(sk, "tap0", err, errlen)) < 0 || (r = set_up(sk, "br0", err, errlen)) < 0)
		return r;
	s->vm_tap = steal_fd(&tap);
	log_debug("vm network: guest %s, tap0 and eth0 bridged", s->vm_net);
	return 0;
}

/* ---- the command's process inside the sandbox: QEMU, and the guest's output and status ---- */

/* Appends one record of the request. */
static int spec_add(FILE *f, char tag, const char *v)
{
	return fputc(tag, f) == EOF || fputs(v, f) == EOF || fputc('\0', f) == EOF ? -EIO : 0;
}

static int by_length(const void *a, const void *b)
{
	size_t la = strlen(*(char *const *)a), lb = strlen(*(char *const *)b);
	return la < lb ? -1 : la > lb;
}

/* The read-write places of the sandbox, parents first. */
static size_t rw_shares(const struct sb_session *s, const char **out, size_t max)
{
	const struct sb_config *c = s->cfg;
	size_t n = 0;
	if (c->project_mode != SB_PROJECT_RO && c->project_dir && n < max)
		out[n++] = c->project_dir;
	for (size_t i = 0; i < c->writable_paths.n && n < max; i++)
		out[n++] = c->writable_paths.v[i];
	for (size_t i = 0; i < c->n_binds && n < max; i++)
		if (c->binds[i].rw)
			out[n++] = c->binds[i].dst ? c->binds[i].dst : c->binds[i].src;
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
	const char *shares[SB_VM_SHARES_MAX];
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
	if (c->home && c->home[0] == '/')
		r |= spec_add(f, 'h', c->home);
	for (size_t i = 0; s->argv[i]; i++)
		r |= spec_add(f, 'a', s->argv[i]);
	for (size_t i = 0; env[i]; i++)
		r |= spec_add(f, 'e', env[i]);
	size_t n_shares = rw_shares(s, shares, SB_VM_SHARES_MAX);
	for (size_t i = 0; i < n_shares; i++)
		r |= spec_add(f, 'w', shares[i]);
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
		char *e = qemu_escape(shares[i]);
		if (!e)
			fail_exit("out of memory");
		arg(&a, "-fsdev");
		arg(&a, "local,id=fsrw%zu,path=%s,security_model=none,multidevs=remap", i, e);
		arg(&a, "-device");
		arg(&a, "virtio-9p-device,fsdev=fsrw%zu,mount_tag=sluice.rw%zu", i, i);
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
