/* flock-based slot leases (see lease.h). */
#include "lease.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static void lease_path(char *buf, size_t len, const char *dir, unsigned slot)
{
	snprintf(buf, len, "%s/%u", dir, slot);
}

/* Opens and locks the lease file, making sure the locked inode is still the one at the path (a
 * releaser may have unlinked it between our open and our lock). */
static int lock_path(const char *path, bool create)
{
	for (int tries = 0; tries < 8; tries++) {
		struct stat a, b;
		int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);

		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			close(fd);
			return e == EWOULDBLOCK ? -EBUSY : -e;
		}
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			return fd;
		close(fd);
		if (!create)
			return -ENOENT;
	}
	return -EAGAIN;
}

int netd_lease_take(const char *dir, unsigned slot, const char *record)
{
	char path[PATH_MAX];
	size_t len = strlen(record);
	int fd;

	lease_path(path, sizeof path, dir, slot);
	fd = lock_path(path, true);
	if (fd < 0)
		return fd;
	if (ftruncate(fd, 0) < 0 || pwrite(fd, record, len, 0) != (ssize_t)len) {
		int e = errno ? -errno : -EIO;
		unlink(path);
		close(fd);
		return e;
	}
	return fd;
}

int netd_lease_alloc(const char *dir, unsigned first, unsigned last, unsigned *hint, const char *record,
		     bool (*skip)(unsigned slot, void *arg), void *arg, unsigned *slot)
{
	unsigned span = last - first + 1, s = *hint;

	if (s < first || s > last)
		s = first;
	for (unsigned i = 0; i < span; i++, s = s == last ? first : s + 1) {
		int fd;

		if (skip && skip(s, arg))
			continue;
		fd = netd_lease_take(dir, s, record);
		if (fd == -EBUSY)
			continue;
		if (fd < 0)
			return fd;
		*slot = s;
		*hint = s == last ? first : s + 1;
		return fd;
	}
	return -ENOSPC;
}

void netd_lease_release(const char *dir, unsigned slot, int fd)
{
	char path[PATH_MAX];

	if (fd < 0)
		return;
	lease_path(path, sizeof path, dir, slot);
	unlink(path);
	close(fd);
}

static int read_record(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

int netd_lease_scan(const char *dir, void (*dead)(unsigned slot, const char *record, void *arg),
		    void (*live)(unsigned slot, const char *record, void *arg), void *arg)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		char path[PATH_MAX], rec[NETD_LEASE_RECORD_MAX], *end;
		unsigned long slot;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		errno = 0;
		slot = strtoul(de->d_name, &end, 10);
		if (errno || *end || slot > UINT_MAX)
			continue;
		lease_path(path, sizeof path, dir, (unsigned)slot);
		fd = lock_path(path, false);
		if (fd == -EBUSY) {
			int rfd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

			if (rfd >= 0) {
				if (read_record(rfd, rec, sizeof rec) == 0 && live)
					live((unsigned)slot, rec, arg);
				close(rfd);
			}
			continue;
		}
		if (fd < 0)
			continue;
		if (read_record(fd, rec, sizeof rec) == 0 && dead)
			dead((unsigned)slot, rec, arg);
		unlink(path);
		close(fd);
	}
	closedir(d);
	return 0;
}
