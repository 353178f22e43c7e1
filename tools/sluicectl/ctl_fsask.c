/* The filesystem half of `sluicectl asks|approve|deny`: opens held by the gates of `sluice run --fs
 * ask` sessions (sandbox/fsgate.c), reached over their control sockets (common/fsask.h), not through
 * sluiced: the gate is the launching user's own process and needs no privilege. Who may decide is
 * checked on both ends by SO_PEERCRED: root any, a user their own sessions. */
#include "ctl.h"

#include "fsask.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct fs_list {
	json_object *arr; /* borrowed; NULL = table */
	unsigned n;
	bool header_done;
};

static void print_plain(const char *s)
{
	for (; s && *s; s++)
		putchar(((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) ? '?' : *s);
}

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
	print_plain(e->id);
	printf(" fs   ");
	print_plain(e->session);
	printf(" %6u %4llds  ", (unsigned)e->uid, left);
	print_plain(e->path);
	printf("%s (", e->dir ? "/" : "");
	print_plain(e->command);
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
	printf("%s %s: read %s%s%s (session %s)\n", allow ? "approved" : "denied", e->id, e->path,
	       e->subtree ? " and everything beneath it" : "", e->dir && !e->subtree ? "/" : "", e->session);
}

int ctl_fsask_decide(const char *id, bool allow, bool subtree)
{
	char err[512] = "";
	int r = fsask_decide(id, allow, subtree, decided_cb, &allow, err, sizeof err);

	if (r < 0) {
		fprintf(stderr, "sluicectl: %s %s: %s\n", allow ? "approve" : "deny", id, err[0] ? err : strerror(-r));
		return 1;
	}
	return 0;
}
