/* `sluicectl sessions` and `sluicectl session end|save|discard ID`: live network sessions come from
 * sluiced (netd_sessions_list, netd_session_end); saved sessions are the session directories that
 * `sluice run --save` kept (changes.patch, and the project path in `project`), found in the same
 * per-user places the launcher uses. The patch was produced from files the sandboxed command wrote:
 * it is applied with GNU patch, which refuses file names that leave the project directory, after a
 * dry run, and never through a shell. */
#include "ctl.h"

#include "client.h"
#include "policy.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SESSION_ID_LEN 16 /* the launcher's session ids: 16 hex digits */

/* ---- live sessions (sluiced) ---- */

struct list_arg {
	json_object *arr; /* owned by the caller; NULL = table output */
	unsigned n;
};


static void list_cb(const struct netd_session_entry *e, void *arg)
{
	struct list_arg *a = arg;
	char when[32] = "-";
	time_t t = (time_t)e->created;
	struct tm tm;

	a->n++;
	if (t > 0 && gmtime_r(&t, &tm))
		strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (a->arr) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "id", json_object_new_string(e->id));
		json_object_object_add(o, "uid", json_object_new_int64(e->uid));
		json_object_object_add(o, "pid", json_object_new_int64(e->pid));
		json_object_object_add(o, "command", json_object_new_string(e->command));
		json_object_object_add(o, "sandbox", e->sandbox[0] ? json_object_new_string(e->sandbox) : NULL);
		json_object_object_add(o, "interface", json_object_new_string(e->ifname));
		json_object_object_add(o, "addr4", e->addr4[0] ? json_object_new_string(e->addr4) : NULL);
		json_object_object_add(o, "addr6", e->addr6[0] ? json_object_new_string(e->addr6) : NULL);
		json_object_object_add(o, "netns", e->netns_path[0] ? json_object_new_string(e->netns_path) : NULL);
		json_object_object_add(o, "created", json_object_new_string(when));
		json_object_array_add(a->arr, o);
		return;
	}
	if (a->n == 1)
		printf("%-12s %6s %7s %-16s %-24s %-20s %-8s %s\n", "ID", "UID", "PID", "ADDR4", "ADDR6", "CREATED",
		       "SANDBOX", "COMMAND");
	ctl_print_plain(e->id, 12);
	printf(" %6u %7u ", e->uid, e->pid);
	ctl_print_plain(e->addr4[0] ? e->addr4 : "-", 16);
	putchar(' ');
	ctl_print_plain(e->addr6[0] ? e->addr6 : "-", 24);
	printf(" %-20s ", when);
	ctl_print_plain(e->sandbox[0] ? e->sandbox : "-", 8);
	putchar(' ');
	ctl_print_plain(e->command, 0);
	if (e->netns_path[0]) {
		printf("  [netns ");
		ctl_print_plain(e->netns_path, 0);
		putchar(']');
	}
	putchar('\n');
}

static int ctl_sessions(int argc, char **argv)
{
	struct list_arg a = {0};
	char err[1024] = "";
	int r;

	if (argc == 2 && strcmp(argv[1], "--json") == 0) {
		a.arr = json_object_new_array();
	} else if (argc != 1) {
		fprintf(stderr, "usage: sluicectl sessions [--json]\n");
		return 2;
	}
	r = netd_sessions_list(list_cb, &a, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "sluicectl: sessions: %s\n", err[0] ? err : strerror(-r));
		json_object_put(a.arr);
		return 1;
	}
	if (a.arr) {
		const char *js = json_object_to_json_string_ext(a.arr, JSON_C_TO_STRING_PLAIN);
		ctl_print_json(js, strlen(js));
	} else if (a.n == 0)
		printf("no live sessions\n");
	json_object_put(a.arr);
	return 0;
}

/* ---- saved sessions (session directories) ---- */

static bool valid_id(const char *id)
{
	return strlen(id) == SESSION_ID_LEN && strspn(id, "0123456789abcdef") == SESSION_ID_LEN;
}

/* Finds the kept session directory ID of the calling user: where the launcher puts them
 * ($XDG_RUNTIME_DIR/sluice, /run/sluice/sessions for root, /var/tmp/sluice-UID). */
static int find_session(const char *id, char *dir, size_t len)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	char bases[3][PATH_MAX];
	size_t nb = 0;
	struct stat st;
	uid_t uid = getuid();

	if (rt && rt[0] == '/')
		snprintf(bases[nb++], PATH_MAX, "%s/sluice", rt);
	if (uid == 0)
		snprintf(bases[nb++], PATH_MAX, "/run/sluice/sessions");
	snprintf(bases[nb++], PATH_MAX, "/var/tmp/sluice-%u", (unsigned)uid);
	for (size_t i = 0; i < nb; i++) {
		snprintf(dir, len, "%s/%s", bases[i], id);
		/* Ours, a real directory, and not writable by others (it may be under /var/tmp). */
		if (lstat(bases[i], &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 022))
			continue;
		if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid)
			return 0;
	}
	return -ENOENT;
}

/* Reads SESSION/project (the project directory the launcher recorded). */
static int read_project(int dfd, char *out, size_t len)
{
	cleanup_fd int fd = openat(dfd, "project", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, out, len - 1);
	if (n <= 0)
		return -EINVAL;
	out[n] = '\0';
	out[strcspn(out, "\n")] = '\0';
	return out[0] == '/' ? 0 : -EINVAL;
}

static int run_wait(const char *const *argv, int in_fd)
{
	int st;
	pid_t p = fork();
	if (p < 0)
		return -errno;
	if (p == 0) {
		if (in_fd >= 0 && dup2(in_fd, 0) < 0)
			_exit(127);
		execvp(argv[0], (char *const *)argv);
		fprintf(stderr, "sluicectl: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(p, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int remove_dir(const char *dir)
{
	const char *argv[] = {"rm", "-rf", "--one-file-system", "--", dir, NULL};
	return run_wait(argv, -1) == 0 ? 0 : -EIO;
}

/* Copies fd to stdout; 0 or -1. Trust boundary: the patch holds bytes the sandboxed command wrote, and
 * on a terminal a carriage return or an escape sequence in them can hide a hunk (or forge the protected
 * section's header) from the person who reviews it before applying: visible is set when stdout is a
 * terminal, and then C0 controls other than tab and newline are shown as ^X, DEL as ^?, and the UTF-8
 * C1 controls as \u00XX. Into a pipe or a file the patch goes as it is (it must still apply). */
static int cat_fd(int fd, bool visible)
{
	char buf[65536];
	bool c2 = false; /* the previous byte was 0xc2 (held back) */
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		if (!visible) {
			if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n)
				return -1;
			continue;
		}
		for (ssize_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)buf[i];
			if (c2) {
				c2 = false;
				if (c >= 0x80 && c <= 0x9f) {
					printf("\\u%04x", c);
					continue;
				}
				putchar(0xc2);
			}
			if (c == 0xc2)
				c2 = true;
			else if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f)
				printf("^%c", c == 0x7f ? '?' : c + 0x40);
			else
				putchar(c);
		}
	}
	if (c2)
		putchar(0xc2);
	return n < 0 || ferror(stdout) ? -1 : 0;
}

/* Whether the file fd is empty (or unreadable). */
static bool fd_empty(int fd)
{
	struct stat st;
	return fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0;
}

/* Applies the patch on fd to project: a dry run first, so a patch that does not apply leaves the
 * project untouched. 0 or -1 (with a message naming what). */
static int apply_patch(const char *id, const char *what, int fd, const char *project)
{
	const char *dry[] = {"patch", "-p1", "--batch", "--forward", "--dry-run", "--silent", "-d", project, NULL};
	const char *real[] = {"patch", "-p1", "--batch", "--forward", "--silent", "-d", project, NULL};
	if (run_wait(dry, fd) != 0) {
		fprintf(stderr,
		        "sluicectl: the %s of session %s do not apply cleanly to %s; nothing was changed (see "
		        "`sluicectl session save --patch %s`)\n",
		        what, id, project, id);
		return -1;
	}
	if (lseek(fd, 0, SEEK_SET) < 0 || run_wait(real, fd) != 0) {
		fprintf(stderr, "sluicectl: applying the %s of session %s to %s failed; the session is kept\n", what,
		        id, project);
		return -1;
	}
	return 0;
}

static int session_saved(const char *verb, int argc, char **argv)
{
	bool print_patch = false, with_protected = false;
	const char *id = NULL;
	char dir[PATH_MAX], project[PATH_MAX], patch[PATH_MAX + 32];
	cleanup_fd int dfd = -1;

	bool bad = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--patch") == 0 && strcmp(verb, "save") == 0)
			print_patch = true;
		else if (strcmp(argv[i], "--protected") == 0 && strcmp(verb, "save") == 0)
			with_protected = true;
		else if (!id && argv[i][0] != '-')
			id = argv[i];
		else
			bad = true;
	}
	if (!id || bad) {
		fprintf(stderr, "usage: sluicectl session save [--patch] [--protected] ID | session discard ID\n");
		return 2;
	}
	if (!valid_id(id) || find_session(id, dir, sizeof dir) < 0) {
		fprintf(stderr,
		        "sluicectl: session %s: no saved session with that id (ids are the 16 hex digits `sluice run "
		        "--save` printed)\n",
		        id);
		return 1;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "sluicectl: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	/* A live launcher holds the lock; a session is only saved or discarded after it ended. */
	if (flock(dfd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "sluicectl: session %s is still running\n", id);
		return 1;
	}
	if (faccessat(dfd, "kept", F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
		fprintf(stderr, "sluicectl: session %s was not kept with --save (nothing to %s)\n", id, verb);
		return 1;
	}
	snprintf(patch, sizeof patch, "%s/changes.patch", dir);
	if (strcmp(verb, "discard") == 0) {
		if (remove_dir(dir) < 0) {
			fprintf(stderr, "sluicectl: cannot remove %s\n", dir);
			return 1;
		}
		printf("session %s discarded\n", id);
		return 0;
	}
	cleanup_fd int pfd = openat(dfd, "changes.patch", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0) {
		fprintf(stderr, "sluicectl: session %s has no changes.patch: %s\n", id, strerror(errno));
		return 1;
	}
	/* Changes to protected paths (.sluice/, .git/, build and rc files: docs/sandbox.md) are kept
	 * apart by the launcher and applied only when asked for by name. */
	cleanup_fd int prot = openat(dfd, "protected.patch", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	bool has_prot = !fd_empty(prot);
	if (print_patch) {
		bool tty = isatty(STDOUT_FILENO);
		if (cat_fd(pfd, tty) < 0)
			return 1;
		if (has_prot) {
			printf("# ---- protected changes (sluicectl session save --protected %s applies them too) "
			       "----\n",
			       id);
			if (cat_fd(prot, tty) < 0)
				return 1;
		}
		return 0;
	}
	int r = read_project(dfd, project, sizeof project);
	if (r < 0) {
		fprintf(stderr,
		        "sluicectl: session %s does not record its project directory (%s); apply it by hand: "
		        "`patch -p1 -d PROJECT < %s`\n",
		        id, strerror(-r), patch);
		return 1;
	}
	if (has_prot && with_protected) {
		/* both dry runs before either is applied */
		const char *dry[] = {"patch",    "-p1", "--batch", "--forward", "--dry-run",
		                     "--silent", "-d",  project,   NULL};
		if (run_wait(dry, prot) != 0 || lseek(prot, 0, SEEK_SET) < 0) {
			fprintf(stderr,
			        "sluicectl: the protected changes of session %s do not apply cleanly to %s; nothing "
			        "was "
			        "changed\n",
			        id, project);
			return 1;
		}
	}
	if (!fd_empty(pfd) && apply_patch(id, "changes", pfd, project) < 0)
		return 1;
	if (has_prot && !with_protected) {
		fprintf(stderr,
		        "sluicectl: session %s: changes applied to %s, but not its protected changes (they can widen "
		        "the next session or run code outside the sandbox); review them with `sluicectl session save "
		        "--patch %s`, apply them with `sluicectl session save --protected %s`\n",
		        id, project, id, id);
		/* the plain part is done: what is left to save is the protected part alone */
		int t = openat(dfd, "changes.patch", O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
		if (t < 0)
			fprintf(stderr, "sluicectl: cannot empty %s: %s\n", patch, strerror(errno));
		else
			close(t);
		return 0;
	}
	if (has_prot && apply_patch(id, "protected changes", prot, project) < 0)
		return 1;
	if (remove_dir(dir) < 0)
		fprintf(stderr, "sluicectl: applied, but cannot remove %s\n", dir);
	printf("session %s: changes applied to %s%s\n", id, project, has_prot ? " (with its protected changes)" : "");
	return 0;
}

/* `sluicectl session policy ID (--allow P | --deny P)... | --file FILE`: changes a live session's policy
 * through sluiced. --allow/--deny add rules beside what the session has; --file replaces everything but
 * the organisation layer with FILE (a policy file or preset name). The rules are checked here first, so a
 * typo gets its file:line:col before anything is sent. */
static int session_policy(int argc, char **argv)
{
	static const struct option opts[] = {{"allow", required_argument, NULL, 'a'},
	                                     {"deny", required_argument, NULL, 'd'},
	                                     {"file", required_argument, NULL, 'f'},
	                                     {NULL, 0, NULL, 0}};
	struct policy_builder *b = policy_builder_new();
	struct policy_error perr = {0};
	struct policy *p = NULL;
	json_object *rules = json_object_new_object(), *allow = json_object_new_array(), *deny = json_object_new_array();
	const char *file = NULL, *id;
	char err[1024] = "", buf[POLICY_ERR_MAX + 300];
	char *json = NULL;
	int c, r, rc = 2;

	if (!b || !rules || !allow || !deny) {
		fprintf(stderr, "sluicectl: out of memory\n");
		goto out;
	}
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
		case 'd':
			if (policy_builder_add_pattern(b, POLICY_LAYER_CLI, optarg, c == 'd', c == 'd' ? "--deny" : "--allow",
			                               &perr) < 0) {
				fprintf(stderr, "sluicectl: %s\n", policy_error_format(&perr, buf, sizeof buf));
				goto out;
			}
			json_object_array_add(c == 'd' ? deny : allow, json_object_new_string(optarg));
			break;
		case 'f': file = optarg; break;
		default: goto usage;
		}
	}
	if (optind != argc - 1 || (!file) == (json_object_array_length(allow) + json_object_array_length(deny) == 0))
		goto usage;
	id = argv[optind];
	if (file) {
		if (policy_builder_add_policy_arg(b, POLICY_LAYER_PROJECT, file, &perr) < 0 ||
		    !(p = policy_builder_compile(b, &perr))) {
			fprintf(stderr, "sluicectl: %s\n", policy_error_format(&perr, buf, sizeof buf));
			goto out;
		}
		json = policy_serialize(p);
	} else {
		json_object_object_add(rules, "allow", json_object_get(allow));
		json_object_object_add(rules, "deny", json_object_get(deny));
		json = strdup(json_object_to_json_string_ext(rules, JSON_C_TO_STRING_PLAIN));
	}
	if (!json) {
		fprintf(stderr, "sluicectl: out of memory\n");
		goto out;
	}
	r = file ? netd_session_set_policy_by_id(id, json, err, sizeof err) :
	           netd_session_add_rules_by_id(id, json, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "sluicectl: session policy %s: %s\n", id, err[0] ? err : strerror(-r));
		rc = 1;
		goto out;
	}
	printf("session %s: policy %s; the next request is decided by it\n", id, file ? "replaced" : "changed");
	rc = 0;
	goto out;
usage:
	fprintf(stderr, "usage: sluicectl session policy ID (--allow HOST[:PORT] | --deny HOST[:PORT])... | --file FILE\n");
out:
	free(json);
	policy_unref(p);
	policy_builder_free(b);
	json_object_put(allow);
	json_object_put(deny);
	json_object_put(rules);
	return rc;
}

int ctl_session(int argc, char **argv)
{
	char err[1024] = "";

	if (argc >= 1 && strcmp(argv[0], "sessions") == 0)
		return ctl_sessions(argc, argv);
	if (argc == 3 && strcmp(argv[1], "end") == 0) {
		int r = netd_session_end(argv[2], err, sizeof err);
		if (r < 0) {
			fprintf(stderr, "sluicectl: session end %s: %s\n", argv[2], err[0] ? err : strerror(-r));
			return 1;
		}
		return 0;
	}
	if (argc >= 2 && (strcmp(argv[1], "save") == 0 || strcmp(argv[1], "discard") == 0))
		return session_saved(argv[1], argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "policy") == 0)
		return session_policy(argc - 1, argv + 1);
	fprintf(stderr, "usage: sluicectl session end ID | policy ID (--allow P | --deny P)... | --file FILE\n"
	                "       sluicectl session save [--patch] [--protected] ID | discard ID\n");
	return 2;
}
