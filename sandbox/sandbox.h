/* The launcher's shared types: the resolved session configuration (from config files and the
 * command line) and the per-session runtime state that the containment steps read and fill.
 * Every containment step is a function `int sb_<step>(...)` returning 0 or -errno and writing a
 * one-line reason into an error buffer; none of them exits. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SB_ERR_MAX 1024

/* Exit statuses of the launcher itself (like env(1)); the command's own status passes through. */
#define SB_EXIT_TIMEOUT 124 /* --timeout expired (like timeout(1)) */
#define SB_EXIT_FAIL    125 /* the launcher failed: bad usage, bad config, a containment step failed */
#define SB_EXIT_NOEXEC  126 /* the command was found but could not be executed */
#define SB_EXIT_NOENT   127 /* the command was not found */

/* --disk: the smallest scratch space a session may have. */
#define SB_DISK_MIN (1ull << 20)
/* --disk by default: 2 GiB (or half the memory when that is less); one inode per 4 KiB of it. */
#define SB_DISK_DEFAULT         (2ull << 30)
#define SB_DISK_BYTES_PER_INODE 4096

enum sb_profile {
	SB_PROFILE_BASE = 0, /* tight: system dirs read-only, empty home, project, caches */
	SB_PROFILE_PLUGIN,   /* base + the extra paths named in config ("plugin_paths") */
	SB_PROFILE_UNSAFE,   /* the whole host read-only (secrets still masked) */
};

enum sb_project_mode {
	SB_PROJECT_OVERLAY = 0, /* copy-on-write; changes in the session dir */
	SB_PROJECT_RW,
	SB_PROJECT_RO,
};

/* --fs: what the sandbox may read outside its allow-list (fsmode.c, fsgate.c). */
enum sb_fs_mode {
	SB_FS_AUTO = 0, /* not chosen: ask with a terminal and a reachable decision, else relaxed */
	SB_FS_RELAXED,  /* the profile's view: what it does not show does not exist */
	SB_FS_ASK,      /* the host read-only behind a gate: the first open outside the allow-list waits */
};

enum sb_save_mode {
	SB_SAVE_NONE = 0,
	SB_SAVE_PATCH, /* keep the session dir and write changes.patch into it */
	SB_SAVE_APPLY, /* copy the changes onto the project directory */
};

/* One extra mount. */
struct sb_bind {
	char *src; /* owned; absolute, as given (opened once when mounted: binds.c) */
	char *dst; /* owned; absolute path inside the sandbox, or NULL: where src really is */
	bool rw;
	bool literal; /* no symlink may be followed on src's path (a devcontainer.json's binds) */
};

/* I/O throttle for one block device. */
struct sb_io_limit {
	unsigned maj, min;
	uint64_t read_bps, write_bps; /* 0 = unlimited */
};

#define SB_IO_MAX 8

struct sb_limits {
	uint64_t cpu_millicores; /* 0 = none; 1500 = 1.5 cores */
	uint64_t memory_bytes;   /* 0 = none */
	uint64_t pids;           /* 0 = none */
	struct sb_io_limit io[SB_IO_MAX];
	size_t n_io;
	unsigned timeout_s;  /* wall clock; 0 = none */
	uint64_t disk_bytes; /* the session's scratch space (overlay upper, /tmp, ...); 0 = the default */
};

/* A growable list of owned strings. */
struct sb_strv {
	char **v; /* owned array of owned strings; NULL-terminated when n > 0 */
	size_t n;
};

int sb_strv_add(struct sb_strv *s, const char *str);
/* Appends word w to *acc (malloced, or NULL), space-separated, quoted so that sh, bash, zsh and fish read it
 * back as w: as it is when it is made of letters, digits and _-+=%@:,./ only and does not begin with =,
 * else in single quotes (a ' as '\'', a \ as '\\', never inside the quotes: fish reads them there). */
int sb_sh_quote(const char *w, char **acc);
bool sb_strv_contains(const struct sb_strv *s, const char *str);
void sb_strv_clear(struct sb_strv *s);

/* Who sandboxes the command (--sandbox-type). */
enum sb_sandbox_type {
	SB_TYPE_LOCAL = 0,    /* sluice's own namespaces (the default) */
	SB_TYPE_FIREJAIL,     /* firejail in a netd-wired namespace (firejail.c) */
	SB_TYPE_CONTAINER,    /* a Podman container of --image (container.c) */
	SB_TYPE_DEVCONTAINER, /* a Podman container from .devcontainer/devcontainer.json (devcontainer.c) */
	SB_TYPE_VM,           /* a QEMU VM inside the local sandbox (vm.c) */
};

/* What a container session runs (--sandbox-type container|devcontainer): --image, or what the
 * project's devcontainer.json says. The strings come from the command line or from the (untrusted)
 * repository, checked by devcontainer.c. */
struct sb_ctr_spec {
	char *image;           /* owned; image reference, or NULL when built from a Dockerfile */
	char *dockerfile;      /* owned; absolute path of build.dockerfile (inside the project), or NULL */
	char *context;         /* owned; absolute build context (inside the project), or NULL */
	char *workspace;       /* owned; where the project appears in the container (default: its own path) */
	char *user;            /* owned; "UID[:GID]" the command runs as inside (remoteUser), or NULL: 0 */
	char *source;          /* owned; the devcontainer.json it came from (for messages), or NULL */
	struct sb_strv env;    /* NAME=VALUE (containerEnv) */
	struct sb_strv mounts; /* podman --mount values of type volume or tmpfs (session-local) */
	char *post_create;     /* owned; postCreateCommand as a shell command (an array form quoted), or NULL */
};

/* Everything the session needs to know, resolved before any namespace exists. */
struct sb_config {
	enum sb_profile profile;
	enum sb_project_mode project_mode;
	enum sb_save_mode save;
	char *project_dir; /* owned; realpath of the project directory */
	char *home;        /* owned; the invoking user's home (realpath when it exists) */
	uid_t uid;         /* the invoking user */
	gid_t gid;

	struct sb_strv writable_paths;  /* host paths bound read-write at the same place (caches) */
	struct sb_strv plugin_paths;    /* host paths bound read-only for the plugin profile */
	struct sb_strv env_keep;        /* variable names passed through (exact, or PREFIX* ) */
	struct sb_strv env_set;         /* NAME=VALUE set in the sandbox */
	struct sb_strv protected_paths; /* patterns added to the protected set (protect.c) */
	struct sb_strv masks;           /* host paths masked besides the defaults (masks.c), expanded */
	struct sb_strv org_masks;       /* those the organisation added: no layer may unmask them */
	struct sb_strv unmask;          /* default or user masks taken off (org and user layers only) */
	bool apply_protected;           /* --apply-protected: --apply also applies protected changes */
	struct sb_bind *binds;          /* owned array */
	size_t n_binds;
	struct sb_limits limits;

	bool allow_network;
	struct sb_strv policies; /* --policy NAME|FILE */
	struct sb_strv allows;   /* --allow HOST[:PORT] */
	char *audit_log;         /* owned; --audit-log PATH, or NULL */
	char *learn_file;        /* owned; --learn FILE made absolute: where the learned policy goes, or NULL */
	int learn_dirfd;         /* owned; FILE's directory, held since --learn was checked (-1: none) */
	bool ask;                /* --ask: hold requests no rule allows for sluicectl approve|deny */
	unsigned ask_timeout_s;  /* --ask-timeout (0 = the policy's, default 60) */

	/* --fs (fsmode.c) */
	enum sb_fs_mode fs_mode;      /* as configured or given; sb_fsmode_resolve settles AUTO */
	bool fs_mode_org;             /* the organisation file set "fs": lower layers and --fs cannot change it */
	struct sb_strv fs_read;       /* "fs_read": host paths (or subtrees) readable without asking */
	bool org_forbid_fs_remember;  /* "allow_fs_remember": false */
	bool org_fs_read_fixed;       /* "fs_read_fixed": true: only the organisation's fs_read entries count */
	bool allow_kvm;     /* --allow-kvm: /dev/kvm in the sandbox (kvm.c) */

	bool keep_root_uid; /* --keep-root-uid: a root launch runs the command as host uid 0 */

	/* Organisation caps (from /etc/sluice only). */
	bool org_forbid_unsafe;
	bool org_forbid_no_sandbox;
	bool org_forbid_network;
	bool org_forbid_keep_root_uid; /* "allow_keep_root_uid": false */
	bool org_allow_masked_binds;   /* "allow_masked_binds": true: a bind may show a masked path */
	uid_t root_uid_base;           /* "root_uid_range": "BASE:COUNT" (0 count: the default range) */
	uint32_t root_uid_count;

	char *hostname; /* owned; default "sluice" */
	int verbose;
	bool quiet;                /* --quiet: no messages of the launcher's own but errors */
	char *const *run_opts;     /* borrowed: `sluice run`'s options as given (run_nopts of them) */
	size_t run_nopts;
	bool *run_opt_secret;      /* owned, run_nopts of them or NULL: the word holds an --env VALUE (discard.c) */
	enum sb_sandbox_type type; /* --sandbox-type */
	struct sb_ctr_spec ctr;    /* container and devcontainer types */
	bool allow_containers;     /* --allow-containers: rootless Podman inside the local sandbox (nest.c) */
	bool vm_tcg;     /* --vm-accel tcg: emulate (else KVM, required) */
	char *vm_kernel; /* owned; the guest kernel (vm.c) */
	char *vm_initrd; /* owned; the guest's initramfs (vm.c) */
};

void sb_config_init(struct sb_config *c);
/* "local", "firejail", "container", "devcontainer": the --sandbox-type word. */
const char *sb_sandbox_type_name(enum sb_sandbox_type t);
void sb_ctr_spec_clear(struct sb_ctr_spec *spec);
void sb_config_clear(struct sb_config *c);

/* Which configuration file a setting came from, strongest first. The project file lives in the
 * (possibly untrusted) repository: it may only narrow (a tighter profile, lower limits). */
enum sb_cfg_layer { SB_CFG_ORG = 0, SB_CFG_USER, SB_CFG_PROJECT };

/* Reads the "sandbox" object of the layered configuration files (org, user, project) into c.
 * Lower layers cannot widen what the organisation forbids. sysconfdir: e.g. "/etc/sluice". */
int sb_config_load_layers(struct sb_config *c, const char *sysconfdir, char *err, size_t errlen);
/* Parses one file's "sandbox" object (the rest of the file is the policy's business).
 * Only the org layer may set the allow_* caps. Missing file: 0. */
int sb_config_load_file(struct sb_config *c, const char *path, enum sb_cfg_layer layer, char *err, size_t errlen);
/* Parses a "sandbox" JSON text as if read from `name`. */
int sb_config_load_json(struct sb_config *c, const char *name, const char *text, size_t len, enum sb_cfg_layer layer,
                        char *err, size_t errlen);
/* The organisation's maxima (0 = none), for capping command-line limits. */
const struct sb_limits *sb_config_org_caps(void);

/* ---- fsmode.c ---- */
/* Settles cfg->fs_mode (AUTO: ask with a terminal and a reachable decision, relaxed otherwise, and
 * with --verbose says why); refuses contradictions (ask with --profile unsafe or firejail). */
int sb_fsmode_resolve(struct sb_config *c, bool cli_set, char *err, size_t errlen);
/* Parses one "sandbox" key of the --fs family ("fs", "fs_read", "allow_fs_remember",
 * "fs_read_fixed"); 1 when it was one (r in *rc), 0 when not ours. */
struct json_object;
int sb_fsmode_config_key(struct sb_config *c, const char *key, struct json_object *val, int layer, const char *name,
                         int *rc, char *err, size_t errlen);

/* fsexplain.c: which layer decides whether --fs ask reads path without asking; one line in out. */
enum { SB_FS_EXPLAIN_ALLOW = 0, SB_FS_EXPLAIN_DENY = 1, SB_FS_EXPLAIN_ASK = 3 };
int sb_fs_explain(const char *path, const char *project, const char *sysconfdir, char *out, size_t outlen);

/* JSON with comments (json-c): the whole text must be one value; errors name name:line:col. *out is
 * the caller's (json_object_put). */
struct json_object;
int sb_json_parse(const char *name, const char *text, size_t len, struct json_object **out, char *err, size_t errlen);
/* The 1-based line and column of byte offset off in text. */
void sb_text_position(const char *text, size_t len, size_t off, size_t *line, size_t *col);

/* Parsers shared by the command line and config: "512M", "2G", "1.5" cores, "8:0:10M". */
int sb_parse_size(const char *s, uint64_t *out);
int sb_parse_cpu(const char *s, uint64_t *millicores);
int sb_parse_io(const char *s, unsigned *maj, unsigned *min, uint64_t *bps);
/* Expands a leading "~/" against home. Returns a malloced string or NULL (ENOMEM). */
char *sb_expand_home(const char *path, const char *home);
/* Lexically normalises an absolute path ("//", "/./", "..", a trailing "/"); no symlinks are read
 * (mounts.c). 0, -EINVAL (not absolute) or -ENAMETOOLONG. */
int sb_normalize_abs(const char *in, char *out, size_t len);
