/* `sluice run --sandbox-type container --image IMAGE` and `--sandbox-type devcontainer`: the command
 * runs in a Podman container, inside the same session as the local sandbox (session.c: session
 * directory, cgroup with the limits, network namespace wired by netd, overlay and --save), of which
 * this file is pid 1. It runs as root (a root launch only) in the session's fresh mount, pid and
 * network namespaces, and:
 *
 *  - mounts what the container gets beneath SESSION/ctr/root (a tmpfs): the project as in local mode
 *    (overlay over the bind that binds.c opened and checked once, or read-only), and --bind/--ro-bind
 *    sources (refused when they are or lie in a masked path); these mounts exist in this mount
 *    namespace only and vanish with it;
 *  - gives Podman a store of its own in SESSION/ctr (storage.conf, containers.conf) on the session's
 *    scratch space (a tmpfs of --disk's size over the session directory, in this mount namespace
 *    only), with the user's store as a read-only additional image store, so that the container, its
 *    layer, what a devcontainer builds and its volumes never touch the user's store and vanish with
 *    the namespace; images are never pulled;
 *  - runs `podman run --network host`: host is this pid 1's network namespace, the session's (only lo
 *    without --allow-network), with the session's resolv.conf bound over /etc/resolv.conf here;
 *    --cgroups disabled keeps conmon and the container in the session cgroup, whose limits
 *    (--memory, --pids, --cpu, --io-*) therefore hold for everything Podman starts;
 *  - maps exactly one uid into the container, the session's unprivileged uid (ns.c), as uid 0 or as
 *    remoteUser's uid, with no_new_privs: the command never runs as the host's root.
 *
 * When this process dies (the command ended, or the launcher was killed: parent-death signal), the
 * kernel kills everything in its pid namespace, Podman, conmon and the container included. */
#include "session.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define SB_CTR_DEFAULT_GRAPH "/var/lib/containers/storage"

/* The user's image store (root's: the container types run for root only). */
struct ctr_store {
	char graph[PATH_MAX]; /* graphroot */
	char driver[32];      /* storage driver */
	char conf[PATH_MAX];  /* the file they came from, or "" (defaults) */
};

/* Reads `graphroot` and `driver` of the [storage] table of a containers-storage.conf: a line-based
 * reading of the two keys (TOML basic strings without escapes), enough for the file an administrator
 * writes; anything else in the file is Podman's business. -ENOENT when the file does not exist. */
static int read_storage_conf(const char *path, struct ctr_store *st, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	char line[PATH_MAX + 64];
	bool in_storage = false;
	unsigned lineno = 0;
	int r = 0;

	if (!f)
		return errno == ENOENT ? -ENOENT : sb_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
	util_strlcpy(st->conf, path, sizeof st->conf);
	while (fgets(line, sizeof line, f)) {
		lineno++;
		char *p = line + strspn(line, " \t");
		p[strcspn(p, "\r\n")] = '\0';
		if (*p == '[') {
			in_storage = strncmp(p, "[storage]", 9) == 0 && p[9 + strspn(p + 9, " \t")] == '\0';
			continue;
		}
		if (!in_storage)
			continue;
		char *key = p, *eq = strchr(p, '=');
		size_t kl = strcspn(key, " \t=");
		if (!eq || kl == 0)
			continue;
		char *v = eq + 1 + strspn(eq + 1, " \t");
		char *field;
		size_t flen;
		if (kl == 9 && strncmp(key, "graphroot", 9) == 0) {
			field = st->graph;
			flen = sizeof st->graph;
		} else if (kl == 6 && strncmp(key, "driver", 6) == 0) {
			field = st->driver;
			flen = sizeof st->driver;
		} else {
			continue;
		}
		char *end = *v == '"' ? strchr(v + 1, '"') : NULL;
		if (!end || strchr(v + 1, '\\') || (size_t)(end - v - 1) >= flen) {
			r = sb_errc(err, errlen, EINVAL, "%s:%u: %.*s: want a plain \"quoted\" value", path, lineno,
			            (int)kl, key);
			break;
		}
		memcpy(field, v + 1, (size_t)(end - v - 1));
		field[end - v - 1] = '\0';
	}
	fclose(f);
	return r;
}

/* Where the user's images are: $CONTAINERS_STORAGE_CONF, else /etc/containers/storage.conf, else
 * /usr/share/containers/storage.conf (Podman's order), else Podman's defaults. */
static int user_store(struct ctr_store *st, char *err, size_t errlen)
{
	static const char *const files[] = {"/etc/containers/storage.conf", "/usr/share/containers/storage.conf"};
	const char *env = getenv("CONTAINERS_STORAGE_CONF");
	int r = -ENOENT;

	memset(st, 0, sizeof *st);
	if (env && *env) {
		if ((r = read_storage_conf(env, st, err, errlen)) == -ENOENT)
			return sb_errc(err, errlen, ENOENT, "CONTAINERS_STORAGE_CONF=%s: no such file", env);
	}
	for (size_t i = 0; r == -ENOENT && i < sizeof files / sizeof files[0]; i++)
		r = read_storage_conf(files[i], st, err, errlen);
	if (r < 0 && r != -ENOENT)
		return r;
	if (!st->graph[0])
		util_strlcpy(st->graph, SB_CTR_DEFAULT_GRAPH, sizeof st->graph);
	if (!st->driver[0])
		util_strlcpy(st->driver, "overlay", sizeof st->driver);
	if (st->graph[0] != '/' || strpbrk(st->graph, "\"\n") ||
	    strspn(st->driver, "abcdefghijklmnopqrstuvwxyz0123456789-_") != strlen(st->driver))
		return sb_errc(err, errlen, EINVAL, "%s: graphroot must be an absolute path and driver a plain name",
		               st->conf[0] ? st->conf : "containers-storage.conf");
	return 0;
}

int sb_container_check(const struct sb_config *cfg, char *err, size_t errlen)
{
	struct ctr_store st;
	cleanup_free char *podman = sb_find_program("podman");
	const char *type = cfg->type == SB_TYPE_DEVCONTAINER ? "devcontainer" : "container";

	if (!podman)
		return sb_errc(err, errlen, ENOENT,
		               "--sandbox-type %s: podman is not installed (Debian/Ubuntu: `sudo apt install podman "
		               "crun`), or use --sandbox-type local",
		               type);
	if (geteuid() != 0)
		return sb_errc(err, errlen, EPERM,
		               "--sandbox-type %s needs root (Podman joins the session's network namespace and maps "
		               "the session's uid); as a user, run the local sandbox with --allow-containers, which "
		               "gives the command rootless Podman inside",
		               type);
	return user_store(&st, err, errlen);
}

/* ---- pid 1 ---- */

static int write_text(const char *dir, const char *name, const char *text, char *err, size_t errlen)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	cleanup_fd int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	size_t len = strlen(text);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len)
		return sb_err(err, errlen, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
	return 0;
}

/* SESSION/ctr (in the scratch space): Podman's configuration, store, run and temporary directories. */
static int podman_files(const struct sb_session *s, const struct ctr_store *st, char *dir, size_t dirlen, char *err,
                        size_t errlen)
{
	static const char *const sub[] = {"graph", "run", "tmp", "home", "root"};
	char path[PATH_MAX], *text = NULL;
	int r;

	if ((size_t)snprintf(dir, dirlen, "%s/ctr", s->dir) >= dirlen)
		return sb_errc(err, errlen, ENAMETOOLONG, "session directory path too long");
	if (mkdir(dir, 0700) < 0)
		return sb_err(err, errlen, "cannot create %s: %s", dir, strerror(errno));
	for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, sub[i]);
		if (mkdir(path, 0700) < 0)
			return sb_err(err, errlen, "cannot create %s: %s", path, strerror(errno));
	}
	/* The user's store is read only (an additional image store), and only when it exists. */
	struct stat sst;
	bool have_user = stat(st->graph, &sst) == 0 && S_ISDIR(sst.st_mode);
	if (asprintf(&text,
	             "# sluice session %s: this session's own store (removed with the session)\n"
	             "[storage]\ndriver = \"%s\"\ngraphroot = \"%s/graph\"\nrunroot = \"%s/run\"\n"
	             "[storage.options]\nadditionalimagestores = [%s%s%s]\n",
	             s->id, st->driver, dir, dir, have_user ? "\"" : "", have_user ? st->graph : "",
	             have_user ? "\"" : "") < 0)
		return -ENOMEM;
	r = write_text(dir, "storage.conf", text, err, errlen);
	free(text);
	if (r < 0)
		return r;
	/* No default sysctls: the container shares the session's network namespace, whose sysctls
	 * belong to the host's user namespace and cannot be written from the container's. No events
	 * log, and every temporary file in the session. */
	if (asprintf(&text,
	             "# sluice session %s\n[containers]\ndefault_sysctls = []\n"
	             "[engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"none\"\ntmp_dir = \"%s/tmp\"\n",
	             s->id, dir) < 0)
		return -ENOMEM;
	r = write_text(dir, "containers.conf", text, err, errlen);
	free(text);
	return r;
}

/* crun refuses to start on a hybrid cgroup layout (v1 controllers with a cgroup2 mount at
 * /sys/fs/cgroup/unified that has none). Podman runs with --cgroups disabled (the session cgroup
 * holds it), so the empty v2 mount is of no use to it: it is detached in this mount namespace. */
static void hide_hybrid_unified(void)
{
	struct statfs top, uni;
	if (statfs("/sys/fs/cgroup", &top) == 0 && top.f_type == TMPFS_MAGIC &&
	    statfs("/sys/fs/cgroup/unified", &uni) == 0 && uni.f_type == CGROUP2_SUPER_MAGIC &&
	    umount2("/sys/fs/cgroup/unified", MNT_DETACH) < 0)
		log_debug("cannot detach /sys/fs/cgroup/unified: %s", strerror(errno));
}

/* The mounts of this namespace: private, a /proc of the new pid namespace, the session's resolv.conf,
 * the sources opened and checked (binds.c), and the session's scratch space (scratch.c, --disk) over
 * the session directory: Podman's store, the container's layer and the project's changes live in it,
 * in this mount namespace only, and go with it. */
static int ns_mounts(struct sb_session *s, const struct sb_go *go, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int r;

	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return sb_err(err, errlen, "cannot make the mount namespace private: %s", strerror(errno));
	/* Podman reads /proc/PID of the processes it starts: a /proc of this pid namespace. */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return sb_err(err, errlen, "cannot mount /proc for the pid namespace: %s", strerror(errno));
	hide_hybrid_unified();
	if (go->have_resolv) {
		snprintf(path, sizeof path, "%s/resolv.conf", s->dir);
		if (mount(path, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0)
			return sb_err(err, errlen, "cannot bind the session's resolv.conf over /etc/resolv.conf: %s",
			              strerror(errno));
	}
	if ((r = sb_sources_prepare(s, err, errlen)) < 0)
		return r;
	cleanup_fd int hostroot = open(s->dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (hostroot < 0)
		return sb_err(err, errlen, "cannot open %s: %s", s->dir, strerror(errno));
	return sb_scratch_mount(s, hostroot, err, errlen);
}

/* The container's volumes beneath dir/root: the project (overlay with the scratch space's upper/ and
 * work/, or read-only) and the other sources, each at its place. */
static int volume_mounts(struct sb_session *s, const char *dir, char *err, size_t errlen)
{
	char path[PATH_MAX];
	cleanup_fd int rootfd = -1, upperfd = -1, workfd = -1;
	int r;

	snprintf(path, sizeof path, "%s/root", dir);
	if (mount("sluice-ctr", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") < 0)
		return sb_err(err, errlen, "cannot mount a tmpfs on %s: %s", path, strerror(errno));
	rootfd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rootfd < 0)
		return sb_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
	if (s->cfg->project_mode == SB_PROJECT_OVERLAY) {
		upperfd = openat(s->scratch_fd, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		workfd = openat(s->scratch_fd, "work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (upperfd < 0 || workfd < 0)
			return sb_err(err, errlen, "cannot open the overlay directories in the scratch space: %s",
			              strerror(errno));
	}
	if ((r = sb_overlay_mount_project(s, rootfd, upperfd, workfd, err, errlen)) < 0)
		return r;
	return sb_mounts_attach_sources(s, rootfd, err, errlen);
}

/* A growable argv of owned strings. */
static int argv_addf(struct sb_strv *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int argv_addf(struct sb_strv *v, const char *fmt, ...)
{
	char *str = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&str, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -ENOMEM;
	int r = sb_strv_add(v, str);
	free(str);
	return r;
}

/* Where the command starts in the container: the launcher's directory inside the project, mapped
 * to the workspace, else the workspace. */
static int ctr_workdir(const struct sb_session *s, const char *ws, char *out, size_t len)
{
	const char *proj = s->cfg->project_dir;
	size_t pl = strlen(proj);
	const char *rest = "";

	if (s->cwd && strncmp(s->cwd, proj, pl) == 0 && (s->cwd[pl] == '/' || s->cwd[pl] == '\0'))
		rest = s->cwd + pl;
	return (size_t)snprintf(out, len, "%s%s", ws, rest) >= len ? -ENAMETOOLONG : 0;
}

/* The user the command runs as: "UID[:GID]" (validated by devcontainer.c), default 0. */
static void ctr_user(const struct sb_ctr_spec *spec, unsigned *uid, unsigned *gid)
{
	*uid = *gid = 0;
	if (!spec->user)
		return;
	char *end;
	*uid = (unsigned)strtoul(spec->user, &end, 10);
	*gid = *end == ':' ? (unsigned)strtoul(end + 1, NULL, 10) : *uid;
}

/* podman run ...: everything comes from the checked configuration; the image name and the command
 * are single argv entries (no shell), options end before the image. */
static int run_argv(const struct sb_session *s, const struct sb_go *go, const char *dir, const char *image,
                    struct sb_strv *a)
{
	const struct sb_config *c = s->cfg;
	const struct sb_ctr_spec *spec = &c->ctr;
	const char *ws = spec->workspace ? spec->workspace : c->project_dir;
	char wd[PATH_MAX];
	unsigned uid, gid;
	int r = 0;

	ctr_user(spec, &uid, &gid);
	if (ctr_workdir(s, ws, wd, sizeof wd) < 0)
		return -ENAMETOOLONG;
	r |= sb_strv_add(a, "podman");
	r |= sb_strv_add(a, c->verbose > 1 ? "--log-level=info" : "--log-level=error");
	r |= sb_strv_add(a, "run");
	r |= sb_strv_add(a, "--rm");
	r |= sb_strv_add(a, "--pull=never");
	r |= sb_strv_add(a, "--cgroups=disabled");
	r |= sb_strv_add(a, "--network=host");
	r |= argv_addf(a, "--name=sluice-%s", s->id);
	r |= sb_strv_add(a, "--security-opt=no-new-privileges");
	r |= argv_addf(a, "--uidmap=%u:%u:1", uid, (unsigned)s->host_uid);
	r |= argv_addf(a, "--gidmap=%u:%u:1", gid, (unsigned)s->host_uid);
	/* always: an image's own USER would be an uid the container does not map */
	r |= argv_addf(a, "--user=%u:%u", uid, gid);
	r |= sb_strv_add(a, "--interactive");
	if (isatty(STDIN_FILENO))
		r |= sb_strv_add(a, "--tty");
	r |= sb_strv_add(a, "--entrypoint=[]");
	r |= argv_addf(a, "--workdir=%s", wd);
	/* The volumes: what ctr_mounts attached beneath dir/root, each at its place. */
	for (size_t i = 0; i < s->n_sources; i++) {
		const struct sb_source *src = &s->sources[i];
		if (src->tree < 0 && src->kind != SB_SRC_PROJECT)
			continue;
		bool project = src->kind == SB_SRC_PROJECT;
		bool ro = project ? c->project_mode == SB_PROJECT_RO : !src->rw;
		r |= argv_addf(a, "--mount=type=bind,source=%s/root%s,destination=%s%s", dir, src->dst,
		               project ? ws : src->dst, ro ? ",ro=true" : "");
	}
	for (size_t i = 0; i < spec->mounts.n; i++)
		r |= argv_addf(a, "--mount=%s", spec->mounts.v[i]);
	/* The sandbox's environment (the whitelist, --env, proxy variables, SLUICE_SESSION) less what
	 * describes the host (PATH, HOME, USER, LOGNAME: the image has its own), then containerEnv. */
	extern char **environ;
	char **env = sb_env_build(s, go, environ);
	if (!env)
		return -ENOMEM;
	static const char *const host_only[] = {"PATH=", "HOME=", "USER=", "LOGNAME="};
	for (char **e = env; *e; e++) {
		bool skip = false;
		for (size_t k = 0; k < sizeof host_only / sizeof host_only[0]; k++)
			skip |= strncmp(*e, host_only[k], strlen(host_only[k])) == 0;
		if (!skip)
			r |= argv_addf(a, "--env=%s", *e);
	}
	sb_env_free(env);
	for (size_t i = 0; i < spec->env.n; i++)
		r |= argv_addf(a, "--env=%s", spec->env.v[i]);
	if (spec->post_create)
		r |= argv_addf(a, "--env=SLUICE_POST_CREATE=%s", spec->post_create);
	r |= sb_strv_add(a, image);
	if (spec->post_create) {
		/* postCreateCommand first (its failure is the session's status), then the command. */
		r |= sb_strv_add(a, "/bin/sh");
		r |= sb_strv_add(a, "-c");
		r |= sb_strv_add(
		        a, "p=$SLUICE_POST_CREATE; unset SLUICE_POST_CREATE; /bin/sh -c \"$p\" || exit; exec \"$@\"");
		r |= sb_strv_add(a, "sluice-post-create");
	}
	for (size_t i = 0; s->argv[i]; i++)
		r |= sb_strv_add(a, s->argv[i]);
	return r ? -ENOMEM : 0;
}

struct ctr_exec {
	struct sb_session *s;
	const struct sb_go *go;
	const char *dir;        /* SESSION/ctr */
	const char *podman;     /* its path */
	const char *dockerfile; /* the checked copy of build.dockerfile (SESSION/ctr/Dockerfile), or NULL */
};

/* build.dockerfile comes from the repository and the build runs as root on the host's file system:
 * read it once beneath the project (no symlink followed), check it (sb_dockerfile_check) and write the
 * checked bytes to dir/Dockerfile, which is what Podman reads: a file changed after the check (another
 * session writing the project) is never built. out: that path. */
static int checked_dockerfile(const struct sb_session *s, const char *dir, char *out, size_t outlen, char *err,
                              size_t errlen)
{
	const struct sb_config *c = s->cfg;
	const char *df = c->ctr.dockerfile, *shown = c->ctr.source ? c->ctr.source : df;
	size_t pl = c->project_dir ? strlen(c->project_dir) : 0;
	cleanup_free char *text = NULL;
	struct stat st;
	ssize_t n;
	int r;

	if (!pl || strncmp(df, c->project_dir, pl) != 0 || df[pl] != '/')
		return sb_errc(err, errlen, EPERM, "%s: the Dockerfile %s is not inside the project", shown, df);
	cleanup_fd int proj = open(c->project_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (proj < 0)
		return sb_err(err, errlen, "cannot open the project %s: %s", c->project_dir, strerror(errno));
	cleanup_fd int fd = sb_open_beneath(proj, df + pl, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, err, errlen);
	if (fd < 0)
		return err[0] ? fd : sb_errc(err, errlen, -fd, "%s: %s", df, strerror(-fd));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SB_DOCKERFILE_MAX_BYTES)
		return sb_errc(err, errlen, EINVAL, "%s: not a regular file of at most %d bytes", df,
		               SB_DOCKERFILE_MAX_BYTES);
	if (!(text = malloc((size_t)st.st_size + 1)))
		return -ENOMEM;
	n = read(fd, text, (size_t)st.st_size + 1);
	if (n < 0 || n > st.st_size)
		return sb_errc(err, errlen, EIO, "%s: %s", df, n < 0 ? strerror(errno) : "changed while read");
	if ((r = sb_dockerfile_check(df, text, (size_t)n, err, errlen)) < 0)
		return r;
	text[n] = '\0';
	if ((size_t)snprintf(out, outlen, "%s/Dockerfile", dir) >= outlen)
		return sb_errc(err, errlen, ENAMETOOLONG, "session directory path too long");
	cleanup_fd int wfd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (wfd < 0 || write(wfd, text, (size_t)n) != n)
		return sb_err(err, errlen, "cannot write %s: %s", out, strerror(errno ? errno : EIO));
	return 0;
}

/* The environment Podman itself runs with: its configuration and directories in the session. */
static char **podman_env(const char *dir)
{
	static char *env[16];
	static char bufs[8][PATH_MAX + 32];
	size_t n = 0;
	const char *term = getenv("TERM");

	static char path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	env[n++] = path;
	snprintf(bufs[0], sizeof bufs[0], "CONTAINERS_CONF=%s/containers.conf", dir);
	snprintf(bufs[1], sizeof bufs[1], "CONTAINERS_STORAGE_CONF=%s/storage.conf", dir);
	snprintf(bufs[2], sizeof bufs[2], "HOME=%s/home", dir);
	snprintf(bufs[3], sizeof bufs[3], "XDG_CONFIG_HOME=%s/home", dir);
	snprintf(bufs[4], sizeof bufs[4], "TMPDIR=%s/tmp", dir);
	snprintf(bufs[5], sizeof bufs[5], "TERM=%s", term && strlen(term) < 64 ? term : "dumb");
	for (size_t i = 0; i < 6; i++)
		env[n++] = bufs[i];
	env[n] = NULL;
	return env;
}

/* Runs argv (Podman) and waits; its exit status, or 125 when it could not run. */
static int run_wait(const char *podman, char *const *argv, char **env)
{
	pid_t p = fork();
	int st;
	if (p < 0)
		return SB_EXIT_FAIL;
	if (p == 0) {
		execve(podman, argv, env);
		_exit(SB_EXIT_NOEXEC);
	}
	while (waitpid(p, &st, 0) < 0)
		if (errno != EINTR)
			return SB_EXIT_FAIL;
	return WIFEXITED(st) ? WEXITSTATUS(st) : SB_EXIT_FAIL;
}

/* The command sb_init_run forks: the devcontainer's build (when it has a Dockerfile), then podman run. */
static void exec_podman(void *p)
{
	struct ctr_exec *x = p;
	const struct sb_ctr_spec *spec = &x->s->cfg->ctr;
	struct sb_strv a = {0};
	char image[96];
	char **env = podman_env(x->dir);

	if (spec->dockerfile) {
		/* Built into the session's store: the image goes with the session. RUN steps run in the
		 * session's network, pid and mount namespaces, but as root of a rootful build container
		 * (Podman's default capabilities and seccomp profile): docs/sandbox.md says so. */
		snprintf(image, sizeof image, "localhost/sluice-build-%s", x->s->id);
		struct sb_strv b = {0};
		int r = 0;
		r |= sb_strv_add(&b, "podman");
		r |= sb_strv_add(&b, "--log-level=error");
		r |= sb_strv_add(&b, "build");
		r |= sb_strv_add(&b, "--pull=never");
		r |= sb_strv_add(&b, "--network=host");
		r |= sb_strv_add(&b, "--quiet");
		r |= sb_strv_add(&b, "--layers=false");
		r |= argv_addf(&b, "--file=%s", x->dockerfile);
		r |= argv_addf(&b, "--tag=%s", image);
		r |= sb_strv_add(&b, spec->context);
		if (r)
			_exit(SB_EXIT_FAIL);
		/* its image id on stdout is not the command's output */
		int saved = dup(STDOUT_FILENO);
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (saved < 0 || null < 0 || dup2(null, STDOUT_FILENO) < 0)
			_exit(SB_EXIT_FAIL);
		int st = run_wait(x->podman, b.v, env);
		if (dup2(saved, STDOUT_FILENO) < 0)
			_exit(SB_EXIT_FAIL);
		close(saved);
		close(null);
		if (st != 0) {
			fprintf(stderr, "sluice: %s: building %s failed (podman build: status %d)\n",
			        spec->source ? spec->source : "devcontainer", spec->dockerfile, st);
			_exit(SB_EXIT_FAIL);
		}
		sb_strv_clear(&b);
	} else {
		util_strlcpy(image, spec->image, sizeof image);
	}
	if (run_argv(x->s, x->go, x->dir, spec->dockerfile ? image : spec->image, &a) < 0) {
		fprintf(stderr, "sluice: cannot build the podman command line: out of memory or path too long\n");
		_exit(SB_EXIT_FAIL);
	}
	if (x->s->cfg->verbose) {
		fprintf(stderr, "sluice: container:");
		for (size_t i = 0; i < a.n; i++)
			fprintf(stderr, " %s", a.v[i]);
		fputc('\n', stderr);
	}
	execve(x->podman, a.v, env);
	fprintf(stderr, "sluice: cannot run %s: %s\n", x->podman, strerror(errno));
	_exit(SB_EXIT_NOEXEC);
}

void sb_container_main(struct sb_session *s)
{
	char err[SB_ERR_MAX] = "", dir[PATH_MAX], dockerfile[PATH_MAX];
	struct ctr_store st;
	struct sb_go go;
	int r;

	sb_contain_begin(s, &go);
	cleanup_free char *podman = sb_find_program("podman");
	if (!podman) {
		fprintf(stderr, "sluice: container: podman is not installed any more\n");
		_exit(SB_EXIT_FAIL);
	}
	/* the launcher keeps the scratch space (sb_scratch_send) to report on it and save from it */
	if ((r = user_store(&st, err, sizeof err)) < 0 || (r = ns_mounts(s, &go, err, sizeof err)) < 0 ||
	    (r = podman_files(s, &st, dir, sizeof dir, err, sizeof err)) < 0 ||
	    (r = volume_mounts(s, dir, err, sizeof err)) < 0 ||
	    (s->cfg->ctr.dockerfile &&
	     (r = checked_dockerfile(s, dir, dockerfile, sizeof dockerfile, err, sizeof err)) < 0) ||
	    (r = sb_scratch_send(s, err, sizeof err)) < 0 || (r = sb_close_fds_above(2, err, sizeof err)) < 0) {
		fprintf(stderr, "sluice: container: %s\n", err[0] ? err : strerror(-r));
		_exit(SB_EXIT_FAIL);
	}
	s->sync_fd = -1; /* closed with the others */
	struct ctr_exec x = {s, &go, dir, podman, s->cfg->ctr.dockerfile ? dockerfile : NULL};
	_exit(sb_init_run(exec_podman, &x, &s->saved_mask));
}
