/* The filesystem half of `sluicectl asks|approve|deny`: opens held by the gates of `sluice run --fs
 * ask` sessions (sandbox/fsgate.c), reached over their control sockets (common/fsask.h), not through
 * sluiced: the gate is the launching user's own process and needs no privilege. Who may decide is
 * checked on both ends by SO_PEERCRED: root any, a user their own sessions. */
#include "ctl.h"

#include "config.h"
#include "fsask.h"
#include "sandbox.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct fs_list {
	json_object *arr; /* borrowed; NULL = table */
	unsigned n;
	bool header_done;
};


static void list_cb(const struct fsask_entry *e, void *arg)
{
	struct fs_list *l = arg;
	long long now = (long long)time(NULL), left = e->created + (long long)e->timeout_s - now;

	if (left < 0)
		left = 0;
	l->n++;
	if (l->arr) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "id", json_object_new_string(e->id));
		json_object_object_add(o, "kind", json_object_new_string("fs"));
		json_object_object_add(o, "session", json_object_new_string(e->session));
		json_object_object_add(o, "uid", json_object_new_int64(e->uid));
		json_object_object_add(o, "path", json_object_new_string(e->path));
		json_object_object_add(o, "dir", json_object_new_boolean(e->dir));
		json_object_object_add(o, "command", json_object_new_string(e->command ? e->command : ""));
		json_object_object_add(o, "held_for", json_object_new_int64(now - e->created));
		json_object_object_add(o, "timeout", json_object_new_int64(e->timeout_s));
		json_object_array_add(l->arr, o);
		return;
	}
	if (!l->header_done)
		printf("%-11s %-4s %-16s %6s %5s  %s\n", "ID", "KIND", "SESSION", "UID", "LEFT", "PATH (COMMAND)");
	l->header_done = true;
	ctl_print_plain(e->id, 0);
	printf(" fs   ");
	ctl_print_plain(e->session, 0);
	printf(" %6u %4llds  ", (unsigned)e->uid, left);
	ctl_print_plain(e->path, 0);
	printf("%s (", e->dir ? "/" : "");
	ctl_print_plain(e->command, 0);
	printf(")\n");
}

int ctl_fsask_list(void *arr, unsigned *count, char *err, size_t errlen)
{
	struct fs_list l = {.arr = arr};
	int r = fsask_list(list_cb, &l, err, errlen);
	*count = l.n;
	return r;
}

static void decided_cb(const struct fsask_entry *e, void *arg)
{
	bool allow = *(bool *)arg;
	/* the gate's strings are host file names: printable only, like the table */
	printf("%s ", allow ? "approved" : "denied");
	ctl_print_plain(e->id, 0);
	printf(": read ");
	ctl_print_plain(e->path, 0);
	printf("%s%s (session ", e->subtree ? " and everything beneath it" : "", e->dir && !e->subtree ? "/" : "");
	ctl_print_plain(e->session, 0);
	printf(")\n");
}

struct found {
	const char *id;
	char path[FSASK_PATH_MAX + 1];
	char project[FSASK_PATH_MAX + 1];
	bool hit;
};

static void find_cb(const struct fsask_entry *e, void *arg)
{
	struct found *f = arg;
	if (strcmp(e->id, f->id) != 0)
		return;
	f->hit = true;
	snprintf(f->path, sizeof f->path, "%s", e->path);
	snprintf(f->project, sizeof f->project, "%s", e->project ? e->project : "");
}

/* Whether the organisation's file lets a user or project remember a path ("allow_fs_remember":
 * false forbids it; "fs_read_fixed": true makes lower layers' entries count for nothing). */
static int org_allows_remember(const char *layer, char *err, size_t errlen)
{
	json_object *root = json_object_from_file(SLUICE_SYSCONFDIR "/policy.json"), *sb, *v;
	int r = 0;

	if (!root)
		return 0; /* no organisation file (or one the launcher will refuse anyway) */
	if (json_object_object_get_ex(root, "sandbox", &sb) && json_object_is_type(sb, json_type_object)) {
		if (json_object_object_get_ex(sb, "allow_fs_remember", &v) &&
		    json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v) &&
		    strcmp(layer, "org") != 0) {
			snprintf(err, errlen,
			         "the organisation forbids remembering filesystem approvals (%s/policy.json: "
			         "\"allow_fs_remember\": false)",
			         SLUICE_SYSCONFDIR);
			r = -EPERM;
		} else if (json_object_object_get_ex(sb, "fs_read_fixed", &v) &&
		           json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v) &&
		           strcmp(layer, "org") != 0) {
			snprintf(err, errlen,
			         "the organisation fixes the read allow-list (%s/policy.json: \"fs_read_fixed\": "
			         "true); only --remember org would count",
			         SLUICE_SYSCONFDIR);
			r = -EPERM;
		}
	}
	json_object_put(root);
	return r;
}

int ctl_fsask_decide(const char *id, bool allow, bool subtree, const char *layer, const char *project)
{
	char err[1024] = "";
	struct found f = {.id = id};
	int r;

	if (layer) {
		/* remembered first: when it cannot be written, nothing is decided (decide again without) */
		if (!allow) {
			fprintf(stderr, "sluicectl: --remember goes with approve\n");
			return 2;
		}
		if ((r = fsask_list(find_cb, &f, err, sizeof err)) < 0 || !f.hit) {
			fprintf(stderr, "sluicectl: approve %s: %s\n", id,
			        r < 0 ? err : "no such held open of yours (it may have been decided or timed out)");
			return 1;
		}
		if ((r = org_allows_remember(layer, err, sizeof err)) < 0 ||
		    (r = ctl_remember(f.path, "sandbox", "fs_read", layer,
		                      project ? project : (f.project[0] ? f.project : NULL), err, sizeof err)) < 0) {
			fprintf(stderr, "sluicectl: approve %s: not remembered, not decided: %s\n", id, err);
			return 1;
		}
	}
	r = fsask_decide(id, allow, subtree, layer, decided_cb, &allow, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "sluicectl: %s %s: %s\n", allow ? "approve" : "deny", id, err[0] ? err : strerror(-r));
		return 1;
	}
	return 0;
}

int ctl_fsask_explain(int argc, char **argv)
{
	static const struct option opts[] = {
	        {"path", required_argument, NULL, 'p'},
	        {"project", required_argument, NULL, 'P'},
	        {NULL, 0, NULL, 0},
	};
	const char *path = NULL, *project = NULL;
	char cwd[PATH_MAX], real[PATH_MAX], out[2 * PATH_MAX];
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'p': path = optarg; break;
		case 'P': project = optarg; break;
		default: fprintf(stderr, "usage: sluicectl policy explain --path PATH [--project DIR]\n"); return 2;
		}
	}
	if (!path || optind != argc || path[0] != '/') {
		fprintf(stderr, "usage: sluicectl policy explain --path PATH [--project DIR] (PATH absolute)\n");
		return 2;
	}
	if (!project)
		project = getcwd(cwd, sizeof cwd);
	if (project && realpath(project, real))
		project = real;
	int r = sb_fs_explain(path, project, SLUICE_SYSCONFDIR, out, sizeof out);
	if (r < 0) {
		fprintf(stderr, "sluicectl: %s\n", out);
		return 2;
	}
	printf("%s: %s\n", path, out);
	return r;
}
