/* Parent side of the proxy engine: forks the engine as a child (which drops privileges after it
 * received its listening sockets and audit log), talks to it over a socketpair with the engine
 * protocol, registers sessions, forwards NFLOG drops and SIGHUP, and restarts it when it dies.
 * While it is down, sessions fail closed: their traffic is still filtered and nobody serves it.
 *
 * Nothing sent to a running engine waits (docs/netd.md, "Engine protocol"): a message its socket does
 * not take at once joins an outgoing queue, sent in order when the socket is writable, so a stalled
 * engine never holds sluiced's loop. Drops and drop summaries are the exception: they go only when nothing
 * is queued and the socket takes them, else they are counted. The metrics poll, sent only while nothing is
 * queued, is also the liveness probe: not answered, it counts like a queue that does not move. When the
 * queue does not move (or the poll is not answered) for ENGINE_STALL_MS, new sessions are refused (and
 * setups waiting for the engine fail) with an error naming it; for ENGINE_STUCK_MS, it is killed and
 * restarted, and the new engine is given every live session with its current policy and verdicts (what
 * was queued for the old one is dropped: removed sessions are not given, narrowed policies are given as
 * they are now). */
#include "netd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine_bounds.h"
#include "log.h"
#include "netd_metrics.h"
#include "outq_ev.h"
#include "policy.h"
#include "reaper.h"
#include "util.h"

struct netd_engine {
	struct netd *d;              /* borrowed */
	pid_t pid;
	int sock;                    /* owned */
	struct event *ev;            /* owned: reads from the engine */
	struct event *restart_ev;    /* owned */
	bool ready;
	uint32_t seq;
	unsigned failures;           /* consecutive deaths before READY, for back-off */
	char last_err[NETD_ERRMSG_MAX + 1]; /* why it is down, for clients */
	struct netd_outq_ev out;     /* owned: what the socket did not take yet, in order (out.q), and the events
	                              * that send it; initialised while sock is open */
	struct event *stall_ev;      /* owned: watches the queue's progress and the liveness poll (pending while
	                              * the queue is not empty or a poll waits: engine_watch) */
	double moved_at;             /* netd_metrics_now() when the queue last became non-empty or sent a message */
	bool stalled;                /* new sessions are refused: outq outgrew ENGINE_QUEUE_MAX, or did not move
	                              * for ENGINE_STALL_MS (timed_out: setups waiting for the engine failed) */
	bool timed_out;
	char stall_err[NETD_ERRMSG_MAX + 1]; /* why new sessions are refused while stalled */
	uint64_t stuck_restarts;     /* engines killed for taking no message, or answering no poll, for
	                              * ENGINE_STUCK_MS (metrics) */
	double poll_at;              /* netd_metrics_now() since when the liveness probe waits: the metrics poll
	                              * not answered yet was first tried (sent, or its socket was full); 0: none */
	bool poll_sent;              /* that poll is in the socket (else it is tried again every second) */
};

/* The bounds of the outgoing queue: ENGINE_STALL_MS, ENGINE_STUCK_MS, ENGINE_QUEUE_MAX (engine_bounds.h). */

static int engine_spawn(struct netd *d, char *err, size_t errlen);
static void engine_died(struct netd *d, const char *why);

static uint32_t next_seq(struct netd_engine *e);

/* The queue outgrew ENGINE_QUEUE_MAX: new sessions are refused (netd_engine_down_reason) until the
 * engine catches up; the setups under way wait for it as usual. */
static void engine_behind(struct netd_engine *e)
{
	e->stalled = true;
	snprintf(e->stall_err, sizeof e->stall_err,
		 "the proxy engine (pid %d) is behind: %zu messages (%zu KiB) from sluiced wait for it; no new "
		 "session until it catches up; try again", (int)e->pid, e->out.q.n, e->out.q.bytes / 1024);
	log_warnx("%s", e->stall_err);
}

/* The queue has not moved for idle_ms: new sessions are refused from now on (netd_engine_down_reason),
 * and the setups that wait for the engine's answer fail now rather than when their launchers give up;
 * sessions already running are left as they are. Called from the stall timer only (it closes sessions). */
static void engine_timed_out(struct netd *d, double idle_ms, bool unanswered)
{
	struct netd_engine *e = d->engine;

	e->stalled = e->timed_out = true;
	if (unanswered) /* nothing waits for it, but its loop did not answer the poll */
		snprintf(e->stall_err, sizeof e->stall_err,
			 "the proxy engine (pid %d) has not answered sluiced for %.1f s: no new session until it "
			 "does (it is restarted if it stays stuck for %d s); try again",
			 (int)e->pid, idle_ms / 1000, ENGINE_STUCK_MS / 1000);
	else
		snprintf(e->stall_err, sizeof e->stall_err,
			 "the proxy engine (pid %d) has taken no message from sluiced for %.1f s (%zu waiting): no "
			 "new session until it does (it is restarted if it stays stuck for %d s); try again",
			 (int)e->pid, idle_ms / 1000, e->out.q.n, ENGINE_STUCK_MS / 1000);
	log_warnx("%s", e->stall_err);
	for (struct netd_sess *s = d->sessions, *next; s; s = next) {
		next = s->next;
		if (s->replier && s->engine_seq) /* closes s (and queues its removal) */
			netd_conn_session_ready(d, s, -ETIMEDOUT, e->stall_err);
	}
}

/* How long the engine has made no progress that sluiced waits for, in ms: while messages are queued, since
 * the queue last moved; else since the liveness poll that is out was sent (*unanswered), else 0. */
static double engine_idle_ms(const struct netd_engine *e, bool *unanswered)
{
	double now = netd_metrics_now();

	*unanswered = !e->out.q.n && e->poll_at;
	if (e->out.q.n)
		return (now - e->moved_at) * 1000;
	return e->poll_at ? (now - e->poll_at) * 1000 : 0;
}

/* (Re)arms the stall timer for the next bound the engine's idle time will cross, or stops it when nothing
 * is waited for. */
static void engine_watch(struct netd_engine *e)
{
	bool unanswered;
	double idle = engine_idle_ms(e, &unanswered), next_ms;
	struct timeval tv;

	if (!e->out.q.n && !e->poll_at) {
		event_del(e->stall_ev);
		return;
	}
	next_ms = (idle < ENGINE_STALL_MS ? ENGINE_STALL_MS : ENGINE_STUCK_MS) - idle;
	if (next_ms < 0)
		next_ms = 0;
	tv.tv_sec = (time_t)(next_ms / 1000);
	tv.tv_usec = (suseconds_t)((next_ms - (double)tv.tv_sec * 1000) * 1000) + 1000;
	if (tv.tv_usec >= 1000000) {
		tv.tv_sec++;
		tv.tv_usec -= 1000000;
	}
	event_add(e->stall_ev, &tv);
}

/* Every message to a running engine goes through here (but those that may be dropped: engine_offer):
 * sent now when the socket takes it, else queued behind the others and sent in order when the socket is
 * writable (engine_write_cb). Never waits. */
static int engine_send(struct netd *d, struct ipc_buf *b)
{
	struct netd_engine *e = d->engine;
	size_t queued = e->out.q.n;
	int r = netd_outq_ev_send(&e->out, b);

	if (r < 0 || e->out.q.n == queued)
		return r;
	if (queued == 0) { /* the socket is full: from now on the queue's progress is watched */
		e->moved_at = netd_metrics_now();
		engine_watch(e);
		log_debug("engine: its socket is full%s; messages queued",
			  e->out.q.retry_ms ? " (the kernel is short of memory)" : "");
	}
	if (netd_engine_queue_over(e->out.q.bytes) && !e->stalled)
		engine_behind(e);
	return 0;
}

/* A message that may be dropped (a drop, a drop summary): sent only when nothing is
 * queued (it never overtakes a message that waits) and the socket takes it at once, else -EAGAIN, and the
 * caller counts it as not taken. */
static int engine_offer(struct netd_engine *e, struct ipc_buf *b)
{
	return e->out.q.n ? -EAGAIN : ipc_send_nowait(e->sock, b);
}

/* The queue was sent as far as the socket took it (netd_outq_ev): r messages went. A refusal for want of
 * memory is no failure: the queue is tried again shortly, and the time without progress counts towards
 * ENGINE_STALL_MS and ENGINE_STUCK_MS as a full socket's does, so a refusal that never ends still
 * restarts the engine. */
static void engine_write_cb(void *arg, int r)
{
	struct netd *d = arg;
	struct netd_engine *e = d->engine;

	if (r < 0) {
		log_warnx("engine: sending it a queued message: %s", strerror(-r));
		engine_died(d, r == -EPIPE ? "exited" : "could not be sent its messages");
		return;
	}
	if (r > 0) {
		e->moved_at = netd_metrics_now();
		if (e->poll_at) /* it reads: the poll's clock starts again (its answer may come after the queue) */
			e->poll_at = e->moved_at;
	}
	if (e->out.q.n == 0)
		engine_watch(e);
	if (e->stalled && r > 0 && !netd_engine_queue_over(e->out.q.bytes)) {
		e->stalled = e->timed_out = false;
		log_info("proxy engine %d takes messages again (%zu still queued)", (int)e->pid, e->out.q.n);
	}
}

static void engine_read_cb(evutil_socket_t fd, short what, void *arg);

/* While the queue is not empty or a poll is not answered: refuses new sessions after ENGINE_STALL_MS
 * without progress, restarts the engine after ENGINE_STUCK_MS. */
static void engine_stall_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd *d = arg;
	struct netd_engine *e = d->engine;
	bool unanswered;
	double idle_ms = engine_idle_ms(e, &unanswered);

	if (unanswered && idle_ms >= ENGINE_STALL_MS) {
		/* an answer may wait unread: sluiced's own loop may have been held (the timer and the socket
		 * became ready together); read it before judging */
		engine_read_cb(e->sock, EV_READ, d);
		if (d->engine != e || !e->ready)
			return;
		idle_ms = engine_idle_ms(e, &unanswered);
	}
	if (!e->out.q.n && !e->poll_at)
		return;
	if (idle_ms >= ENGINE_STUCK_MS) {
		char why[160];

		if (unanswered)
			log_warnx("proxy engine %d has not answered sluiced for %.1f s: killing it", (int)e->pid,
				  idle_ms / 1000);
		else
			log_warnx("proxy engine %d has taken no message from sluiced for %.1f s (%zu waiting): killing it",
				  (int)e->pid, idle_ms / 1000, e->out.q.n);
		snprintf(why, sizeof why, "was stuck (it %s for %d s) and was killed",
			 unanswered ? "answered nothing" : "took no message", ENGINE_STUCK_MS / 1000);
		e->stuck_restarts++;
		engine_died(d, why);
		return;
	}
	if (idle_ms >= ENGINE_STALL_MS && !e->timed_out)
		engine_timed_out(d, idle_ms, unanswered);
	engine_watch(e);
}

/* The metrics poll, every second (metrics.c), is also the engine's liveness probe: one at a time, and the
 * engine's loop answers it (METRICS_DATA) at once. While nothing is queued for the engine, a poll that is
 * not answered counts as the engine taking no message (ENGINE_STALL_MS, ENGINE_STUCK_MS), so an engine that
 * hangs with nothing to read is restarted too; while the queue is not empty, its progress is what counts
 * and no poll is sent. Like a drop, the poll never queues (it would count among the messages waiting): a
 * socket that does not take it (full of drops the engine does not read) starts the probe's clock just the
 * same, and the poll is tried again the next second. */
void netd_engine_request_metrics(struct netd *d)
{
	struct netd_engine *e = d->engine;
	struct ipc_buf b;
	int r;

	if (!e || !e->ready || e->poll_sent || e->out.q.n || ipc_buf_init(&b, NETD_ENG_METRICS, next_seq(e)) < 0)
		return;
	r = engine_offer(e, &b);
	ipc_buf_release(&b);
	if (r < 0 && r != -EAGAIN) {
		log_debug("engine: the metrics request was not sent: %s", strerror(-r));
		return;
	}
	if (!e->poll_at)
		e->poll_at = netd_metrics_now();
	e->poll_sent = r == 0;
	engine_watch(e);
}

/* The poll was answered: the engine's loop runs. */
static void engine_answered(struct netd_engine *e)
{
	bool unanswered;

	e->poll_at = 0;
	e->poll_sent = false;
	if (e->stalled && !netd_engine_queue_over(e->out.q.bytes) && engine_idle_ms(e, &unanswered) < ENGINE_STALL_MS) {
		e->stalled = e->timed_out = false;
		log_info("proxy engine %d answers again", (int)e->pid);
	}
	engine_watch(e);
}

bool netd_engine_running(const struct netd *d)
{
	return d->engine && d->engine->ready;
}

void netd_engine_queue_counts(const struct netd *d, size_t *queued, uint64_t *stuck_restarts)
{
	*queued = d->engine ? d->engine->out.q.n : 0;
	*stuck_restarts = d->engine ? d->engine->stuck_restarts : 0;
}

const char *netd_engine_down_reason(const struct netd *d)
{
	if (d->engine && d->engine->ready && d->engine->stalled)
		return d->engine->stall_err;
	if (!d->engine || d->engine->ready || d->engine->failures == 0)
		return NULL; /* running, or starting for the first time */
	return d->engine->last_err[0] ? d->engine->last_err : "the proxy engine is restarting";
}

static uint32_t next_seq(struct netd_engine *e)
{
	if (++e->seq == 0)
		e->seq = 1;
	return e->seq;
}

static int open_audit(const struct netd *d, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	int fd;

	util_strlcpy(dir, d->cfg.audit_log, sizeof dir);
	if (mkdir(dirname(dir), 0750) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "creating the directory of %s: %s", d->cfg.audit_log, strerror(errno));
		return -errno;
	}
	/* Read as well as append: the engine reads the last line to continue the log's hash chain. */
	fd = open(d->cfg.audit_log, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (fd < 0) {
		int r = -errno;
		snprintf(err, errlen, "opening the audit log %s: %s", d->cfg.audit_log, strerror(-r));
		return r;
	}
	return fd;
}

static void engine_send_add(struct netd *d, struct netd_sess *s)
{
	struct netd_engine *e = d->engine;
	char a4[46], g4[46], a6[46], g6[46];
	struct ipc_buf b;
	int r;

	if (!e || !e->ready)
		return; /* sent when the engine (re)starts */
	netd_sess_addrs(d, s, a4, g4, a6, g6);
	s->engine_seq = next_seq(e);
	if (ipc_buf_init(&b, NETD_ENG_SESSION_ADD, s->engine_seq) < 0)
		return;
	ipc_buf_put_str(&b, NETD_A_ID, s->id);
	ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)s->uid);
	ipc_buf_put_str(&b, NETD_A_COMMAND, s->command);
	ipc_buf_put_str(&b, NETD_A_ADDR4, a4);
	ipc_buf_put_str(&b, NETD_A_GW4, g4);
	if (a6[0]) {
		ipc_buf_put_str(&b, NETD_A_ADDR6, a6);
		ipc_buf_put_str(&b, NETD_A_GW6, g6);
	}
	ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, s->policy_json); /* a long one in a memfd */
	ipc_buf_put_u32(&b, NETD_A_POLICY_VERSION, s->policy_version);
	if (s->direct_ended)
		ipc_buf_put_u32(&b, NETD_A_DIRECT_ENDED, s->direct_ended);
	if (s->ca_key_pem && s->ca_cert_pem) {
		ipc_buf_put_str(&b, NETD_A_CA_CERT, s->ca_cert_pem);
		ipc_buf_put_str(&b, NETD_A_CA_KEY, s->ca_key_pem);
	}
	r = engine_send(d, &b);
	ipc_buf_release(&b);
	if (r < 0)
		log_warnx("engine: sending session %s: %s", s->id, strerror(-r));
	else
		s->direct_ended = 0; /* (the engine audits them) */
	/* the verdicts operators gave in the session so far: a restarted engine knows them again (the child
	 * handles messages in order, so the session exists by then) */
	for (unsigned i = 0; r == 0 && i < s->ngrants; i++) {
		if ((r = ipc_buf_init(&b, NETD_ENG_GRANT, 0)) < 0)
			break;
		ipc_buf_put_str(&b, NETD_A_ID, s->id);
		ipc_buf_put_str(&b, NETD_A_HOST, s->grants[i].host);
		ipc_buf_put_u16(&b, NETD_A_DPORT, s->grants[i].port);
		ipc_buf_put_u8(&b, NETD_A_VERDICT, s->grants[i].allow ? 1 : 0);
		ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)s->grants[i].by);
		r = engine_send(d, &b);
		ipc_buf_release(&b);
	}
	if (r < 0)
		log_warnx("engine: restoring the verdicts of session %s: %s", s->id, strerror(-r));
}

void netd_engine_session_add(struct netd *d, struct netd_sess *s)
{
	s->engine_ok = false;
	if (d->engine && d->engine->stalled)
		return; /* refused (netd_engine_down_reason): nothing is queued for a session that will not be */
	engine_send_add(d, s);
}

/* A removal names the session's addresses: the engine applies a later SESSION_ADD of another session with
 * one of them only after it (engine_queue.c), also when the removal waits behind its session's compile. */
static void put_remove_addrs(struct netd *d, const struct netd_sess *s, struct ipc_buf *b)
{
	char a4[46], g4[46], a6[46], g6[46];

	netd_sess_addrs(d, s, a4, g4, a6, g6);
	if (a4[0])
		ipc_buf_put_str(b, NETD_A_ADDR4, a4);
	if (a6[0])
		ipc_buf_put_str(b, NETD_A_ADDR6, a6);
}

void netd_engine_session_remove(struct netd *d, const struct netd_sess *s)
{
	struct netd_engine *e = d->engine;
	struct ipc_buf b;

	if (!e || !e->ready || (!s->engine_ok && !s->engine_seq))
		return; /* (the engine never had it: not sent, as to a stalled engine, or refused) */
	/* seq 0: no answer wanted (netd_engine_session_release asks for one) */
	if (ipc_buf_init(&b, NETD_ENG_SESSION_REMOVE, 0) < 0)
		return;
	ipc_buf_put_str(&b, NETD_A_ID, s->id);
	put_remove_addrs(d, s, &b);
	if (engine_send(d, &b) < 0)
		log_warnx("engine: removing session %s failed", s->id);
	ipc_buf_release(&b);
}

int netd_engine_session_release(struct netd *d, struct netd_sess *s)
{
	struct netd_engine *e = d->engine;
	struct ipc_buf b;
	int r;

	if (!e || !e->ready)
		return -EHOSTDOWN;
	s->records_seq = next_seq(e);
	if ((r = ipc_buf_init(&b, NETD_ENG_SESSION_REMOVE, s->records_seq)) < 0)
		goto fail;
	ipc_buf_put_str(&b, NETD_A_ID, s->id);
	put_remove_addrs(d, s, &b);
	r = engine_send(d, &b);
	ipc_buf_release(&b);
	if (r == 0)
		return 0;
fail:
	s->records_seq = 0;
	return r;
}

int netd_engine_audit_drop(struct netd *d, const char *src, uint16_t sport, const char *dst, uint16_t dport,
			   uint8_t proto)
{
	struct netd_engine *e = d->engine;
	struct ipc_buf b;
	int r;

	if (!e || !e->ready)
		return -ENOTCONN;
	if ((r = ipc_buf_init(&b, NETD_ENG_AUDIT_DROP, next_seq(e))) < 0)
		return r;
	ipc_buf_put_str(&b, NETD_A_SRC, src);
	ipc_buf_put_str(&b, NETD_A_DST, dst);
	ipc_buf_put_u16(&b, NETD_A_SPORT, sport);
	ipc_buf_put_u16(&b, NETD_A_DPORT, dport);
	ipc_buf_put_u8(&b, NETD_A_PROTO, proto);
	r = engine_offer(e, &b);
	ipc_buf_release(&b);
	return r;
}

int netd_engine_drop_summary(struct netd *d, const char *id, uint32_t over_rate, uint32_t lost, uint32_t unsent)
{
	struct netd_engine *e = d->engine;
	struct ipc_buf b;
	int r;

	if (!e || !e->ready)
		return -ENOTCONN;
	if ((r = ipc_buf_init(&b, NETD_ENG_DROP_SUMMARY, next_seq(e))) < 0)
		return r;
	if (id)
		ipc_buf_put_str(&b, NETD_A_ID, id);
	ipc_buf_put_u32(&b, NETD_A_DROPS_OVER_RATE, over_rate);
	ipc_buf_put_u32(&b, NETD_A_DROPS_LOST, lost);
	ipc_buf_put_u32(&b, NETD_A_DROPS_UNSENT, unsent);
	r = engine_offer(e, &b);
	ipc_buf_release(&b);
	return r;
}

void netd_engine_reopen_log(struct netd *d)
{
	struct netd_engine *e = d->engine;
	char err[512];
	struct ipc_buf b;
	int fd;

	if (!e || !e->ready)
		return;
	/* the engine is unprivileged: the parent reopens the log and hands the new fd over */
	fd = open_audit(d, err, sizeof err);
	if (fd < 0) {
		log_warnx("%s (keeping the old log)", err);
		return;
	}
	if (ipc_buf_init(&b, NETD_ENG_REOPEN_LOG, next_seq(e)) == 0) {
		ipc_buf_put_fd(&b, fd); /* a queued message keeps a copy of it */
		if (engine_send(d, &b) < 0)
			log_warnx("engine: reopening the log failed");
		ipc_buf_release(&b);
	}
	close(fd);
}

/* DIRECT_DONE: the engine's DIRECT_ADD with seq was dealt with (netd_direct_add is synchronous: its
 * elements are in the kernel's set, or it refused them), so the DNS answer it holds may go. */
static void engine_direct_done(struct netd *d, uint32_t seq)
{
	struct ipc_buf b;

	if (ipc_buf_init(&b, NETD_ENG_DIRECT_DONE, seq) < 0)
		return;
	if (engine_send(d, &b) < 0)
		log_warnx("engine: DIRECT_DONE: the engine's answer waits for its time-out instead");
	ipc_buf_release(&b);
}

int netd_engine_session_policy(struct netd *d, struct netd_sess *s)
{
	struct netd_engine *e = d->engine;
	struct ipc_buf b;
	int r;

	if (!e || !e->ready)
		return -EHOSTDOWN; /* it gets the new policy with SESSION_ADD when it is back */
	s->policy_seq = next_seq(e);
	if ((r = ipc_buf_init(&b, NETD_ENG_SESSION_POLICY, s->policy_seq)) < 0) {
		s->policy_seq = 0;
		return r;
	}
	ipc_buf_put_str(&b, NETD_A_ID, s->id);
	ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)s->uid); /* (its compile is kept per user: engine_queue.c) */
	ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, s->policy_json); /* a long one in a memfd */
	ipc_buf_put_u32(&b, NETD_A_POLICY_VERSION, s->policy_version);
	if (s->direct_ended)
		ipc_buf_put_u32(&b, NETD_A_DIRECT_ENDED, s->direct_ended);
	r = engine_send(d, &b);
	ipc_buf_release(&b);
	if (r == 0)
		s->direct_ended = 0; /* (the engine audits them) */
	if (r < 0) {
		s->policy_seq = 0;
		log_warnx("engine: sending the new policy of session %s: %s", s->id, strerror(-r));
	}
	return r;
}

/* ---- held requests (policy option "ask") ---- */

struct netd_ask *netd_ask_find(struct netd *d, const char *id)
{
	for (struct netd_ask *a = d->asks; a && id; a = a->next)
		if (strcmp(a->id, id) == 0)
			return a;
	return NULL;
}

void netd_ask_remove(struct netd *d, const char *id)
{
	for (struct netd_ask **p = &d->asks; *p; p = &(*p)->next)
		if (strcmp((*p)->id, id) == 0) {
			struct netd_ask *a = *p;
			*p = a->next;
			d->nasks--;
			free(a);
			return;
		}
}

void netd_asks_drop_session(struct netd *d, const char *session_id)
{
	for (struct netd_ask **p = &d->asks; *p;) {
		struct netd_ask *a = *p;
		if (!session_id || strcmp(a->session, session_id) == 0) {
			*p = a->next;
			d->nasks--;
			free(a);
		} else {
			p = &a->next;
		}
	}
}

int netd_engine_verdict(struct netd *d, const char *ask_id, bool allow, uid_t by)
{
	struct netd_engine *e = d->engine;
	struct ipc_buf b;
	int r;

	if (!e || !e->ready)
		return -EHOSTDOWN;
	if (e->stalled)
		return -EAGAIN; /* not decided: the operator is told why (netd_engine_down_reason) and tries again */
	if ((r = ipc_buf_init(&b, NETD_ENG_VERDICT, next_seq(e))) < 0)
		return r;
	ipc_buf_put_str(&b, NETD_A_ASK_ID, ask_id);
	ipc_buf_put_u8(&b, NETD_A_VERDICT, allow ? 1 : 0);
	ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)by);
	r = engine_send(d, &b);
	ipc_buf_release(&b);
	return r;
}

static bool hex_id(const char *s)
{
	return strlen(s) == NETD_ASK_ID_MAX && strspn(s, "0123456789abcdef") == NETD_ASK_ID_MAX;
}

static bool token(const char *s)
{
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~") == strlen(s);
}

/* Trust boundary: the engine parses hostile traffic, so what it reports is checked like a client's
 * request: a session of ours (whose uid is ours to say), a well-formed id, a protocol that holds ("http",
 * "https": a request in an inspected tunnel, its HTTP rules already passed; "connect", "socks5"), a canonical host
 * name, a port, and the same bounds the engine promises. A bad report is dropped (and logged). */
static void engine_ask(struct netd *d, const struct ipc_msg *m)
{
	const char *id = ipc_get_str(m, NETD_A_ASK_ID), *sid = ipc_get_str(m, NETD_A_ID);
	const char *host = ipc_get_str(m, NETD_A_HOST), *proto = ipc_get_str(m, NETD_A_PROTOCOL);
	const char *method = ipc_get_str(m, NETD_A_METHOD);
	uint16_t port = ipc_get_u16(m, NETD_A_DPORT, 0);
	struct netd_sess *s = netd_sess_find(d, sid);
	char canon[POLICY_HOST_MAX + 1];
	struct netd_ask *a;
	unsigned n = 0;

	if (!s || !hex_id(id) || port == 0 ||
	    (strcmp(proto, "http") != 0 && strcmp(proto, "https") != 0 && strcmp(proto, "connect") != 0 &&
	     strcmp(proto, "socks5") != 0) ||
	    (method && !token(method)) || policy_canon_host(host, strlen(host), canon) != POLICY_CANON_OK ||
	    strcmp(canon, host) != 0 || netd_ask_find(d, id)) {
		log_warnx("engine: ignoring a malformed held-request report (session %s)", s ? s->id : "unknown");
		return;
	}
	for (a = d->asks; a; a = a->next)
		n += strcmp(a->session, s->id) == 0;
	if (n >= NETD_ASKS_PER_SESSION || d->nasks >= NETD_ASKS_MAX) {
		log_warnx("engine: session %s: too many held requests reported; ignoring %s", s->id, id);
		return;
	}
	a = calloc(1, sizeof *a);
	if (!a)
		return;
	util_strlcpy(a->id, id, sizeof a->id);
	util_strlcpy(a->session, s->id, sizeof a->session);
	a->uid = s->uid;
	util_strlcpy(a->protocol, proto, sizeof a->protocol);
	util_strlcpy(a->method, method ? method : "", sizeof a->method);
	util_strlcpy(a->host, host, sizeof a->host);
	a->port = port;
	a->timeout_s = ipc_get_u32(m, NETD_A_TIMEOUT, 0);
	a->created = time(NULL);
	a->next = d->asks;
	d->asks = a;
	d->nasks++;
	log_info("session %s: %s %s:%u held for approval as %s", s->id, a->method, a->host, a->port, a->id);
	netd_control_ask_held(d, a);
}

/* Stops listening to the engine and closes its socket (for the engine: the end of file that stops it). */
static void engine_disconnect(struct netd_engine *e)
{
	if (e->ev) {
		event_free(e->ev);
		e->ev = NULL;
	}
	/* what was queued for this engine goes with it: a restarted one is given the sessions as they are */
	netd_outq_ev_release(&e->out);
	e->poll_at = 0;
	e->poll_sent = false;
	if (e->stall_ev)
		event_del(e->stall_ev);
	e->stalled = e->timed_out = false;
	if (e->sock >= 0) {
		close(e->sock);
		e->sock = -1;
	}
}

static void engine_reap(struct netd_engine *e)
{
	engine_disconnect(e);
	if (e->pid > 0) {
		kill(e->pid, SIGKILL);
		while (waitpid(e->pid, NULL, 0) < 0 && errno == EINTR)
			;
		e->pid = -1;
	}
	e->ready = false;
}

static void restart_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd *d = arg;
	char err[512];

	if (engine_spawn(d, err, sizeof err) < 0) {
		struct timeval tv = {5, 0};
		log_warnx("restarting the proxy engine: %s", err);
		event_add(d->engine->restart_ev, &tv);
	}
}

static void engine_died(struct netd *d, const char *why)
{
	struct netd_engine *e = d->engine;
	struct timeval tv = {0, 200000};

	log_warnx("proxy engine %s; sessions fail closed until it is back", why);
	if (!e->last_err[0] || e->ready)
		snprintf(e->last_err, sizeof e->last_err, "the proxy engine %s and is restarting", why);
	engine_reap(e);
	netd_asks_drop_session(d, NULL); /* the held requests died with the engine */
	/* (netd_conn_records_ready does not close sessions, so the list stays valid) */
	for (struct netd_sess *s = d->sessions; s; s = s->next) {
		s->engine_seq = 0;
		s->direct_orphaned |= s->direct_granted; /* (its grants died with it: netd_direct_end_orphans) */
		if (s->records_seq) { /* what the engine wrote before it died is all there is */
			s->records_seq = 0;
			netd_conn_records_ready(d, s);
		}
		if (s->policy_seq) { /* the restarted engine gets the new policy with the session */
			s->policy_seq = 0;
			/* the change's revocations (sent before its RESULT) may have died with the engine */
			netd_direct_end_orphans(d, s);
			netd_conn_policy_done(d, s, 0, NULL);
		}
	}
	if (d->stopping)
		return;
	e->failures++;
	if (e->failures > 3)
		tv.tv_sec = e->failures > 10 ? 10 : (time_t)e->failures;
	event_add(e->restart_ev, &tv);
}

static void engine_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd *d = arg;
	struct netd_engine *e = d->engine;

	for (int i = 0; i < 64; i++) {
		struct ipc_msg m;
		char err[256];
		int r = ipc_recv_nowait(e->sock, &m);

		if (r == -EAGAIN) {
			ipc_msg_clear(&m);
			return;
		}
		if (r < 0) {
			ipc_msg_clear(&m);
			engine_died(d, r == -EPIPE ? "exited" : "sent a malformed message");
			return;
		}
		r = ipc_msg_check(&netd_engine_proto, &m, NETD_ES_PARENT, err, sizeof err);
		if (r < 0) {
			log_warnx("engine: %s", err);
			ipc_msg_clear(&m);
			engine_died(d, "broke the protocol");
			return;
		}
		if (m.type == NETD_ENG_READY) {
			if (ipc_get_u32(&m, NETD_A_ERRNO, 0)) {
				const char *why = ipc_get_str(&m, NETD_A_ERRMSG);

				snprintf(e->last_err, sizeof e->last_err, "the proxy engine cannot start: %s",
					 why ? why : "unknown error");
				log_warnx("%s", e->last_err);
				ipc_msg_clear(&m);
				engine_died(d, "failed to start");
				return;
			}
			e->ready = true;
			e->failures = 0;
			e->last_err[0] = '\0';
			log_info("proxy engine %d running", (int)e->pid);
			for (struct netd_sess *s = d->sessions; s; s = s->next) {
				s->engine_released = false; /* a released one is added again too: removed at its end */
				engine_send_add(d, s);
			}
		} else if (m.type == NETD_ENG_ASK) {
			engine_ask(d, &m);
		} else if (m.type == NETD_ENG_ASK_END) {
			netd_ask_remove(d, ipc_get_str(&m, NETD_A_ASK_ID));
		} else if (m.type == NETD_ENG_DIRECT_ADD) {
			netd_direct_add(d, &m);
			if (m.seq) /* the engine holds the DNS answer until the elements are in (or refused) */
				engine_direct_done(d, m.seq);
		} else if (m.type == NETD_ENG_DIRECT_REVOKE) {
			netd_direct_revoke(d, &m);
		} else if (m.type == NETD_ENG_METRICS_DATA) {
			engine_answered(e);
			netd_metrics_engine_data(d, &m);
		} else if (m.type == NETD_ENG_RESULT) {
			uint32_t en = ipc_get_u32(&m, NETD_A_ERRNO, 0);

			for (struct netd_sess *s = d->sessions; s; s = s->next) {
				if (s->records_seq && s->records_seq == m.seq) {
					s->records_seq = 0;
					s->engine_released = true;
					netd_conn_records_ready(d, s);
					break;
				}
				if (s->policy_seq && s->policy_seq == m.seq) {
					s->policy_seq = 0;
					netd_conn_policy_done(d, s, -(int)en,
							      en ? "the proxy engine refused the new policy" : NULL);
					break;
				}
				if (s->engine_seq != m.seq)
					continue;
				s->engine_seq = 0;
				s->engine_ok = en == 0;
				ipc_msg_clear(&m);
				/* may close s */
				netd_conn_session_ready(d, s, -(int)en, en ? "the proxy engine refused the session" : NULL);
				break;
			}
		}
		ipc_msg_clear(&m);
	}
}

static int send_config(struct netd *d, int sock, char *err, size_t errlen)
{
	/* enum proxy_listener_kind (proxy/engine.h; engine_child.c checks the numbers) */
	static const int kinds[NETD_LISTENERS] = {0 /* HTTP */, 1 /* DNS UDP */, 2 /* DNS TCP */, 3 /* transparent */,
	                                          4 /* SOCKS5 */};
	struct ipc_buf b;
	int afd = open_audit(d, err, errlen), r;

	if (afd < 0)
		return afd;
	/* the engine user must be able to keep writing to the log after a reopen by rotation tools */
	if (fchown(afd, d->cfg.engine_uid, d->cfg.engine_gid) < 0)
		log_debug("chown of the audit log failed");
	r = ipc_buf_init(&b, NETD_ENG_CONFIG, 1);
	if (r == 0) {
		char dns[64];
		util_strlcpy(dns, d->cfg.upstream_dns, sizeof dns);
		ipc_buf_put_str(&b, NETD_A_AUDIT_LOG, d->cfg.audit_log);
		ipc_buf_put_str(&b, NETD_A_DNS_UPSTREAM, dns);
		ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)d->cfg.engine_uid);
		ipc_buf_put_u32(&b, NETD_A_GID, (uint32_t)d->cfg.engine_gid);
		if (d->upstream_proxy[0])
			ipc_buf_put_str(&b, NETD_A_UPSTREAM_PROXY, d->upstream_proxy);
		if (d->cfg.dns_cache_entries)
			ipc_buf_put_u32(&b, NETD_A_DNS_CACHE, d->cfg.dns_cache_entries);
		ipc_buf_put_fd(&b, afd);
		r = ipc_send(sock, &b);
		ipc_buf_release(&b);
	}
	close(afd);
	for (int i = 0; r == 0 && i < (int)d->nlisten; i++) {
		for (int fam = 0; r == 0 && fam < 2; fam++) {
			int fd = fam ? d->listen_fds6[i] : d->listen_fds[i];

			if (fd < 0)
				continue;
			if ((r = ipc_buf_init(&b, NETD_ENG_LISTENER, 2)) < 0)
				break;
			ipc_buf_put_u32(&b, NETD_A_KIND, (uint32_t)kinds[i]);
			ipc_buf_put_fd(&b, fd);
			r = ipc_send(sock, &b);
			ipc_buf_release(&b);
		}
	}
	if (r == 0)
		r = ipc_send_empty(sock, NETD_ENG_START, 3);
	if (r < 0)
		snprintf(err, errlen, "configuring the proxy engine: %s", strerror(-r));
	return r;
}

/* Whether this process runs more than one thread now (the link reaper, policy compilers, the audit
 * shipper): /proc/self/status's Threads line. Unknown counts as more than one. */
static bool other_threads(void)
{
	char buf[4096];
	const char *t;
	ssize_t n;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	t = strstr(buf, "\nThreads:");
	return !t || strtoul(t + 9, NULL, 10) != 1;
}

static int engine_spawn(struct netd *d, char *err, size_t errlen)
{
	struct netd_engine *e = d->engine;
	int sv[2], r;
	pid_t parent = getpid(), pid;
	char arg0[] = "sluiced", arg1[] = "--engine-child", level[16];
	char *const argv[] = {arg0, arg1, level, NULL};
	/* A forked child of a process with other threads may only exec: a lock another thread held at the
	 * fork (the allocator's, the sanitizer's) stays held in the child forever, an engine that never
	 * answers. The first engine is forked before sluiced starts any thread and runs at once; a restart
	 * later (the reaper, compilers and shipper running) execs sluiced again as `--engine-child`. */
	bool reexec = other_threads();

	snprintf(level, sizeof level, "%d", (int)log_get_level());
	if ((r = ipc_socketpair(sv, false)) < 0) {
		snprintf(err, errlen, "socketpair: %s", strerror(-r));
		return r;
	}
	pid = fork();
	if (pid < 0) {
		r = -errno;
		close(sv[0]);
		close(sv[1]);
		snprintf(err, errlen, "fork: %s", strerror(-r));
		return r;
	}
	if (pid == 0) {
		/* child: keep only stdio and our end of the socketpair, as fd 3; async-signal-safe calls only
		 * until the exec */
		int fd = sv[1];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		signal(SIGPIPE, SIG_IGN);
		signal(SIGHUP, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		if (fd != 3) {
			if (dup2(fd, 3) < 0)
				_exit(1);
			fd = 3;
		}
		close_range(4, ~0u, 0);
		if (!reexec)
			_exit(netd_engine_child_main(fd));
		if (fcntl(fd, F_SETFD, 0) == 0)
			execv("/proc/self/exe", argv);
		{
			static const char msg[] = "sluiced: the proxy engine could not be started (exec of /proc/self/exe)\n";

			(void)!write(2, msg, sizeof msg - 1);
		}
		_exit(127);
	}
	close(sv[1]);
	e->pid = pid;
	e->sock = sv[0];
	{
		struct timeval tv = {2, 0};
		setsockopt(e->sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	}
	r = send_config(d, e->sock, err, errlen);
	if (r < 0) {
		engine_reap(e);
		return r;
	}
	e->ev = event_new(d->base, e->sock, EV_READ | EV_PERSIST, engine_read_cb, d);
	if (!e->ev || netd_outq_ev_init(&e->out, d->base, e->sock, engine_write_cb, d) < 0 ||
	    event_add(e->ev, NULL) < 0) {
		engine_reap(e);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

int netd_engine_start(struct netd *d, char *err, size_t errlen)
{
	struct netd_engine *e = calloc(1, sizeof *e);

	if (!e)
		return -ENOMEM;
	e->d = d;
	e->sock = -1;
	e->pid = -1;
	d->engine = e;
	e->restart_ev = evtimer_new(d->base, restart_cb, d);
	e->stall_ev = evtimer_new(d->base, engine_stall_cb, d);
	if (!e->restart_ev || !e->stall_ev)
		return -ENOMEM;
	return engine_spawn(d, err, errlen);
}

/* The engine's socket closing is its signal to stop (engine_child.c): it frees its sessions, writes
 * what its audit log still buffers and exits. What is still queued for it is sent first, then its exit
 * waited for (a pidfd, no polling loop), 2 s for both together, then it is killed as engine_reap does. A
 * SIGKILL straight away could lose the last records of a session that just ended, an embedded helper's
 * in particular, which stops the engine right after the session. */
#define ENGINE_STOP_MS 2000

void netd_engine_free(struct netd_engine *e)
{
	if (!e)
		return;
	if (e->pid > 0) {
		int pfd = (int)syscall(SYS_pidfd_open, e->pid, 0);
		double until = netd_metrics_now() + ENGINE_STOP_MS / 1000.0;

		while (e->out.q.n && e->sock >= 0) {
			struct pollfd w = {.fd = e->sock, .events = POLLOUT};
			int left = (int)((until - netd_metrics_now()) * 1000);

			if (e->out.q.retry_ms) { /* short of memory: a pause, not a socket that polls writable */
				w.fd = -1;
				left = left < (int)e->out.q.retry_ms ? left : (int)e->out.q.retry_ms;
			}
			if (left <= 0 || (poll(&w, 1, left) < 0 && errno != EINTR) || ipc_outq_flush(&e->out.q, e->sock) < 0)
				break;
		}
		engine_disconnect(e);
		if (pfd >= 0) {
			struct pollfd p = {.fd = pfd, .events = POLLIN};
			int left = (int)((until - netd_metrics_now()) * 1000);

			while (left > 0 && poll(&p, 1, left) < 0 && errno == EINTR)
				;
			close(pfd);
		}
	}
	engine_reap(e); /* kills it if it is still there, and reaps it */
	if (e->restart_ev)
		event_free(e->restart_ev);
	if (e->stall_ev)
		event_free(e->stall_ev);
	if (e->d)
		e->d->engine = NULL;
	free(e);
}
