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
 * boundary).
 *
 * This file is the launcher's part (sb_vm_prepare: QEMU and KVM checks, the kernel, the cached
 * initramfs and uncompressed kernel, their binds); vm-net.c is pid 1's (the network), vm-run.c the
 * command process's (QEMU, the guest's output and exit status). */
#include "session.h"

#include "config.h"
#include "fs_safe.h"
#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SB_VM_INIT_BIN "sluice-vm-init"

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

/* The cache: its directory, held open. Only the invoking user and root can have put anything in it
 * (fs_safe_open_owned_dir): the kernel and initramfs it holds are booted and bound into the sandbox,
 * so a directory another local user made, could write, or pointed at with a symlink would let them
 * choose what a root or another user's VM runs, and a prune would delete through their symlink. */
struct vm_cache {
	int dfd;            /* owned */
	char dir[PATH_MAX]; /* the directory's path without symlinks */
	uid_t uid;          /* the invoking user, who (or root) must own the cache */
};

/* A new temporary file beside NAME in the cache (never through a symlink or an old file). */
static int cache_tmp(const struct vm_cache *vc, const char *name, char *tmp, size_t tlen)
{
	snprintf(tmp, tlen, "%s.%d.tmp", name, (int)getpid());
	unlinkat(vc->dfd, tmp, 0);
	int fd = openat(vc->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	return fd < 0 ? -errno : fd;
}

/* Writes the initramfs to NAME in the cache (through a temporary file, renamed into place). */
static int build_initramfs(const struct vm_cache *vc, const char *name, const char *kver, const char *init, char *err,
                           size_t errlen)
{
	struct sb_moddep m = {0};
	struct sb_strv order = {0};
	char tmp[NAME_MAX + 1];
	FILE *f = NULL;
	int r;

	if ((r = moddep_load(&m, kver, err, errlen)) < 0)
		goto out;
	for (size_t i = 0; i < sizeof sb_vm_modules / sizeof sb_vm_modules[0]; i++)
		if ((r = moddep_resolve(&m, sb_vm_modules[i], strlen(sb_vm_modules[i]), &order, 0, err, errlen)) < 0)
			goto out;
	int fd = cache_tmp(vc, name, tmp, sizeof tmp);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		r = sb_err(err, errlen, "--sandbox-type vm: cannot write %s in the cache: %s", tmp,
		           strerror(fd < 0 ? -fd : errno));
		if (fd >= 0) {
			close(fd);
			unlinkat(vc->dfd, tmp, 0);
		}
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
		char mp[PATH_MAX], ent[16];
		snprintf(mp, sizeof mp, "/lib/modules/%s/%s", kver, order.v[i]);
		if ((r = slurp(mp, &data, &len)) < 0) {
			r = sb_errc(err, errlen, -r, "--sandbox-type vm: %s: %s", mp, strerror(-r));
			goto out;
		}
		snprintf(ent, sizeof ent, "m/%02zu.ko", i);
		r = cpio_entry(f, ent, 0100644, 0, 0, data, len, ino++);
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
	if (renameat(vc->dfd, tmp, vc->dfd, name) < 0) {
		r = sb_err(err, errlen, "--sandbox-type vm: cannot rename %s in the cache: %s", tmp, strerror(errno));
		unlinkat(vc->dfd, tmp, 0);
		goto out;
	}
	r = 0;
	goto out;
write_err:
	r = sb_errc(err, errlen, EIO, "--sandbox-type vm: cannot write %s in the cache: %s", tmp,
	            strerror(errno ? errno : EIO));
	unlinkat(vc->dfd, tmp, 0);
out:
	if (f)
		fclose(f);
	sb_strv_clear(&order);
	moddep_free(&m);
	return r;
}

/* The cache directory: $SLUICE_VM_CACHE, else $XDG_CACHE_HOME/sluice/vm, else ~/.cache/sluice/vm;
 * made 0700 when missing; refused (fail closed) unless the invoking user or root owns it and every
 * directory above it, none of them is writable by others (sticky ones aside), and no symlink of
 * another user's is on the way. */
static int cache_open(const struct sb_config *c, struct vm_cache *vc, char *err, size_t errlen)
{
	const char *e = getenv("SLUICE_VM_CACHE"), *x = getenv("XDG_CACHE_HOME");
	char path[PATH_MAX], why[PATH_MAX + 128];
	if (e && e[0] == '/')
		snprintf(path, sizeof path, "%s", e);
	else if (x && x[0] == '/')
		snprintf(path, sizeof path, "%s/sluice/vm", x);
	else if (c->home)
		snprintf(path, sizeof path, "%s/.cache/sluice/vm", c->home);
	else
		return sb_errc(err, errlen, ENOENT, "--sandbox-type vm: no cache directory (set HOME or SLUICE_VM_CACHE)");
	vc->uid = c->uid;
	vc->dfd = fs_safe_open_owned_dir(path, c->uid, true, 0700, vc->dir, sizeof vc->dir, why, sizeof why);
	if (vc->dfd == -EPERM || vc->dfd == -ELOOP)
		return sb_errc(err, errlen, -vc->dfd,
		               "--sandbox-type vm: unsafe cache directory %s: %s (another user could choose the VM's "
		               "kernel and initramfs); remove it, or set SLUICE_VM_CACHE to a directory of your own "
		               "(mode 0700)",
		               path, why);
	if (vc->dfd < 0)
		return sb_errc(err, errlen, -vc->dfd, "--sandbox-type vm: cache directory %s: %s", path,
		               why[0] ? why : strerror(-vc->dfd));
	return 0;
}

/* A cache file name for what `key` describes: NAME is PREFIX-KVER-HASH.EXT, OUT the path DIR/NAME. */
static int cache_name(const struct vm_cache *vc, const char *prefix, const char *kver, const char *key, const char *ext,
                      char *name, size_t nlen, char *out, size_t len, char *err, size_t errlen)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	if ((size_t)snprintf(name, nlen, "%s-%s-%016llx.%s", prefix, kver, (unsigned long long)h, ext) >= nlen - 24 ||
	    (size_t)snprintf(out, len, "%s/%s", vc->dir, name) >= len)
		return sb_errc(err, errlen, ENAMETOOLONG, "--sandbox-type vm: %s: path too long", vc->dir);
	return 0;
}

/* Whether the cache holds NAME, and may use it: 1 yes, 0 absent (to be made), -errno when a file is
 * there that the user or root did not make alone (a symlink, not a regular file, another owner,
 * writable by others): refused, never rebuilt over (the directory is the user's: something is wrong). */
static int cache_has(const struct vm_cache *vc, const char *name, char *err, size_t errlen)
{
	char why[NAME_MAX + 128];
	int fd = fs_safe_open_owned_file(vc->dfd, name, vc->uid, why, sizeof why);
	if (fd >= 0) {
		close(fd);
		return 1;
	}
	if (fd == -ENOENT)
		return 0;
	return sb_errc(err, errlen, -fd, "--sandbox-type vm: unsafe cache file %s/%s: %s; remove it", vc->dir, name,
	               why[0] ? why : strerror(-fd));
}

/* Removes the cache's other files of the same kind ("PREFIX-..."), left by earlier kernels or init
 * binaries, once `keep` has been made. */
static void cache_prune(const struct vm_cache *vc, const char *prefix, const char *keep)
{
	int fd = fcntl(vc->dfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;
	size_t pl = strlen(prefix);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d)))
		if (strncmp(e->d_name, prefix, pl) == 0 && e->d_name[pl] == '-' && strcmp(e->d_name, keep) != 0 &&
		    !strstr(e->d_name, ".tmp"))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

/* The initramfs for kver and this init binary, built once into the cache directory. */
static int cached_initramfs(const struct vm_cache *vc, const char *kver, const char *init, char *out, size_t len,
                            char *err, size_t errlen)
{
	char key[PATH_MAX + 128], dep[PATH_MAX], name[NAME_MAX + 1];
	struct stat si, sd;
	int r;

	snprintf(dep, sizeof dep, "/lib/modules/%s/modules.dep", kver);
	if (stat(init, &si) < 0 || stat(dep, &sd) < 0)
		return sb_err(err, errlen, "--sandbox-type vm: %s: %s", init, strerror(errno));
	/* The key: kernel, init binary and module index, by identity and time. */
	snprintf(key, sizeof key, "%s|%s|%llu|%llu|%lld.%ld|%llu|%lld.%ld", kver, init, (unsigned long long)si.st_ino,
	         (unsigned long long)si.st_size, (long long)si.st_mtim.tv_sec, si.st_mtim.tv_nsec,
	         (unsigned long long)sd.st_size, (long long)sd.st_mtim.tv_sec, sd.st_mtim.tv_nsec);
	if ((r = cache_name(vc, "initramfs", kver, key, "cpio", name, sizeof name, out, len, err, errlen)) < 0 ||
	    (r = cache_has(vc, name, err, errlen)) != 0)
		return r < 0 ? r : 0;
	log_info("vm: building %s", out);
	if ((r = build_initramfs(vc, name, kver, init, err, errlen)) == 0)
		cache_prune(vc, "initramfs", name);
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
static int cached_vmlinux(const struct vm_cache *vc, const char *kernel, const char *kver, char *out, size_t len,
                          char *err, size_t errlen)
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
	char key[PATH_MAX + 64], tmp[NAME_MAX + 1], name[NAME_MAX + 1];
	struct stat st;
	char *img = NULL;
	size_t ilen = 0;
	int r;

	if (!kernel_has_pvh(kver) || stat(kernel, &st) < 0)
		return -ENOTSUP;
	snprintf(key, sizeof key, "%s|%llu|%llu|%lld", kernel, (unsigned long long)st.st_ino,
	         (unsigned long long)st.st_size, (long long)st.st_mtim.tv_sec);
	if ((r = cache_name(vc, "vmlinux", kver, key, "elf", name, sizeof name, out, len, err, errlen)) < 0 ||
	    (r = cache_has(vc, name, err, errlen)) != 0)
		return r < 0 ? -EPERM : 0;
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
	int in = memfd_create("sluice-bzimage", MFD_CLOEXEC);
	int o = cache_tmp(vc, name, tmp, sizeof tmp);
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
	int c = openat(vc->dfd, tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ok = ok && pid > 0 && WIFEXITED(ws) && WEXITSTATUS(ws) <= 2 && c >= 0 && read(c, hdr, 4) == 4 &&
	     memcmp(hdr, "\x7f" "ELF", 4) == 0;
	if (c >= 0)
		close(c);
	if (!ok || renameat(vc->dfd, tmp, vc->dfd, name) < 0) {
		unlinkat(vc->dfd, tmp, 0);
		return -EIO;
	}
	cache_prune(vc, "vmlinux", name);
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
	char kernel[PATH_MAX], kver[256], init[PATH_MAX], initrd[PATH_MAX], qemu[PATH_MAX], vmlinux[PATH_MAX];
	struct vm_cache vc = {.dfd = -1};
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
	    (r = find_init(init, sizeof init, err, errlen)) < 0 || (r = cache_open(c, &vc, err, errlen)) < 0 ||
	    (r = cached_initramfs(&vc, kver, init, initrd, sizeof initrd, err, errlen)) < 0)
		goto out;
	if ((r = cached_vmlinux(&vc, kernel, kver, vmlinux, sizeof vmlinux, err, errlen)) == 0)
		snprintf(kernel, sizeof kernel, "%s", vmlinux);
	else if (r == -EPERM)
		goto out; /* an unsafe file in the cache: refused, err says which */
	else
		log_info("vm: booting %s (no uncompressed kernel: %s)", kernel, strerror(-r));
	free(c->vm_kernel);
	free(c->vm_initrd);
	c->vm_kernel = strdup(kernel);
	c->vm_initrd = strdup(initrd);
	if (!c->vm_kernel || !c->vm_initrd || add_ro_bind(c, kernel) < 0 || add_ro_bind(c, initrd) < 0)
		r = sb_errc(err, errlen, ENOMEM, "out of memory");
	else
		r = 0;
out:
	if (vc.dfd >= 0)
		close(vc.dfd);
	return r;
}
