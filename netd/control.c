/* The control socket: accepts launchers and sluicectl on RUN_DIR/control.sock, authenticates each
 * with SO_PEERCRED, checks every message against the permission table (proto.c) for the
 * connection's state, and dispatches. Unprivileged users may create, list and end only their own
 * sessions. A session attached over a connection ends when that connection closes. */
#include "netd.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define CONTROL_MAX_CONNS 4096
#define CONTROL_MAX_CONNS_PER_UID 256 /* for unprivileged users: one user cannot starve the others */

struct netd_conn {
	struct netd_conn *next, *prev;
	struct netd *d;        /* borrowed */
	int fd;                /* owned */
	struct event *ev;      /* owned */
	uid_t uid;
	pid_t pid;
	uint32_t state;        /* NETD_CS_* */
	bool embedded;         /* the one connection of an embedded helper: closing it stops the loop */
	char watch[NETD_ID_BUF]; /* WATCH: the session whose held requests are announced here ("" = none) */
};

struct netd_control {
	int listen_fd;           /* owned */
	struct event *listen_ev; /* owned */
	char path[PATH_MAX];
	struct netd_conn *conns; /* owned list */
	unsigned nconns;
};

static struct netd_control *control_of(struct netd *d)
{
	struct netd_control *c = d->control;

	if (!c) {
		c = calloc(1, sizeof *c);
		if (!c)
			return NULL;
		c->listen_fd = -1;
		d->control = c;
	}
	return c;
}

static void conn_close(struct netd *d, struct netd_conn *c)
{
	struct netd_control *ctl = d->control;
	bool embedded = c->embedded;

	/* the launcher went away: its attached sessions end with it; pending replies are dropped */
	for (struct netd_sess *s = d->sessions, *next; s; s = next) {
		next = s->next;
		if (s->replier == c)
			s->replier = NULL;
		if (s->policy_replier == c)
			s->policy_replier = NULL;
		if (s->records_replier == c)
			s->records_replier = NULL;
		if (s->owner == c)
			netd_sess_close(d, s);
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		ctl->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	ctl->nconns--;
	if (c->ev)
		event_free(c->ev);
	close(c->fd);
	free(c);
	if (embedded && !d->stopping)
		event_base_loopexit(d->base, NULL);
}

static int send_session(struct netd *d, int fd, uint32_t seq, const struct netd_sess *s)
{
	char a4[46], g4[46], a6[46], g6[46], resolv[NETD_RESOLV_MAX + 1];
	struct ipc_buf b;
	int r;

	netd_sess_addrs(d, s, a4, g4, a6, g6);
	netd_sess_resolv(d, resolv, sizeof resolv);
	if ((r = ipc_buf_init(&b, NETD_MSG_SESSION, seq)) < 0)
		return r;
	ipc_buf_put_str(&b, NETD_A_ID, s->id);
	ipc_buf_put_str(&b, NETD_A_IFNAME, s->ifname);
	ipc_buf_put_str(&b, NETD_A_ADDR4, a4);
	ipc_buf_put_str(&b, NETD_A_GW4, g4);
	if (a6[0]) {
		ipc_buf_put_str(&b, NETD_A_ADDR6, a6);
		ipc_buf_put_str(&b, NETD_A_GW6, g6);
	}
	ipc_buf_put_u16(&b, NETD_A_PROXY_PORT, d->cfg.proxy_port);
	ipc_buf_put_str(&b, NETD_A_RESOLV_CONF, resolv);
	if (s->netns_path)
		ipc_buf_put_str(&b, NETD_A_NETNS_PATH, s->netns_path);
	if (s->ca_cert_pem)
		ipc_buf_put_str(&b, NETD_A_CA_CERT, s->ca_cert_pem);
	ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)s->uid);
	ipc_buf_put_u32(&b, NETD_A_PID, (uint32_t)s->pid);
	ipc_buf_put_u64(&b, NETD_A_CREATED, (uint64_t)s->created);
	{
		char cmd[NETD_COMMAND_MAX + 1];
		util_strlcpy(cmd, s->command, sizeof cmd);
		ipc_buf_put_str(&b, NETD_A_COMMAND, cmd);
	}
	r = ipc_send(fd, &b);
	ipc_buf_release(&b);
	return r;
}

void netd_conn_session_ready(struct netd *d, struct netd_sess *s, int err, const char *msg)
{
	struct netd_conn *c = s->replier;
	uint32_t seq = s->reply_seq;

	s->replier = NULL;
	s->reply_seq = 0;
	if (err) {
		log_warnx("session %s: %s", s->id, msg ? msg : strerror(-err));
		if (c)
			netd_send_error(c->fd, seq, err, msg ? msg : strerror(-err));
		if (c && s->owner == c)
			c->state = NETD_CS_OPEN;
		netd_sess_close(d, s);
		return;
	}
	if (c && send_session(d, c->fd, seq, s) < 0)
		log_warnx("session %s: the reply could not be sent", s->id);
}

static void handle_open(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_sess_req req = {0};
	struct netd_sess *s;
	char err[NETD_ERRMSG_MAX + 1];
	char *policy = NULL;
	int r;

	req.netns_fd = m->type == NETD_MSG_ATTACH ? ipc_msg_take_fd(m, 0) : -1;
	req.command = ipc_get_str(m, NETD_A_COMMAND);
	req.name = ipc_get_str(m, NETD_A_NAME);
	req.uid = c->uid;
	req.pid = c->pid;
	req.owner = m->type == NETD_MSG_ATTACH ? c : NULL;
	if (m->type == NETD_MSG_CREATE && c->embedded) {
		/* an embedded helper dies with its launcher: a persistent namespace needs sluiced */
		if (req.netns_fd >= 0)
			close(req.netns_fd);
		netd_send_error(c->fd, m->seq, EOPNOTSUPP, "named namespaces need sluiced (start sluiced.service)");
		return;
	}
	if (ipc_has(m, NETD_A_AUDIT_LOG) && !c->embedded) {
		/* a client does not choose where sluiced writes */
		if (req.netns_fd >= 0)
			close(req.netns_fd);
		netd_send_error(c->fd, m->seq, EPERM, "audit_log is only honoured in embedded mode");
		return;
	}
	/* inline or in a memfd (a long policy): untrusted either way, compiled again by netd_sess_open */
	req.policy_json = policy = ipc_msg_text(m, NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX, err, sizeof err);
	if (!policy) {
		r = -errno;
		if (req.netns_fd >= 0)
			close(req.netns_fd);
		netd_send_error(c->fd, m->seq, r, err);
		return;
	}
	r = netd_sess_open(d, &req, &s, err, sizeof err);
	free(policy);
	if (r < 0) {
		netd_send_error(c->fd, m->seq, r, err);
		return;
	}
	if (m->type == NETD_MSG_ATTACH)
		c->state = NETD_CS_ATTACHED;
	/* replied once the engine registered the session, so its first packet is already served */
	s->replier = c;
	s->reply_seq = m->seq;
	if (s->engine_ok)
		netd_conn_session_ready(d, s, 0, NULL);
	else if (netd_engine_down_reason(d))
		/* the engine is down (failing to start, or restarting): fail now, and closed */
		netd_conn_session_ready(d, s, -EHOSTDOWN, netd_engine_down_reason(d));
}

void netd_conn_policy_done(struct netd *d, struct netd_sess *s, int err, const char *msg)
{
	struct netd_conn *c = s->policy_replier;
	uint32_t seq = s->policy_reply_seq;

	(void)d;
	s->policy_replier = NULL;
	s->policy_reply_seq = 0;
	if (err)
		log_warnx("session %s: %s", s->id, msg ? msg : strerror(-err));
	if (!c)
		return;
	if (err)
		netd_send_error(c->fd, seq, err, msg ? msg : strerror(-err));
	else
		ipc_send_empty(c->fd, NETD_MSG_OK, seq);
}

/* POLICY: replaces a session's policy. Only the connection that attached the session (the launcher that
 * chose its first policy, never the sandboxed command, which does not hold that socket) or root may:
 * another process of the same user could otherwise widen a session it runs in. The new policy is
 * compiled under the organisation layer like the first one. Replied to once the engine applied it. */
static void handle_policy(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_sess *s = netd_sess_find(d, ipc_get_str(m, NETD_A_ID));
	char err[NETD_ERRMSG_MAX + 1];
	char *policy;
	int r;

	if (!s || (c->uid != 0 && s->uid != c->uid)) {
		netd_send_error(c->fd, m->seq, ENOENT, "no such session of yours");
		return;
	}
	if (c->uid != 0 && s->owner != c) {
		netd_send_error(c->fd, m->seq, EPERM,
				"only the connection that attached the session (its launcher) or root may change its policy");
		return;
	}
	if (s->policy_replier) {
		netd_send_error(c->fd, m->seq, EBUSY, "a policy change of this session is already in progress");
		return;
	}
	policy = ipc_msg_text(m, NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX, err, sizeof err);
	if (!policy) {
		netd_send_error(c->fd, m->seq, -errno, err);
		return;
	}
	r = netd_sess_set_policy(d, s, policy, err, sizeof err);
	free(policy);
	if (r < 0) {
		netd_send_error(c->fd, m->seq, r, err);
		return;
	}
	s->policy_replier = c;
	s->policy_reply_seq = m->seq;
	if (!s->policy_seq) /* the engine is down: it gets the policy when it is back */
		netd_conn_policy_done(d, s, 0, NULL);
}

void netd_conn_session_ending(struct netd *d, struct netd_sess *s)
{
	(void)d;
	if (s->owner)
		s->owner->state = NETD_CS_OPEN;
}

void netd_conn_records_ready(struct netd *d, struct netd_sess *s)
{
	struct netd_conn *c = s->records_replier;
	uint32_t seq = s->records_reply_seq;
	int r;

	s->records_replier = NULL;
	s->records_reply_seq = 0;
	if (!c)
		return;
	r = netd_records_send(d->cfg.audit_log, s->audit_from, s->id, c->fd, seq);
	if (r < 0) {
		log_warnx("session %s: reading its audit records: %s", s->id, strerror(-r));
		netd_send_error(c->fd, seq, r, "sluiced could not read the session's records from its audit log");
	}
}

/* RECORDS: the audit records of the session this connection attached, for its launcher's summary at
 * exit (an unprivileged user cannot read the audit log itself). Only the attaching connection asks
 * (state ATTACHED), so only the session's own records reach it. The command has ended by then: the
 * engine lets go of the session first, so the records of its last connections are in the log. */
static void handle_records(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_sess *s = d->sessions;

	while (s && s->owner != c)
		s = s->next;
	if (!s) {
		netd_send_error(c->fd, m->seq, ENOENT, "this connection has no session");
		return;
	}
	if (s->records_replier) {
		netd_send_error(c->fd, m->seq, EBUSY, "the session's records are already on their way");
		return;
	}
	s->records_replier = c;
	s->records_reply_seq = m->seq;
	if (s->records_seq)
		return; /* the engine is letting go of it already */
	if (netd_engine_session_release(d, s) < 0)
		netd_conn_records_ready(d, s);
}

static void handle_list(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	for (struct netd_sess *s = d->sessions; s; s = s->next) {
		if (c->uid != 0 && s->uid != c->uid)
			continue;
		if (send_session(d, c->fd, m->seq, s) < 0)
			return;
	}
	ipc_send_empty(c->fd, NETD_MSG_LIST_END, m->seq);
}

static void handle_end(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_sess *s = netd_sess_find(d, ipc_get_str(m, NETD_A_ID));

	/* the same answer for "no such session" and "not yours": ids of others are not probed */
	if (!s || (c->uid != 0 && s->uid != c->uid)) {
		netd_send_error(c->fd, m->seq, ENOENT, "no such session of yours");
		return;
	}
	netd_conn_session_ending(d, s);
	netd_sess_close(d, s);
	ipc_send_empty(c->fd, NETD_MSG_OK, m->seq);
}

static int send_ask(int fd, uint32_t seq, const struct netd_ask *a)
{
	struct ipc_buf b;
	int r;

	if ((r = ipc_buf_init(&b, NETD_MSG_ASK, seq)) < 0)
		return r;
	ipc_buf_put_str(&b, NETD_A_ASK_ID, a->id);
	ipc_buf_put_str(&b, NETD_A_ID, a->session);
	ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)a->uid);
	ipc_buf_put_str(&b, NETD_A_PROTOCOL, a->protocol);
	ipc_buf_put_str(&b, NETD_A_METHOD, a->method);
	ipc_buf_put_str(&b, NETD_A_HOST, a->host);
	ipc_buf_put_u16(&b, NETD_A_DPORT, a->port);
	ipc_buf_put_u32(&b, NETD_A_TIMEOUT, a->timeout_s);
	ipc_buf_put_u64(&b, NETD_A_CREATED, (uint64_t)a->created);
	r = ipc_send(fd, &b);
	ipc_buf_release(&b);
	return r;
}

/* WATCH: the launcher of a session (or root) is told of every request of it that gets held, so that
 * `sluice run --ask` can say so on its terminal. Same answer as DECIDE for a session not theirs. */
static void handle_watch(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_sess *s = netd_sess_find(d, ipc_get_str(m, NETD_A_ID));

	if (!s || (c->uid != 0 && s->uid != c->uid)) {
		netd_send_error(c->fd, m->seq, ENOENT, "no such session of yours");
		return;
	}
	util_strlcpy(c->watch, s->id, sizeof c->watch);
	ipc_send_empty(c->fd, NETD_MSG_OK, m->seq);
}

void netd_control_ask_held(struct netd *d, const struct netd_ask *a)
{
	struct netd_control *ctl = d->control;

	for (struct netd_conn *c = ctl ? ctl->conns : NULL; c; c = c->next)
		if (c->watch[0] && strcmp(c->watch, a->session) == 0 && send_ask(c->fd, 0, a) < 0)
			log_debug("control: a watcher of session %s did not take the notice", a->session);
}

/* Held requests the caller may decide: root all, a user those of their own sessions (SO_PEERCRED). */
static void handle_asks(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	for (const struct netd_ask *a = d->asks; a; a = a->next) {
		if (c->uid != 0 && a->uid != c->uid)
			continue;
		if (send_ask(c->fd, m->seq, a) < 0)
			return;
	}
	ipc_send_empty(c->fd, NETD_MSG_LIST_END, m->seq);
}

static void handle_decide(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_ask *a = netd_ask_find(d, ipc_get_str(m, NETD_A_ASK_ID));
	uint8_t v = ipc_get_u8(m, NETD_A_VERDICT, 0);
	char err[NETD_ERRMSG_MAX + 1];
	int r;

	/* the same answer for "no such request" and "not yours": others' requests are not probed */
	if (!a || (c->uid != 0 && a->uid != c->uid) || !netd_sess_find(d, a->session)) {
		netd_send_error(c->fd, m->seq, ENOENT,
				"no such held request of yours (it may have been decided or timed out: `sluicectl asks`)");
		return;
	}
	if (v > 1) {
		netd_send_error(c->fd, m->seq, EINVAL, "verdict must be 0 (deny) or 1 (approve)");
		return;
	}
	if (v == 1 && (r = netd_ask_check_org(d, a, err, sizeof err)) < 0) {
		netd_send_error(c->fd, m->seq, r, err);
		return;
	}
	r = netd_engine_verdict(d, a->id, v == 1, c->uid);
	if (r < 0) {
		netd_send_error(c->fd, m->seq, r, "the proxy engine is not running; the request was not decided");
		return;
	}
	log_info("session %s: %s %s:%u %s by uid %u", a->session, a->id, a->host, a->port,
		 v ? "approved" : "denied", (unsigned)c->uid);
	/* the reply says what was decided (sluicectl writes --remember from it) */
	send_ask(c->fd, m->seq, a);
	netd_ask_remove(d, a->id);
}

static void conn_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd_conn *c = arg;
	struct netd *d = c->d;

	for (int i = 0; i < 16; i++) {
		struct ipc_msg m;
		char err[256];
		int r = ipc_recv_nowait(c->fd, &m);

		if (r == -EAGAIN) {
			ipc_msg_clear(&m);
			return;
		}
		if (r < 0) {
			if (r != -EPIPE) {
				log_warnx("control: uid %u pid %d: %s; dropping the client", (unsigned)c->uid, (int)c->pid,
					  strerror(-r));
				netd_send_error(c->fd, 0, r, "malformed message");
			}
			ipc_msg_clear(&m);
			conn_close(d, c);
			return;
		}
		r = ipc_msg_check(&netd_control_proto, &m, c->state, err, sizeof err);
		if (r < 0) {
			/* log and drop the offending client (its attached session ends with it) */
			log_warnx("control: uid %u pid %d: %s; dropping the client", (unsigned)c->uid, (int)c->pid, err);
			netd_send_error(c->fd, m.seq, r, err);
			ipc_msg_clear(&m);
			conn_close(d, c);
			return;
		}
		switch (m.type) {
		case NETD_MSG_ATTACH:
		case NETD_MSG_CREATE:
			handle_open(d, c, &m);
			break;
		case NETD_MSG_LIST:
			handle_list(d, c, &m);
			break;
		case NETD_MSG_END:
			handle_end(d, c, &m);
			break;
		case NETD_MSG_POLICY:
			handle_policy(d, c, &m);
			break;
		case NETD_MSG_ASKS:
			handle_asks(d, c, &m);
			break;
		case NETD_MSG_RECORDS:
			handle_records(d, c, &m);
			break;
		case NETD_MSG_DECIDE:
			handle_decide(d, c, &m);
			break;
		case NETD_MSG_WATCH:
			handle_watch(d, c, &m);
			break;
		default:
			break;
		}
		ipc_msg_clear(&m);
	}
}

static int conn_add(struct netd *d, int fd, uid_t uid, pid_t pid, bool embedded)
{
	struct netd_control *ctl = control_of(d);
	struct netd_conn *c;
	struct timeval tv = {1, 0};

	if (!ctl || ctl->nconns >= CONTROL_MAX_CONNS) {
		close(fd);
		return -ENOMEM;
	}
	if (uid != 0) {
		unsigned n = 0;

		for (struct netd_conn *o = ctl->conns; o; o = o->next)
			n += o->uid == uid;
		if (n >= CONTROL_MAX_CONNS_PER_UID) {
			log_warnx("control: uid %u has %u connections (the limit); refusing another", (unsigned)uid, n);
			netd_send_error(fd, 0, EUSERS, "too many connections to sluiced for this user");
			close(fd);
			return -EUSERS;
		}
	}
	c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	/* replies block at most a second: a client that does not read its replies is dropped */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	c->d = d;
	c->fd = fd;
	c->uid = uid;
	c->pid = pid;
	c->state = NETD_CS_OPEN;
	c->embedded = embedded;
	c->ev = event_new(d->base, fd, EV_READ | EV_PERSIST, conn_cb, c);
	if (!c->ev || event_add(c->ev, NULL) < 0) {
		if (c->ev)
			event_free(c->ev);
		close(fd);
		free(c);
		return -ENOMEM;
	}
	c->next = ctl->conns;
	if (ctl->conns)
		ctl->conns->prev = c;
	ctl->conns = c;
	ctl->nconns++;
	return 0;
}

static void accept_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd *d = arg;

	for (int i = 0; i < 32; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
		uid_t uid;
		pid_t pid;

		if (cfd < 0)
			return;
		if (ipc_peer_cred(cfd, &uid, NULL, &pid) < 0) {
			close(cfd);
			continue;
		}
		conn_add(d, cfd, uid, pid, false);
	}
}

int netd_control_listen(struct netd *d, char *err, size_t errlen)
{
	struct netd_control *ctl = control_of(d);
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd, r;

	if (!ctl)
		return -ENOMEM;
	if ((size_t)snprintf(ctl->path, sizeof ctl->path, "%s/control.sock", d->cfg.run_dir) >= sizeof sun.sun_path) {
		snprintf(err, errlen, "run directory path too long for a socket: %s", d->cfg.run_dir);
		return -ENAMETOOLONG;
	}
	util_strlcpy(sun.sun_path, ctl->path, sizeof sun.sun_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	unlink(ctl->path); /* a stale socket of a crashed sluiced (we hold the gateway lease) */
	if (bind(fd, (struct sockaddr *)&sun, sizeof sun) < 0 || chmod(ctl->path, 0666) < 0 ||
	    listen(fd, 128) < 0) {
		r = -errno;
		snprintf(err, errlen, "listening on %s: %s", ctl->path, strerror(-r));
		close(fd);
		return r;
	}
	ctl->listen_fd = fd;
	ctl->listen_ev = event_new(d->base, fd, EV_READ | EV_PERSIST, accept_cb, d);
	if (!ctl->listen_ev || event_add(ctl->listen_ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

int netd_control_adopt(struct netd *d, int fd, uid_t uid, pid_t pid)
{
	return conn_add(d, fd, uid, pid, true);
}

void netd_control_free(struct netd *d)
{
	struct netd_control *ctl = d->control;

	if (!ctl)
		return;
	while (ctl->conns)
		conn_close(d, ctl->conns);
	if (ctl->listen_ev)
		event_free(ctl->listen_ev);
	if (ctl->listen_fd >= 0) {
		close(ctl->listen_fd);
		unlink(ctl->path);
	}
	free(ctl);
	d->control = NULL;
}
