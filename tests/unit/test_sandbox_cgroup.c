/* Unit tests: sandbox/cgroup.c's cgroup v2 path, against a fixture. The machines here are hybrid with
 * every controller on v1 (a fresh cgroup2 mount in a private mount and cgroup namespace lists only
 * hugetlb in cgroup.controllers, and writing +pids or +memory to its cgroup.subtree_control fails), so
 * the v2 limits have never run on a real kernel here: this fixture is a directory tree laid out like a
 * cgroup2 mount (cgroup.controllers, cgroup.subtree_control, cgroup.procs, cgroup.kill, cgroup.events
 * and each enabled controller's files, made by a mkdir that does what cgroupfs does) plus a v1 cpu
 * hierarchy, found through a mountinfo and a /proc/self/cgroup of its own (sb_cgroup_set_fixture).
 * It checks which limit goes where (v2 when our cgroup's subtree_control enables the controller, else
 * v1), the values written, the attach, cgroup.kill, removal, the reaper, and the error without either. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "session.h"

static char top[64], v2root[128], v1cpu[128], me_v2[192], me_v1[192];
static char mountinfo[128], cgroupf[128];

static void put(const char *dir, const char *file, const char *text)
{
	char p[512];
	FILE *f;
	snprintf(p, sizeof p, "%s/%s", dir, file);
	assert_non_null(f = fopen(p, "w"));
	fputs(text, f);
	fclose(f);
}

/* The file's text ("" when empty), NULL when it does not exist. */
static const char *get(const char *dir, const char *file)
{
	static char buf[4][256];
	static int k;
	char p[512];
	FILE *f;
	size_t n;
	char *b = buf[k++ % 4];

	snprintf(p, sizeof p, "%s/%s", dir, file);
	if (!(f = fopen(p, "r")))
		return NULL;
	n = fread(b, 1, 255, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

static bool under(const char *path, const char *root)
{
	return strncmp(path, root, strlen(root)) == 0 && path[strlen(root)] == '/';
}

/* What cgroupfs does on mkdir: a v2 child gets the core files and the files of each controller its
 * parent's cgroup.subtree_control enables (listed in its cgroup.controllers); a v1 cpu child gets the
 * cpu files. */
static int fixture_mkdir(const char *path, mode_t mode)
{
	char parent[512];
	const char *sub;

	if (mkdir(path, mode) < 0)
		return -1;
	snprintf(parent, sizeof parent, "%s", path);
	*strrchr(parent, '/') = '\0';
	put(path, "cgroup.procs", "");
	if (under(path, v1cpu)) {
		put(path, "cpu.cfs_period_us", ""); /* (a fixture file is not truncated by a write: empty) */
		put(path, "cpu.cfs_quota_us", "");
		return 0;
	}
	sub = get(parent, "cgroup.subtree_control");
	put(path, "cgroup.controllers", sub ? sub : "");
	put(path, "cgroup.subtree_control", "");
	put(path, "cgroup.kill", "");
	put(path, "cgroup.events", "populated 0\nfrozen 0\n");
	if (sub && strstr(sub, "memory")) {
		put(path, "memory.max", "");
		put(path, "memory.swap.max", "");
		put(path, "memory.oom.group", "");
	}
	if (sub && strstr(sub, "pids"))
		put(path, "pids.max", "");
	if (sub && strstr(sub, "cpu"))
		put(path, "cpu.max", "");
	if (sub && strstr(sub, "io"))
		put(path, "io.max", "");
	return 0;
}

/* rmdir of cgroupfs: EBUSY while a task is listed and not killed; the interface files go with it. */
static int fixture_rmdir(const char *path)
{
	const char *procs = get(path, "cgroup.procs"), *kill = get(path, "cgroup.kill");
	DIR *d;
	struct dirent *de;

	if (!procs) {
		errno = ENOENT;
		return -1;
	}
	if (procs[0] && !(kill && kill[0] == '1')) {
		errno = EBUSY;
		return -1;
	}
	if (!(d = opendir(path)))
		return -1;
	while ((de = readdir(d))) {
		char p[512];
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof p, "%s/%s", path, de->d_name);
		unlink(p);
	}
	closedir(d);
	return rmdir(path);
}

static const struct sb_cgroup_fixture fx = {
        .mountinfo = mountinfo, .cgroup = cgroupf, .mkdir = fixture_mkdir, .rmdir = fixture_rmdir};

/* A cgroup2 mount at TOP/cg2 whose root enables ROOT_SUB for our cgroup /user/me, which enables ME_SUB
 * for its children; a v1 cpu hierarchy at TOP/v1cpu with us in /user/me too. */
static void layout(const char *me_sub, bool with_v1cpu)
{
	char p[256];
	FILE *f;

	snprintf(top, sizeof top, "/tmp/sluice-cgfx.XXXXXX");
	assert_non_null(mkdtemp(top));
	snprintf(v2root, sizeof v2root, "%s/cg2", top);
	snprintf(v1cpu, sizeof v1cpu, "%s/v1cpu", top);
	snprintf(me_v2, sizeof me_v2, "%s/user/me", v2root);
	snprintf(me_v1, sizeof me_v1, "%s/user/me", v1cpu);
	assert_int_equal(mkdir(v2root, 0755), 0);
	put(v2root, "cgroup.controllers", "cpu io memory pids\n");
	put(v2root, "cgroup.subtree_control", "cpu io memory pids\n");
	snprintf(p, sizeof p, "%s/user", v2root);
	assert_int_equal(fixture_mkdir(p, 0755), 0);
	put(p, "cgroup.subtree_control", "cpu io memory pids\n");
	assert_int_equal(fixture_mkdir(me_v2, 0755), 0);
	put(me_v2, "cgroup.subtree_control", me_sub);
	if (with_v1cpu) {
		assert_int_equal(mkdir(v1cpu, 0755), 0);
		snprintf(p, sizeof p, "%s/user", v1cpu);
		assert_int_equal(fixture_mkdir(p, 0755), 0);
		assert_int_equal(fixture_mkdir(me_v1, 0755), 0);
	}
	snprintf(mountinfo, sizeof mountinfo, "%s/mountinfo", top);
	snprintf(cgroupf, sizeof cgroupf, "%s/cgroup", top);
	assert_non_null(f = fopen(mountinfo, "w"));
	fprintf(f, "22 1 0:21 / /proc rw,nosuid - proc proc rw\n");
	fprintf(f, "30 25 0:26 / %s rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n", v2root);
	if (with_v1cpu)
		fprintf(f, "31 25 0:27 / %s rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct\n", v1cpu);
	fclose(f);
	assert_non_null(f = fopen(cgroupf, "w"));
	if (with_v1cpu)
		fprintf(f, "4:cpu,cpuacct:/user/me\n");
	fprintf(f, "0::/user/me\n");
	fclose(f);
	sb_cgroup_set_fixture(&fx);
}

static int teardown(void **state)
{
	char cmd[128];
	sb_cgroup_set_fixture(NULL);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
	return system(cmd) == 0 ? 0 : -1;
}

static bool exists(const char *dir, const char *sub)
{
	char p[512];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", dir, sub);
	return stat(p, &st) == 0;
}

/* memory and pids enabled on v2: they go there; cpu is not (our subtree_control lacks it): v1. */
static void test_v2_limits(void **state)
{
	struct sb_limits lim = {.memory_bytes = 256u << 20, .pids = 64, .cpu_millicores = 500};
	struct sb_cgroup *cg = NULL;
	char err[512] = "", s2[256], s1[256];
	int fd;

	layout("memory pids\n", true);
	assert_int_equal(sb_cgroup_new(&lim, "abc", true, &cg, err, sizeof err), 0);
	assert_non_null(cg);
	snprintf(s2, sizeof s2, "%s/sluice-abc", me_v2);
	snprintf(s1, sizeof s1, "%s/sluice-abc", me_v1);
	assert_string_equal(get(s2, "memory.max"), "268435456");
	assert_string_equal(get(s2, "memory.swap.max"), "0");
	assert_string_equal(get(s2, "memory.oom.group"), "1");
	assert_string_equal(get(s2, "pids.max"), "64");
	assert_null(get(s2, "cpu.max")); /* not enabled for our children: the kernel gives no such file */
	assert_string_equal(get(s1, "cpu.cfs_period_us"), "100000");
	assert_string_equal(get(s1, "cpu.cfs_quota_us"), "50000");
	assert_true(sb_cgroup_active(cg));
	fd = sb_cgroup_v2_fd(cg);
	assert_true(fd >= 0);
	close(fd);

	assert_int_equal(sb_cgroup_attach(cg, 4242, false, err, sizeof err), 0);
	assert_string_equal(get(s2, "cgroup.procs"), "4242");
	assert_string_equal(get(s1, "cgroup.procs"), "4242");
	put(s1, "cgroup.procs", ""); /* (the v1 fixture: its task is gone) */

	/* populated: cgroup.kill ends everything at once; then the directories go */
	put(s2, "cgroup.events", "populated 1\nfrozen 0\n");
	sb_cgroup_kill_all(cg);
	assert_string_equal(get(s2, "cgroup.kill"), "1");
	sb_cgroup_free(cg);
	assert_false(exists(me_v2, "sluice-abc"));
	assert_false(exists(me_v1, "sluice-abc"));
}

/* A session with no task left: cgroup.events says so, and cgroup.kill is not written. */
static void test_v2_not_populated(void **state)
{
	struct sb_limits lim = {.pids = 10};
	struct sb_cgroup *cg = NULL;
	char err[512] = "", s2[256];

	layout("memory pids cpu io\n", false);
	assert_int_equal(sb_cgroup_new(&lim, "def", true, &cg, err, sizeof err), 0);
	snprintf(s2, sizeof s2, "%s/sluice-def", me_v2);
	assert_string_equal(get(s2, "pids.max"), "10");
	assert_string_equal(get(s2, "memory.max"), ""); /* not asked for */
	sb_cgroup_kill_all(cg);
	assert_string_equal(get(s2, "cgroup.kill"), "");
	sb_cgroup_free(cg);
	assert_false(exists(me_v2, "sluice-def"));
}

/* cpu and io on v2 when enabled there: cpu.max and io.max. */
static void test_v2_cpu_io(void **state)
{
	struct sb_limits lim = {.cpu_millicores = 1500, .n_io = 1};
	struct sb_cgroup *cg = NULL;
	char err[512] = "", s2[256];

	lim.io[0].maj = 8;
	lim.io[0].min = 0;
	lim.io[0].read_bps = 1048576;
	layout("cpu io memory pids\n", false);
	assert_int_equal(sb_cgroup_new(&lim, "ghi", true, &cg, err, sizeof err), 0);
	snprintf(s2, sizeof s2, "%s/sluice-ghi", me_v2);
	assert_string_equal(get(s2, "cpu.max"), "150000 100000");
	assert_string_equal(get(s2, "io.max"), "8:0 rbps=1048576 wbps=max");
	sb_cgroup_free(cg);
}

/* This machine's case: a v2 tree without controllers and no v1 hierarchy of the controller: refused,
 * saying which controller and where it looked; nothing is left behind. */
static void test_no_controller(void **state)
{
	struct sb_limits lim = {.memory_bytes = 1 << 20};
	struct sb_cgroup *cg = NULL;
	char err[512] = "";

	layout("", false);
	assert_int_equal(sb_cgroup_new(&lim, "jkl", true, &cg, err, sizeof err), -ENOTSUP);
	assert_null(cg);
	assert_non_null(strstr(err, "the memory limit needs the 'memory' cgroup controller, which is neither enabled "
	                            "for our cgroup v2"));
	assert_non_null(strstr(err, me_v2));
	assert_false(exists(me_v2, "sluice-jkl"));
}

/* The reaper of a dead launcher's session: cgroup.kill, then the directory goes. */
static void test_reap(void **state)
{
	char s2[256];

	layout("pids\n", false);
	snprintf(s2, sizeof s2, "%s/sluice-mno", me_v2);
	assert_int_equal(fixture_mkdir(s2, 0755), 0);
	put(s2, "cgroup.procs", "77\n");
	assert_int_equal(sb_cgroup_reap("mno"), 0);
	assert_false(exists(me_v2, "sluice-mno"));
	assert_int_equal(sb_cgroup_reap("mno"), 0); /* gone already: fine */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(test_v2_limits, teardown),
	        cmocka_unit_test_teardown(test_v2_not_populated, teardown),
	        cmocka_unit_test_teardown(test_v2_cpu_io, teardown),
	        cmocka_unit_test_teardown(test_no_controller, teardown),
	        cmocka_unit_test_teardown(test_reap, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
