/* The ask channel of the filesystem gate (`sluice run --fs ask`): an open outside the allow-list is held
 * here, its FUSE request unanswered, until `sluicectl approve|deny` decides over the control socket
 * (common/fsask.h) or --ask-timeout denies it. Opens of the same path wait on one ask; an approval
 * --subtree settles the other held opens beneath it; every step is an audit record (fsgate.c), and
 * an approval that cannot be recorded is refused. The prompt on the launcher's terminal shows the host
 * path first and at most GATE_PROMPT_CMD printable bytes of the command line the sandbox wrote.
 * fsgate.c is the file system around it (fsgate.h). */
#include "fsgate.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* pid is in the sandbox's pid namespace (FUSE reports the mounter's): read it from the sandbox's
 * own /proc, which init handed over with its ready byte. */
static void cmdline_of(const struct gate *g, pid_t pid, char *out, size_t len)
{
	char path[32];
	ssize_t n = -1;
	int fd = -1;

	snprintf(path, sizeof path, "%d/cmdline", (int)pid);
	if (g->procfd >= 0)
		fd = openat(g->procfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		n = read(fd, out, len - 1);
		close(fd);
	}
	if (n <= 0) {
		snprintf(out, len, "pid %d", (int)pid);
		return;
	}
	for (ssize_t i = 0; i < n; i++)
		if (out[i] == '\0')
			out[i] = ' ';
		else if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
			out[i] = '?';
	while (n > 0 && out[n - 1] == ' ')
		n--;
	out[n] = '\0';
}

#define GATE_PROMPT_CMD 48 /* bytes of the command line the prompt shows */

/* The command line for the prompt: printable ASCII, at most GATE_PROMPT_CMD bytes (then "..."). The
 * sandbox writes its own argv, so it must neither carry terminal controls nor be long enough to push
 * the path out of the approver's sight (a command line that reads "wants to read /harmless" and then
 * pads the real path onto a later line). */
static const char *prompt_cmd(const char *cmd, char *buf, size_t len)
{
	util_printable(buf, len, cmd);
	for (char *q = buf; *q; q++)
		if (*q == '"')
			*q = '\''; /* the quotes around it are the prompt's */
	if (strlen(buf) > GATE_PROMPT_CMD && len > GATE_PROMPT_CMD + 3)
		memcpy(buf + GATE_PROMPT_CMD, "...", 4);
	return buf;
}

static void ask_finish(struct gate *g, struct gate_ask *a, bool allow);

/* A held open whose caller was interrupted: answered EINTR at once; an ask nobody waits for any more
 * ends (recorded as abandoned). */
static void ask_interrupted(fuse_req_t req, void *data)
{
	struct gate *g = data;

	for (struct gate_ask *a = g->asks; a; a = a->next)
		for (struct gate_wait **pp = &a->waiters; *pp; pp = &(*pp)->next) {
			if ((*pp)->req != req)
				continue;
			struct gate_wait *w = *pp;
			*pp = w->next;
			fuse_reply_err(req, EINTR);
			free(w);
			if (!a->waiters) {
				sb_gate_audit(g, "abandoned", "deny", a->path, a->cmd, a->id, -1);
				ask_finish(g, a, false);
			}
			return;
		}
}

void sb_gate_ask_wait(struct gate *g, fuse_req_t req, enum gate_op op, struct gate_node *node, const char *path,
                      struct fuse_file_info *fi)
{
	struct gate_ask *a;
	struct gate_wait *w = calloc(1, sizeof *w);

	if (!w) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	w->req = req;
	w->op = op;
	w->node = node;
	if (fi)
		w->fi = *fi;
	for (a = g->asks; a; a = a->next)
		if (strcmp(a->path, path) == 0)
			break;
	if (!a) {
		uint8_t rnd[4];
		if (g->nasks >= GATE_ASKS_MAX || getrandom(rnd, sizeof rnd, 0) != sizeof rnd ||
		    !(a = calloc(1, sizeof *a)) || !(a->path = strdup(path))) {
			free(a);
			free(w);
			sb_gate_audit(g, "denied", "deny", path, NULL, NULL, -1);
			fuse_reply_err(req, EACCES);
			return;
		}
		snprintf(a->id, sizeof a->id, "fs-%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
		cmdline_of(g, fuse_req_ctx(req)->pid, a->cmd, sizeof a->cmd);
		a->dir = op == OP_OPENDIR;
		a->node = node;
		a->created = time(NULL);
		clock_gettime(CLOCK_MONOTONIC, &a->deadline);
		a->deadline.tv_sec += g->wait_s;
		if (sb_gate_audit(g, "asked", "ask", path, a->cmd, a->id, -1) < 0) {
			/* not recorded, not asked: refused */
			free(a->path);
			free(a);
			free(w);
			fuse_reply_err(req, EACCES);
			return;
		}
		a->next = g->asks;
		g->asks = a;
		g->nasks++;
		if (!g->s->cfg->quiet) {
			/* the host path first, before anything the sandbox wrote (its command line) */
			char safe[PATH_MAX], cmd[FSASK_COMMAND_MAX + 1];
			fprintf(stderr,
			        "sluice: a read of %s is held (asked by \"%s\"); waiting: sluicectl approve %s "
			        "[--subtree] | sluicectl deny %s (denied in %u s)\n",
			        util_printable(safe, sizeof safe, a->path), prompt_cmd(a->cmd, cmd, sizeof cmd), a->id,
			        a->id, g->wait_s);
		}
	}
	w->next = a->waiters;
	a->waiters = w;
	/* the opener may give up (a signal, the session killed): the kernel says so with an INTERRUPT,
	 * which must be answered, or a killed process would wait for the decision uninterruptibly */
	fuse_req_interrupt_func(req, ask_interrupted, g);
}

static void ask_finish(struct gate *g, struct gate_ask *a, bool allow)
{
	struct gate_ask **pp;
	struct gate_wait *w, *next;

	for (pp = &g->asks; *pp && *pp != a; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = a->next;
	g->nasks--;
	for (w = a->waiters; w; w = next) {
		next = w->next;
		if (!allow)
			fuse_reply_err(w->req, EACCES);
		else
			sb_gate_open_real(g, w->req, w->node, &w->fi, w->op == OP_OPENDIR);
		free(w);
	}
	free(a->path);
	free(a);
}

/* After a verdict: other held opens that a rule now decides end too (a --subtree approval). */
static void asks_settle(struct gate *g)
{
	for (struct gate_ask *a = g->asks, *next; a; a = next) {
		next = a->next;
		enum verdict v = sb_gate_decide(g, a->path, false);
		if (v != V_ASK)
			ask_finish(g, a, v == V_ALLOW);
	}
}

/* Denies the held opens whose time is up (recorded, and said unless --quiet); returns the milliseconds
 * until the earliest deadline left, or -1 when nothing is held: the gate's poll timeout. */
int sb_gate_asks_expire(struct gate *g)
{
	int timeout = -1;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	for (struct gate_ask *a = g->asks, *next; a; a = next) {
		next = a->next;
		long ms =
		        (long)(a->deadline.tv_sec - now.tv_sec) * 1000 + (a->deadline.tv_nsec - now.tv_nsec) / 1000000;
		if (ms <= 0) {
			sb_gate_audit(g, "timed-out", "deny", a->path, a->cmd, a->id, -1);
			if (!g->s->cfg->quiet) {
				char safe[PATH_MAX];
				fprintf(stderr, "sluice: %s: nobody decided in %u s; %s is denied\n", a->id, g->wait_s,
				        util_printable(safe, sizeof safe, a->path));
			}
			ask_finish(g, a, false);
			continue;
		}
		if (timeout < 0 || ms < timeout)
			timeout = (int)ms;
	}
	return timeout;
}

/* ---- the control socket ---- */

static void send_error(int fd, int e, const char *msg)
{
	struct ipc_buf b;
	if (ipc_buf_init(&b, FSASK_MSG_ERROR, 0) < 0)
		return;
	ipc_buf_put_u32(&b, FSASK_A_ERRNO, (uint32_t)e);
	ipc_buf_put_str(&b, FSASK_A_ERRMSG, msg);
	ipc_send(fd, &b);
	ipc_buf_release(&b);
}

static int send_ask(struct gate *g, int fd, const struct gate_ask *a, int verdict, bool subtree)
{
	struct ipc_buf b;
	struct timespec now;
	long long left;
	int r;

	clock_gettime(CLOCK_MONOTONIC, &now);
	left = a->deadline.tv_sec - now.tv_sec;
	if ((r = ipc_buf_init(&b, FSASK_MSG_ASK, 0)) < 0)
		return r;
	ipc_buf_put_str(&b, FSASK_A_ID, a->id);
	ipc_buf_put_str(&b, FSASK_A_SESSION, g->s->id);
	ipc_buf_put_u32(&b, FSASK_A_UID, (uint32_t)g->s->cfg->uid);
	ipc_buf_put_str(&b, FSASK_A_PATH, a->path);
	ipc_buf_put_str(&b, FSASK_A_COMMAND, a->cmd);
	ipc_buf_put_u32(&b, FSASK_A_TIMEOUT, (uint32_t)((time(NULL) - a->created) + (left > 0 ? left : 0)));
	ipc_buf_put_u64(&b, FSASK_A_CREATED, (uint64_t)a->created);
	ipc_buf_put_u8(&b, FSASK_A_DIR, a->dir);
	if (g->s->cfg->project_dir)
		ipc_buf_put_str(&b, FSASK_A_PROJECT, g->s->cfg->project_dir);
	if (verdict >= 0) {
		ipc_buf_put_u8(&b, FSASK_A_VERDICT, (uint8_t)verdict);
		ipc_buf_put_u8(&b, FSASK_A_SUBTREE, subtree);
	}
	r = ipc_send(fd, &b);
	ipc_buf_release(&b);
	return r;
}

void sb_gate_client_msg(struct gate *g, int fd, uid_t by)
{
	struct ipc_msg m;
	char err[256];
	int r = ipc_recv_nowait(fd, &m);

	if (r == -EAGAIN) {
		ipc_msg_clear(&m);
		return;
	}
	if (r < 0 || (r = ipc_msg_check(&fsask_proto, &m, FSASK_CS_GATE, err, sizeof err)) < 0) {
		ipc_msg_clear(&m);
		for (size_t i = 0; i < GATE_CLIENTS_MAX; i++)
			if (g->clients[i] == fd)
				g->clients[i] = -1;
		close(fd);
		return;
	}
	if (m.type == FSASK_MSG_LIST) {
		for (const struct gate_ask *a = g->asks; a; a = a->next)
			if (send_ask(g, fd, a, -1, false) < 0)
				break;
		ipc_send_empty(fd, FSASK_MSG_END, m.seq);
	} else {
		const char *id = ipc_get_str(&m, FSASK_A_ID);
		bool allow = ipc_get_u8(&m, FSASK_A_VERDICT, 0) == 1;
		bool subtree = ipc_get_u8(&m, FSASK_A_SUBTREE, 0) == 1;
		struct gate_ask *a;

		for (a = g->asks; a; a = a->next)
			if (strcmp(a->id, id) == 0)
				break;
		if (!a) {
			send_error(fd, ENOENT, "no such held open (it may have been decided or timed out)");
		} else if (g->nrules == GATE_RULES_MAX) {
			send_error(fd, ENOSPC, "too many decisions in this session");
		} else if (sb_gate_audit(g, allow ? "approved" : "denied", allow ? "allow" : "deny", a->path, a->cmd,
		                         a->id, (long long)by) < 0 &&
		           allow) {
			/* only a denial stands unrecorded */
			send_error(fd, EIO, "the audit log cannot be written: not approved");
		} else if (sb_gate_rule_add(g, a->path, subtree, allow, false) < 0) {
			send_error(fd, ENOMEM, "out of memory");
		} else {
			if (!allow)
				sb_gate_id_deny(g, a->node->fd, subtree);
			const char *layer = ipc_get_str(&m, FSASK_A_REMEMBER);
			if (allow && layer)
				sb_gate_audit(g, "remembered", layer, a->path, a->cmd, a->id, (long long)by);
			send_ask(g, fd, a, allow, subtree);
			ask_finish(g, a, allow);
			asks_settle(g);
		}
	}
	ipc_msg_clear(&m);
}

void sb_gate_accept_client(struct gate *g)
{
	int fd = accept4(g->listenfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	uid_t uid;

	if (fd < 0)
		return;
	/* only the session's user and root may see or decide its opens */
	if (ipc_peer_cred(fd, &uid, NULL, NULL) < 0 || (uid != 0 && uid != g->s->cfg->uid)) {
		close(fd);
		return;
	}
	for (size_t i = 0; i < GATE_CLIENTS_MAX; i++)
		if (g->clients[i] < 0) {
			g->clients[i] = fd;
			return;
		}
	close(fd);
}

int sb_gate_listen_control(struct gate *g)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n = snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, FSASK_SOCK_PREFIX "%u/%s", (unsigned)g->s->cfg->uid,
	                 g->s->id);
	g->listenfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (g->listenfd < 0 ||
	    bind(g->listenfd, (struct sockaddr *)&sa,
	         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) < 0 ||
	    listen(g->listenfd, 16) < 0)
		return -errno;
	return 0;
}
