/* The cgroup step (launcher side): one cgroup per session. Each limit goes to cgroup v2 when its
 * controller is enabled in our v2 cgroup, else to the v1 hierarchy of that controller (hybrid
 * machines keep memory, pids, cpu and blkio on v1). A v2 cgroup without controllers is still
 * created when possible: its cgroup.kill ends every process of the session at once. At the end
 * everything left in the session's cgroups is killed and the directories are removed. */
#include "session.h"

#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum sb_ctrl { SB_CG_MEMORY = 0, SB_CG_PIDS, SB_CG_CPU, SB_CG_IO, SB_CG_N };
static const char *const ctrl_v2[SB_CG_N] = {"memory", "pids", "cpu", "io"};
static const char *const ctrl_v1[SB_CG_N] = {"memory", "pids", "cpu", "blkio"};

struct sb_cgroup {
	char *v2;          /* owned; the session's v2 cgroup directory, or NULL */
	char *v1[SB_CG_N]; /* owned; the session's v1 cgroup directory per controller, or NULL */
};

static const struct sb_cgroup_fixture *fixture; /* borrowed; tests only (sb_cgroup_set_fixture) */

void sb_cgroup_set_fixture(const struct sb_cgroup_fixture *f)
{
	fixture = f;
}

static int cg_mkdir(const char *path, mode_t mode)
{
	return fixture && fixture->mkdir ? fixture->mkdir(path, mode) : mkdir(path, mode);
}

static int cg_rmdir(const char *path)
{
	return fixture && fixture->rmdir ? fixture->rmdir(path) : rmdir(path);
}

/* Where our own cgroups are: the v2 mount + our path, and each v1 controller's mount + path. */
struct cg_where {
	char v2[PATH_MAX];          /* "" when there is no cgroup2 mount */
	char v1[SB_CG_N][PATH_MAX]; /* "" when the controller has no v1 hierarchy */
};

static int write_str(const char *dir, const char *file, const char *val)
{
	char path[PATH_MAX + 64];
	cleanup_fd int fd = -1;
	size_t len = strlen(val);

	if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path)
		return -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, val, len) != (ssize_t)len)
		return errno ? -errno : -EIO;
	return 0;
}

static ssize_t read_str(const char *path, char *buf, size_t len)
{
	cleanup_fd int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;

	if (fd < 0)
		return -errno;
	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, len - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	return (ssize_t)got;
}

/* out = a + b (b "/" counts as empty); false when it does not fit. */
static bool join(char *out, size_t len, const char *a, const char *b)
{
	int n = snprintf(out, len, "%s%s", a, strcmp(b, "/") ? b : "");
	if (n < 0 || (size_t)n >= len) {
		out[0] = '\0';
		return false;
	}
	return true;
}

/* Reads /proc/self/mountinfo and /proc/self/cgroup into w. */
static void cg_locate(struct cg_where *w)
{
	char mnt_v2[PATH_MAX] = "", mnt_v1[SB_CG_N][PATH_MAX];
	char line[4096];
	FILE *f;

	memset(w, 0, sizeof *w);
	memset(mnt_v1, 0, sizeof mnt_v1);
	if ((f = fopen(fixture ? fixture->mountinfo : "/proc/self/mountinfo", "re"))) {
		while (fgets(line, sizeof line, f)) {
			/* id parent maj:min root mountpoint opts... - fstype source superopts */
			char root[PATH_MAX], mp[PATH_MAX];
			char *dash = strstr(line, " - ");
			if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", root, mp) != 2)
				continue;
			char fstype[32], src[256], sopts[1024];
			if (sscanf(dash + 3, "%31s %255s %1023s", fstype, src, sopts) != 3)
				continue;
			if (strcmp(root, "/") != 0)
				continue; /* a bind of a sub-tree: paths would not line up */
			if (strcmp(fstype, "cgroup2") == 0 && !mnt_v2[0]) {
				util_strlcpy(mnt_v2, mp, sizeof mnt_v2);
			} else if (strcmp(fstype, "cgroup") == 0) {
				for (int c = 0; c < SB_CG_N; c++) {
					char *tok, *save = NULL;
					char copy[1024];
					util_strlcpy(copy, sopts, sizeof copy);
					for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
						if (strcmp(tok, ctrl_v1[c]) == 0 && !mnt_v1[c][0])
							util_strlcpy(mnt_v1[c], mp, sizeof mnt_v1[c]);
				}
			}
		}
		fclose(f);
	}
	if ((f = fopen(fixture ? fixture->cgroup : "/proc/self/cgroup", "re"))) {
		while (fgets(line, sizeof line, f)) {
			char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
			if (!c2)
				continue;
			*c1 = *c2 = '\0';
			char *path = c2 + 1;
			path[strcspn(path, "\n")] = '\0';
			if (strcmp(line, "0") == 0 && c1[1] == '\0') {
				if (mnt_v2[0])
					join(w->v2, sizeof w->v2, mnt_v2, path);
				continue;
			}
			char *tok, *save = NULL;
			for (tok = strtok_r(c1 + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
				for (int c = 0; c < SB_CG_N; c++)
					if (strcmp(tok, ctrl_v1[c]) == 0 && mnt_v1[c][0])
						join(w->v1[c], sizeof w->v1[c], mnt_v1[c], path);
		}
		fclose(f);
	}
}

/* True when `ctrl` is listed in the v2 cgroup's subtree_control (children may use it). */
static bool v2_has(const char *dir, const char *ctrl)
{
	char path[PATH_MAX + 32], buf[512];
	snprintf(path, sizeof path, "%s/cgroup.subtree_control", dir);
	if (read_str(path, buf, sizeof buf) < 0)
		return false;
	for (char *tok = strtok(buf, " \n"); tok; tok = strtok(NULL, " \n"))
		if (strcmp(tok, ctrl) == 0)
			return true;
	return false;
}

static bool wanted(const struct sb_limits *lim, int c)
{
	switch (c) {
	case SB_CG_MEMORY: return lim->memory_bytes != 0;
	case SB_CG_PIDS: return lim->pids != 0;
	case SB_CG_CPU: return lim->cpu_millicores != 0;
	case SB_CG_IO: return lim->n_io != 0;
	}
	return false;
}

static int make_dir(const char *base, const char *id, char **out)
{
	char *p = NULL;
	if (asprintf(&p, "%s/sluice-%s", base, id) < 0)
		return -ENOMEM;
	if (cg_mkdir(p, 0755) < 0) {
		int e = errno;
		free(p);
		return -e;
	}
	*out = p;
	return 0;
}

static int set_limits_v2(const char *dir, const struct sb_limits *lim, bool *done, char *err, size_t errlen)
{
	char v[128];
	int r;

	if (done[SB_CG_MEMORY]) {
		snprintf(v, sizeof v, "%" PRIu64, lim->memory_bytes);
		if ((r = write_str(dir, "memory.max", v)) < 0)
			goto fail;
		write_str(dir, "memory.swap.max", "0"); /* absent without swap accounting */
		/* One OOM kill takes the whole session, so no half-dead build lingers. */
		write_str(dir, "memory.oom.group", "1");
	}
	if (done[SB_CG_PIDS]) {
		snprintf(v, sizeof v, "%" PRIu64, lim->pids);
		if ((r = write_str(dir, "pids.max", v)) < 0)
			goto fail;
	}
	if (done[SB_CG_CPU]) {
		snprintf(v, sizeof v, "%" PRIu64 " 100000", lim->cpu_millicores * 100);
		if ((r = write_str(dir, "cpu.max", v)) < 0)
			goto fail;
	}
	if (done[SB_CG_IO]) {
		for (size_t i = 0; i < lim->n_io; i++) {
			char rb[32] = "max", wb[32] = "max";
			if (lim->io[i].read_bps)
				snprintf(rb, sizeof rb, "%" PRIu64, lim->io[i].read_bps);
			if (lim->io[i].write_bps)
				snprintf(wb, sizeof wb, "%" PRIu64, lim->io[i].write_bps);
			snprintf(v, sizeof v, "%u:%u rbps=%s wbps=%s", lim->io[i].maj, lim->io[i].min, rb, wb);
			if ((r = write_str(dir, "io.max", v)) < 0)
				goto fail;
		}
	}
	return 0;
fail:
	snprintf(err, errlen, "cannot set a cgroup v2 limit in %s: %s", dir, strerror(-r));
	return r;
}

static int set_limit_v1(int c, const char *dir, const struct sb_limits *lim, char *err, size_t errlen)
{
	char v[128];
	int r = 0;
	const char *file = "";

	switch (c) {
	case SB_CG_MEMORY:
		snprintf(v, sizeof v, "%" PRIu64, lim->memory_bytes);
		file = "memory.limit_in_bytes";
		if ((r = write_str(dir, file, v)) < 0)
			break;
		/* With swap accounting, cap memory+swap too so the bomb cannot page out instead. */
		write_str(dir, "memory.memsw.limit_in_bytes", v);
		break;
	case SB_CG_PIDS:
		snprintf(v, sizeof v, "%" PRIu64, lim->pids);
		file = "pids.max";
		r = write_str(dir, file, v);
		break;
	case SB_CG_CPU:
		file = "cpu.cfs_period_us";
		if ((r = write_str(dir, file, "100000")) < 0)
			break;
		snprintf(v, sizeof v, "%" PRIu64, lim->cpu_millicores * 100);
		file = "cpu.cfs_quota_us";
		r = write_str(dir, file, v);
		break;
	case SB_CG_IO:
		for (size_t i = 0; i < lim->n_io && r == 0; i++) {
			if (lim->io[i].read_bps) {
				snprintf(v, sizeof v, "%u:%u %" PRIu64, lim->io[i].maj, lim->io[i].min,
				         lim->io[i].read_bps);
				file = "blkio.throttle.read_bps_device";
				if ((r = write_str(dir, file, v)) < 0)
					break;
			}
			if (lim->io[i].write_bps) {
				snprintf(v, sizeof v, "%u:%u %" PRIu64, lim->io[i].maj, lim->io[i].min,
				         lim->io[i].write_bps);
				file = "blkio.throttle.write_bps_device";
				r = write_str(dir, file, v);
			}
		}
		break;
	}
	if (r < 0)
		snprintf(err, errlen, "cannot set %s/%s: %s", dir, file, strerror(-r));
	return r;
}

int sb_cgroup_new(const struct sb_limits *lim, const char *id, bool privileged, struct sb_cgroup **out, char *err,
                  size_t errlen)
{
	struct cg_where w;
	struct sb_cgroup *cg = calloc(1, sizeof *cg);
	bool on_v2[SB_CG_N] = {false};
	bool any_wanted = false;
	int r = 0;

	*out = NULL;
	if (!cg)
		return -ENOMEM;
	for (int c = 0; c < SB_CG_N; c++)
		any_wanted |= wanted(lim, c);
	cg_locate(&w);

	/* The v2 cgroup: for its controllers, and for cgroup.kill. Unprivileged users only get one
	 * where their cgroup was delegated to them (mkdir fails with EACCES otherwise). */
	if (w.v2[0] && (privileged || any_wanted)) {
		r = make_dir(w.v2, id, &cg->v2);
		if (r < 0 && (r != -EACCES && r != -EPERM && r != -EROFS)) {
			snprintf(err, errlen, "cannot create a cgroup under %s: %s", w.v2, strerror(-r));
			goto out;
		}
		r = 0;
	}
	for (int c = 0; c < SB_CG_N; c++) {
		if (!wanted(lim, c))
			continue;
		if (cg->v2 && v2_has(w.v2, ctrl_v2[c])) {
			on_v2[c] = true;
			continue;
		}
		if (!w.v1[c][0]) {
			snprintf(err, errlen,
			         "the %s limit needs the '%s' cgroup controller, which is neither enabled for our "
			         "cgroup v2 (%s) nor mounted as cgroup v1",
			         c == SB_CG_IO ? "I/O" : ctrl_v2[c], ctrl_v2[c], w.v2[0] ? w.v2 : "not mounted");
			r = -ENOTSUP;
			goto out;
		}
		r = make_dir(w.v1[c], id, &cg->v1[c]);
		if (r < 0) {
			snprintf(err, errlen, "cannot create a cgroup under %s: %s%s", w.v1[c], strerror(-r),
			         privileged ? "" : " (resource limits need root or a delegated cgroup)");
			goto out;
		}
		if ((r = set_limit_v1(c, cg->v1[c], lim, err, errlen)) < 0)
			goto out;
	}
	if (cg->v2 && (r = set_limits_v2(cg->v2, lim, on_v2, err, errlen)) < 0)
		goto out;
	*out = steal_pointer(&cg);
out:
	sb_cgroup_free(cg);
	return r;
}

bool sb_cgroup_active(const struct sb_cgroup *cg)
{
	if (!cg)
		return false;
	if (cg->v2)
		return true;
	for (int c = 0; c < SB_CG_N; c++)
		if (cg->v1[c])
			return true;
	return false;
}

int sb_cgroup_v2_fd(const struct sb_cgroup *cg)
{
	if (!cg || !cg->v2)
		return -1;
	return open(cg->v2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

int sb_cgroup_attach(struct sb_cgroup *cg, pid_t pid, bool v2_done, char *err, size_t errlen)
{
	char v[32];
	int r;

	snprintf(v, sizeof v, "%d", (int)pid);
	if (cg->v2 && !v2_done && (r = write_str(cg->v2, "cgroup.procs", v)) < 0) {
		snprintf(err, errlen, "cannot move the session into %s: %s", cg->v2, strerror(-r));
		return r;
	}
	for (int c = 0; c < SB_CG_N; c++) {
		if (cg->v1[c] && (r = write_str(cg->v1[c], "cgroup.procs", v)) < 0) {
			snprintf(err, errlen, "cannot move the session into %s: %s", cg->v1[c], strerror(-r));
			return r;
		}
	}
	return 0;
}

/* Kills every process listed in DIR/cgroup.procs; returns how many were listed. */
static int kill_listed(const char *dir)
{
	char path[PATH_MAX + 32];
	FILE *f;
	int n = 0, pid;

	snprintf(path, sizeof path, "%s/cgroup.procs", dir);
	if (!(f = fopen(path, "re")))
		return 0;
	while (fscanf(f, "%d", &pid) == 1) {
		if (pid > 1 && kill(pid, SIGKILL) == 0)
			n++;
	}
	fclose(f);
	return n;
}

void sb_cgroup_kill_all(struct sb_cgroup *cg)
{
	if (!cg)
		return;
	if (cg->v2) {
		/* Usually the pid namespace took everything with it: cgroup.events says so cheaply. */
		char path[PATH_MAX + 32], buf[256];
		snprintf(path, sizeof path, "%s/cgroup.events", cg->v2);
		if (read_str(path, buf, sizeof buf) > 0 && strstr(buf, "populated 0"))
			return;
		if (write_str(cg->v2, "cgroup.kill", "1") == 0)
			return;
	}
	/* v1 (or a kernel without cgroup.kill): kill what is listed until nothing is. A process
	 * forking in a loop cannot outrun this for long: the pid namespace is already gone by the
	 * time we get here in the normal path, so this only catches stragglers. */
	for (int round = 0; round < 100; round++) {
		int n = 0;
		if (cg->v2)
			n += kill_listed(cg->v2);
		for (int c = 0; c < SB_CG_N; c++)
			if (cg->v1[c])
				n += kill_listed(cg->v1[c]);
		if (n == 0)
			break;
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

static void remove_dir(const char *dir)
{
	/* Killed tasks leave the cgroup asynchronously: retry briefly while it is still busy. */
	for (int i = 0; i < 500; i++) {
		if (cg_rmdir(dir) == 0 || errno == ENOENT)
			return;
		if (errno != EBUSY) {
			log_warn("cannot remove cgroup %s", dir);
			return;
		}
		struct timespec ts = {0, 2000000};
		nanosleep(&ts, NULL);
	}
	log_warnx("cgroup %s is still busy; left behind", dir);
}

void sb_cgroup_free(struct sb_cgroup *cg)
{
	if (!cg)
		return;
	sb_cgroup_kill_all(cg);
	if (cg->v2)
		remove_dir(cg->v2);
	free(cg->v2);
	for (int c = 0; c < SB_CG_N; c++) {
		if (cg->v1[c])
			remove_dir(cg->v1[c]);
		free(cg->v1[c]);
	}
	free(cg);
}

int sb_cgroup_reap(const char *id)
{
	struct cg_where w;
	char path[PATH_MAX + 64];
	int r = 0;

	cg_locate(&w);
	for (int c = -1; c < SB_CG_N; c++) {
		const char *base = c < 0 ? w.v2 : w.v1[c];
		if (!base[0])
			continue;
		snprintf(path, sizeof path, "%s/sluice-%s", base, id);
		if (c < 0)
			write_str(path, "cgroup.kill", "1"); /* nothing should be left; make sure */
		/* EBUSY: a task of the dead session is still a zombie nobody reaped yet. */
		if (cg_rmdir(path) < 0 && errno != ENOENT)
			r = -errno;
	}
	return r;
}
