/* The per-session runtime state shared by the launcher (outside) and the containment steps run in
 * the sandbox's first process (inside), and the prototypes of every containment step, grouped by
 * the file that implements it. Each step returns 0 or -errno and writes one line into err. */
#pragma once

#include "sandbox.h"

#include <signal.h>
#include <dirent.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#define SB_ID_LEN 17 /* 16 hex digits + NUL */

struct sb_cgroup;
struct sb_netsess;

/* A secret the sandbox must not see (masks.c), resolved on the host by the launcher. */
struct sb_mask {
	char *path; /* owned; where it really is on the host (symlinks resolved) */
	dev_t dev;  /* its identity, to recognise other spellings of it (binds.c) */
	ino_t ino;
	bool dir;
};

/* What the session may take of its user's per-user kernel limits (ulimits.c). */
#define SB_NS_LIMITS 12
#define SB_RLIMITS   4
struct sb_ulimits {
	long ns[SB_NS_LIMITS]; /* /proc/sys/user/max_* in the session's user namespace; -1: leave */
	rlim_t rl[SB_RLIMITS]; /* NPROC, MSGQUEUE, SIGPENDING, MEMLOCK (soft and hard); RLIM_INFINITY: leave */
};

/* A host path mounted into the sandbox (binds.c). */
enum sb_source_kind {
	SB_SRC_PROJECT,
	SB_SRC_HOME, /* unsafe profile, root launch with a remapped uid: root's home, idmapped, read-only */
	SB_SRC_WRITABLE,
	SB_SRC_PLUGIN,
	SB_SRC_BIND,
	SB_SRC_RO_BIND,
};
#define SB_SOURCES_MAX 128

struct sb_source {
	enum sb_source_kind kind;
	char *path;    /* owned; as configured */
	char *dst;     /* owned; where it appears in the sandbox (default: real) */
	char *real;    /* owned; what the path resolved to when it was opened, or NULL (not opened yet) */
	bool rw;       /* mounted read-write */
	bool literal;  /* no symlink may be followed on its path */
	bool optional; /* a missing path is skipped (plugin paths) */
	bool dir;      /* a directory (else a regular file) */
	int tree;      /* owned; the detached mount to attach, or -1 (not prepared, or skipped) */
};

/* What the launcher sends the sandbox's init once the outside is ready (fixed size, one write). */
struct sb_go {
	int32_t status;      /* 0 = continue; else -errno: the launcher failed, abort quietly */
	char proxy_url[128]; /* "http://GW:PORT" with --allow-network, else "" */
	char socks_url[128]; /* "socks5h://GW:PORT" when the gateway serves SOCKS5, else "" */
	uint8_t have_resolv; /* session dir holds resolv.conf to bind over /etc/resolv.conf */
	uint8_t have_ca;     /* session dir holds ca-bundle.crt (HTTPS inspection) to bind over the system bundle */
	char cred_env[1024]; /* "NAME=PLACEHOLDER\n"...: credentials' placeholders for the environment (inspection) */
	uint8_t cgroup_ns;   /* enter a cgroup namespace (after init was placed in its cgroups) */
	uint8_t net_late;    /* the network is being wired: a second go (its status and the proxy's
	                      * addresses) follows, and the command waits for it (sb_net_can_finish_late) */
};

struct sb_session {
	const struct sb_config *cfg; /* borrowed */
	char id[SB_ID_LEN];
	char *dir;                 /* owned; the session directory (upper/, resolv.conf, ...), or NULL for a
	                            * session that records nothing there (a lock file of its id instead) */
	char *anchor;              /* owned; where pid 1 stacks the scratch space and the new root in the
	                            * sandbox's mount namespace: the session directory, else its base */
	bool keep_dir;             /* --save: leave it for the user */
	bool userns;               /* cloned into a user namespace (the launcher is not root) */
	uid_t host_uid;            /* the host uid (and gid) the command runs as: the user's; for a root
	                            * launch a per-session unprivileged uid, or 0 with --keep-root-uid */
	int remap_userns;          /* owned; root launch: the user namespace owned by host_uid that the
	                            * command runs in (pid 1 enters it once the mounts are made), or -1 */
	struct sb_ulimits ulimits; /* computed by the launcher (ulimits.c) */
	bool protect_git_absent;   /* --project-mode rw: the project had no .git at start (protect.c) */
	struct sb_mask *masks;     /* owned array (masks.c): the masks that exist on the host */
	size_t n_masks;
	struct sb_strv mask_paths; /* every masked path as written and as resolved (masks.c) */
	struct sb_source *sources; /* owned array of SB_SOURCES_MAX (binds.c) */
	size_t n_sources;
	char *cwd;              /* owned; the working directory the command starts in */
	char *const *argv;      /* borrowed; the command */
	struct sb_cgroup *cg;   /* owned (launcher side) */
	struct sb_netsess *net; /* owned (launcher side) */
	pid_t init_pid;         /* the sandbox's pid 1, as seen by the launcher */
	int sync_fd;            /* owned; socketpair end (launcher's or init's) */
	int lock_fd;            /* owned; the session directory, flock'ed while the launcher lives */
	int scratch_fd;         /* owned; the session's scratch tmpfs (scratch.c), or -1 */
	int64_t started_ns;     /* CLOCK_REALTIME when the launcher began (writes.c) */
	int tty_fd;             /* borrowed (stdin) while the sandbox owns the terminal, else -1 */
	bool born_in_cgroup;    /* init was cloned straight into the v2 session cgroup */
	int fsgate_fd;          /* owned; --fs ask: socketpair end to the gate (launcher: none; init: its end) */
	pid_t fsgate_pid;       /* --fs ask: the gate process (launcher side), or -1 */
	sigset_t saved_mask;    /* the launcher's signal mask before it blocked the forwarded set */
	int vm_tap;             /* owned (pid 1 and the command); --sandbox-type vm: the guest's tap, or -1 */
	char vm_net[64];        /* --sandbox-type vm: "ADDR/PREFIX,GW" the guest takes over, or "" */
};

/* ---- err.c ---- */
/* Writes the message and returns -errno (errno as it was on entry). */
int sb_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Writes the message and returns -code. */
int sb_errc(char *err, size_t errlen, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- session.c: the launcher side ---- */
/* Runs the whole session; returns the exit status for the launcher. */
int sb_session_run(const struct sb_config *cfg, char *const *argv);

/* ---- contain.c: the ordered containment steps inside; never returns ---- */
__attribute__((noreturn)) void sb_contain_main(struct sb_session *s);
/* The first steps of any pid 1: die with the launcher, a process group of its own, the launcher's
 * "go" (into go), lo up. A failure ends the process (status 125). */
void sb_contain_begin(struct sb_session *s, struct sb_go *go);

/* ---- ns.c ---- */
int sb_ns_clone_flags(const struct sb_session *s);
int sb_ns_write_idmaps(pid_t pid, uid_t in_uid, uid_t out_uid, gid_t in_gid, gid_t out_gid, char *err, size_t errlen);
/* The unprivileged host uid (and gid) a root launch runs session id as (config root_uid_range). */
uid_t sb_ns_pick_uid(const struct sb_config *c, const char *id);
/* Launcher (root): a user namespace owned by uid, with 0 inside mapped to it and the session's
 * per-user limits set in it; returns its fd. */
int sb_ns_make_userns(uid_t uid, const struct sb_ulimits *u, char *err, size_t errlen);
/* pid 1 (root): drops root's groups and enters that namespace as its uid 0. */
int sb_ns_enter_userns(int fd, char *err, size_t errlen);
int sb_ns_set_hostname(const char *name, char *err, size_t errlen);
int sb_ns_loopback_up(char *err, size_t errlen);
int sb_ns_enter_cgroup_ns(char *err, size_t errlen);

/* ---- ulimits.c ---- */
/* Launcher: half of its own per-user limits (see ulimits.c). */
/* nested (--allow-containers): a bounded number of namespaces instead of none. */
void sb_ulimits_compute(struct sb_ulimits *u, bool nested);
/* As root of the session's user namespace: writes its /proc/sys/user maxima. */
int sb_ulimits_apply_ns(const struct sb_ulimits *u, char *err, size_t errlen);
/* pid 1: lowers its rlimits (the command inherits them). */
int sb_ulimits_apply_rlimits(const struct sb_ulimits *u, char *err, size_t errlen);

/* ---- protect.c ---- */
/* Whether a change to relpath (relative to the project) is a protected one (defaults and config). */
bool sb_protect_match(const struct sb_config *c, const char *relpath);
/* Launcher, --project-mode rw: makes an empty .sluice/ when there is none, notes whether .git exists. */
int sb_protect_rw_begin(struct sb_session *s, char *err, size_t errlen);
/* Launcher, --project-mode rw, at exit: a .git the session created is renamed aside, with a warning. */
void sb_protect_rw_end(const struct sb_session *s);
/* pid 1, --project-mode rw: binds the project's .sluice and .git read-only over themselves. */
int sb_protect_mount_rw(const struct sb_session *s, int rootfd, char *err, size_t errlen);
/* -EILSEQ (and the path in bad) when a name beneath dirfd holds a control character. */
int sb_protect_check_names(int dirfd, const char *relpath, char *bad, size_t badlen);
/* Copies a `diff -ruN --no-dereference a b` from in (closed) into plain and prot, each file's part by
 * whether its path is protected; adds the protected paths to protected_paths. */
int sb_protect_split_patch(const struct sb_config *c, int in, FILE *plain, FILE *prot, struct sb_strv *protected_paths);

/* ---- masks.c ---- */
/* Launcher: resolves the mask list on the host into s->masks. */
int sb_masks_resolve(struct sb_session *s, char *err, size_t errlen);
/* Whether a mask lies strictly beneath the host directory dir (a bind of it would show the mask). */
bool sb_masks_below(const struct sb_session *s, const char *dir);
/* Init: replaces what is mounted at dst beneath rootfd (the host directory hpath) by a read-only view
 * without the masked names, also for names that appear on the host later (see masks.c). */
int sb_masks_view(const struct sb_session *s, int rootfd, const char *hpath, const char *dst, char *err,
                  size_t errlen);
/* Init: covers every mask visible beneath rootfd (call last, after every other mount). */
int sb_masks_apply(const struct sb_session *s, int rootfd, char *err, size_t errlen);
void sb_masks_free(struct sb_session *s);

/* ---- binds.c ---- */
/* Lists the host paths to mount (project, carve-outs, plugin paths, binds) in s->sources. */
int sb_sources_init(struct sb_session *s, char *err, size_t errlen);
/* Init: opens each source once, checks it on the descriptor (refusing one that is or lies in a
 * masked path unless the organisation allows it) and clones it into a detached tree from that
 * descriptor, idmapped through s->remap_userns when there is one. */
int sb_sources_prepare(struct sb_session *s, char *err, size_t errlen);
void sb_sources_free(struct sb_session *s);

/* ---- mounts.c ---- */
/* Builds the sandbox's filesystem under the session's root directory and pivots into it. */
int sb_mounts_build(struct sb_session *s, const struct sb_go *go, char *err, size_t errlen);
/* Attaches every prepared source but the project and the home (mounted by their own steps) at its
 * destination beneath rootfd (also the container backend's volumes: container.c). */
int sb_mounts_attach_sources(const struct sb_session *s, int rootfd, char *err, size_t errlen);

/* ---- trust.c: HTTPS inspection's CA in the sandbox's trust ---- */
#define SB_CA_BUNDLE_PATH "/etc/ssl/certs/ca-certificates.crt"
/* Launcher: writes SESSION/ca-bundle.crt, the host's bundle plus ca_pem. */
int sb_ca_bundle_write(const struct sb_session *s, const char *ca_pem, char *err, size_t errlen);
/* Init, building the root: binds bundlefd (SESSION/ca-bundle.crt) read-only over SB_CA_BUNDLE_PATH. */
int sb_ca_bundle_mount(int bundlefd, int rootfd, char *err, size_t errlen);
/* Safe path helpers (also used by overlay.c): open PATH beneath dirfd without following any
 * symlink or crossing into /proc magic links. */
int sb_open_beneath(int dirfd, const char *path, int flags, char *err, size_t errlen);
/* Creates PATH beneath rootfd (a directory, or the last component as an empty file) without
 * following symlinks; returns an O_PATH fd on it. */
int sb_mkpath(int rootfd, const char *path, bool dir, char *err, size_t errlen);
/* Attaches the detached mount tree onto the target fd. */
int sb_attach(int tree, int target, const char *what, char *err, size_t errlen);
int sb_set_attr(int tree, uint64_t set, bool recursive, const char *what, char *err, size_t errlen);
/* A detached fresh file system of `type` with string options (NULL-terminated key, value pairs). */
int sb_new_fs(const char *type, const char *const *opts, uint64_t attrs, char *err, size_t errlen);

/* ---- overlay.c ---- */
int sb_session_dir_create(struct sb_session *s, char *err, size_t errlen);
void sb_session_dir_remove(struct sb_session *s);
/* Mounts the project at its place under rootfd (overlay/rw/ro); upperfd/workfd: the session's
 * upper/ and work/ directories (overlay mode), opened before the new root covered them. */
int sb_overlay_mount_project(const struct sb_session *s, int rootfd, int upperfd, int workfd, char *err, size_t errlen);
/* After the session: writes SESSION/changes.patch (SB_SAVE_PATCH) or applies the upper dir onto
 * the project (SB_SAVE_APPLY). */
int sb_overlay_save(struct sb_session *s, char *err, size_t errlen);
/* A DIR on a duplicate of fd (which stays open), or NULL with errno set. */
DIR *sb_opendir_dup(int fd);

/* Copies upfd/name (a regular file) to projfd/name, replacing what is there, without set-id bits. */
int sb_overlay_copy_file(int upfd, int projfd, const char *name, mode_t mode);

/* ---- scratch.c ---- */
/* The scratch space's size (--disk, limits.disk, or the default) and its inodes. */
uint64_t sb_scratch_size(const struct sb_config *c);
uint64_t sb_scratch_inodes(uint64_t size);
/* pid 1: makes the session's limited tmpfs (upper/ and work/ in overlay mode) on hostroot, into
 * s->scratch_fd. */
int sb_scratch_mount(struct sb_session *s, int hostroot, char *err, size_t errlen);
/* pid 1: a directory `name` of the scratch space (mode, owner or -1) mounted at dst beneath dirfd. */
int sb_scratch_at(const struct sb_session *s, const char *name, int dirfd, const char *dst, mode_t mode,
                  long long owner, uint64_t attrs, char *err, size_t errlen);
/* pid 1 -> launcher over s->sync_fd: the scratch space's descriptor. */
int sb_scratch_send(struct sb_session *s, char *err, size_t errlen);
/* Launcher: receives it into s->scratch_fd (stays -1 when pid 1 failed before sending). */
void sb_scratch_recv(struct sb_session *s);
/* Launcher, at exit: says (unless quiet) whether the limit was reached; true when it was. */
bool sb_scratch_report(const struct sb_session *s);
/* Launcher, at exit (--save, --apply): copies the scratch space's upper/ into SESSION/upper. */
int sb_scratch_take_upper(struct sb_session *s, char *err, size_t errlen);

/* ---- writes.c ---- */
int64_t sb_writes_now(bool coarse);
/* Launcher, after a session with a writable project or --bind ended: appends its window to the
 * user's record. */
void sb_writes_record(const struct sb_session *s, int64_t start, int64_t end);
/* Before a session: -EPERM (and a line in err) when the project's or the user's policy file was
 * changed while an earlier session could write it. */
int sb_writes_check(const struct sb_config *c, char *err, size_t errlen);
/* 1 when a record line of buf (untrusted) says file was writable by a session at ctime_ns (its id in
 * id), else 0. */
int sb_writes_match(const char *buf, size_t len, const char *file, int64_t ctime_ns, char *id, size_t idlen);

/* ---- firejail.c ---- */
/* --sandbox-type firejail: runs argv under firejail in a netd-wired namespace; the exit status. */
int sb_firejail_run(const struct sb_config *cfg, char *const *argv);

/* ---- kvm.c ---- */
/* Launcher, --allow-kvm: /dev/kvm exists and (unprivileged launch) the user may open it. who: the
 * option that needs it, for the message. */
int sb_kvm_check(const struct sb_config *c, const char *who, char *err, size_t errlen);
/* Init, while building /dev (devfd): the kvm node for the command's uid (see kvm.c). */
int sb_kvm_node(const struct sb_session *s, int devfd, char *err, size_t errlen);

/* ---- vm.c, vm-net.c, vm-run.c: --sandbox-type vm ---- */
#define SB_VM_QEMU   "qemu-system-x86_64"
#define SB_VM_TAP_FD 3 /* where the guest's tap sits in the command's process (contain.c, vm-run.c) */
/* Launcher: checks QEMU, KVM (unless --vm-accel tcg), finds the kernel, builds or reuses the cached
 * initramfs and binds both into the sandbox (read-only); sets allow_kvm. */
int sb_vm_prepare(struct sb_config *c, char *err, size_t errlen);
/* Pid 1, with --allow-network: moves the session's address from eth0 to the guest (bridge + tap). */
int sb_vm_net_setup(struct sb_session *s, char *err, size_t errlen);
/* The command's process: runs QEMU, relays the guest's output, exits with its command's status. */
__attribute__((noreturn)) void sb_vm_exec(const struct sb_session *s, char **env);

/* ---- nest.c: --allow-containers ---- */
/* pid 1, before the masks: with the flag, Podman's configuration in /run/sluice-containers and the
 * devices it needs; without it, the refusal over /usr/bin/podman and /usr/bin/buildah. */
int sb_nest_mounts(const struct sb_session *s, int rootfd, char *err, size_t errlen);

/* ---- container.c: --sandbox-type container|devcontainer ---- */
/* The session's pid 1 of a container session (root launch): mounts the project (overlay, rw or ro as
 * in local mode) and the binds where Podman can see them, then runs `podman run` (after `podman
 * build` for a devcontainer Dockerfile) with a per-session store in the session directory, in the
 * session's network namespace; exits with the container's status. Never returns. */
__attribute__((noreturn)) void sb_container_main(struct sb_session *s);
/* Launcher, before anything is made: podman is installed (else a one-line hint) and the user's image
 * store can be found. */
int sb_container_check(const struct sb_config *cfg, char *err, size_t errlen);

/* ---- devcontainer.c ---- */
/* Reads PROJECT/.devcontainer/devcontainer.json (else PROJECT/.devcontainer.json) into c->ctr (and
 * bind mounts inside the project into c->binds, read-only). Errors name file:line. */
int sb_devcontainer_load(struct sb_config *c, char *err, size_t errlen);
/* Parses a devcontainer.json text as if read from `name` for the project at project_dir (the fuzzed
 * entry point). Fills spec and adds read-only binds to c. */
int sb_devcontainer_parse(struct sb_config *c, const char *name, const char *text, size_t len, char *err,
                          size_t errlen);
#define SB_DOCKERFILE_MAX_BYTES (1024 * 1024)
/* Checks the text of a devcontainer's build.dockerfile (name: for messages) before a rootful build: no
 * RUN (nor ONBUILD RUN) may carry flags (--mount, --network, --security), which the build would apply
 * on the host. Continuations and the escape directive are read as the builder reads them. 0, or -errno
 * with "file:line: ..." in err (the fuzzed entry point). */
int sb_dockerfile_check(const char *name, const char *text, size_t len, char *err, size_t errlen);

/* ---- summary.c ---- */
/* The size of the audit log now (where this session's records will start), 0 when unreadable. */
long long sb_summary_mark(const char *log_path);
/* Prints the denials of session id found in log_path after offset `from` (nothing when none).
 * Returns 0 or -errno (the log cannot be read). */
int sb_summary_print(FILE *f, const char *id, const char *log_path, long long from);
struct audit_entry;
/* Calls fn once for each request of session id in log_path after offset `from` (or from the start
 * when the log was rotated or truncated since), with its final record (borrowed for the call): the
 * close record, or a decision that has none (common/audit_read.h, outcomes). Lines that are not
 * records are skipped. Returns 0 or -errno (the log cannot be read). */
int sb_summary_each(const char *id, const char *log_path, long long from,
                    void (*fn)(const struct audit_entry *rec, void *arg), void *arg);

/* ---- fsgate.c ---- */
/* Launcher, --fs ask: forks the gate (outside the sandbox) and keeps s->fsgate_fd for init. */
int sb_fsgate_start(struct sb_session *s, char *err, size_t errlen);
/* Launcher: stops the gate (after the sandbox is gone). */
void sb_fsgate_stop(struct sb_session *s);
/* Init: mounts the gate's FUSE file system (detached) and hands /dev/fuse to the gate; returns the
 * mount fd: the new root. */
int sb_fsgate_mount(struct sb_session *s, char *err, size_t errlen);
/* Init, --fs ask: the home as the gate shows it, under a writable layer in the scratch space (what the
 * command writes there is discarded with the session; what it reads outside the allow-list is asked
 * about). owner: the uid the writable layer belongs to, or -1 for the mounter. */
int sb_fsgate_home(const struct sb_session *s, int rootfd, long long owner, char *err, size_t errlen);
/* Init: the filesystem is built; from now on every open outside the allow-list is asked about. */
int sb_fsgate_ready(struct sb_session *s, char *err, size_t errlen);

/* ---- discard.c ---- */
/* At exit, --project-mode overlay without --save/--apply: when the overlay holds changes about to be
 * discarded, says how many files changed, were added and removed, and how to keep them next time. */
void sb_discard_summary(const struct sb_session *s);

/* ---- learn.c ---- */
/* --learn FILE: refuses (one line in err) a FILE that exists or whose directory cannot be written,
 * before the session starts; else *dirfd is FILE's directory (O_PATH, close-on-exec, owned by the caller),
 * where the learned policy will be written whatever happens to the path meanwhile. */
int sb_learn_check(const char *path, int *dirfd, char *err, size_t errlen);
/* At exit: writes the smallest policy that allows what session id was allowed to reach (its records
 * in the audit log after `from`) to path, atomically and never over an existing file, and prints
 * where (unless quiet). `settle`: the log is sluiced's, which writes the last records (tunnels
 * closed by the teardown) after the launcher hung up: wait until it stops growing (at most 2 s).
 * Returns 0 or -errno (with a message printed). */
int sb_learn_write(const struct sb_session *s, const char *id, const char *log_path, long long from, bool settle);

/* ---- env.c ---- */
/* The executable `name` on the launcher's PATH (else the usual directories), malloced, or NULL. */
char *sb_find_program(const char *name);
/* Builds the sandbox environment (malloced NULL-terminated array of malloced strings). */
char **sb_env_build(const struct sb_session *s, const struct sb_go *go, char **environ_in);
void sb_env_free(char **env);
bool sb_env_name_allowed(const struct sb_config *cfg, const char *name, size_t namelen);

/* ---- caps.c ---- */
/* keep_setfcap (--allow-containers): CAP_SETFCAP stays, ambient, for rootless Podman (nest.c). */
int sb_caps_drop_all(bool keep_setfcap, char *err, size_t errlen);
int sb_no_new_privs(char *err, size_t errlen);
int sb_die_with_parent(char *err, size_t errlen);
int sb_close_fds_above(int keep_max, char *err, size_t errlen);

/* ---- seccomp.c ---- */
/* nested: the --allow-containers filter (namespaces and mounts of the command's own allowed). */
int sb_seccomp_load(bool nested, char *err, size_t errlen);
/* Builds the filter (libseccomp context) without loading it; used by seccomp-gen at build time.
 * The caller owns *out (seccomp_release). Declared with void * so callers need not include
 * seccomp.h. */
int sb_seccomp_build(void **out, bool nested, char *err, size_t errlen);

/* ---- cgroup.c (launcher side) ---- */
int sb_cgroup_new(const struct sb_limits *lim, const char *id, bool privileged, struct sb_cgroup **out, char *err,
                  size_t errlen);
/* Moves pid into the session's cgroups (v2_done: it was born in the v2 one, CLONE_INTO_CGROUP). */
int sb_cgroup_attach(struct sb_cgroup *cg, pid_t pid, bool v2_done, char *err, size_t errlen);
/* An fd on the session's v2 cgroup directory for clone3(CLONE_INTO_CGROUP), or -1. */
int sb_cgroup_v2_fd(const struct sb_cgroup *cg);
bool sb_cgroup_active(const struct sb_cgroup *cg);
void sb_cgroup_kill_all(struct sb_cgroup *cg);
void sb_cgroup_free(struct sb_cgroup *cg); /* kills what is left and removes the cgroups; NULL ok */
/* Removes the cgroups sluice-ID of a session whose launcher died; -EBUSY while one of its tasks
 * is still a zombie (try again later). */
int sb_cgroup_reap(const char *id);
/* Tests only (tests/unit/test_sandbox_cgroup.c): where the cgroups are found, in place of
 * /proc/self/mountinfo and /proc/self/cgroup, and the mkdir/rmdir that stand in for the kernel's (a
 * fixture tree on tmpfs gives a new cgroup its interface files, as cgroupfs does). NULL: the real ones.
 * No environment variable reaches this: a launcher run as root never takes its cgroup root from its caller. */
struct sb_cgroup_fixture {
	const char *mountinfo, *cgroup;               /* borrowed, files */
	int (*mkdir)(const char *path, mode_t mode);  /* 0 or -1 with errno, like mkdir(2) */
	int (*rmdir)(const char *path);
};
void sb_cgroup_set_fixture(const struct sb_cgroup_fixture *f); /* borrowed until reset with NULL */

/* ---- init.c: pid 1 of the sandbox ---- */
/* Forks the command (which runs `exec_cmd`), then reaps and forwards signals; returns the exit
 * status for init to exit with. */
int sb_init_run(void (*exec_cmd)(void *), void *arg, const sigset_t *saved_mask);
/* The signals the launcher and init forward to the command. */
void sb_forward_sigset(sigset_t *set);

/* ---- net.c (launcher side) ---- */
/* The --allow-network step: wires the session's netns (netns_fd, borrowed) through netd, writes
 * SESSION/resolv.conf and fills go->proxy_url. Without --allow-network: nothing. It is three steps,
 * which a launcher can spread out so that netd works while it does (docs/sandbox.md "Start-up"):
 * compile (the policy, before the namespace exists; fills go->cred_env), send (the request, as soon as
 * the namespace exists) and finish (netd's answer: the session is wired and policed only after it
 * returned 0). */
int sb_net_open(struct sb_session *s, int netns_fd, struct sb_go *go, char *err, size_t errlen);
int sb_net_compile(struct sb_session *s, struct sb_go *go, char *err, size_t errlen);
int sb_net_send(struct sb_session *s, int netns_fd, char *err, size_t errlen);
int sb_net_finish(struct sb_session *s, struct sb_go *go, char *err, size_t errlen);
/* Whether sb_net_finish may come after the sandbox built its filesystem (no HTTPS inspection, whose CA
 * is mounted with it; a local sandbox): the launcher then makes an empty SESSION/resolv.conf first
 * (sb_net_placeholder, which sets go->have_resolv), fills it in at the finish, and sends pid 1 the
 * proxy's address in a second go (go->net_late) that pid 1 waits for before it forks the command. */
bool sb_net_can_finish_late(const struct sb_session *s);
int sb_net_placeholder(const struct sb_session *s, struct sb_go *go, char *err, size_t errlen);
/* With --allow-network: connects to netd now (starting the embedded helper when there is no sluiced), so
 * that the helper's start overlaps the launcher's own set-up; sb_net_open uses the connection. */
void sb_net_prepare(const struct sb_session *s);
/* At the start of the teardown: asks sluiced for the session's records, read by sb_net_close. */
void sb_net_records_ask(struct sb_session *s);
void sb_net_close(struct sb_session *s);
/* Last of the teardown: closes the connection to sluiced that sb_net_close left open (sluiced then
 * ends the session); no-op without one. */
void sb_net_release(void);
