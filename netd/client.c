/* Launcher/tool side of the control protocol, and the embedded-helper fallback. */
#include "client.h"
#include "client_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "ipc.h"
#include "log.h"
#include "netd.h"
#include "proto.h"
#include "util.h"

struct netd_session {
	int fd;    /* owned: the control connection; closing it ends the session */
	pid_t pid; /* embedded helper, or -1 */
	int records_asked; /* RECORDS: 0 not sent, 1 sent, -errno sending failed */
};

static const char *run_dir(void)
{
	const char *d = getenv("SLUICE_RUN_DIR");

	return d && d[0] == '/' ? d : NETD_DEFAULT_RUN_DIR;
}

/* Connects to sluiced: fd, or -errno (ENOENT/ECONNREFUSED: not running). */
static int daemon_connect(char *err, size_t errlen)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	struct timeval tv = {30, 0};
	int fd;

	if ((size_t)snprintf(sun.sun_path, sizeof sun.sun_path, "%s/control.sock", run_dir()) >= sizeof sun.sun_path) {
		snprintf(err, errlen, "SLUICE_RUN_DIR is too long for a socket path");
		return -ENAMETOOLONG;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
		int r = -errno;
		close(fd);
		snprintf(err, errlen, "cannot reach sluiced at %s: %s", sun.sun_path, strerror(-r));
		return r;
	}
	/* setup takes milliseconds; a daemon that does not answer in 30 s is broken */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd;
}

static int recv_reply(int fd, uint32_t seq, struct ipc_msg *m, char *err, size_t errlen)
{
	char why[256];
	int r = ipc_recv(fd, m);

	if (r < 0) {
		snprintf(err, errlen, "no answer from the network daemon: %s",
			 r == -EAGAIN ? "timed out" : r == -EPIPE ? "it closed the connection" : strerror(-r));
		return r;
	}
	r = ipc_msg_check(&netd_control_proto, m, NETD_CS_CLIENT, why, sizeof why);
	if (r < 0) {
		snprintf(err, errlen, "bad answer from the network daemon: %s", why);
		return r;
	}
	if (m->type == NETD_MSG_ERROR) {
		snprintf(err, errlen, "%s", ipc_get_str(m, NETD_A_ERRMSG));
		r = -(int)ipc_get_u32(m, NETD_A_ERRNO, EIO);
		return r ? r : -EIO;
	}
	if (m->seq != seq && m->seq != 0) {
		snprintf(err, errlen, "the network daemon answered another request");
		return -EPROTO;
	}
	return 0;
}

static void copy_str(char *dst, size_t len, const struct ipc_msg *m, uint16_t attr)
{
	const char *s = ipc_get_str(m, attr);

	util_strlcpy(dst, s ? s : "", len);
}

static void fill_reply(const struct ipc_msg *m, struct netd_session_reply *r)
{
	memset(r, 0, sizeof *r);
	copy_str(r->id, sizeof r->id, m, NETD_A_ID);
	copy_str(r->addr4, sizeof r->addr4, m, NETD_A_ADDR4);
	copy_str(r->gw4, sizeof r->gw4, m, NETD_A_GW4);
	copy_str(r->addr6, sizeof r->addr6, m, NETD_A_ADDR6);
	copy_str(r->gw6, sizeof r->gw6, m, NETD_A_GW6);
	copy_str(r->resolv_conf, sizeof r->resolv_conf, m, NETD_A_RESOLV_CONF);
	copy_str(r->ca_cert, sizeof r->ca_cert, m, NETD_A_CA_CERT);
	r->proxy_port = ipc_get_u16(m, NETD_A_PROXY_PORT, NETD_DEFAULT_PROXY_PORT);
	r->socks_port = ipc_get_u16(m, NETD_A_SOCKS_PORT, 0);
}

/* The sluiced that serves an embedded session: $SLUICE_SLUICED when set (an absolute path: the tests
 * name their build's; only root starts an embedded helper, with root's own environment), else the one
 * beside a build tree's launcher (BUILD/sandbox/sluice -> BUILD/netd/sluiced), else where this build
 * installs it. */
static int helper_path(char *buf, size_t len)
{
	const char *env = getenv("SLUICE_SLUICED");
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && env[0] == '/') {
		if ((size_t)snprintf(buf, len, "%s", env) >= len)
			return -ENAMETOOLONG;
		return access(buf, X_OK) == 0 ? 0 : -errno;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		if ((slash = strrchr(exe, '/')) != NULL) {
			*slash = '\0';
			if ((size_t)snprintf(buf, len, "%s/../netd/sluiced", exe) < len && access(buf, X_OK) == 0)
				return 0;
		}
	}
	if ((size_t)snprintf(buf, len, "%s", SLUICE_SLUICED_PATH) >= len)
		return -ENAMETOOLONG;
	return access(buf, X_OK) == 0 ? 0 : -errno;
}

/* Starts the embedded helper, `sluiced --embedded` (exec'd, so the launcher itself links none of the
 * network code); returns our end of its socketpair and sets *pid. */
static int embedded_spawn(const char *audit_log, pid_t *pid, char *err, size_t errlen)
{
	char path[PATH_MAX], level[8];
	int sv[2], r;
	pid_t parent = getpid(), p;

	if ((r = helper_path(path, sizeof path)) < 0) {
		snprintf(err, errlen, "the embedded network helper %s cannot be run: %s (is sluice installed whole?)",
			 path, strerror(-r));
		return r;
	}
	snprintf(level, sizeof level, "%d", (int)log_get_level());
	r = ipc_socketpair(sv, false);
	if (r < 0) {
		snprintf(err, errlen, "socketpair: %s", strerror(-r));
		return r;
	}
	p = fork();
	if (p < 0) {
		r = -errno;
		close(sv[0]);
		close(sv[1]);
		snprintf(err, errlen, "starting the embedded network helper: %s", strerror(-r));
		return r;
	}
	if (p == 0) {
		int fd = sv[1];

		/* the helper tears down when the launcher's end closes; if the launcher dies it gets
		 * SIGTERM too. Its own process group keeps terminal signals meant for the command away. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		setpgid(0, 0);
		close(sv[0]);
		if (fd != 3) {
			if (dup2(fd, 3) < 0)
				_exit(1);
			close(fd);
			fd = 3;
		}
		close_range(4, ~0u, 0);
		{
			char a0[] = "sluiced", a1[] = "--embedded", a2[] = "3";
			char *argv[] = {a0, a1, a2, level, (char *)audit_log, NULL};
			if (!audit_log || !audit_log[0])
				argv[4] = NULL;
			execv(path, argv); /* the environment (SLUICE_RUN_DIR, test hooks) goes along */
		}
		_exit(127);
	}
	close(sv[1]);
	*pid = p;
	{
		struct timeval tv = {30, 0};
		setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	}
	return sv[0];
}

/* Says why a request carrying a policy could not be sent (nothing when r is 0). */
static void policy_send_error(int r, const char *policy_json, const char *what, char *err, size_t errlen)
{
	if (r == -EMSGSIZE && strlen(policy_json) > NETD_POLICY_MAX)
		snprintf(err, errlen, "the policy is too large to send (%zu bytes as JSON, at most %u MiB): "
			 "split it, or use wildcard rules (*.example.com) instead of many hosts",
			 strlen(policy_json), NETD_POLICY_MAX >> 20);
	else if (r < 0)
		snprintf(err, errlen, "%s: %s", what, strerror(-r));
}

/* netd_session_prepare's connection, for the next netd_session_open (the launcher is single-threaded
 * around it). */
static struct {
	int fd;          /* owned, or -1 */
	pid_t pid;       /* its embedded helper, or -1 */
	char *audit_log; /* owned: the audit log the helper was given, or NULL */
} prepared = {-1, -1, NULL};

static bool same_log(const char *a, const char *b)
{
	return a && b ? strcmp(a, b) == 0 : a == b;
}

void netd_session_prepare(const char *audit_log)
{
	char err[512];
	pid_t pid = -1;
	int fd;

	if (prepared.fd >= 0)
		return;
	fd = daemon_connect(err, sizeof err);
	if ((fd == -ENOENT || fd == -ECONNREFUSED) && geteuid() == 0)
		fd = embedded_spawn(audit_log, &pid, err, sizeof err);
	if (fd < 0)
		return;
	if (audit_log && !(prepared.audit_log = strdup(audit_log))) {
		close(fd); /* a helper exits on its end of file */
		return;
	}
	prepared.fd = fd;
	prepared.pid = pid;
}

void netd_session_unprepare(void)
{
	if (prepared.fd >= 0)
		close(prepared.fd);
	if (prepared.pid > 0)
		waitpid(prepared.pid, NULL, WNOHANG); /* else reaped by whoever inherits it */
	prepared.fd = prepared.pid = -1;
	free(prepared.audit_log);
	prepared.audit_log = NULL;
}

/* A session that failed: an embedded helper exits once every copy of its socket is closed, not waited
 * for here, as a copy may live on in a child the caller forked since netd_session_prepare (the
 * sandbox's pid 1, which the caller ends after this failure). */
static void drop(int fd, pid_t pid)
{
	close(fd);
	if (pid > 0)
		waitpid(pid, NULL, WNOHANG);
}

struct netd_session *netd_session_send(const struct netd_session_request *req, char *err, size_t errlen)
{
	struct netd_session *s = NULL;
	struct ipc_buf b = {0};
	pid_t pid = -1;
	int fd, r;
	bool embedded = false;

	if (!req || req->netns_fd < 0 || !req->command || !req->policy_json) {
		snprintf(err, errlen, "netd_session_send: missing netns fd, command or policy");
		return NULL;
	}
	if (prepared.fd >= 0 && same_log(prepared.audit_log, req->audit_log)) {
		fd = prepared.fd;
		pid = prepared.pid;
		embedded = pid > 0;
		prepared.fd = prepared.pid = -1;
		netd_session_unprepare(); /* frees the rest */
	} else {
		netd_session_unprepare();
		fd = daemon_connect(err, errlen);
	}
	if (!embedded && (fd == -ENOENT || fd == -ECONNREFUSED)) {
		if (geteuid() != 0) {
			snprintf(err, errlen,
				 "--allow-network needs the sluice network daemon, and it is not running (no %s/control.sock): "
				 "start it with `sudo systemctl start sluiced` (or run sluiced as root)", run_dir());
			return NULL;
		}
		fd = embedded_spawn(req->audit_log, &pid, err, errlen);
		embedded = true;
	}
	if (fd < 0)
		return NULL;
	r = ipc_buf_init(&b, NETD_MSG_ATTACH, 1);
	if (r == 0) {
		char cmd[NETD_COMMAND_MAX + 1];

		util_strlcpy(cmd, req->command, sizeof cmd); /* long command lines are cut, not refused */
		ipc_buf_put_str(&b, NETD_A_COMMAND, cmd);
		if (req->sandbox)
			ipc_buf_put_str(&b, NETD_A_SANDBOX, req->sandbox);
		ipc_buf_put_fd(&b, req->netns_fd); /* fd 0; a long policy's memfd comes after it */
		ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, req->policy_json);
		if (embedded && req->audit_log)
			ipc_buf_put_str(&b, NETD_A_AUDIT_LOG, req->audit_log);
		r = ipc_send(fd, &b);
		policy_send_error(r, req->policy_json, "sending the session request", err, errlen);
	}
	ipc_buf_release(&b);
	if (r == 0 && !(s = calloc(1, sizeof *s))) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	}
	if (r < 0) {
		drop(fd, pid);
		return NULL;
	}
	s->fd = fd;
	s->pid = pid;
	return s;
}

int netd_session_wait(struct netd_session *s, struct netd_session_reply *reply, char *err, size_t errlen)
{
	struct ipc_msg m = {0};
	int r;

	if (!s || s->fd < 0) {
		snprintf(err, errlen, "netd_session_wait: no session request is on its way");
		return -EINVAL;
	}
	r = recv_reply(s->fd, 1, &m, err, errlen);
	if (r == 0 && m.type != NETD_MSG_SESSION) {
		snprintf(err, errlen, "unexpected answer from the network daemon");
		r = -EPROTO;
	}
	if (r == 0)
		fill_reply(&m, reply);
	ipc_msg_clear(&m);
	if (r < 0) {
		drop(s->fd, s->pid);
		s->fd = s->pid = -1;
	}
	return r;
}

struct netd_session *netd_session_open(const struct netd_session_request *req, struct netd_session_reply *reply,
				       char *err, size_t errlen)
{
	struct netd_session *s = netd_session_send(req, err, errlen);

	if (s && netd_session_wait(s, reply, err, errlen) < 0) {
		netd_session_close(s);
		return NULL;
	}
	return s;
}

void netd_session_close(struct netd_session *s)
{
	if (!s)
		return;
	if (s->fd < 0) {
		/* netd_session_wait failed and let go of the connection already */
	} else if (s->pid > 0) {
		/* An embedded helper tears the session down on our end of file and closes its end once
		 * the audit log is complete (embedded.c); its kernel clean-up after that does not hold
		 * us up. The helper is reaped here if it is done already, else by whoever inherits it. */
		char buf[256];
		ssize_t n;
		shutdown(s->fd, SHUT_WR);
		while ((n = recv(s->fd, buf, sizeof buf, 0)) > 0 || (n < 0 && errno == EINTR))
			;
		close(s->fd);
		waitpid(s->pid, NULL, WNOHANG);
	} else {
		close(s->fd); /* the daemon tears the session down on EOF */
	}
	free(s);
}

bool netd_session_is_embedded(const struct netd_session *s)
{
	return s && s->pid > 0;
}

int netd_netns_create(const char *name, const char *command, const char *policy_json,
		      struct netd_session_reply *reply, char *path, size_t pathlen, char *err, size_t errlen)
{
	struct ipc_msg m = {0};
	struct ipc_buf b;
	int fd = daemon_connect(err, errlen), r;

	if (fd < 0)
		return fd;
	r = ipc_buf_init(&b, NETD_MSG_CREATE, 1);
	if (r == 0) {
		if (name)
			ipc_buf_put_str(&b, NETD_A_NAME, name);
		ipc_buf_put_str(&b, NETD_A_COMMAND, command);
		ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, policy_json);
		r = ipc_send(fd, &b);
		ipc_buf_release(&b);
		policy_send_error(r, policy_json, "sending the request", err, errlen);
	}
	if (r == 0)
		r = recv_reply(fd, 1, &m, err, errlen);
	if (r == 0 && m.type != NETD_MSG_SESSION)
		r = -EPROTO;
	if (r == 0) {
		fill_reply(&m, reply);
		copy_str(path, pathlen, &m, NETD_A_NETNS_PATH);
	}
	ipc_msg_clear(&m);
	close(fd);
	return r;
}

int netd_sessions_list(void (*fn)(const struct netd_session_entry *e, void *arg), void *arg, char *err,
		       size_t errlen)
{
	int fd = daemon_connect(err, errlen), r;

	if (fd < 0)
		return fd;
	r = ipc_send_empty(fd, NETD_MSG_LIST, 1);
	while (r == 0) {
		struct ipc_msg m = {0};
		struct netd_session_entry e = {0};

		r = recv_reply(fd, 1, &m, err, errlen);
		if (r == 0 && m.type == NETD_MSG_LIST_END) {
			ipc_msg_clear(&m);
			break;
		}
		if (r == 0 && m.type == NETD_MSG_SESSION) {
			copy_str(e.id, sizeof e.id, &m, NETD_A_ID);
			copy_str(e.ifname, sizeof e.ifname, &m, NETD_A_IFNAME);
			copy_str(e.addr4, sizeof e.addr4, &m, NETD_A_ADDR4);
			copy_str(e.addr6, sizeof e.addr6, &m, NETD_A_ADDR6);
			copy_str(e.netns_path, sizeof e.netns_path, &m, NETD_A_NETNS_PATH);
			copy_str(e.command, sizeof e.command, &m, NETD_A_COMMAND);
			copy_str(e.sandbox, sizeof e.sandbox, &m, NETD_A_SANDBOX);
			e.uid = ipc_get_u32(&m, NETD_A_UID, 0);
			e.pid = ipc_get_u32(&m, NETD_A_PID, 0);
			e.created = (long long)ipc_get_u64(&m, NETD_A_CREATED, 0);
			fn(&e, arg);
		} else if (r == 0) {
			r = -EPROTO;
		}
		ipc_msg_clear(&m);
	}
	close(fd);
	return r;
}

static int send_policy(struct netd_session *s, const char *id, const char *policy_json, uint32_t kind, char *err,
		       size_t errlen);

/* kind 0: replace the policy; 1: add rules to it */
static int policy_by_id(const char *id, const char *json, uint32_t kind, char *err, size_t errlen)
{
	struct netd_session s = {.fd = -1, .pid = -1};
	int r;

	s.fd = daemon_connect(err, errlen);
	if (s.fd < 0)
		return s.fd;
	r = send_policy(&s, id, json, kind, err, errlen);
	close(s.fd);
	return r;
}

int netd_session_set_policy_by_id(const char *id, const char *policy_json, char *err, size_t errlen)
{
	return policy_by_id(id, policy_json, 0, err, errlen);
}

int netd_session_add_rules_by_id(const char *id, const char *rules_json, char *err, size_t errlen)
{
	return policy_by_id(id, rules_json, 1, err, errlen);
}

int netd_session_set_policy(struct netd_session *s, const char *id, const char *policy_json, char *err,
			    size_t errlen)
{
	return send_policy(s, id, policy_json, 0, err, errlen);
}

static int send_policy(struct netd_session *s, const char *id, const char *policy_json, uint32_t kind, char *err,
		       size_t errlen)
{
	static uint32_t seq = 0x1000;
	struct ipc_msg m = {0};
	struct ipc_buf b;
	int r;

	if (!s || !id || !id[0] || strlen(id) > NETD_ID_MAX || !policy_json) {
		snprintf(err, errlen, "bad session id or policy");
		return -EINVAL;
	}
	r = ipc_buf_init(&b, NETD_MSG_POLICY, ++seq);
	if (r == 0) {
		ipc_buf_put_str(&b, NETD_A_ID, id);
		ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, policy_json);
		if (kind)
			ipc_buf_put_u32(&b, NETD_A_KIND, kind);
		r = ipc_send(s->fd, &b);
		ipc_buf_release(&b);
	}
	policy_send_error(r, policy_json, "sending the policy to the network daemon", err, errlen);
	if (r == 0)
		r = recv_reply(s->fd, seq, &m, err, errlen);
	if (r == 0 && m.type != NETD_MSG_OK) {
		snprintf(err, errlen, "unexpected answer from the network daemon");
		r = -EPROTO;
	}
	ipc_msg_clear(&m);
	return r;
}

#define RECORDS_SEQ 0x2000

void netd_session_records_ask(struct netd_session *s)
{
	if (!s || s->pid > 0 || s->fd < 0 || s->records_asked)
		return;
	s->records_asked = ipc_send_empty(s->fd, NETD_MSG_RECORDS, RECORDS_SEQ);
	if (s->records_asked == 0)
		s->records_asked = 1;
}

int netd_session_records(struct netd_session *s, int out_fd, char *err, size_t errlen)
{
	uint32_t seq = RECORDS_SEQ;
	int r;

	if (!s || s->pid > 0 || s->fd < 0) {
		snprintf(err, errlen, "only a session of sluiced has its records read by sluiced");
		return -EOPNOTSUPP;
	}
	netd_session_records_ask(s);
	r = s->records_asked < 0 ? s->records_asked : 0;
	if (r < 0)
		snprintf(err, errlen, "asking the network daemon for the session's records: %s", strerror(-r));
	while (r == 0) {
		struct ipc_msg m = {0};

		r = recv_reply(s->fd, seq, &m, err, errlen);
		if (r == 0 && m.type == NETD_MSG_LIST_END) {
			ipc_msg_clear(&m);
			break;
		}
		if (r == 0 && m.type == NETD_MSG_LINES) {
			const char *lines = ipc_get_str(&m, NETD_A_LINES);
			size_t n = lines ? strlen(lines) : 0, off = 0;

			while (r == 0 && off < n) {
				ssize_t w = write(out_fd, lines + off, n - off);
				if (w < 0 && errno == EINTR)
					continue;
				if (w < 0) {
					r = -errno;
					snprintf(err, errlen, "writing the session's records: %s", strerror(errno));
				} else {
					off += (size_t)w;
				}
			}
		} else if (r == 0) {
			snprintf(err, errlen, "unexpected answer from the network daemon");
			r = -EPROTO;
		}
		ipc_msg_clear(&m);
	}
	return r;
}

/* Connects to sluiced and sends `type` naming session id, which sluiced answers with OK: the connection,
 * or -errno with a one-line message in err. */
static int request_by_id(uint16_t type, const char *id, char *err, size_t errlen)
{
	struct ipc_msg m = {0};
	struct ipc_buf b;
	int fd, r;

	if (!id || !id[0] || strlen(id) > NETD_ID_MAX) {
		snprintf(err, errlen, "bad session id \"%s\"", id ? id : "");
		return -EINVAL;
	}
	fd = daemon_connect(err, errlen);
	if (fd < 0)
		return fd;
	r = ipc_buf_init(&b, type, 1);
	if (r == 0) {
		ipc_buf_put_str(&b, NETD_A_ID, id);
		r = ipc_send(fd, &b);
		ipc_buf_release(&b);
	}
	if (r == 0)
		r = recv_reply(fd, 1, &m, err, errlen);
	if (r == 0 && m.type != NETD_MSG_OK)
		r = -EPROTO;
	ipc_msg_clear(&m);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int netd_session_end(const char *id, char *err, size_t errlen)
{
	int fd = request_by_id(NETD_MSG_END, id, err, errlen);

	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

static void fill_ask(const struct ipc_msg *m, struct netd_ask_entry *e)
{
	memset(e, 0, sizeof *e);
	copy_str(e->id, sizeof e->id, m, NETD_A_ASK_ID);
	copy_str(e->session, sizeof e->session, m, NETD_A_ID);
	copy_str(e->protocol, sizeof e->protocol, m, NETD_A_PROTOCOL);
	copy_str(e->method, sizeof e->method, m, NETD_A_METHOD);
	copy_str(e->host, sizeof e->host, m, NETD_A_HOST);
	e->uid = ipc_get_u32(m, NETD_A_UID, 0);
	e->port = ipc_get_u16(m, NETD_A_DPORT, 0);
	e->timeout_s = ipc_get_u32(m, NETD_A_TIMEOUT, 0);
	e->created = (long long)ipc_get_u64(m, NETD_A_CREATED, 0);
}

int netd_asks_list(void (*fn)(const struct netd_ask_entry *e, void *arg), void *arg, char *err, size_t errlen)
{
	int fd = daemon_connect(err, errlen), r;

	if (fd < 0)
		return fd;
	r = ipc_send_empty(fd, NETD_MSG_ASKS, 1);
	while (r == 0) {
		struct ipc_msg m = {0};
		struct netd_ask_entry e;

		r = recv_reply(fd, 1, &m, err, errlen);
		if (r == 0 && m.type == NETD_MSG_LIST_END) {
			ipc_msg_clear(&m);
			break;
		}
		if (r == 0 && m.type == NETD_MSG_ASK) {
			fill_ask(&m, &e);
			fn(&e, arg);
		} else if (r == 0) {
			r = -EPROTO;
		}
		ipc_msg_clear(&m);
	}
	close(fd);
	return r;
}

int netd_ask_decide(const char *id, bool allow, struct netd_ask_entry *out, char *err, size_t errlen)
{
	struct ipc_msg m = {0};
	struct ipc_buf b;
	int fd, r;

	if (!id || strlen(id) != NETD_ASK_ID_MAX || strspn(id, "0123456789abcdef") != NETD_ASK_ID_MAX) {
		snprintf(err, errlen, "bad request id \"%s\": want the %d hex digits `sluicectl asks` shows", id ? id : "",
			 NETD_ASK_ID_MAX);
		return -EINVAL;
	}
	fd = daemon_connect(err, errlen);
	if (fd < 0)
		return fd;
	r = ipc_buf_init(&b, NETD_MSG_DECIDE, 1);
	if (r == 0) {
		ipc_buf_put_str(&b, NETD_A_ASK_ID, id);
		ipc_buf_put_u8(&b, NETD_A_VERDICT, allow ? 1 : 0);
		r = ipc_send(fd, &b);
		ipc_buf_release(&b);
	}
	if (r == 0)
		r = recv_reply(fd, 1, &m, err, errlen);
	if (r == 0 && m.type != NETD_MSG_ASK)
		r = -EPROTO;
	if (r == 0 && out)
		fill_ask(&m, out);
	ipc_msg_clear(&m);
	close(fd);
	return r;
}

int netd_ask_watch(const char *id, char *err, size_t errlen)
{
	struct timeval none = {0, 0};
	int fd = request_by_id(NETD_MSG_WATCH, id, err, errlen);

	if (fd < 0)
		return fd;
	/* notices come whenever a request is held: no receive timeout from here on */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
	return fd;
}

int netd_ask_watch_next(int fd, struct netd_ask_entry *e)
{
	for (;;) {
		struct ipc_msg m = {0};
		char why[256];
		int r = ipc_recv(fd, &m);

		if (r == 0)
			r = ipc_msg_check(&netd_control_proto, &m, NETD_CS_CLIENT, why, sizeof why);
		if (r == 0 && m.type == NETD_MSG_ASK) {
			fill_ask(&m, e);
			ipc_msg_clear(&m);
			return 0;
		}
		ipc_msg_clear(&m);
		if (r == -EINTR || r == -EAGAIN)
			continue;
		if (r < 0)
			return r;
		/* anything else on a watch connection is not for us: skip it */
	}
}

/* ---- for the other client files of this library (client_int.h) ---- */

int netd_client_connect(char *err, size_t errlen)
{
	return daemon_connect(err, errlen);
}

int netd_client_recv_reply(int fd, uint32_t seq, struct ipc_msg *m, char *err, size_t errlen)
{
	return recv_reply(fd, seq, m, err, errlen);
}

void netd_client_fill_reply(const struct ipc_msg *m, struct netd_session_reply *r)
{
	fill_reply(m, r);
}
