/* Unit tests: common/fs_safe, the writer of files in someone else's tree. No symlink is followed in a
 * path or at the file, a file is replaced (never written through a symlink or a hard link), a directory
 * swapped for a symlink after it was opened does not redirect the write, and (as root) the work runs
 * with the tree owner's credentials: the file is theirs, and what they may not write is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_safe.h"

#define NOBODY 65534

static char top[64];

static void pathf(char *buf, size_t n, const char *rel)
{
	snprintf(buf, n, "%s/%s", top, rel);
}

static void mk(const char *rel)
{
	char p[256];
	pathf(p, sizeof p, rel);
	assert_int_equal(mkdir(p, 0755), 0);
}

static void put(const char *rel, const char *text)
{
	char p[256];
	FILE *f;
	pathf(p, sizeof p, rel);
	assert_non_null(f = fopen(p, "w"));
	fputs(text, f);
	fclose(f);
}

static void ln(const char *target, const char *rel)
{
	char p[256];
	pathf(p, sizeof p, rel);
	assert_int_equal(symlink(target, p), 0);
}

static char *slurp(const char *rel)
{
	static char buf[256];
	char p[256];
	FILE *f;
	size_t n;
	pathf(p, sizeof p, rel);
	if (!(f = fopen(p, "r")))
		return NULL;
	n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int top_fd(void)
{
	int fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

static int setup(void **state)
{
	snprintf(top, sizeof top, "/tmp/sluice-fs-safe.XXXXXX");
	assert_non_null(mkdtemp(top));
	assert_int_equal(chmod(top, 0755), 0);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_open_dir_no_symlink(void **state)
{
	char p[256];
	int fd;

	mk("real");
	ln("real", "link");
	pathf(p, sizeof p, "link");
	assert_int_equal(fs_safe_open_dir(p), -ELOOP);
	pathf(p, sizeof p, "link/");
	assert_int_equal(fs_safe_open_dir(p), -ELOOP);
	pathf(p, sizeof p, "real");
	fd = fs_safe_open_dir(p);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(fs_safe_open_dir("tmp"), -EINVAL);
	pathf(p, sizeof p, "real/../real");
	assert_int_equal(fs_safe_open_dir(p), -EINVAL);
}

static void test_subdir(void **state)
{
	int t = top_fd(), fd;
	struct stat st;

	mk("victim");
	ln("victim", "l");
	assert_int_equal(fs_safe_open_subdir(t, "l/.sluice", true, 0755), -ELOOP);
	{ /* nothing made through the link */
		char p[256];
		pathf(p, sizeof p, "victim/.sluice");
		assert_int_equal(stat(p, &st), -1);
	}
	assert_int_equal(fs_safe_open_subdir(t, "a/../b", true, 0755), -EINVAL);
	assert_int_equal(fs_safe_open_subdir(t, "/abs", true, 0755), -EINVAL);
	assert_int_equal(fs_safe_open_subdir(t, "nope/x", false, 0755), -ENOENT);
	fd = fs_safe_open_subdir(t, "p/.config/sluice", true, 0700);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	close(fd);
	close(t);
}

static void test_read(void **state)
{
	int t = top_fd();
	char *text = NULL, p[256];
	size_t len = 9;

	put("f", "{\"allow\": []}\n");
	put("secret", "root's\n");
	ln("secret", "sl");
	pathf(p, sizeof p, "fifo");
	assert_int_equal(mkfifo(p, 0644), 0);
	assert_int_equal(fs_safe_read(t, "f", 1024, &text, &len, NULL), 0);
	assert_string_equal(text, "{\"allow\": []}\n");
	assert_int_equal(len, 14);
	free(text);
	assert_int_equal(fs_safe_read(t, "sl", 1024, &text, &len, NULL), -ELOOP);
	assert_null(text);
	assert_int_equal(fs_safe_read(t, "fifo", 1024, &text, &len, NULL), -EINVAL); /* and did not block */
	assert_int_equal(fs_safe_read(t, "f", 4, &text, &len, NULL), -EFBIG);
	assert_int_equal(fs_safe_read(t, "missing", 4, &text, &len, NULL), -ENOENT);
	assert_int_equal(fs_safe_read(t, "../f", 4, &text, &len, NULL), -EINVAL);
	close(t);
}

static void test_replace_not_through(void **state)
{
	int t = top_fd();
	struct stat st;
	char p[256];
	DIR *d;
	struct dirent *de;
	int n = 0;

	mk("d");
	put("outside", "keep\n");
	put("hard-target", "keep too\n");
	ln("../outside", "d/policy.json");
	{
		char a[256], b[256];
		pathf(a, sizeof a, "hard-target");
		pathf(b, sizeof b, "d/other.json");
		assert_int_equal(link(a, b), 0);
	}
	int d_fd = fs_safe_open_subdir(t, "d", false, 0);
	assert_true(d_fd >= 0);
	assert_int_equal(fs_safe_replace(d_fd, "policy.json", "new\n", 4, 0640), 0);
	assert_int_equal(fs_safe_replace(d_fd, "other.json", "new2\n", 5, 0644), 0);
	assert_string_equal(slurp("outside"), "keep\n");
	assert_string_equal(slurp("hard-target"), "keep too\n");
	assert_string_equal(slurp("d/policy.json"), "new\n");
	assert_string_equal(slurp("d/other.json"), "new2\n");
	pathf(p, sizeof p, "d/policy.json");
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0640);
	/* no temporary file left behind */
	pathf(p, sizeof p, "d");
	assert_non_null(d = opendir(p));
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
		else
			assert_true(strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0);
	closedir(d);
	assert_int_equal(n, 2);
	assert_int_equal(fs_safe_replace(d_fd, "../x", "y", 1, 0644), -EINVAL);
	close(d_fd);
	close(t);
}

/* The swap race: the directory is opened, then the path is renamed away and a symlink to another
 * (root's) directory put in its place. The write still lands in the directory that was opened; a new
 * walk refuses the symlink. */
static void test_swap_race(void **state)
{
	int t = top_fd(), d;
	char a[256], b[256];

	mk("proj");
	mk("proj/.sluice");
	mk("rootdir");
	mk("rootdir/.sluice");
	d = fs_safe_open_subdir(t, "proj/.sluice", true, 0755);
	assert_true(d >= 0);
	pathf(a, sizeof a, "proj");
	pathf(b, sizeof b, "moved");
	assert_int_equal(rename(a, b), 0);
	ln("rootdir", "proj");
	assert_int_equal(fs_safe_replace(d, "policy.json", "{}\n", 3, 0644), 0);
	assert_string_equal(slurp("moved/.sluice/policy.json"), "{}\n");
	assert_null(slurp("rootdir/.sluice/policy.json"));
	assert_int_equal(fs_safe_open_subdir(t, "proj/.sluice", true, 0755), -ELOOP);
	pathf(a, sizeof a, "proj");
	assert_int_equal(fs_safe_open_dir(a), -ELOOP);
	close(d);
	close(t);
}

struct job {
	int dfd;
	const char *name;
	bool ran;
};

static int write_job(void *arg, char *err, size_t errlen)
{
	struct job *j = arg;
	int r;

	j->ran = true;
	r = fs_safe_replace(j->dfd, j->name, "x\n", 2, 0644);
	if (r < 0)
		snprintf(err, errlen, "writing %s: %s (uid %u)", j->name, strerror(-r), (unsigned)geteuid());
	return r;
}

/* As root: the work runs as the tree's owner (the file is theirs; a directory they cannot write is
 * refused with their EACCES, and the message comes back). Unprivileged: in-process, as the caller. */
static void test_run_as(void **state)
{
	char err[256] = "", p[256];
	struct stat st;
	int r;

	mk("theirs");
	mk("roots");
	pathf(p, sizeof p, "theirs");
	if (geteuid() == 0) {
		assert_int_equal(chown(p, NOBODY, NOBODY), 0);
		struct job j = {.dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC), .name = "policy.json"};
		r = fs_safe_run_as(NOBODY, NOBODY, write_job, &j, err, sizeof err);
		assert_int_equal(r, 0);
		assert_false(j.ran); /* it ran in the child, not here */
		pathf(p, sizeof p, "theirs/policy.json");
		assert_int_equal(stat(p, &st), 0);
		assert_int_equal(st.st_uid, NOBODY);
		close(j.dfd);
		pathf(p, sizeof p, "roots");
		struct job k = {.dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC), .name = "policy.json"};
		r = fs_safe_run_as(NOBODY, NOBODY, write_job, &k, err, sizeof err);
		assert_int_equal(r, -EACCES);
		assert_non_null(strstr(err, "writing policy.json: Permission denied (uid 65534)"));
		assert_null(slurp("roots/policy.json"));
		close(k.dfd);
	} else {
		struct job j = {.dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC), .name = "policy.json"};
		r = fs_safe_run_as(geteuid(), getegid(), write_job, &j, err, sizeof err);
		assert_int_equal(r, 0);
		assert_true(j.ran);
		assert_string_equal(slurp("theirs/policy.json"), "x\n");
		close(j.dfd);
	}
}

/* The VM cache's directory: only the caller and root may have made it what it is. */
static void test_owned_dir(void **state)
{
	char p[256], res[256], why[512], want[256];
	uid_t me = geteuid();
	struct stat st;
	int fd;

	/* made when missing, 0700, and its path comes back */
	pathf(p, sizeof p, "a/b/cache");
	fd = fs_safe_open_owned_dir(p, me, true, 0700, res, sizeof res, why, sizeof why);
	assert_true(fd >= 0);
	close(fd);
	assert_string_equal(res, p);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);

	/* the directory itself a symlink (even to the caller's own directory): refused */
	ln("a/b/cache", "cachelink");
	pathf(p, sizeof p, "cachelink");
	assert_int_equal(fs_safe_open_owned_dir(p, me, true, 0700, res, sizeof res, why, sizeof why), -ELOOP);
	assert_non_null(strstr(why, "cachelink is a symlink"));

	/* a symlink of the caller's on the way is followed, and the path without it comes back */
	ln("a", "alink");
	pathf(p, sizeof p, "alink/b/../b/cache");
	fd = fs_safe_open_owned_dir(p, me, false, 0700, res, sizeof res, why, sizeof why);
	assert_true(fd >= 0);
	close(fd);
	pathf(want, sizeof want, "a/b/cache");
	assert_string_equal(res, want);

	/* writable by its group or by others: refused */
	pathf(p, sizeof p, "a/b/cache");
	assert_int_equal(chmod(p, 0770), 0);
	assert_int_equal(fs_safe_open_owned_dir(p, me, true, 0700, res, sizeof res, why, sizeof why), -EPERM);
	assert_non_null(strstr(why, "cache is writable by its group"));
	assert_int_equal(chmod(p, 01777), 0); /* sticky does not help the directory itself */
	assert_int_equal(fs_safe_open_owned_dir(p, me, true, 0700, res, sizeof res, why, sizeof why), -EPERM);
	assert_non_null(strstr(why, "cache is writable by others"));
	assert_int_equal(chmod(p, 0700), 0);

	/* a directory above it writable by others: refused, unless sticky (as /tmp) */
	pathf(want, sizeof want, "a/b");
	assert_int_equal(chmod(want, 0777), 0);
	assert_int_equal(fs_safe_open_owned_dir(p, me, true, 0700, res, sizeof res, why, sizeof why), -EPERM);
	assert_non_null(strstr(why, "/a/b is writable by others"));
	assert_int_equal(chmod(want, 01777), 0);
	fd = fs_safe_open_owned_dir(p, me, true, 0700, res, sizeof res, why, sizeof why);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(chmod(want, 0755), 0);

	/* a path below a file, and a relative path */
	put("file", "x");
	pathf(p, sizeof p, "file/cache");
	assert_int_equal(fs_safe_open_owned_dir(p, me, true, 0700, res, sizeof res, why, sizeof why), -ENOTDIR);
	assert_int_equal(fs_safe_open_owned_dir("tmp/x", me, true, 0700, res, sizeof res, why, sizeof why), -EINVAL);

	if (me != 0)
		return; /* the rest needs files of another user */
	/* another user's directory, at the end or on the way, or their symlink on the way: refused */
	mk("theirs");
	pathf(p, sizeof p, "theirs");
	assert_int_equal(chown(p, NOBODY, NOBODY), 0);
	assert_int_equal(fs_safe_open_owned_dir(p, 0, true, 0700, res, sizeof res, why, sizeof why), -EPERM);
	assert_non_null(strstr(why, "theirs is owned by uid 65534, not by uid 0 or root"));
	pathf(p, sizeof p, "theirs/cache");
	assert_int_equal(fs_safe_open_owned_dir(p, 0, true, 0700, res, sizeof res, why, sizeof why), -EPERM);
	assert_non_null(strstr(why, "theirs is owned by uid 65534"));
	assert_int_equal(access(p, F_OK), -1); /* nothing made inside */
	/* ... but the same directory is fine for its owner */
	pathf(p, sizeof p, "theirs");
	fd = fs_safe_open_owned_dir(p, NOBODY, false, 0700, res, sizeof res, why, sizeof why);
	assert_true(fd >= 0);
	close(fd);
	ln("a", "theirlink");
	pathf(p, sizeof p, "theirlink");
	assert_int_equal(lchown(p, NOBODY, NOBODY), 0);
	pathf(p, sizeof p, "theirlink/b/cache");
	assert_int_equal(fs_safe_open_owned_dir(p, 0, true, 0700, res, sizeof res, why, sizeof why), -EPERM);
	assert_non_null(strstr(why, "theirlink is owned by uid 65534"));
}

/* The VM cache's files: regular, the caller's or root's, written by nobody else, not a symlink. */
static void test_owned_file(void **state)
{
	int t = top_fd(), fd;
	char why[256], p[256];
	uid_t me = geteuid();

	put("kernel", "k");
	fd = fs_safe_open_owned_file(t, "kernel", me, why, sizeof why);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(fs_safe_open_owned_file(t, "missing", me, why, sizeof why), -ENOENT);
	ln("kernel", "klink");
	assert_int_equal(fs_safe_open_owned_file(t, "klink", me, why, sizeof why), -ELOOP);
	assert_non_null(strstr(why, "klink is a symlink"));
	mk("d");
	assert_int_equal(fs_safe_open_owned_file(t, "d", me, why, sizeof why), -EINVAL);
	pathf(p, sizeof p, "kernel");
	assert_int_equal(chmod(p, 0666), 0);
	assert_int_equal(fs_safe_open_owned_file(t, "kernel", me, why, sizeof why), -EPERM);
	assert_non_null(strstr(why, "kernel is writable by others"));
	assert_int_equal(chmod(p, 0644), 0);
	if (me == 0) {
		assert_int_equal(chown(p, NOBODY, NOBODY), 0);
		assert_int_equal(fs_safe_open_owned_file(t, "kernel", 0, why, sizeof why), -EPERM);
		assert_non_null(strstr(why, "kernel is owned by uid 65534"));
	}
	close(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_open_dir_no_symlink, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_subdir, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_read, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_replace_not_through, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_swap_race, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_run_as, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_owned_dir, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_owned_file, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
