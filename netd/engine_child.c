/* Child side of the proxy engine: the dispatcher that runs in the unprivileged child sluiced forks.
 * It collects its configuration and listening sockets while still privileged, drops to the engine
 * user (groups, gid, uid, no_new_privs; checked), creates the engine and then serves the engine
 * protocol: every message checked against the table in proto.c before a handler reads it. */
#include "netd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine.h"
#include "engine_child_out.h"
#include "engine_queue.h"
#include "metrics.h"
#include "log.h"
#include "parent.h"
#include "policy.h"
#include "util.h"

#define CHILD_MAX_LISTENERS 12
/* netd/engine.c numbers its listeners by this enum without including the engine's header */
_Static_assert(PROXY_LISTEN_HTTP == 0 && PROXY_LISTEN_DNS_UDP == 1 && PROXY_LISTEN_DNS_TCP == 2 &&
                       PROXY_LISTEN_TRANSPARENT == 3 && PROXY_LISTEN_SOCKS5 == 4,
               "listener kinds as netd/engine.c sends them");

struct child {
	int sock;
	struct event_base *base;      /* owned */
	struct proxy_engine *engine;  /* owned */
	struct event *ev;             /* owned */
	int audit_fd;                 /* owned until the engine takes it */
	struct sockaddr_storage dns;
	socklen_t dns_len;
	uid_t uid;
	gid_t gid;
	unsigned dns_cache_entries; /* 0: no DNS cache */
	bool configured;
	int lfd[CHILD_MAX_LISTENERS]; /* owned until the engine takes them */
	int lkind[CHILD_MAX_LISTENERS];
	unsigned nl;
	pid_t parent;                 /* sluiced */
	struct proxy_parent *upstream; /* owned until the engine takes it: the parent proxy, or NULL */
	struct netd_engine_queue *held; /* owned: messages waiting for a policy compile (engine_queue.c) */
	struct netd_child_out out;    /* owned: the reports sluiced's end did not take yet (RUN state) */
	bool running;                 /* RUN state: out is set up (stays true after it is released) */
};

/* What the engine sends sluiced never waits (docs/netd.md, "Engine protocol"): a sluiced that stops reading
 * must not freeze this loop, which serves every session's traffic. The RUN state's reports go through
 * engine_child_out.c, whose bounds (engine_bounds.h) fail closed: a message that asks sluiced to open
 * something (an ASK: a request held for an operator; a DIRECT_ADD: direct flows to open) is refused once
 * sluiced is behind (the request is denied at once, the flows stay shut: the DNS answer goes after its
 * hold, PROXY_DIRECT_HOLD_MS), and past CHILD_OUT_MAX bytes the engine gives up and exits, its sessions
 * fail closed, and sluiced restarts it when it reads again. refusable: such a message (-ENOBUFS then). */
static int child_send(struct child *c, struct ipc_buf *b, bool refusable)
{
	if (!c->running) /* INIT (nothing runs yet, sluiced waits for READY): a plain send */
		return ipc_send(c->sock, b);
	return netd_child_out_send(&c->out, b, refusable);
}

/* "addr", "addr#port" or "[v6]:port" style is not accepted: one spelling, addr[#port] */
static int parse_sockaddr(const char *s, uint16_t defport, struct sockaddr_storage *ss, socklen_t *len)
{
	char buf[64], *hash;
	unsigned long port = defport;

	if (util_strlcpy(buf, s, sizeof buf) >= sizeof buf)
		return -EINVAL;
	hash = strchr(buf, '#');
	if (hash) {
		char *end;
		*hash = '\0';
		errno = 0;
		port = strtoul(hash + 1, &end, 10);
		if (errno || *end || port == 0 || port > 65535)
			return -EINVAL;
	}
	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, buf, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		*len = sizeof(struct sockaddr_in);
		return 0;
	}
	if (inet_pton(AF_INET6, buf, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
		*len = sizeof(struct sockaddr_in6);
		return 0;
	}
	return -EINVAL;
}

static int drop_privileges(uid_t uid, gid_t gid, pid_t parent)
{
	struct rlimit rl;
	uid_t ru, eu, su;

	/* many sessions' connections: take the hard limit while still allowed to */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (uid == 0)
		return -EPERM; /* the engine never runs as root */
	if (chdir("/") < 0 || setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
		return -errno;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (getresuid(&ru, &eu, &su) < 0 || ru != uid || eu != uid || su != uid || setuid(0) == 0)
		return -EPERM;
	/* a credential change clears the parent-death signal: set it again, and make sure the parent did
	 * not die in between */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		return -ESRCH;
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	return 0;
}

static void send_result(struct child *c, uint16_t type, uint32_t seq, int err, const char *msg)
{
	struct ipc_buf b;

	if (ipc_buf_init(&b, type, seq) < 0)
		return;
	ipc_buf_put_u32(&b, NETD_A_ERRNO, (uint32_t)(err < 0 ? -err : err));
	if (msg)
		ipc_buf_put_str(&b, NETD_A_ERRMSG, msg);
	if (child_send(c, &b, false) < 0)
		log_warnx("engine: sending sluiced a reply failed");
	ipc_buf_release(&b);
}

static int addr_of(const struct ipc_msg *m, uint16_t attr, struct sockaddr_storage *ss)
{
	const char *s = ipc_get_str(m, attr);
	socklen_t len;

	memset(ss, 0, sizeof *ss);
	if (!s)
		return 0;
	return parse_sockaddr(s, 0, ss, &len);
}

/* SESSION_ADD, once its policy compiled on a worker (engine_queue.c): p is the engine's own copy of the
 * policy sluiced compiled, borrowed. */
static int handle_session_add(struct child *c, struct ipc_msg *m, struct policy *p, char *err, size_t errlen)
{
	struct proxy_session_info si = {0};
	int r;

	si.id = ipc_get_str(m, NETD_A_ID);
	si.uid = (uid_t)ipc_get_u32(m, NETD_A_UID, 0);
	si.command = ipc_get_str(m, NETD_A_COMMAND);
	if (addr_of(m, NETD_A_ADDR4, &si.addr4) < 0 || addr_of(m, NETD_A_GW4, &si.gw4) < 0 ||
	    addr_of(m, NETD_A_ADDR6, &si.addr6) < 0 || addr_of(m, NETD_A_GW6, &si.gw6) < 0) {
		snprintf(err, errlen, "bad session address");
		return -EINVAL;
	}
	si.policy = p;
	si.policy_version = ipc_get_u32(m, NETD_A_POLICY_VERSION, 0);
	si.ca_cert_pem = ipc_get_str(m, NETD_A_CA_CERT);
	si.ca_key_pem = ipc_get_str(m, NETD_A_CA_KEY);
	r = proxy_engine_session_add(c->engine, &si);
	if (r < 0)
		snprintf(err, errlen, "adding the session: %s", strerror(-r));
	return r;
}

/* The engine held a request for approval, or such an ask ended: tell sluiced, which keeps the list
 * operators see and sends the verdict back (VERDICT). */
static int ask_notify(const struct proxy_ask_event *ev, void *arg)
{
	struct child *c = arg;
	struct ipc_buf b;
	int r;

	if ((r = ipc_buf_init(&b, ev->done ? NETD_ENG_ASK_END : NETD_ENG_ASK, 0)) < 0)
		return r;
	ipc_buf_put_str(&b, NETD_A_ASK_ID, ev->ask_id);
	if (!ev->done) {
		char method[NETD_METHOD_MAX + 1];

		util_strlcpy(method, ev->method ? ev->method : "", sizeof method);
		ipc_buf_put_str(&b, NETD_A_ID, ev->session_id);
		ipc_buf_put_u32(&b, NETD_A_UID, (uint32_t)ev->uid);
		ipc_buf_put_str(&b, NETD_A_PROTOCOL, ev->protocol);
		ipc_buf_put_str(&b, NETD_A_METHOD, method);
		ipc_buf_put_str(&b, NETD_A_HOST, ev->host);
		ipc_buf_put_u16(&b, NETD_A_DPORT, ev->port);
		ipc_buf_put_u32(&b, NETD_A_TIMEOUT, ev->timeout_s);
	}
	/* a new ask is refused when sluiced does not read (proxy_ask_hold then denies the request at once);
	 * its end always queues: sluiced knows of the ask */
	if ((r = child_send(c, &b, !ev->done)) < 0)
		log_warnx("engine: telling sluiced about ask %s failed: %s", ev->ask_id, strerror(-r));
	ipc_buf_release(&b);
	return r;
}

/* Direct mode: the DNS proxy learned an address of an allowed name (or a grant was revoked): sluiced
 * checks it again and opens (or ends) the flows. */
static int direct_notify(const struct proxy_direct_event *ev, void *arg)
{
	struct child *c = arg;
	char addr[INET6_ADDRSTRLEN] = "";
	struct ipc_buf b;
	int r;

	if (ev->addr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)ev->addr)->sin_addr, addr, sizeof addr);
	else if (ev->addr->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ev->addr)->sin6_addr, addr, sizeof addr);
	if (!addr[0] || ev->nports == 0 || ev->nports > 16)
		return -EINVAL;
	if ((r = ipc_buf_init(&b, ev->revoke ? NETD_ENG_DIRECT_REVOKE : NETD_ENG_DIRECT_ADD, ev->seq)) < 0)
		return r;
	ipc_buf_put_str(&b, NETD_A_ID, ev->session_id);
	ipc_buf_put_str(&b, NETD_A_DST, addr);
	ipc_buf_put_u8(&b, NETD_A_PROTO, ev->proto);
	if (ev->revoke) {
		ipc_buf_put_u16(&b, NETD_A_DPORT, ev->ports[0]);
	} else {
		uint16_t ports[16];

		for (size_t i = 0; i < ev->nports; i++)
			ports[i] = htons(ev->ports[i]);
		ipc_buf_put_str(&b, NETD_A_HOST, ev->host);
		ipc_buf_put_bytes(&b, NETD_A_PORTS, ports, ev->nports * 2);
		ipc_buf_put_u32(&b, NETD_A_TTL, ev->ttl_s);
	}
	/* an opening may be refused (the flows stay shut: fail closed, and the engine's audit records say so);
	 * a revocation always queues */
	if ((r = child_send(c, &b, !ev->revoke)) < 0)
		log_warnx("engine: telling sluiced about direct flows to %s failed (%s)", addr,
		          ev->revoke ? "not ended" : "not opened");
	ipc_buf_release(&b);
	return r;
}

/* SESSION_POLICY, once the new policy compiled on a worker: swapped in one step of the loop, so every
 * request is decided wholly by the old or the new policy. p is borrowed. */
static int handle_session_policy(struct child *c, struct ipc_msg *m, struct policy *p, char *err, size_t errlen)
{
	int r = proxy_engine_session_set_policy_version(c->engine, ipc_get_str(m, NETD_A_ID), p,
	                                                ipc_get_u32(m, NETD_A_POLICY_VERSION, 0));

	if (r < 0)
		snprintf(err, errlen, "replacing the policy: %s", strerror(-r));
	return r;
}

static int handle_drop(struct child *c, struct ipc_msg *m)
{
	struct sockaddr_storage src, dst;
	socklen_t sl, dl;
	uint16_t sport = ipc_get_u16(m, NETD_A_SPORT, 0), dport = ipc_get_u16(m, NETD_A_DPORT, 0);

	if (parse_sockaddr(ipc_get_str(m, NETD_A_SRC), 0, &src, &sl) < 0 ||
	    parse_sockaddr(ipc_get_str(m, NETD_A_DST), 0, &dst, &dl) < 0 || src.ss_family != dst.ss_family)
		return -EINVAL;
	if (src.ss_family == AF_INET) {
		((struct sockaddr_in *)&src)->sin_port = htons(sport);
		((struct sockaddr_in *)&dst)->sin_port = htons(dport);
	} else {
		((struct sockaddr_in6 *)&src)->sin6_port = htons(sport);
		((struct sockaddr_in6 *)&dst)->sin6_port = htons(dport);
	}
	return proxy_engine_audit_drop(c->engine, (struct sockaddr *)&src, (struct sockaddr *)&dst,
				       ipc_get_u8(m, NETD_A_PROTO, 0));
}

/* Handles one message of the RUN state; p is the compiled policy of a SESSION_ADD or SESSION_POLICY
 * (borrowed; NULL with r < 0 and why in perr when its compile failed). */
static void dispatch(struct child *c, struct ipc_msg *m, struct policy *p, int r, const char *perr)
{
	char err[NETD_ERRMSG_MAX + 1] = "";

	if (!p && r == 0) {
		r = -EINVAL;
		perr = "no policy";
	}
	switch (m->type) {
	case NETD_ENG_SESSION_ADD:
	case NETD_ENG_SESSION_POLICY:
		if (p)
			r = m->type == NETD_ENG_SESSION_ADD ? handle_session_add(c, m, p, err, sizeof err)
			                                    : handle_session_policy(c, m, p, err, sizeof err);
		/* the direct flows sluiced ended itself, their engine dead: audited on the session's behalf */
		if (r == 0 && ipc_get_u32(m, NETD_A_DIRECT_ENDED, 0) &&
		    proxy_engine_direct_ended(c->engine, ipc_get_str(m, NETD_A_ID), ipc_get_u32(m, NETD_A_DIRECT_ENDED, 0)) < 0)
			log_warnx("engine: the direct flows sluiced ended were not audited");
		send_result(c, NETD_ENG_RESULT, m->seq, r, r < 0 ? (p ? err : perr) : NULL);
		break;
	case NETD_ENG_SESSION_REMOVE:
		r = proxy_engine_session_remove(c->engine, ipc_get_str(m, NETD_A_ID));
		if (r < 0 && r != -ENOENT)
			log_warnx("engine: removing session: %s", strerror(-r));
		/* With a seq, sluiced waits for the answer (RECORDS): the session's last records (its
		 * connections just closed) are in the log before it. An ordinary removal (seq 0) gets no
		 * answer: a thousand sessions ending at once must not queue a thousand replies while
		 * sluiced is still sending removals (both ends would wait on each other). */
		if (m->seq) {
			(void)proxy_engine_flush_audit(c->engine);
			send_result(c, NETD_ENG_RESULT, m->seq, 0, NULL);
		}
		break;
	case NETD_ENG_AUDIT_DROP:
		if (handle_drop(c, m) < 0)
			log_debug("engine: drop record not written");
		break;
	case NETD_ENG_DROP_SUMMARY:
		if (proxy_engine_audit_drop_summary(c->engine, ipc_get_str(m, NETD_A_ID),
		                                    ipc_get_u32(m, NETD_A_DROPS_OVER_RATE, 0),
		                                    ipc_get_u32(m, NETD_A_DROPS_LOST, 0),
		                                    ipc_get_u32(m, NETD_A_DROPS_UNSENT, 0)) < 0)
			log_warnx("engine: the summary of the drops not audited was not written");
		break;
	case NETD_ENG_VERDICT:
		r = proxy_engine_ask_decide(c->engine, ipc_get_str(m, NETD_A_ASK_ID), ipc_get_u8(m, NETD_A_VERDICT, 0) == 1,
		                            (uid_t)ipc_get_u32(m, NETD_A_UID, 0));
		if (r < 0)
			log_info("engine: verdict on an ask that is no longer held (timed out or abandoned)");
		break;
	case NETD_ENG_GRANT:
		/* a verdict of the session's past, given again after this engine started */
		r = proxy_engine_session_grant(c->engine, ipc_get_str(m, NETD_A_ID), ipc_get_str(m, NETD_A_HOST),
		                               ipc_get_u16(m, NETD_A_DPORT, 0), ipc_get_u8(m, NETD_A_VERDICT, 0) == 1,
		                               (uid_t)ipc_get_u32(m, NETD_A_UID, 0));
		if (r < 0)
			log_warnx("engine: restoring a verdict: %s", strerror(-r));
		break;
	case NETD_ENG_METRICS: {
		struct proxy_metrics pm;
		struct ipc_buf b;

		proxy_engine_metrics(c->engine, &pm);
		if (ipc_buf_init(&b, NETD_ENG_METRICS_DATA, m->seq) == 0) {
			ipc_buf_put_bytes(&b, NETD_A_METRICS, &pm, sizeof pm);
			child_send(c, &b, false); /* (one at a time: sluiced polls again once answered) */
		}
		ipc_buf_release(&b);
		break;
	}
	case NETD_ENG_DIRECT_DONE:
		/* sluiced put the grants of a DNS answer in place (or refused them): the answer goes */
		proxy_engine_direct_done(c->engine, m->seq);
		break;
	case NETD_ENG_REOPEN_LOG:
		r = proxy_engine_replace_log_fd(c->engine, ipc_msg_take_fd(m, 0));
		if (r < 0)
			log_warnx("engine: replacing the audit log: %s", strerror(-r));
		break;
	default:
		break;
	}
}

/* A held message's turn came (engine_queue.c): its policy compiled, or its session's earlier one did. */
static void held_cb(void *arg, struct ipc_msg *m, struct policy *p, int r, const char *err)
{
	dispatch(arg, m, p, r, err);
	policy_unref(p);
}

static void run_cb(evutil_socket_t fd, short what, void *arg)
{
	struct child *c = arg;

	for (int i = 0; i < 64; i++) {
		struct ipc_msg m;
		char err[NETD_ERRMSG_MAX + 1] = "";
		int r = ipc_recv_nowait(c->sock, &m);

		if (r == -EAGAIN) {
			ipc_msg_clear(&m);
			return;
		}
		if (r == 0)
			r = ipc_msg_check(&netd_engine_proto, &m, NETD_ES_RUN, err, sizeof err);
		if (r < 0) {
			/* the parent went away or broke the protocol: stop serving */
			if (r != -EPIPE)
				log_warnx("engine: %s", err[0] ? err : strerror(-r));
			ipc_msg_clear(&m);
			event_base_loopbreak(c->base);
			return;
		}
		/* A session's policy compiles on a worker; that session's later messages wait for it (the
		 * others go on at once). */
		r = 0;
		if (m.type == NETD_ENG_SESSION_ADD || m.type == NETD_ENG_SESSION_POLICY ||
		    m.type == NETD_ENG_SESSION_REMOVE || m.type == NETD_ENG_GRANT)
			r = netd_engine_queue_submit(c->held, &m, ipc_get_str(&m, NETD_A_ID),
			                             m.type == NETD_ENG_SESSION_ADD || m.type == NETD_ENG_SESSION_POLICY,
			                             NETD_A_POLICY, NETD_A_POLICY_FD, NETD_POLICY_MAX);
		if (r < 0 && (m.type == NETD_ENG_SESSION_ADD || m.type == NETD_ENG_SESSION_POLICY))
			send_result(c, NETD_ENG_RESULT, m.seq, r, "out of memory");
		else if (r <= 0) /* (out of memory holding a removal or a grant: handled now rather than lost) */
			dispatch(c, &m, NULL, 0, NULL);
		ipc_msg_clear(&m);
	}
}

/* INIT state: blocking reads until START. Returns 0 once the engine runs. */
static int child_init(struct child *c)
{
	for (;;) {
		struct ipc_msg m;
		char err[NETD_ERRMSG_MAX + 1] = "";
		int r = ipc_recv(c->sock, &m);

		if (r == 0)
			r = ipc_msg_check(&netd_engine_proto, &m, NETD_ES_INIT, err, sizeof err);
		if (r < 0) {
			if (r != -EPIPE)
				log_warnx("engine: %s", err[0] ? err : strerror(-r));
			ipc_msg_clear(&m);
			return r;
		}
		if (m.type == NETD_ENG_CONFIG) {
			if (c->configured ||
			    parse_sockaddr(ipc_get_str(&m, NETD_A_DNS_UPSTREAM), 53, &c->dns, &c->dns_len) < 0) {
				ipc_msg_clear(&m);
				return -EINVAL;
			}
			c->uid = (uid_t)ipc_get_u32(&m, NETD_A_UID, 0);
			c->gid = (gid_t)ipc_get_u32(&m, NETD_A_GID, 0);
			c->dns_cache_entries = ipc_get_u32(&m, NETD_A_DNS_CACHE, 0);
			if (c->dns_cache_entries > 1000000) {
				ipc_msg_clear(&m);
				return -EINVAL;
			}
			if (ipc_get_str(&m, NETD_A_UPSTREAM_PROXY)) {
				/* still privileged: the auth_file is readable by root only */
				char perr[600];
				if (proxy_parent_load(ipc_get_str(&m, NETD_A_UPSTREAM_PROXY), &c->upstream, perr,
				                      sizeof perr) < 0) {
					log_warnx("engine: the parent proxy configuration: %s", perr);
					ipc_msg_clear(&m);
					return -EINVAL;
				}
			}
			c->audit_fd = ipc_msg_take_fd(&m, 0);
			c->configured = true;
		} else if (m.type == NETD_ENG_LISTENER) {
			uint32_t kind = ipc_get_u32(&m, NETD_A_KIND, 99);

			if (c->nl >= CHILD_MAX_LISTENERS || kind > PROXY_LISTEN_SOCKS5) {
				ipc_msg_clear(&m);
				return -EINVAL;
			}
			c->lkind[c->nl] = (int)kind;
			c->lfd[c->nl++] = ipc_msg_take_fd(&m, 0);
		} else if (m.type == NETD_ENG_START) {
			struct proxy_config cfg = {0};

			ipc_msg_clear(&m);
			if (!c->configured) {
				send_result(c, NETD_ENG_READY, 0, EINVAL, "START before CONFIG");
				return -EINVAL;
			}
			if ((r = drop_privileges(c->uid, c->gid, c->parent)) < 0) {
				snprintf(err, sizeof err, "dropping privileges to uid %u: %s", (unsigned)c->uid,
					 strerror(-r));
				send_result(c, NETD_ENG_READY, 0, r, err);
				return r;
			}
			cfg.audit_fd = steal_fd(&c->audit_fd);
			cfg.upstream_dns = c->dns;
			cfg.upstream_dns_len = c->dns_len;
			cfg.dns_cache_entries = c->dns_cache_entries;
			cfg.ask_notify = ask_notify;
			cfg.ask_arg = c;
			cfg.direct_notify = direct_notify;
			cfg.direct_arg = c;
			cfg.parent = c->upstream; /* the engine takes it */
			c->upstream = NULL;
			c->engine = proxy_engine_new(c->base, &cfg, err, sizeof err);
			if (!c->engine) {
				send_result(c, NETD_ENG_READY, 0, EIO, err);
				return -EIO;
			}
			for (unsigned i = 0; i < c->nl; i++) {
				r = proxy_engine_add_listener(c->engine, steal_fd(&c->lfd[i]),
							      (enum proxy_listener_kind)c->lkind[i]);
				if (r < 0) {
					snprintf(err, sizeof err, "adding a listener: %s", strerror(-r));
					send_result(c, NETD_ENG_READY, 0, r, err);
					return r;
				}
			}
			send_result(c, NETD_ENG_READY, 0, 0, NULL);
			return 0;
		}
		ipc_msg_clear(&m);
	}
}

int netd_engine_child_main(int sock)
{
	struct child c = {.sock = sock, .audit_fd = -1, .parent = getppid()};
	int rc = 1;

	for (int i = 0; i < CHILD_MAX_LISTENERS; i++)
		c.lfd[i] = -1;
	log_init("sluiced-engine", log_get_level());
	c.base = proxy_event_base_new();
	if (!c.base)
		goto out;
	if (child_init(&c) < 0)
		goto out;
	if (!(c.held = netd_engine_queue_new(c.base, held_cb, &c)) ||
	    netd_child_out_init(&c.out, c.base, sock) < 0)
		goto out;
	c.running = true;
	c.ev = event_new(c.base, sock, EV_READ | EV_PERSIST, run_cb, &c);
	if (!c.ev || event_add(c.ev, NULL) < 0)
		goto out;
	event_base_dispatch(c.base);
	rc = 0;
out:
	if (c.ev)
		event_free(c.ev);
	/* what sluiced did not take goes (it is stopping us, is gone, or we gave up): the engine's last
	 * reports while it frees its sessions below (ASK_END) fail at once, never a blocking send on a full
	 * socket that a stopped sluiced would hold the exit on */
	netd_child_out_release(&c.out);
	netd_engine_queue_free(c.held);
	proxy_engine_free(c.engine);
	for (unsigned i = 0; i < c.nl; i++)
		if (c.lfd[i] >= 0)
			close(c.lfd[i]);
	if (c.audit_fd >= 0)
		close(c.audit_fd);
	if (c.base)
		event_base_free(c.base);
	close(sock);
	return rc;
}
