/* The filesystem gate of `sluice run --fs ask`: a FUSE file system (libfuse3, low-level API) served by
 * a process of the launcher's, outside the sandbox, that shows the host read-only as the sandbox's
 * root. The allow-list's trees (system directories, the project, caches, binds) are mounted over it
 * as in the relaxed view, so they never reach the gate; what does reach it is everything else: an
 * open of a file, or of a directory to list it, outside the allow-list waits here, its FUSE request
 * unanswered (only the calling thread blocks), until `sluicectl approve|deny` decides or
 * --ask-timeout denies it. Lookups are answered (names and attributes are visible, contents are not).
 *
 * Why the decision applies to the object actually opened (docs/sandbox.md, "--fs ask"): the gate
 * serves each node from an O_PATH descriptor it opened itself, one component at a time relative to
 * its parent's descriptor with O_NOFOLLOW, and decides on that node's path as the gate built it, never
 * on a path string from the sandbox. An open reopens that same descriptor. Symlinks are returned as
 * symlinks for the sandbox's kernel to resolve in the sandbox's own view (so /proc/self/root, dirfds
 * and O_PATH-then-/proc/self/fd reopens all come back here as lookups and opens of nodes); the view is
 * read-only, so the sandbox cannot rename, link or swap anything in it; masked paths are refused by
 * path and by identity (device and inode), so a hard link to a secret is refused too.
 *
 * One thread, one poll loop: /dev/fuse, the control socket for sluicectl (common/fsask.h), its
 * clients, the init's socket (its "ready" byte ends the setup phase, in which init's own lookups for
 * the mount points are answered without asking), and the earliest ask deadline.
 *
 * This file is the file system: the rules and identities that decide, the audit records, the nodes and
 * the FUSE operations, and the gate process with its loop. fsgate-ask.c is the ask channel (the opens
 * held for a decision, the prompt, the control socket); fsgate.h is what the two share. */
#include "fsgate.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- paths and rules ---- */

/* Whether path is base or beneath it. */
static bool under(const char *path, const char *base)
{
	size_t n = strlen(base);
	if (strcmp(base, "/") == 0)
		return true;
	return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int sb_gate_rule_add(struct gate *g, const char *path, bool subtree, bool allow, bool mount)
{
	for (size_t i = 0; i < g->nrules; i++) {
		struct gate_rule *r = &g->rules[i];
		if (strcmp(r->path, path) == 0 && r->subtree == subtree && !r->mount && !mount) {
			r->allow = allow;
			return 0;
		}
	}
	if (g->nrules == GATE_RULES_MAX)
		return -ENOSPC;
	char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	g->rules[g->nrules++] = (struct gate_rule){p, subtree, allow, mount};
	return 0;
}

static size_t id_slot(dev_t dev, ino_t ino)
{
	uint64_t h = ((uint64_t)ino * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)dev * 0xc2b2ae3d27d4eb4full);
	return (size_t)(h >> 17) & (GATE_IDS_SLOTS - 1);
}

/* Whether (dev, ino) is a masked or denied file; cost independent of how many there are. */
static bool id_denied(const struct gate *g, dev_t dev, ino_t ino)
{
	for (size_t i = id_slot(dev, ino); g->ids[i].used; i = (i + 1) & (GATE_IDS_SLOTS - 1))
		if (g->ids[i].dev == dev && g->ids[i].ino == ino)
			return true;
	return false;
}

static void id_add(struct gate *g, const struct stat *st)
{
	size_t i = id_slot(st->st_dev, st->st_ino);

	if (g->nids >= GATE_IDS_MAX)
		return;
	for (; g->ids[i].used; i = (i + 1) & (GATE_IDS_SLOTS - 1))
		if (g->ids[i].dev == st->st_dev && g->ids[i].ino == st->st_ino)
			return;
	g->ids[i] = (struct gate_id){st->st_dev, st->st_ino, true};
	g->nids++;
}

/* Records the identity of every file of dfd's tree (bounded in depth and count; dfd is consumed),
 * so that another name for one of them (a hard link) is refused as the file itself is. */
static void id_scan(struct gate *g, int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d) {
		close(dfd);
		return;
	}
	while ((de = readdir(d)) != NULL && g->nids < GATE_IDS_MAX && g->scanned++ < GATE_SCAN_MAX) {
		struct stat st;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			int sub = depth < GATE_SCAN_DEPTH ? openat(dirfd(d), de->d_name,
			                                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
			                                  : -1;
			if (sub >= 0)
				id_scan(g, sub, depth + 1);
		} else if (!S_ISLNK(st.st_mode)) {
			id_add(g, &st);
		}
	}
	closedir(d);
}

/* A denied (or masked) object by its O_PATH fd: itself, or for a directory with subtree, the files
 * beneath it. */
void sb_gate_id_deny(struct gate *g, int fd, bool subtree)
{
	struct stat st;
	char proc[32];

	if (fd < 0 || fstat(fd, &st) < 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		id_add(g, &st);
		return;
	}
	if (!subtree)
		return;
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
	int d = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d >= 0)
		id_scan(g, d, 0);
}

static bool masked(const struct gate *g, const char *path, dev_t dev, ino_t ino, bool have_id)
{
	if (have_id && id_denied(g, dev, ino))
		return true;
	for (size_t i = 0; i < g->s->n_masks; i++) {
		const struct sb_mask *m = &g->s->masks[i];
		if (under(path, m->path) || (have_id && m->dev == dev && m->ino == ino))
			return true;
	}
	/* every masked path as written and as resolved, also those absent at the start: a ~/.aws the
	 * user creates on the host during the session is refused as well (masks.c) */
	for (size_t i = 0; i < g->s->mask_paths.n; i++)
		if (under(path, g->s->mask_paths.v[i]))
			return true;
	return false;
}

/* The most specific rule decides (an exact rule beats a subtree one of the same path, a denial beats
 * an allowance of the same specificity). lookup: the ancestors of the allow-list's mount points may
 * be looked up (not listed), or nothing beneath could be reached. */
enum verdict sb_gate_decide(const struct gate *g, const char *path, bool lookup)
{
	const struct gate_rule *best = NULL;
	size_t bestlen = 0;

	if (masked(g, path, 0, 0, false))
		return V_MASKED;
	if (g->setup)
		return V_ALLOW;
	for (size_t i = 0; i < g->nrules; i++) {
		const struct gate_rule *r = &g->rules[i];
		size_t n = strlen(r->path);
		if (r->mount) {
			if (lookup && under(r->path, path))
				return V_ALLOW;
			if (!under(path, r->path))
				continue;
		} else if (r->subtree ? !under(path, r->path) : strcmp(path, r->path) != 0) {
			continue;
		}
		if (!best || n > bestlen || (n == bestlen && !r->subtree && best->subtree) ||
		    (n == bestlen && r->subtree == best->subtree && !r->allow)) {
			best = r;
			bestlen = n;
		}
	}
	/* the root's listing holds only the names of the top-level directories */
	if (!best && strcmp(path, "/") == 0)
		return V_ALLOW;
	if (!best)
		return V_ASK;
	return best->allow ? V_ALLOW : V_DENY;
}

/* Whether path is a strict ancestor of a mount point of the allow-list: the sandbox must be able to
 * pass through it (search permission) to reach what is mounted beneath, whoever owns it. */
static bool on_the_way(const struct gate *g, const char *path)
{
	for (size_t i = 0; i < g->nrules; i++)
		if (g->rules[i].mount && strcmp(g->rules[i].path, path) != 0 && under(g->rules[i].path, path))
			return true;
	return false;
}

static void fix_mode(const struct gate *g, const char *path, struct stat *st)
{
	if (S_ISDIR(st->st_mode) && on_the_way(g, path))
		st->st_mode |= S_IXUSR | S_IXGRP | S_IXOTH;
}

/* ---- audit ---- */

static void json_str(char *out, size_t len, const char *s)
{
	size_t o = 0;
	for (; s && *s && o + 7 < len; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			o += (size_t)snprintf(out + o, len - o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			o += (size_t)snprintf(out + o, len - o, "\\u%04x", ch);
		else
			out[o++] = (char)ch;
	}
	out[o] = '\0';
}

/* One record per decision: event asked|approved|denied|timed-out|masked; decision ask|allow|deny.
 * Returns 0 or -errno: a decision that cannot be recorded is not made (the callers fail closed). */
static int audit_n(struct gate *g, const char *event, const char *decision, const char *path, const char *cmd,
                   const char *id, long long by, unsigned long repeated)
{
	char line[3 * PATH_MAX], p[2 * PATH_MAX], c[2 * FSASK_COMMAND_MAX], t[40];
	struct timespec ts;
	struct tm tm;
	int n;

	if (g->auditfd < 0)
		return -EBADF;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(t, sizeof t, "%Y-%m-%dT%H:%M:%S", &tm);
	json_str(p, sizeof p, path);
	json_str(c, sizeof c, cmd ? cmd : "");
	n = snprintf(line, sizeof line,
	             "{\"time\":\"%s.%03ldZ\",\"session\":\"%s\",\"uid\":%u,\"protocol\":\"fs\",\"event\":\"%s\","
	             "\"decision\":\"%s\",\"path\":\"%s\",\"command\":\"%s\"%s%s%s",
	             t, ts.tv_nsec / 1000000, g->s->id, (unsigned)g->s->cfg->uid, event, decision, p, c,
	             id ? ",\"ask\":\"" : "", id ? id : "", id ? "\"" : "");
	if (n > 0 && (size_t)n < sizeof line - 32 && by >= 0)
		n += snprintf(line + n, sizeof line - (size_t)n, ",\"by\":%lld", by);
	if (n > 0 && (size_t)n < sizeof line - 32 && repeated > 0)
		n += snprintf(line + n, sizeof line - (size_t)n, ",\"repeated\":%lu", repeated);
	if (n <= 0 || (size_t)n >= sizeof line - 2)
		return -ENAMETOOLONG;
	line[n++] = '}';
	line[n++] = '\n';
	if (write(g->auditfd, line, (size_t)n) != n) {
		log_warn("fs gate: cannot write the audit log");
		return -EIO;
	}
	return 0;
}

int sb_gate_audit(struct gate *g, const char *event, const char *decision, const char *path, const char *cmd,
                  const char *id, long long by)
{
	return audit_n(g, event, decision, path, cmd, id, by, 0);
}

/* A refusal of a masked path. The sandbox can repeat one as fast as it can call stat(2) (about 12,000
 * a second from one Python loop, each a record in the user's own state directory, outside --disk):
 * the first refusal of a path is recorded, the ones within GATE_QUIET_S after it only counted, and the
 * count goes with its next record ("repeated"), or is written when its slot is needed for another path.
 * A denial needs no record to stand (fail closed); the count keeps the log's account whole. */
static void audit_masked(struct gate *g, const char *path)
{
	struct timespec now;
	uint64_t h = 1469598103934665603ull;
	struct gate_quiet *q;

	for (const char *p = path; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	q = &g->quiet[h % GATE_QUIET_SLOTS];
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (strcmp(q->path, path) == 0) {
		if (now.tv_sec - q->last < GATE_QUIET_S) {
			q->repeated++;
			return;
		}
		audit_n(g, "masked", "deny", path, NULL, NULL, -1, q->repeated);
	} else {
		if (q->path[0] && q->repeated)
			audit_n(g, "masked", "deny", q->path, NULL, NULL, -1, q->repeated);
		sb_gate_audit(g, "masked", "deny", path, NULL, NULL, -1);
		util_strlcpy(q->path, path, sizeof q->path);
	}
	q->last = now.tv_sec;
	q->repeated = 0;
}

/* ---- nodes ---- */

static size_t hash(const struct gate_node *parent, const char *name)
{
	size_t h = (size_t)(uintptr_t)parent * 31u;
	for (; *name; name++)
		h = h * 131u + (unsigned char)*name;
	return h % GATE_BUCKETS;
}

static struct gate_node *node_of(struct gate *g, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? &g->root : (struct gate_node *)(uintptr_t)ino;
}

static fuse_ino_t ino_of(struct gate *g, struct gate_node *n)
{
	return n == &g->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

static int child_path(const struct gate_node *parent, const char *name, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%s", strcmp(parent->path, "/") == 0 ? "" : parent->path, name);
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* Opens parent/name without following it, checks it is not a masked object, and answers the lookup. */
static void lookup_real(struct gate *g, fuse_req_t req, struct gate_node *parent, const char *name)
{
	struct fuse_entry_param e;
	struct gate_node *n;
	char path[PATH_MAX];
	struct stat st;
	size_t h = hash(parent, name);
	int fd;

	if (child_path(parent, name, path, sizeof path) < 0) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	fd = openat(parent->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		int saved = errno;
		if (fd >= 0)
			close(fd);
		/* what the session's uid may not search does not exist for it (as in the relaxed view); the
		 * home's writable layer can then still create names there */
		fuse_reply_err(req, saved == EACCES ? ENOENT : saved);
		return;
	}
	if (masked(g, path, st.st_dev, st.st_ino, true)) {
		close(fd);
		if (!g->setup)
			audit_masked(g, path);
		fuse_reply_err(req, EACCES);
		return;
	}
	for (n = g->table[h]; n; n = n->hnext)
		if (n->parent == parent && strcmp(n->name, name) == 0)
			break;
	if (n && (n->dev != st.st_dev || n->ino != st.st_ino)) {
		/* replaced on the host: serve the new object under a new node */
		n = NULL;
	}
	if (n) {
		close(fd);
	} else {
		n = calloc(1, sizeof *n);
		if (!n || !(n->name = strdup(name)) || !(n->path = strdup(path))) {
			if (n)
				free(n->name);
			free(n);
			close(fd);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		n->parent = parent;
		parent->children++;
		n->fd = fd;
		n->dev = st.st_dev;
		n->ino = st.st_ino;
		n->mode = st.st_mode;
		n->hnext = g->table[h];
		g->table[h] = n;
	}
	n->nlookup++;
	memset(&e, 0, sizeof e);
	e.ino = ino_of(g, n);
	e.attr = st;
	fix_mode(g, n->path, &e.attr);
	e.attr_timeout = GATE_TTL;
	e.entry_timeout = GATE_TTL;
	fuse_reply_entry(req, &e);
}

void sb_gate_open_real(struct gate *g, fuse_req_t req, struct gate_node *n, struct fuse_file_info *fi, bool dir)
{
	char proc[32];
	int fd;

	(void)g;
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", n->fd);
	/* reopens the very object the decision was about (the gate's own descriptor) */
	fd = open(proc, O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0) | (fi->flags & O_NONBLOCK));
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	if (dir) {
		DIR *d = fdopendir(fd);
		if (!d) {
			int e = errno;
			close(fd);
			fuse_reply_err(req, e);
			return;
		}
		fi->fh = (uint64_t)(uintptr_t)d;
		if (fuse_reply_open(req, fi) != 0)
			closedir(d);
		return;
	}
	fi->fh = (uint64_t)fd;
	fi->keep_cache = 1;
	if (fuse_reply_open(req, fi) != 0)
		close(fd);
}

/* ---- FUSE operations ---- */

static void gate_init(void *data, struct fuse_conn_info *conn)
{
	(void)data;
	conn->want &= ~(unsigned)FUSE_CAP_ATOMIC_O_TRUNC;
}

static void gate_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct gate *g = fuse_req_userdata(req);
	struct gate_node *p = node_of(g, parent);
	char path[PATH_MAX];

	if (child_path(p, name, path, sizeof path) < 0) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	/* What is asked about is an open (of a file, or of a directory to list it): a lookup outside the
	 * allow-list is answered (the sandbox learns that the name exists and its attributes, not its
	 * content), so that `cat /a/b/c` asks once, about /a/b/c. The host's /sys is never shown, as in
	 * the relaxed view. Masked and denied paths are refused here already. */
	switch (sb_gate_decide(g, path, true)) {
	case V_ASK:
		if (under(path, "/sys"))
			fuse_reply_err(req, ENOENT);
		else
			lookup_real(g, req, p, name);
		return;
	case V_ALLOW: lookup_real(g, req, p, name); return;
	case V_MASKED:
		if (!g->setup)
			audit_masked(g, path);
		fuse_reply_err(req, EACCES);
		return;
	case V_DENY: fuse_reply_err(req, EACCES); return;
	}
}

/* Frees n once the kernel forgot it and no node beneath it is left (then perhaps its parent too). */
static void node_release(struct gate *g, struct gate_node *n)
{
	while (n && n != &g->root && n->nlookup == 0 && n->children == 0) {
		struct gate_node *parent = n->parent, **pp = &g->table[hash(parent, n->name)];
		while (*pp && *pp != n)
			pp = &(*pp)->hnext;
		if (*pp)
			*pp = n->hnext;
		close(n->fd);
		free(n->name);
		free(n->path);
		free(n);
		parent->children--;
		n = parent;
	}
}

static void gate_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct gate *g = fuse_req_userdata(req);
	struct gate_node *n = node_of(g, ino);
	n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	node_release(g, n);
	fuse_reply_none(req);
}

static void gate_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct gate *g = fuse_req_userdata(req);
	struct gate_node *n = node_of(g, ino);
	struct stat st;
	(void)fi;
	if (fstatat(n->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	fix_mode(g, n->path, &st);
	fuse_reply_attr(req, &st, GATE_TTL);
}

static void gate_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct gate *g = fuse_req_userdata(req);
	char buf[PATH_MAX];
	ssize_t n = readlinkat(node_of(g, ino)->fd, "", buf, sizeof buf - 1);
	if (n < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
}

static void gate_open_common(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, bool dir)
{
	struct gate *g = fuse_req_userdata(req);
	struct gate_node *n = node_of(g, ino);

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	enum verdict v = sb_gate_decide(g, n->path, false);
	if (v != V_MASKED && id_denied(g, n->dev, n->ino))
		v = V_MASKED; /* another name of a masked or denied file */
	switch (v) {
	case V_ALLOW: sb_gate_open_real(g, req, n, fi, dir); return;
	case V_MASKED:
		audit_masked(g, n->path);
		fuse_reply_err(req, EACCES);
		return;
	case V_DENY: fuse_reply_err(req, EACCES); return;
	case V_ASK: sb_gate_ask_wait(g, req, dir ? OP_OPENDIR : OP_OPEN, n, n->path, fi); return;
	}
}

static void gate_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	gate_open_common(req, ino, fi, false);
}

static void gate_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	gate_open_common(req, ino, fi, true);
}

static void gate_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
	(void)ino;
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void gate_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static void gate_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	DIR *d = (DIR *)(uintptr_t)fi->fh;
	char *buf = calloc(1, size);
	size_t used = 0;
	struct dirent *de;

	(void)ino;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	seekdir(d, off);
	while ((de = readdir(d)) != NULL) {
		struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)DTTOIF(de->d_type)};
		size_t n = fuse_add_direntry(req, buf + used, size - used, de->d_name, &st, telldir(d));
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void gate_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	closedir((DIR *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void gate_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct gate *g = fuse_req_userdata(req);
	struct statvfs sv;
	if (fstatvfs(node_of(g, ino)->fd, &sv) < 0 && statvfs("/", &sv) < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &sv);
}

static void gate_nosys(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	(void)ino;
	(void)name;
	(void)size;
	fuse_reply_err(req, ENOSYS);
}

static const struct fuse_lowlevel_ops gate_ops = {
        .init = gate_init,
        .lookup = gate_lookup,
        .forget = gate_forget,
        .getattr = gate_getattr,
        .readlink = gate_readlink,
        .open = gate_open,
        .read = gate_read,
        .release = gate_release,
        .opendir = gate_opendir,
        .readdir = gate_readdir,
        .releasedir = gate_releasedir,
        .statfs = gate_statfs,
        .getxattr = gate_nosys,
};

/* The audit log: --audit-log, else the user's state directory (root: /var/log/sluice). */
static int open_audit(const struct sb_config *c, char *path, size_t len)
{
	const char *st = getenv("XDG_STATE_HOME");

	if (c->audit_log)
		util_strlcpy(path, c->audit_log, len);
	else if (c->uid == 0)
		util_strlcpy(path, "/var/log/sluice/fs-audit.log", len);
	else if (st && st[0] == '/')
		snprintf(path, len, "%s/sluice/fs-audit.log", st);
	else if (c->home)
		snprintf(path, len, "%s/.local/state/sluice/fs-audit.log", c->home);
	else {
		snprintf(path, len, "(none: no home directory)");
		errno = ENOENT;
		return -1;
	}
	/* create the directories as the user would (best effort; the open below is what counts) */
	for (char *p = path + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(path, c->uid == 0 ? 0750 : 0700);
			*p = '/';
		}
	return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/* ---- the gate process ---- */

/* One byte (into *c when c) and at most one fd; -EPIPE at the end, -EPROTO with no fd. */
static int recv_fd(int sock, char *c)
{
	char byte = 0;
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	struct cmsghdr *cm;
	int fd = -1;

	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return -EPIPE;
	if (c)
		*c = byte;
	cm = CMSG_FIRSTHDR(&mh);
	if (mh.msg_flags & MSG_CTRUNC) {
		/* a truncated fd list: close whatever did arrive */
		for (; cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
				for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
					memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
					close(fd);
				}
		return -EPROTO;
	}
	if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EPROTO;
	memcpy(&fd, CMSG_DATA(cm), sizeof fd);
	return fd;
}

static int rules_init(struct gate *g)
{
	const struct sb_session *s = g->s;
	const struct sb_config *c = s->cfg;
	static const char *const sys[] = {"/usr", "/bin", "/sbin", "/lib",     "/lib32", "/lib64", "/libx32", "/etc",
	                                  "/opt", "/nix", "/tmp",  "/var/tmp", "/run",   "/dev",   "/proc"};
	int r = 0;

	for (size_t i = 0; r == 0 && i < sizeof sys / sizeof sys[0]; i++)
		r = sb_gate_rule_add(g, sys[i], true, true, true);
	if (r == 0 && c->project_dir)
		r = sb_gate_rule_add(g, c->project_dir, true, true, true);
	for (size_t i = 0; r == 0 && i < s->n_sources; i++)
		r = sb_gate_rule_add(g, s->sources[i].dst ? s->sources[i].dst : s->sources[i].path, true, true, true);
	for (size_t i = 0; r == 0 && i < c->fs_read.n; i++)
		r = sb_gate_rule_add(g, c->fs_read.v[i], true, true, false);
	return r;
}

static __attribute__((noreturn)) void gate_main(struct gate *g)
{
	const struct sb_config *c = g->s->cfg;
	char *argv0[] = {(char *)"sluice-fsgate", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(1, argv0);
	struct fuse_buf fbuf = {.mem = NULL};
	char mnt[32];
	int fusefd, r;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	prctl(PR_SET_NAME, "sluice-fsgate");
	/* every node the kernel holds is an O_PATH descriptor here */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGTSTP, SIG_IGN);
	signal(SIGTTOU, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	char apath[PATH_MAX];
	g->auditfd = open_audit(c, apath, sizeof apath);
	if (g->auditfd < 0) {
		fprintf(stderr,
		        "sluice: --fs ask records every decision, but the audit log %s cannot be opened: %s (give "
		        "--audit-log PATH, or use --fs relaxed)\n",
		        apath, strerror(errno));
		_exit(1);
	}
	if ((r = rules_init(g)) < 0 || (r = sb_gate_listen_control(g)) < 0) {
		fprintf(stderr, "sluice: the filesystem gate cannot start: %s\n", strerror(-r));
		_exit(1);
	}
	for (size_t i = 0; i < g->s->n_masks; i++) {
		int mfd = open(g->s->masks[i].path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		sb_gate_id_deny(g, mfd, true);
		if (mfd >= 0)
			close(mfd);
	}
	g->root.path = (char *)"/";
	g->root.fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	g->root.nlookup = 1;
	fusefd = recv_fd(g->initfd, NULL);
	if (fusefd < 0)
		_exit(0); /* init failed before mounting: it says why */
	g->se = fuse_session_new(&args, &gate_ops, sizeof gate_ops, g);
	snprintf(mnt, sizeof mnt, "/dev/fd/%d", fusefd);
	if (!g->se || fuse_session_mount(g->se, mnt) != 0) {
		fprintf(stderr, "sluice: the filesystem gate cannot serve /dev/fuse\n");
		_exit(1);
	}
	for (;;) {
		struct pollfd p[3 + GATE_CLIENTS_MAX];
		nfds_t n = 0;
		int timeout = sb_gate_asks_expire(g); /* the earliest ask deadline, or -1 */
		p[n++] = (struct pollfd){fuse_session_fd(g->se), POLLIN, 0};
		p[n++] = (struct pollfd){g->listenfd, POLLIN, 0};
		p[n++] = (struct pollfd){g->initfd, g->initfd >= 0 ? POLLIN : 0, 0};
		for (size_t i = 0; i < GATE_CLIENTS_MAX; i++)
			p[n++] = (struct pollfd){g->clients[i], POLLIN, 0};
		if (poll(p, n, timeout) < 0 && errno != EINTR)
			break;
		if (p[0].revents) {
			r = fuse_session_receive_buf(g->se, &fbuf);
			if (r == -EINTR || r == -EAGAIN)
				continue;
			if (r <= 0)
				break; /* the sandbox's mount is gone */
			fuse_session_process_buf(g->se, &fbuf);
			if (fuse_session_exited(g->se))
				break;
		}
		if (p[1].revents & POLLIN)
			sb_gate_accept_client(g);
		if (p[2].revents) {
			char b = 0;
			int pfd = recv_fd(g->initfd, &b);
			if (pfd >= 0 && g->procfd < 0)
				g->procfd = pfd;
			else if (pfd >= 0)
				close(pfd);
			/* the ready byte, or init's end closing: setup is over either way */
			if (pfd == -EPIPE || b == 'R') {
				g->setup = false;
				/* A root launch: from now on read as the session's own uid, never as root
				 * (init's lookups for the mount points were root's). */
				if (geteuid() == 0 && g->s->host_uid != 0 &&
				    (setgroups(0, NULL) < 0 || (setfsgid(g->s->host_uid), setfsuid(g->s->host_uid),
				                                (uid_t)setfsuid((uid_t)-1) != g->s->host_uid))) {
					fprintf(stderr, "sluice: the filesystem gate cannot drop root's rights\n");
					break;
				}
				close(g->initfd);
				g->initfd = -1;
			}
		}
		for (size_t i = 0; i < GATE_CLIENTS_MAX; i++)
			if (g->clients[i] >= 0 && p[3 + i].revents) {
				uid_t by = 0;
				ipc_peer_cred(g->clients[i], &by, NULL, NULL);
				sb_gate_client_msg(g, g->clients[i], by);
			}
	}
	_exit(0);
}

int sb_fsgate_start(struct sb_session *s, char *err, size_t errlen)
{
	static struct gate g; /* the child's; the launcher never touches it */
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return sb_err(err, errlen, "socketpair: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		int e = errno;
		close(sv[0]);
		close(sv[1]);
		return sb_errc(err, errlen, e, "cannot start the filesystem gate: %s", strerror(e));
	}
	if (pid == 0) {
		close(sv[1]);
		memset(&g, 0, sizeof g);
		g.s = s;
		g.setup = true;
		g.initfd = sv[0];
		g.listenfd = -1;
		g.auditfd = -1;
		g.procfd = -1;
		g.wait_s = s->cfg->ask_timeout_s ? s->cfg->ask_timeout_s : GATE_DEFAULT_WAIT;
		for (size_t i = 0; i < GATE_CLIENTS_MAX; i++)
			g.clients[i] = -1;
		gate_main(&g);
	}
	close(sv[0]);
	s->fsgate_fd = sv[1];
	s->fsgate_pid = pid;
	log_info("launcher: filesystem gate pid %d (sluicectl asks lists its held opens)", (int)pid);
	return 0;
}

void sb_fsgate_stop(struct sb_session *s)
{
	if (s->fsgate_fd >= 0)
		close(s->fsgate_fd);
	s->fsgate_fd = -1;
	if (s->fsgate_pid > 0) {
		kill(s->fsgate_pid, SIGTERM);
		while (waitpid(s->fsgate_pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	s->fsgate_pid = -1;
}

static int send_fd(int sock, int fd, char c)
{
	struct iovec iov = {&c, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	memset(&u, 0, sizeof u);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

int sb_fsgate_mount(struct sb_session *s, char *err, size_t errlen)
{
	char fdstr[16], uid[16], gid[16];
	cleanup_fd int dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	int r;

	if (dev < 0)
		return sb_err(err, errlen, "--fs ask needs /dev/fuse: %s (use --fs relaxed)", strerror(errno));
	snprintf(fdstr, sizeof fdstr, "%d", dev);
	snprintf(uid, sizeof uid, "%u", (unsigned)getuid());
	snprintf(gid, sizeof gid, "%u", (unsigned)getgid());
	/* default_permissions: the kernel checks the command's uid against each file's mode, as it
	 * would on the host; allow_other: a root launch's command runs as another uid than init. */
	const char *opts[] = {
	        "fd", fdstr,         "rootmode", "40000",   "user_id", uid, "group_id", gid, "default_permissions",
	        NULL, "allow_other", NULL,       "subtype", "sluice",  NULL};
	int mfd = sb_new_fs("fuse", opts, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err, errlen);
	if (mfd < 0)
		return mfd;
	if ((r = send_fd(s->fsgate_fd, dev, 'F')) < 0) {
		close(mfd);
		if (r == -EPIPE || r == -ECONNRESET) {
			err[0] = '\0'; /* the gate is gone, and said why */
			return r;
		}
		return sb_errc(err, errlen, -r, "cannot hand /dev/fuse to the filesystem gate: %s", strerror(-r));
	}
	return mfd;
}

int sb_fsgate_ready(struct sb_session *s, char *err, size_t errlen)
{
	if (s->fsgate_fd < 0)
		return 0;
	/* with the sandbox's /proc, where the gate reads who opened what */
	cleanup_fd int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
	int r = proc >= 0 ? send_fd(s->fsgate_fd, proc, 'R') : (write(s->fsgate_fd, "R", 1) == 1 ? 0 : -errno);
	if (r < 0)
		return sb_errc(err, errlen, -r, "the filesystem gate went away: %s", strerror(-r));
	close(s->fsgate_fd);
	s->fsgate_fd = -1;
	return 0;
}

int sb_fsgate_home(const struct sb_session *s, int rootfd, long long owner, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	char lower[32], upper[32], work[32];

	if (!c->home || strcmp(c->home, "/") == 0)
		return 0;
	/* the home as the gate shows it (absent on the host: nothing to show) */
	cleanup_fd int lowerfd = sb_open_beneath(rootfd, c->home, O_PATH | O_DIRECTORY, err, errlen);
	if (lowerfd == -ENOENT || lowerfd == -EACCES) {
		err[0] = '\0';
		return 0;
	}
	if (lowerfd < 0)
		return lowerfd;
	if (mkdirat(s->scratch_fd, "home-upper", 0700) < 0 || mkdirat(s->scratch_fd, "home-work", 0700) < 0 ||
	    (owner >= 0 && fchownat(s->scratch_fd, "home-upper", (uid_t)owner, (gid_t)owner, AT_SYMLINK_NOFOLLOW) < 0))
		return sb_err(err, errlen, "cannot make the home's writable layer in the scratch space: %s",
		              strerror(errno));
	cleanup_fd int upperfd = openat(s->scratch_fd, "home-upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	cleanup_fd int workfd = openat(s->scratch_fd, "home-work", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	cleanup_fd int fs = fsopen("overlay", FSOPEN_CLOEXEC);
	if (upperfd < 0 || workfd < 0 || fs < 0)
		return sb_err(err, errlen, "cannot set up the home's writable layer: %s", strerror(errno));
	snprintf(lower, sizeof lower, "/proc/self/fd/%d", lowerfd);
	snprintf(upper, sizeof upper, "/proc/self/fd/%d", upperfd);
	snprintf(work, sizeof work, "/proc/self/fd/%d", workfd);
	if (fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir", lower, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) < 0 ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "workdir", work, 0) < 0 ||
	    (s->userns && fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0) ||
	    fsconfig(fs, FSCONFIG_SET_STRING, "index", "off", 0) < 0 ||
	    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return sb_err(err, errlen, "cannot set up the home's writable layer over %s: %s", c->home,
		              strerror(errno));
	cleanup_fd int tree = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (tree < 0)
		return sb_err(err, errlen, "cannot mount the home's writable layer: %s", strerror(errno));
	return sb_attach(tree, lowerfd, c->home, err, errlen);
}
