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

#include <json-c/json.h>

#include "log.h"
#include "netd_metrics.h"
#include "util.h"

#define CONTROL_MAX_CONNS 4096
#define CONTROL_MAX_CONNS_PER_UID 256 /* for unprivileged users: one user cannot starve the others */

#define CONN_NETS_MAX 32 /* ancestors of a peer whose network namespace is recorded */

struct netd_conn {
	struct netd_conn *next, *prev;
	struct netd *d;        /* borrowed */
	int fd;                /* owned */
	struct event *ev;      /* owned */
	uid_t uid;
	pid_t pid;
	/* The network namespaces of the peer and its ancestors when it connected (peer_in_session): read
	 * at accept, while the connecting process is still there, so a pid reused later cannot lend the
	 * connection another process's namespace. nets_unknown: the peer's own could not be read. */
	struct conn_net {
		dev_t dev;
		ino_t ino;
	} nets[CONN_NETS_MAX];
	unsigned nnets;
	bool nets_unknown;
	uint32_t state;        /* NETD_CS_* */
	bool embedded;         /* the one connection of an embedded helper: closing it stops the loop */
	char watch[NETD_ID_BUF]; /* WATCH: the session whose held requests are announced here ("" = none) */
	struct pending_open *opening; /* owned: an ATTACH/CREATE whose policy compiles; reading paused */
};

/* An ATTACH or CREATE waiting for its policy's compile (compile.c): the rest of the request. */
struct pending_open {
	struct netd_compile *job; /* the compile; cancelled if the connection goes first */
	uint32_t type, seq;
	int netns_fd;             /* owned */
	char *command, *name;     /* owned; name may be NULL */
	char *cni_key, *sess_if;  /* owned; CNI_ADD only, else NULL */
	char *sandbox;            /* owned; the launcher's sandbox type, or NULL */
	double received;          /* netd_metrics_now() when the request arrived */
};

static void pending_open_free(struct pending_open *po)
{
	if (!po)
		return;
	netd_compile_cancel(po->job);
	if (po->netns_fd >= 0)
		close(po->netns_fd);
	free(po->command);
	free(po->name);
	free(po->cni_key);
	free(po->sess_if);
	free(po->sandbox);
	free(po);
}

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
	pending_open_free(c->opening);
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
	if (d->cfg.socks_port)
		ipc_buf_put_u16(&b, NETD_A_SOCKS_PORT, d->cfg.socks_port);
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
	if (s->sandbox[0])
		ipc_buf_put_str(&b, NETD_A_SANDBOX, s->sandbox);
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
		netd_metrics_session_failed(d);
		log_warnx("session %s: %s", s->id, msg ? msg : strerror(-err));
		if (c)
			netd_send_error(c->fd, seq, err, msg ? msg : strerror(-err));
		if (c && s->owner == c)
			c->state = NETD_CS_OPEN;
		netd_sess_close(d, s);
		return;
	}
	if (s->setup_start > 0) { /* once: a restarted engine's re-registration is no new session */
		double now = netd_metrics_now();

		netd_metrics_session_ready(d, now - s->setup_start);
		log_debug(
		        "session %s: answered %.0f us after the request (the engine's answer %.0f us after the wiring)",
		        s->id, (now - s->setup_start) * 1e6, s->wired_at > 0 ? (now - s->wired_at) * 1e6 : 0.0);
	}
	s->setup_start = 0;
	if (c && send_session(d, c->fd, seq, s) < 0)
		log_warnx("session %s: the reply could not be sent", s->id);
}

/* The policy of an ATTACH/CREATE compiled (or failed, or ran out of time): the session is wired, and
 * the connection is read again. */
static void open_compiled(struct netd *d, int r, struct netd_compiled *res, const char *cerr, void *arg)
{
	struct netd_conn *c = arg;
	struct pending_open *po = c->opening;
	struct netd_sess_req req = {0};
	struct netd_sess *s;
	char err[NETD_ERRMSG_MAX + 1];

	po->job = NULL;
	c->opening = NULL;
	/* messages the client sent meanwhile are read now */
	if (event_add(c->ev, NULL) == 0)
		event_active(c->ev, EV_READ, 0);
	if (r < 0) {
		netd_send_error(c->fd, po->seq, r, cerr);
		pending_open_free(po);
		return;
	}
	req.netns_fd = po->netns_fd;
	po->netns_fd = -1;
	req.command = po->command;
	req.name = po->name;
	req.sandbox = po->sandbox;
	req.cni_key = po->cni_key;
	req.sess_if = po->sess_if;
	req.policy = res;
	req.requested = po->received;
	req.uid = c->uid;
	req.pid = c->pid;
	req.owner = po->type == NETD_MSG_ATTACH ? c : NULL;
	r = netd_sess_open(d, &req, &s, err, sizeof err);
	if (r < 0) {
		netd_send_error(c->fd, po->seq, r, err);
		pending_open_free(po);
		return;
	}
	if (po->type == NETD_MSG_ATTACH)
		c->state = NETD_CS_ATTACHED;
	/* replied once the engine registered the session, so its first packet is already served */
	s->replier = c;
	s->reply_seq = po->seq;
	pending_open_free(po);
	if (s->engine_ok)
		netd_conn_session_ready(d, s, 0, NULL);
	else if (netd_engine_down_reason(d))
		/* the engine is down (failing to start, or restarting): fail now, and closed */
		netd_conn_session_ready(d, s, -EHOSTDOWN, netd_engine_down_reason(d));
}

/* ATTACH / CREATE: the request checked here, its policy compiled on a worker (compile.c: a huge policy
 * does not stall other clients, and has a deadline); the connection is not read until it is done
 * (open_compiled), so its requests stay in order. */
static void handle_open(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct pending_open *po;
	const char *command = ipc_get_str(m, NETD_A_COMMAND), *name = ipc_get_str(m, NETD_A_NAME);
	char err[NETD_ERRMSG_MAX + 1];
	const char *cni_key = ipc_get_str(m, NETD_A_CNI_KEY), *sess_if = ipc_get_str(m, NETD_A_SESS_IF);
	const char *sandbox = ipc_get_str(m, NETD_A_SANDBOX);
	int netns_fd = m->type != NETD_MSG_CREATE ? ipc_msg_take_fd(m, 0) : -1;
	char *policy = NULL;
	int r;

	if (m->type == NETD_MSG_CNI_ADD && (c->uid != 0 || c->embedded)) {
		/* a CNI session outlives its connection and any uid could name any container: the runtime's
		 * plugin runs as root, and nobody else may */
		if (netns_fd >= 0)
			close(netns_fd);
		netd_send_error(c->fd, m->seq, EPERM, c->embedded ? "CNI sessions need sluiced (start sluiced.service)"
								 : "only root (a CNI runtime's plugin) may add CNI sessions");
		return;
	}
	if (m->type == NETD_MSG_CREATE && c->embedded) {
		/* an embedded helper dies with its launcher: a persistent namespace needs sluiced */
		if (netns_fd >= 0)
			close(netns_fd);
		netd_send_error(c->fd, m->seq, EOPNOTSUPP, "named namespaces need sluiced (start sluiced.service)");
		return;
	}
	if (ipc_has(m, NETD_A_AUDIT_LOG) && !c->embedded) {
		/* a client does not choose where sluiced writes */
		if (netns_fd >= 0)
			close(netns_fd);
		netd_send_error(c->fd, m->seq, EPERM, "audit_log is only honoured in embedded mode");
		return;
	}
	/* inline or in a memfd (a long policy): untrusted either way, compiled again here */
	policy = ipc_msg_text(m, NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX, err, sizeof err);
	if (!policy) {
		r = -errno;
		if (netns_fd >= 0)
			close(netns_fd);
		netd_send_error(c->fd, m->seq, r, err);
		return;
	}
	po = calloc(1, sizeof *po);
	if (!po || !(po->command = strdup(command ? command : "")) || (name && !(po->name = strdup(name))) ||
	    (cni_key && !(po->cni_key = strdup(cni_key))) || (sess_if && !(po->sess_if = strdup(sess_if))) ||
	    (sandbox && !(po->sandbox = strdup(sandbox)))) {
		free(policy);
		if (po)
			po->netns_fd = netns_fd;
		else if (netns_fd >= 0)
			close(netns_fd);
		pending_open_free(po);
		netd_send_error(c->fd, m->seq, ENOMEM, "out of memory");
		return;
	}
	po->type = m->type;
	po->seq = m->seq;
	po->received = netd_metrics_now();
	po->netns_fd = netns_fd;
	r = netd_compile_start(d, policy, c->uid, open_compiled, c, &po->job, err, sizeof err);
	if (r < 0) {
		netd_send_error(c->fd, m->seq, r, err);
		pending_open_free(po);
		return;
	}
	c->opening = po;
	event_del(c->ev);
}

void netd_conn_policy_done(struct netd *d, struct netd_sess *s, int err, const char *msg)
{
	struct netd_conn *c = s->policy_replier;
	uint32_t seq = s->policy_reply_seq;

	s->policy_replier = NULL;
	s->policy_reply_seq = 0;
	netd_reload_pump_soon(d); /* a reload may wait for this session's change to end */
	if (err)
		log_warnx("session %s: %s", s->id, msg ? msg : strerror(-err));
	if (!c)
		return;
	if (err)
		netd_send_error(c->fd, seq, err, msg ? msg : strerror(-err));
	else
		ipc_send_empty(c->fd, NETD_MSG_OK, seq);
}

/* The parent of pid (from /proc/PID/stat, after the command name's last ')'), or -1. */
static pid_t parent_of(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd, ppid;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
		return -1;
	return ppid;
}

/* Records the network namespaces of the peer (pid) and of its ancestors up to pid 1 (CONN_NETS_MAX of
 * them at most). A process that left the session's namespace (unshare -n, which a process with
 * capabilities can do: a root command under --sandbox-type firejail) still descends from one inside it. */
static void conn_record_nets(struct netd_conn *c)
{
	pid_t p = c->pid;

	c->nets_unknown = true;
	for (unsigned depth = 0; p > 0 && depth < CONN_NETS_MAX; depth++) {
		char path[64];
		struct stat st;
		bool seen = false;

		snprintf(path, sizeof path, "/proc/%d/ns/net", (int)p);
		if (stat(path, &st) != 0)
			return; /* the peer's own unreadable: unknown (inside); an ancestor's: the walk ends */
		c->nets_unknown = false;
		for (unsigned i = 0; i < c->nnets; i++)
			seen |= c->nets[i].dev == st.st_dev && c->nets[i].ino == st.st_ino;
		if (!seen)
			c->nets[c->nnets++] = (struct conn_net){st.st_dev, st.st_ino};
		if (p == 1)
			return;
		p = parent_of(p);
	}
}

/* Whether the peer of c runs inside session s's network namespace, or descends from a process that
 * does: the sandboxed command (or anything it started) must not widen its own session or approve its
 * own requests, even where it can reach this socket (--sandbox-type firejail, whose command is root),
 * whatever its uid. A peer whose namespace could not be read counts as inside (fail closed). */
static bool peer_in_session(const struct netd_conn *c, const struct netd_sess *s)
{
	if (c->pid <= 0 || c->nets_unknown)
		return true;
	for (unsigned i = 0; i < c->nnets; i++)
		if (c->nets[i].dev == s->ns_dev && c->nets[i].ino == s->ns_ino)
			return true;
	return false;
}

#define LIVE_RULES_MAX 1024 /* allow/deny patterns added to one session with `sluicectl session policy` */

/* Appends the "allow" and "deny" arrays of the document `add` (nothing else may be in it) to those of
 * `base` (NULL = none). Returns the merged document (malloced) or NULL with err set. */
static char *merge_rules(const char *base, const char *add, char *err, size_t errlen)
{
	json_object *b = base ? json_tokener_parse(base) : json_object_new_object();
	json_object *a = json_tokener_parse(add);
	char *out = NULL;
	size_t total = 0;

	if (!b || !a || !json_object_is_type(a, json_type_object) || !json_object_is_type(b, json_type_object)) {
		snprintf(err, errlen, "rules to add must be a JSON object {\"allow\": [...], \"deny\": [...]}");
		goto out;
	}
	json_object_object_foreach(a, key, val)
	{
		json_object *dst;
		if ((strcmp(key, "allow") && strcmp(key, "deny")) || !json_object_is_type(val, json_type_array)) {
			snprintf(err, errlen, "only \"allow\" and \"deny\" arrays add to a live policy (\"%.64s\"); "
				 "replace the policy with --file to change anything else", key);
			goto out;
		}
		if (!json_object_object_get_ex(b, key, &dst)) {
			dst = json_object_new_array();
			if (!dst || json_object_object_add(b, key, dst) != 0)
				goto oom;
		}
		for (size_t i = 0; i < json_object_array_length(val); i++)
			if (json_object_array_add(dst, json_object_get(json_object_array_get_idx(val, i))) != 0)
				goto oom;
	}
	json_object_object_foreach(b, k2, v2)
	{
		(void)k2;
		total += json_object_is_type(v2, json_type_array) ? json_object_array_length(v2) : 0;
	}
	if (total > LIVE_RULES_MAX) {
		snprintf(err, errlen, "more than %d rules added to one live session; replace its policy with --file",
			 LIVE_RULES_MAX);
		goto out;
	}
	out = strdup(json_object_to_json_string_ext(b, JSON_C_TO_STRING_PLAIN));
	if (!out)
		goto oom;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	json_object_put(a);
	json_object_put(b);
	return out;
}

/* A POLICY's new policy compiled (or failed, or ran out of time): applied, and the reply sent (now, or
 * once the engine applied it). */
static void policy_compiled(struct netd *d, int r, struct netd_compiled *res, const char *cerr, void *arg)
{
	struct netd_sess *s = arg;
	char err[NETD_ERRMSG_MAX + 1];

	s->policy_job = NULL;
	if (r < 0) {
		netd_conn_policy_done(d, s, r, cerr);
		return;
	}
	r = netd_sess_apply_policy(d, s, res, err, sizeof err);
	if (r < 0)
		netd_conn_policy_done(d, s, r, err);
	else if (!s->policy_seq) /* the engine is down: it gets the policy when it is back */
		netd_conn_policy_done(d, s, 0, NULL);
}

/* POLICY: replaces a session's policy (NETD_A_KIND 0), or adds allow/deny rules to it (NETD_A_KIND 1,
 * `sluicectl session policy ID --allow`). Who may: root; the connection that attached the session (its
 * launcher); and the session's own user from outside the session (sluicectl in another terminal) — never
 * a process inside the session's network namespace, which could otherwise widen the session it runs in.
 * The new policy is compiled under the organisation layer like the first one, on a worker (compile.c).
 * Replied to once the engine applied it. */
static void handle_policy(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_sess *s = netd_sess_find(d, ipc_get_str(m, NETD_A_ID));
	uint32_t kind = ipc_get_u32(m, NETD_A_KIND, 0);
	char err[NETD_ERRMSG_MAX + 1];
	char *policy, *extra = NULL;
	int r;

	if (!s || (c->uid != 0 && s->uid != c->uid)) {
		netd_send_error(c->fd, m->seq, ENOENT, "no such session of yours");
		return;
	}
	if (s->owner != c && peer_in_session(c, s)) {
		netd_send_error(c->fd, m->seq, EPERM,
				"a process inside the session cannot change its policy (its user can, from outside it)");
		return;
	}
	if (kind > 1) {
		netd_send_error(c->fd, m->seq, EINVAL, "kind must be 0 (replace) or 1 (add rules)");
		return;
	}
	if (s->policy_replier || s->policy_job || s->policy_seq) {
		netd_send_error(c->fd, m->seq, EBUSY, "a policy change of this session is already in progress");
		return;
	}
	policy = ipc_msg_text(m, NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX, err, sizeof err);
	if (!policy) {
		netd_send_error(c->fd, m->seq, -errno, err);
		return;
	}
	if (kind == 1) {
		/* the launcher's policy as it is, and the rules added so far plus these, beside it */
		extra = merge_rules(s->client_extra, policy, err, sizeof err);
		free(policy);
		policy = extra ? strdup(s->client_policy) : NULL;
		if (extra && !policy)
			snprintf(err, sizeof err, "out of memory");
		r = policy ? netd_compile_start2(d, policy, extra, c->uid, policy_compiled, s, &s->policy_job, err,
						 sizeof err) :
			     -EINVAL;
		if (!policy)
			free(extra);
	} else {
		r = netd_compile_start(d, policy, c->uid, policy_compiled, s, &s->policy_job, err, sizeof err);
	}
	if (r < 0) {
		netd_send_error(c->fd, m->seq, r, err);
		return;
	}
	log_info("session %s: policy %s by uid %u (compiling)", s->id, kind ? "rules added" : "replaced",
		 (unsigned)c->uid);
	s->policy_replier = c;
	s->policy_reply_seq = m->seq;
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

/* CNI_DEL: ends the session CNI_ADD made for the key; OK also when there is none (the spec wants DEL
 * idempotent: the runtime repeats it after a crash, or after a sluiced restart already ended it). */
static void handle_cni_del(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	const char *key = ipc_get_str(m, NETD_A_CNI_KEY);
	struct netd_sess *s;

	if (c->uid != 0) {
		netd_send_error(c->fd, m->seq, EPERM, "only root (a CNI runtime's plugin) may delete CNI sessions");
		return;
	}
	if ((s = netd_sess_find_cni(d, key)) != NULL) {
		log_info("session %s: CNI DEL of %s", s->id, key);
		netd_conn_session_ending(d, s);
		netd_sess_close(d, s);
	}
	ipc_send_empty(c->fd, NETD_MSG_OK, m->seq);
}

/* CNI_CHECK: the session of the key, if it is wired into the very namespace passed (the runtime's
 * CNI_NETNS); else ENOENT (no session) or ESTALE (another namespace). */
static void handle_cni_check(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	struct netd_sess *s = c->uid == 0 ? netd_sess_find_cni(d, ipc_get_str(m, NETD_A_CNI_KEY)) : NULL;
	int fd = ipc_msg_take_fd(m, 0);
	struct stat st;

	if (c->uid != 0)
		netd_send_error(c->fd, m->seq, EPERM, "only root (a CNI runtime's plugin) may check CNI sessions");
	else if (!s || !s->wired)
		netd_send_error(c->fd, m->seq, ENOENT, "no sluice session for this container");
	else if (fd < 0 || fstat(fd, &st) < 0 || st.st_dev != s->ns_dev || st.st_ino != s->ns_ino)
		netd_send_error(c->fd, m->seq, ESTALE, "the container's sluice session is wired into another namespace");
	else if (!s->engine_ok)
		netd_send_error(c->fd, m->seq, EHOSTDOWN, "the container's session has no proxy service (engine down)");
	else if (send_session(d, c->fd, m->seq, s) < 0)
		log_warnx("session %s: the CHECK reply could not be sent", s->id);
	if (fd >= 0)
		close(fd);
}

/* METRICS: the Prometheus text (netd_metrics.h) as LINES, then LIST_END. Any local user may read it:
 * the counters name no host, session or user (RUN_DIR/metrics.sock is 0660 for collectors). */
static void handle_metrics(struct netd *d, struct netd_conn *c, struct ipc_msg *m)
{
	char *text = netd_metrics_render(d), *p;

	if (!text) {
		netd_send_error(c->fd, m->seq, d->metrics ? ENOMEM : EOPNOTSUPP,
				d->metrics ? "out of memory" : "metrics are served by sluiced only");
		return;
	}
	for (p = text; *p;) {
		/* whole lines, at most NETD_LINES_MAX bytes a message */
		size_t n = strlen(p);
		struct ipc_buf b;
		char save;

		if (n > NETD_LINES_MAX) {
			n = NETD_LINES_MAX;
			while (n > 0 && p[n - 1] != '\n')
				n--;
			if (n == 0)
				n = NETD_LINES_MAX;
		}
		save = p[n];
		p[n] = '\0';
		if (ipc_buf_init(&b, NETD_MSG_LINES, m->seq) == 0) {
			ipc_buf_put_str(&b, NETD_A_LINES, p);
			ipc_send(c->fd, &b);
		}
		ipc_buf_release(&b);
		p[n] = save;
		p += n;
	}
	free(text);
	ipc_send_empty(c->fd, NETD_MSG_LIST_END, m->seq);
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
	struct netd_sess *s = a ? netd_sess_find(d, a->session) : NULL;

	if (!a || (c->uid != 0 && a->uid != c->uid) || !s) {
		netd_send_error(c->fd, m->seq, ENOENT,
				"no such held request of yours (it may have been decided or timed out: `sluicectl asks`)");
		return;
	}
	if (peer_in_session(c, s)) {
		netd_send_error(c->fd, m->seq, EPERM, "a process inside the session cannot decide its own requests");
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
		netd_send_error(c->fd, m->seq, r, r == -EAGAIN && netd_engine_down_reason(d)
				? netd_engine_down_reason(d) /* stalled: it names the engine and says to try again */
				: "the proxy engine is not running; the request was not decided");
		return;
	}
	log_info("session %s: %s %s:%u %s by uid %u", a->session, a->id, a->host, a->port,
		 v ? "approved" : "denied", (unsigned)c->uid);
	netd_sess_grant(s, a->host, a->port, v == 1, c->uid); /* for a restarted engine */
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
		case NETD_MSG_CNI_ADD:
			handle_open(d, c, &m);
			break;
		case NETD_MSG_METRICS:
			handle_metrics(d, c, &m);
			break;
		case NETD_MSG_CNI_DEL:
			handle_cni_del(d, c, &m);
			break;
		case NETD_MSG_CNI_CHECK:
			handle_cni_check(d, c, &m);
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
		if (c->opening)
			return; /* paused until its policy compiled */
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
	conn_record_nets(c);
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
