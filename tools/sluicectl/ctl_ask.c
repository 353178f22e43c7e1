/* `sluicectl asks`, `sluicectl approve [ID [--remember user|project]]` and `sluicectl deny ID`: the
 * operator's side of interactive approval (`sluice run --ask`). sluiced keeps the held requests and
 * checks who may decide them (root: any; a user: their own sessions', by SO_PEERCRED); a verdict goes
 * from sluiced to the proxy engine. --remember writes the approval into a policy file, and it is
 * sluicectl that writes it, as the approving user, never the root daemon: the user layer of whoever
 * approves, or PROJECT/.sluice/policy.json of the directory the approver names (--project, default the
 * current directory). */
#include "ctl.h"

#include "client.h"
#include "fsask.h"
#include "config.h"
#include "fs_safe.h"
#include "policy.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POLICY_FILE_MAX (1024L * 1024) /* a policy file larger than this is not one we rewrite */

struct asks_arg {
	json_object *arr; /* owned by the caller; NULL = table */
	unsigned n;
};


static void asks_cb(const struct netd_ask_entry *e, void *arg)
{
	struct asks_arg *a = arg;
	long long now = (long long)time(NULL), left = e->created + (long long)e->timeout_s - now;

	a->n++;
	if (left < 0)
		left = 0;
	if (a->arr) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "id", json_object_new_string(e->id));
		json_object_object_add(o, "session", json_object_new_string(e->session));
		json_object_object_add(o, "uid", json_object_new_int64(e->uid));
		json_object_object_add(o, "protocol", json_object_new_string(e->protocol));
		json_object_object_add(o, "method", json_object_new_string(e->method));
		json_object_object_add(o, "host", json_object_new_string(e->host));
		json_object_object_add(o, "port", json_object_new_int(e->port));
		json_object_object_add(o, "held_for", json_object_new_int64(now - e->created));
		json_object_object_add(o, "timeout", json_object_new_int64(e->timeout_s));
		json_object_array_add(a->arr, o);
		return;
	}
	if (a->n == 1)
		printf("%-8s %-12s %6s %5s  %s\n", "ID", "SESSION", "UID", "LEFT", "REQUEST");
	size_t sl = strlen(e->session);

	ctl_print_plain(e->id, 0);
	printf(" ");
	ctl_print_plain(e->session, 0);
	printf(" %*s%6u %4llds  ", (int)(sl < 12 ? 12 - sl : 0), "", e->uid, left);
	ctl_print_plain(e->method, 0);
	printf(" ");
	ctl_print_plain(e->host, 0);
	printf(":%u\n", e->port);
}

static int list_asks(bool json)
{
	struct asks_arg a = {0};
	char err[1024] = "";
	int r;

	if (json)
		a.arr = json_object_new_array();
	r = netd_asks_list(asks_cb, &a, err, sizeof err);
	/* then the opens held by --fs ask gates, which need no sluiced (ctl_fsask.c) */
	char ferr[512] = "";
	unsigned nfs = 0;
	int gates = ctl_fsask_list(a.arr, &nfs, ferr, sizeof ferr);
	if (r < 0 && gates <= 0) {
		fprintf(stderr, "sluicectl: asks: %s\n", err[0] ? err : strerror(-r));
		json_object_put(a.arr);
		return 1;
	}
	a.n += nfs;
	if (a.arr) {
		const char *js = json_object_to_json_string_ext(a.arr, JSON_C_TO_STRING_PLAIN);
		ctl_print_json(js, strlen(js));
	} else if (a.n == 0)
		printf("no requests are waiting for approval\n");
	json_object_put(a.arr);
	return 0;
}

/* ---- --remember: add host:port to a policy file's "allow" list ---- */

/* Whether JSON text carries comments (which json-c does not keep): '/' outside a string. */
static bool has_comments(const char *s, size_t n)
{
	bool str = false;

	for (size_t i = 0; i < n; i++) {
		if (str) {
			if (s[i] == '\\')
				i++;
			else if (s[i] == '"')
				str = false;
		} else if (s[i] == '"') {
			str = true;
		} else if (s[i] == '/' && i + 1 < n && (s[i + 1] == '/' || s[i + 1] == '*')) {
			return true;
		}
	}
	return false;
}

struct remember_job {
	const char *entry;   /* borrowed: what to add ("host:port", a path) */
	const char *section; /* borrowed: the object holding the list, or NULL for the top level */
	const char *key;     /* borrowed: the list ("allow", "fs_read") */
	enum policy_layer pl;
	int base;        /* borrowed: the directory the policy directory is beneath (home, config or project) */
	const char *rel; /* the policy directory beneath base: "sluice", ".config/sluice", ".sluice" */
	mode_t dmode;    /* for the directories made on the way */
	char path[PATH_MAX + 64]; /* for messages: the file as the user knows it */
};

/* The update itself, relative to job->base and with the credentials fs_safe_run_as gave it (the
 * project's owner when root approves into a user's project): no symlink followed, the file replaced by
 * rename (common/fs_safe.h). */
static int remember_in(void *arg, char *err, size_t errlen)
{
	struct remember_job *job = arg;
	const char *path = job->path, *entry = job->entry;
	char buf[POLICY_ERR_MAX + 300];
	cleanup_fd int dfd = -1;
	cleanup_free char *text = NULL;
	json_object *root = NULL, *allow = NULL, *sect = NULL;
	struct stat st;
	bool exists;
	size_t len = 0;
	int r;

	dfd = fs_safe_open_subdir(job->base, job->rel, true, job->dmode);
	if (dfd < 0) {
		snprintf(err, errlen, "opening the directory of %s: %s%s", path, strerror(-dfd),
		         dfd == -ELOOP ? " (a symlink is not followed); not changed" : "");
		return dfd;
	}
	r = fs_safe_read(dfd, "policy.json", POLICY_FILE_MAX, &text, &len, &st);
	exists = r == 0;
	if (r < 0 && r != -ENOENT) {
		if (r == -ELOOP)
			snprintf(err, errlen, "%s is a symlink, which is not followed; not changed", path);
		else if (r == -EINVAL || r == -EFBIG)
			snprintf(err, errlen, "%s is not a regular file of at most 1 MiB; not changed", path);
		else
			snprintf(err, errlen, "reading %s: %s", path, strerror(-r));
		return r;
	}
	if (exists && strspn(text, " \t\r\n") != len) {
		struct json_tokener *tok = json_tokener_new();
		enum json_tokener_error je = json_tokener_success;

		if (tok) {
			root = json_tokener_parse_ex(tok, text, (int)len);
			je = json_tokener_get_error(tok);
			json_tokener_free(tok);
		}
		if (!root || je != json_tokener_success || !json_object_is_type(root, json_type_object)) {
			snprintf(err, errlen,
			         "%s is not a JSON object (`sluicectl policy check %s` says where); not changed", path,
			         path);
			json_object_put(root);
			return -EINVAL;
		}
	} else {
		root = json_object_new_object();
	}
	sect = root;
	if (job->section && json_object_object_get_ex(root, job->section, &sect)) {
		if (!json_object_is_type(sect, json_type_object)) {
			snprintf(err, errlen, "%s: \"%s\" is not an object; not changed", path, job->section);
			json_object_put(root);
			return -EINVAL;
		}
	} else if (job->section) {
		sect = json_object_new_object();
		json_object_object_add(root, job->section, sect);
	}
	if (json_object_object_get_ex(sect, job->key, &allow)) {
		if (!json_object_is_type(allow, json_type_array)) {
			snprintf(err, errlen, "%s: \"%s\" is not a list; not changed", path, job->key);
			json_object_put(root);
			return -EINVAL;
		}
	} else {
		allow = json_object_new_array();
		json_object_object_add(sect, job->key, allow);
	}
	for (size_t i = 0; i < json_object_array_length(allow); i++) {
		json_object *v = json_object_array_get_idx(allow, i);
		if (json_object_is_type(v, json_type_string) && strcmp(json_object_get_string(v), entry) == 0) {
			printf("%s already allows %s\n", path, entry);
			json_object_put(root);
			return 0;
		}
	}
	json_object_array_add(allow, json_object_new_string(entry));
	{
		const char *out =
		        json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
		cleanup_free char *nl = NULL;
		struct policy_builder *b = policy_builder_new();
		struct policy_error pe;
		struct policy *p = NULL;
		mode_t mode = exists ? (st.st_mode & 0777) : 0644;

		memset(&pe, 0, sizeof pe);
		if (!out || asprintf(&nl, "%s\n", out) < 0 || !b) {
			policy_builder_free(b);
			json_object_put(root);
			return -ENOMEM;
		}
		/* the new file must load as a policy of its layer before it replaces the old one */
		if (policy_builder_add_json(b, job->pl, path, nl, strlen(nl), &pe) < 0 ||
		    !(p = policy_builder_compile(b, &pe))) {
			snprintf(err, errlen, "the updated file would not load (%s); not changed",
			         policy_error_format(&pe, buf, sizeof buf));
			policy_builder_free(b);
			json_object_put(root);
			return -EINVAL;
		}
		policy_unref(p);
		policy_builder_free(b);
		json_object_put(root);
		if (exists && has_comments(text, len)) {
			/* json-c drops comments: keep the file as it was next to the new one */
			r = fs_safe_replace(dfd, "policy.json.bak", text, len, mode);
			if (r < 0) {
				snprintf(err, errlen, "writing %s.bak: %s", path, strerror(-r));
				return r;
			}
			fprintf(stderr, "sluicectl: %s had comments, which rewriting drops; the old file is %s.bak\n",
			        path, path);
		}
		r = fs_safe_replace(dfd, "policy.json", nl, strlen(nl), mode);
		if (r < 0) {
			snprintf(err, errlen, "writing %s: %s", path, strerror(-r));
			return r;
		}
	}
	printf("remembered: %s now allows %s\n", path, entry);
	return 0;
}

/* Adds entry to the list `key` of a policy file's top level (section NULL: network "allow") or of its
 * object `section`, in the layer named: user (whoever approves, written as them), project
 * (DIR/.sluice, written with the credentials of DIR's owner: root approving into a user's project can do
 * there only what the user could, fs_safe_run_as) or org (SLUICE_SYSCONFDIR, root only). Nothing is
 * followed as a symlink: the layer's base directory is resolved once (realpath: the approver's own path
 * may have symlinks) and then opened by a walk that follows none, so a component swapped for a symlink
 * after the resolution is refused, and the file is replaced by rename (common/fs_safe.h). */
int ctl_remember(const char *entry, const char *section, const char *key, const char *layer, const char *project,
                 char *err, size_t errlen)
{
	struct remember_job job = {.entry = entry, .section = section, .key = key};
	char real[PATH_MAX], org[PATH_MAX];
	const char *base;
	cleanup_fd int bfd = -1;
	struct stat st;
	int r;

	if (strcmp(layer, "user") == 0) {
		const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");

		job.pl = POLICY_LAYER_USER;
		job.dmode = 0700;
		if (!home || home[0] != '/') {
			struct passwd *pw = getpwuid(getuid());
			home = pw ? pw->pw_dir : NULL;
		}
		if (xdg && xdg[0] == '/') {
			base = xdg;
			job.rel = "sluice";
		} else if (home) {
			base = home;
			job.rel = ".config/sluice";
		} else {
			snprintf(err, errlen, "--remember user: no home directory (set HOME)");
			return -EINVAL;
		}
	} else if (strcmp(layer, "org") == 0) {
		char *slash;

		job.pl = POLICY_LAYER_ORG;
		job.dmode = 0755;
		if (geteuid() != 0) {
			snprintf(err, errlen, "--remember org writes %s/policy.json: root only", SLUICE_SYSCONFDIR);
			return -EPERM;
		}
		util_strlcpy(org, SLUICE_SYSCONFDIR, sizeof org);
		slash = strrchr(org, '/');
		if (!slash || slash == org || !slash[1]) {
			snprintf(err, errlen, "--remember org: %s is not DIR/NAME", SLUICE_SYSCONFDIR);
			return -EINVAL;
		}
		*slash = '\0';
		base = org;
		job.rel = slash + 1;
	} else {
		job.pl = POLICY_LAYER_PROJECT;
		job.dmode = 0755;
		job.rel = ".sluice";
		base = project ? project : ".";
	}
	if (!realpath(base, real)) {
		r = -errno;
		snprintf(err, errlen, "--remember %s: %s: %s", layer, base, strerror(-r));
		return r;
	}
	snprintf(job.path, sizeof job.path, "%s/%s/policy.json", strcmp(real, "/") == 0 ? "" : real, job.rel);
	bfd = fs_safe_open_dir(real);
	if (bfd < 0 || fstat(bfd, &st) < 0) {
		r = bfd < 0 ? bfd : -errno;
		snprintf(err, errlen, "--remember %s: opening %s: %s%s", layer, real, strerror(-r),
		         r == -ELOOP ? " (it changed into a symlink since it was resolved); not changed" : "");
		return r;
	}
	job.base = bfd;
	if (job.pl != POLICY_LAYER_PROJECT)
		return remember_in(&job, err, errlen);
	return fs_safe_run_as(st.st_uid, st.st_gid, remember_in, &job, err, errlen);
}

static void usage_approve(FILE *f)
{
	fprintf(f, "usage: sluicectl asks [--json]                      requests held for approval\n"
	           "       sluicectl approve [ID [--remember user|project [--project DIR]]]\n"
	           "       sluicectl approve ID --subtree    (an fs ask: the path and everything beneath it)\n"
	           "       sluicectl deny ID [--subtree]\n"
	           "approve without ID lists the held requests. An approval or denial applies to the request's\n"
	           "host:port for the rest of its session. --remember also adds host:port to the \"allow\" list of\n"
	           "your user policy (~/.config/sluice/policy.json) or of DIR/.sluice/policy.json (DIR: --project,\n"
	           "default the current directory), written by sluicectl as you.\n");
}

int ctl_ask(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"remember", required_argument, NULL, 'r'},
	        {"project", required_argument, NULL, 'p'},
	        {"json", no_argument, NULL, 'j'},
	        {"subtree", no_argument, NULL, 's'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	const char *cmd = argv[0], *layer = NULL, *project = NULL;
	bool json = false, allow = strcmp(cmd, "approve") == 0, subtree = false;
	struct netd_ask_entry e;
	char err[1024] = "";
	int opt, r;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'r':
			if (strcmp(optarg, "user") != 0 && strcmp(optarg, "project") != 0 && strcmp(optarg, "org") != 0) {
				fprintf(stderr, "sluicectl: --remember %s: want user, project or org\n", optarg);
				return 2;
			}
			layer = optarg;
			break;
		case 'p': project = optarg; break;
		case 'j': json = true; break;
		case 's': subtree = true; break;
		case 'h': usage_approve(stdout); return 0;
		default: usage_approve(stderr); return 2;
		}
	}
	if (strcmp(cmd, "asks") == 0 || (allow && optind == argc && !layer && !project)) {
		if (optind != argc || layer || project) {
			usage_approve(stderr);
			return 2;
		}
		return list_asks(json);
	}
	if (optind + 1 != argc || json || (!allow && (layer || project)) || (project && !layer)) {
		usage_approve(stderr);
		return 2;
	}
	if (project && strcmp(layer, "project") != 0) {
		fprintf(stderr, "sluicectl: --project goes with --remember project\n");
		return 2;
	}
	if (fsask_is_id(argv[optind]))
		return ctl_fsask_decide(argv[optind], allow, subtree, layer, project);
	if (subtree) {
		fprintf(stderr, "sluicectl: --subtree is for filesystem asks (fs-... ids)\n");
		return 2;
	}
	r = netd_ask_decide(argv[optind], allow, &e, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "sluicectl: %s %s: %s\n", cmd, argv[optind], err[0] ? err : strerror(-r));
		return 1;
	}
	printf("%s %s: %s %s:%u (session %s)\n", allow ? "approved" : "denied", e.id, e.method, e.host, e.port,
	       e.session);
	if (layer) {
		char entry[300]; /* host (at most 253) ":" port */

		snprintf(entry, sizeof entry, "%s:%u", e.host, e.port);
		r = ctl_remember(entry, NULL, "allow", layer, project, err, sizeof err);
	}
	if (layer && r < 0) {
		fprintf(stderr, "sluicectl: approved for the session, but not remembered: %s\n", err);
		return 1;
	}
	return 0;
}
