/* The fs-ask channel (fsask.h): its permission table, and the client side used by sluicectl: find the
 * gates in /proc/net/unix, check who they are (SO_PEERCRED), list and decide. */
#include "fsask.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "util.h"

#define STR(max)                                                                                                       \
	{                                                                                                              \
		IPC_T_STR, (max), false                                                                                \
	}
#define STR_REQ(max)                                                                                                   \
	{                                                                                                              \
		IPC_T_STR, (max), true                                                                                 \
	}
#define U8                                                                                                             \
	{                                                                                                              \
		IPC_T_U8, 0, false                                                                                     \
	}
#define U8_REQ                                                                                                         \
	{                                                                                                              \
		IPC_T_U8, 0, true                                                                                      \
	}
#define U32_REQ                                                                                                        \
	{                                                                                                              \
		IPC_T_U32, 0, true                                                                                     \
	}
#define U64                                                                                                            \
	{                                                                                                              \
		IPC_T_U64, 0, false                                                                                    \
	}

static const struct ipc_msg_spec fsask_msgs[FSASK_MSG_COUNT_] = {
        [FSASK_MSG_LIST] = {"LIST", FSASK_CS_GATE, 0, {{0}}},
        [FSASK_MSG_DECIDE] = {"DECIDE",
                              FSASK_CS_GATE,
                              0,
                              {[FSASK_A_ID] = STR_REQ(FSASK_ID_MAX),
                               [FSASK_A_VERDICT] = U8_REQ,
                               [FSASK_A_SUBTREE] = U8,
                               [FSASK_A_REMEMBER] = STR(15)}},
        [FSASK_MSG_ASK] = {"ASK",
                           FSASK_CS_CLIENT,
                           0,
                           {[FSASK_A_ID] = STR_REQ(FSASK_ID_MAX),
                            [FSASK_A_SESSION] = STR_REQ(FSASK_SESSION_MAX),
                            [FSASK_A_UID] = U32_REQ,
                            [FSASK_A_PATH] = STR_REQ(FSASK_PATH_MAX),
                            [FSASK_A_COMMAND] = STR(FSASK_COMMAND_MAX),
                            [FSASK_A_TIMEOUT] = U32_REQ,
                            [FSASK_A_CREATED] = U64,
                            [FSASK_A_DIR] = U8,
                            [FSASK_A_SUBTREE] = U8,
                            [FSASK_A_VERDICT] = U8,
                            [FSASK_A_PROJECT] = STR(FSASK_PATH_MAX)}},
        [FSASK_MSG_END] = {"END", FSASK_CS_CLIENT, 0, {{0}}},
        [FSASK_MSG_ERROR] = {"ERROR",
                             FSASK_CS_CLIENT,
                             0,
                             {[FSASK_A_ERRNO] = U32_REQ, [FSASK_A_ERRMSG] = STR_REQ(FSASK_ERRMSG_MAX)}},
};

const struct ipc_proto fsask_proto = {"fsask", fsask_msgs, FSASK_MSG_COUNT_};

bool fsask_is_id(const char *id)
{
	return id && strncmp(id, "fs-", 3) == 0 && strlen(id) <= FSASK_ID_MAX;
}

#define GATE_ANSWER_S 3 /* a gate answers from its poll loop at once; one that does not is skipped */

/* Connects to the abstract socket name (without the leading NUL) and checks that the gate behind it
 * belongs to the caller (root: anyone). Returns the fd or -errno. Abstract names belong to whoever binds
 * them first: the process behind "sluice-fs/UID/..." must be UID's (or root's), else any user could show
 * root made-up opens under another user's name, or hold root's sluicectl forever with a silent socket
 * (hence also the timeouts). */
static int gate_connect(const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = GATE_ANSWER_S};
	size_t n = strlen(name);
	unsigned long owner;
	char *end;
	uid_t peer;
	int fd;

	if (n + 1 > sizeof sa.sun_path)
		return -ENAMETOOLONG;
	if (strncmp(name, FSASK_SOCK_PREFIX, strlen(FSASK_SOCK_PREFIX)) != 0)
		return -EINVAL;
	errno = 0;
	owner = strtoul(name + strlen(FSASK_SOCK_PREFIX), &end, 10);
	if (errno || *end != '/' || end == name + strlen(FSASK_SOCK_PREFIX) || owner > (uid_t)-2)
		return -EINVAL;
	memcpy(sa.sun_path + 1, name, n);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0 ||
	    ipc_peer_cred(fd, &peer, NULL, NULL) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if ((peer != (uid_t)owner && peer != 0) || (getuid() != 0 && (uid_t)owner != getuid())) {
		close(fd);
		return -EPERM;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

static void fill_entry(struct ipc_msg *m, struct fsask_entry *e)
{
	memset(e, 0, sizeof *e);
	e->id = ipc_get_str(m, FSASK_A_ID);
	e->session = ipc_get_str(m, FSASK_A_SESSION);
	e->path = ipc_get_str(m, FSASK_A_PATH);
	e->command = ipc_get_str(m, FSASK_A_COMMAND);
	e->project = ipc_get_str(m, FSASK_A_PROJECT);
	e->uid = ipc_get_u32(m, FSASK_A_UID, 0);
	e->timeout_s = ipc_get_u32(m, FSASK_A_TIMEOUT, 0);
	e->created = (long long)ipc_get_u64(m, FSASK_A_CREATED, 0);
	e->dir = ipc_get_u8(m, FSASK_A_DIR, 0) != 0;
	e->subtree = ipc_get_u8(m, FSASK_A_SUBTREE, 0) != 0;
}

/* Sends req and reads ASK records until END (list) or one ASK/ERROR (decide). Returns the number of
 * ASK records, or -errno (ERROR: its errno, message in err). */
static int exchange(int fd, struct ipc_buf *req, bool one, void (*fn)(const struct fsask_entry *, void *), void *arg,
                    char *err, size_t errlen)
{
	int r, n = 0;

	if ((r = ipc_send(fd, req)) < 0)
		return r;
	for (;;) {
		struct ipc_msg m;
		struct fsask_entry e;
		char cerr[256];

		if ((r = ipc_recv(fd, &m)) < 0 ||
		    (r = ipc_msg_check(&fsask_proto, &m, FSASK_CS_CLIENT, cerr, sizeof cerr)) < 0) {
			ipc_msg_clear(&m);
			return r;
		}
		if (m.type == FSASK_MSG_END) {
			ipc_msg_clear(&m);
			return n;
		}
		if (m.type == FSASK_MSG_ERROR) {
			r = -(int)ipc_get_u32(&m, FSASK_A_ERRNO, EIO);
			snprintf(err, errlen, "%s", ipc_get_str(&m, FSASK_A_ERRMSG));
			ipc_msg_clear(&m);
			return r < 0 ? r : -EIO;
		}
		fill_entry(&m, &e);
		n++;
		if (fn)
			fn(&e, arg);
		ipc_msg_clear(&m);
		if (one)
			return n;
	}
}

/* Calls each(name) for every gate socket in /proc/net/unix the caller may talk to (by the UID in
 * its name; the peer check in gate_connect is what counts). Stops when each returns nonzero. */
static int each_gate(int (*each)(const char *name, void *arg), void *arg, char *err, size_t errlen)
{
	FILE *f = fopen("/proc/net/unix", "re");
	char line[512], prefix[64];
	int r = 0;

	if (!f) {
		snprintf(err, errlen, "cannot read /proc/net/unix: %s", strerror(errno));
		return -errno;
	}
	snprintf(prefix, sizeof prefix, "@" FSASK_SOCK_PREFIX "%u/", (unsigned)getuid());
	while (r == 0 && fgets(line, sizeof line, f)) {
		char *p = strrchr(line, ' ');
		if (!p)
			continue;
		p++;
		p[strcspn(p, "\n")] = '\0';
		if (strncmp(p, "@" FSASK_SOCK_PREFIX, sizeof FSASK_SOCK_PREFIX) != 0)
			continue;
		if (getuid() != 0 && strncmp(p, prefix, strlen(prefix)) != 0)
			continue;
		/* a listening socket's line has state 01 and no peer; connected ones repeat the name */
		if (!strstr(line, " 00010000 ") && !strstr(line, " 00010000"))
			continue;
		r = each(p + 1, arg);
	}
	fclose(f);
	return r < 0 ? r : 0;
}

struct list_ctx {
	void (*fn)(const struct fsask_entry *, void *);
	void *arg;
	int gates;
	const char *id;
	bool allow, subtree;
	const char *remembered;
	int result;
	char *err;
	size_t errlen;
};

static int list_one(const char *name, void *p)
{
	struct list_ctx *c = p;
	struct ipc_buf b;
	int fd = gate_connect(name);

	if (fd < 0)
		return 0; /* gone meanwhile, or not the caller's: skip */
	if (ipc_buf_init(&b, FSASK_MSG_LIST, 1) == 0) {
		if (exchange(fd, &b, false, c->fn, c->arg, c->err, c->errlen) >= 0)
			c->gates++;
		ipc_buf_release(&b);
	}
	close(fd);
	return 0;
}

int fsask_list(void (*fn)(const struct fsask_entry *e, void *arg), void *arg, char *err, size_t errlen)
{
	struct list_ctx c = {.fn = fn, .arg = arg, .err = err, .errlen = errlen};
	int r = each_gate(list_one, &c, err, errlen);
	return r < 0 ? r : c.gates;
}

static void has_id(const struct fsask_entry *e, void *p)
{
	struct list_ctx *c = p;
	if (strcmp(e->id, c->id) == 0)
		c->result = 1;
}

static int decide_one(const char *name, void *p)
{
	struct list_ctx *c = p;
	struct list_ctx probe = {.id = c->id};
	struct ipc_buf b;
	int fd = gate_connect(name), r;

	if (fd < 0)
		return 0;
	/* only the gate holding the id gets the verdict */
	if (ipc_buf_init(&b, FSASK_MSG_LIST, 1) == 0) {
		exchange(fd, &b, false, has_id, &probe, c->err, c->errlen);
		ipc_buf_release(&b);
	}
	if (!probe.result) {
		close(fd);
		return 0;
	}
	if ((r = ipc_buf_init(&b, FSASK_MSG_DECIDE, 2)) < 0) {
		close(fd);
		return r;
	}
	ipc_buf_put_str(&b, FSASK_A_ID, c->id);
	ipc_buf_put_u8(&b, FSASK_A_VERDICT, c->allow ? 1 : 0);
	ipc_buf_put_u8(&b, FSASK_A_SUBTREE, c->subtree ? 1 : 0);
	if (c->remembered)
		ipc_buf_put_str(&b, FSASK_A_REMEMBER, c->remembered);
	r = exchange(fd, &b, true, c->fn, c->arg, c->err, c->errlen);
	ipc_buf_release(&b);
	close(fd);
	c->result = r < 0 ? r : 1;
	return 1;
}

int fsask_decide(const char *id, bool allow, bool subtree, const char *remembered,
                 void (*fn)(const struct fsask_entry *e, void *arg), void *arg, char *err, size_t errlen)
{
	struct list_ctx c = {.fn = fn,
	                     .arg = arg,
	                     .id = id,
	                     .allow = allow,
	                     .subtree = subtree,
	                     .remembered = remembered,
	                     .err = err,
	                     .errlen = errlen};
	int r;

	err[0] = '\0';
	if (!fsask_is_id(id)) {
		snprintf(err, errlen, "not an fs ask id");
		return -EINVAL;
	}
	if ((r = each_gate(decide_one, &c, err, errlen)) < 0)
		return r;
	if (c.result == 0) {
		snprintf(err, errlen,
		         "no such held open of yours (it may have been decided or timed out: `sluicectl asks`)");
		return -ENOENT;
	}
	return c.result < 0 ? c.result : 0;
}
