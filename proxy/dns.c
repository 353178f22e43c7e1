/* The DNS proxy on each session's gateway, over UDP and TCP: a query is checked (dns_msg.c), its
 * name canonicalised and decided by the session's policy; denied names are answered here (REFUSED)
 * and never leave the host; allowed ones are rebuilt and relayed upstream (dns_relay.c), and the
 * answer is filtered of addresses the policy forbids before it goes back. One audit line per query. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "proxy_int.h"
#include "util.h"

/* Under load every wake-up found a full batch of 32 (strace, docs/proxy.md): a larger one makes fewer
 * epoll_wait, recvmmsg, sendmmsg and audit write(2) calls per query. */
#define UDP_BATCH        128  /* datagrams read with one recvmmsg(2) */
#define UDP_QUERY_MAX    4096 /* a query datagram longer than this is dropped (a question and an OPT fit in 600) */
#define UDP_OUT_MAX      128  /* answers sent with one sendmmsg(2) */
#define UDP_READS        4    /* batches read per wake-up of a listener, at most (proxy_dns_udp_cb) */
#define TCP_MAX_INFLIGHT 16
#define TCP_IDLE_MS      10000

struct dns_tcp;

/* One query being answered. A UDP query answered at once (denied, or from a cached view: most of them)
 * lives in a scratch job that is neither allocated nor attached to its session (job_start); one that must
 * wait (relayed upstream, or its answer held) is copied to the heap first (job_keep). Everything before
 * `q` is reset for each query; `q` and the buffers after it are written before they are read. */
struct dns_job {
	struct proxy_conn base;  /* attached to the session while `kept`, not counted (ndns is) */
	struct proxy_session *s; /* borrowed */
	bool kept;               /* allocated, attached and counted in s->ndns (job_keep, or a TCP job) */
	struct timespec start_rt;
	uint64_t start_ms;
	/* where the answer goes: a UDP socket and peer, or a TCP connection */
	int udp_fd; /* borrowed (the listener's) */
	struct sockaddr_storage peer;
	socklen_t peerlen;
	struct sockaddr_storage local; /* the address the query was sent to (answered from it) */
	bool have_local;
	bool set_source; /* the answer names its source (IP_PKTINFO): the listener is bound to no one address */
	struct dns_tcp *tcp;        /* borrowed; NULL for UDP */
	struct dns_relay_query *rq; /* owned while relayed */
	const char *decision;
	const char *error; /* static, or error_buf */
	int rcode;
	size_t qlen, alen;
	bool audited;
	bool via_tcp;    /* the upstream is asked over TCP (its UDP answer was truncated) */
	bool from_cache; /* the answer being filtered came from the DNS cache, not the upstream */
	struct dns_cache_ticket ticket; /* which cached copy (from_cache), for its filtered view */
	TAILQ_ENTRY(dns_job) tcp_entry;
	/* direct mode: the answer, held until the parent has put the grants it taught in place */
	uint8_t *held;          /* owned: the answer to send; NULL when not held */
	size_t heldlen;
	uint32_t hold_seq;      /* the direct_notify events' seq */
	unsigned hold_pending;  /* events the parent has not dealt with yet */
	struct event *hold_ev;  /* owned: PROXY_DIRECT_HOLD_MS, then the answer goes anyway */
	TAILQ_ENTRY(dns_job) hold_entry;
	/* from here on: not reset per query (job_start) */
	struct dns_query q;
	char host[POLICY_HOST_MAX + 1];
	char rule[POLICY_WHERE_MAX];
	char reason[POLICY_ERR_MAX];
	char addr[64];
	char error_buf[160];
};

/* Names already decided, by policy generation (proxy_session.policy_gen): a name asked again under the
 * same policy is not canonicalised and decided again (with a denial's reason formatted again), which was
 * a tenth of the user-space CPU of a query (issue 16). Exact: the key is the generation, which no other
 * policy ever has and which a session's new policy changes, and the name's bytes as asked; the policy is
 * immutable and its decision for a name a pure function of both (policy_decide). An "ask" outcome is never
 * kept: it depends on the session's approvals, which change under one policy. A decision whose rule or
 * reason does not fit is not kept either. A set holds one name's decisions under DECIDED_WAYS policies
 * (sessions with different policies asking the same names), and a new one replaces them in turn.
 * Generations are unique in the process, so one table serves every engine (each single-threaded, one per
 * process outside unit tests). Queries are still audited one by one, each with its own record. */
#define DECIDED_SETS 64 /* by the name's hash; each holds its name's decisions under up to DECIDED_WAYS policies */
#define DECIDED_WAYS 4
#define DECIDED_TEXT 192
struct decided {
	uint64_t policy_gen; /* 0: empty (generations start at 1) */
	size_t name_len, host_len, rule_len, reason_len;
	char name[POLICY_HOST_MAX + 2]; /* as asked: dns_query.name, raw */
	char host[POLICY_HOST_MAX + 1]; /* canonical */
	bool allow;                     /* else deny */
	char rule[DECIDED_TEXT];
	char reason[DECIDED_TEXT]; /* a denial's */
};
static struct decided decided_names[DECIDED_SETS][DECIDED_WAYS];
static unsigned decided_next[DECIDED_SETS]; /* the way a new decision replaces when the set is full */

static unsigned decided_set(const char *name, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 16777619u;
	return (h ^ h >> 16) & (DECIDED_SETS - 1);
}

/* The decision kept for name under gen, or NULL. */
static const struct decided *decided_find(uint64_t gen, const char *name, size_t len)
{
	const struct decided *set = decided_names[decided_set(name, len)];
	for (unsigned w = 0; gen && w < DECIDED_WAYS; w++)
		if (set[w].policy_gen == gen && set[w].name_len == len && memcmp(set[w].name, name, len) == 0)
			return &set[w];
	return NULL;
}

static void decided_put(uint64_t gen, const char *name, size_t len, const char *host, bool allow, const char *rule,
                        const char *reason)
{
	unsigned k = decided_set(name, len), w;
	struct decided *m;
	size_t hl = strlen(host), rl = strlen(rule), zl = reason ? strlen(reason) : 0;

	if (!gen || len > sizeof m->name || hl >= sizeof m->host || rl >= sizeof m->rule || zl >= sizeof m->reason)
		return;
	for (w = 0; w < DECIDED_WAYS && decided_names[k][w].policy_gen; w++)
		;
	if (w == DECIDED_WAYS)
		w = decided_next[k]++ % DECIDED_WAYS;
	m = &decided_names[k][w];
	m->policy_gen = gen;
	m->name_len = len;
	memcpy(m->name, name, len);
	m->host_len = hl;
	memcpy(m->host, host, hl + 1);
	m->allow = allow;
	m->rule_len = rl;
	memcpy(m->rule, rule, rl + 1);
	m->reason_len = zl;
	memcpy(m->reason, reason ? reason : "", zl + 1);
}

/* Answers held for direct-mode grants, of every engine in the process (each is single-threaded, and a
 * process runs one engine outside unit tests); seqs are unique across them. */
static TAILQ_HEAD(, dns_job) held_jobs = TAILQ_HEAD_INITIALIZER(held_jobs);
static uint32_t last_hold_seq;

/* A DNS-over-TCP client connection. */
struct dns_tcp {
	struct proxy_conn base;  /* attached, counted */
	struct proxy_session *s; /* borrowed */
	struct bufferevent *bev; /* owned */
	struct event *idle;      /* owned */
	/* ... its deadline (a grace after a stall of the engine: tcp_idle_cb) */
	struct proxy_deadline idle_due;
	unsigned inflight;
	bool closing;
	TAILQ_HEAD(, dns_job) jobs; /* borrowed: jobs whose answers go here */
};

static void job_free(struct dns_job *j);
static void tcp_free(struct dns_tcp *t);

static void job_audit(struct dns_job *j)
{
	struct audit_record r;
	char qt[16];

	if (j->audited)
		return;
	j->audited = true;
	memset(&r, 0, sizeof r);
	r.start = j->start_rt;
	r.duration_ms = proxy_mono_ms() - j->start_ms;
	r.protocol = "dns";
	r.host = j->host[0] ? j->host : j->q.name;
	r.port = 53;
	r.method = dns_msg_type_name(j->q.qtype, qt, sizeof qt);
	r.decision = j->decision ? j->decision : "deny";
	r.rule = j->rule;
	r.reason = j->reason[0] ? j->reason : NULL;
	r.address = j->addr[0] ? j->addr : NULL;
	r.status = j->rcode;
	r.bytes_out = j->qlen;
	r.bytes_in = j->alen;
	r.error = j->error;
	proxy_session_audit(j->s, &r);
}

/* UDP answers wait here and leave with one sendmmsg(2) per socket when the callback that produced them
 * ends (proxy_dns_udp_flush): the per-datagram system call was the largest cost of the DNS proxy. Only
 * ever filled and emptied within one callback of the event loop (the engine is single-threaded), so
 * nothing waits across a return to the loop. */
union pktinfo_cmsg {
	char buf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
	struct cmsghdr align;
};
static struct {
	unsigned n;
	int fd[UDP_OUT_MAX];
	struct mmsghdr msg[UDP_OUT_MAX];
	struct iovec iov[UDP_OUT_MAX];
	struct sockaddr_storage peer[UDP_OUT_MAX];
	union pktinfo_cmsg cmsg[UDP_OUT_MAX];
	uint8_t data[UDP_OUT_MAX][DNS_EDNS_SIZE];
} udp_out;

void proxy_dns_udp_flush(void)
{
	unsigned i = 0;

	while (i < udp_out.n) {
		unsigned k = i + 1;
		int sent;
		while (k < udp_out.n && udp_out.fd[k] == udp_out.fd[i])
			k++;
		sent = sendmmsg(udp_out.fd[i], udp_out.msg + i, k - i, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (sent <= 0) {
			/* this datagram cannot go (EAGAIN: the client's answers are dropped as a full socket
			 * would drop them; the client retries): the others still do */
			log_debug("dns: sendmmsg: %s", sent < 0 ? strerror(errno) : "nothing sent");
			sent = 1;
		}
		i += (unsigned)sent;
	}
	udp_out.n = 0;
}

/* Fills the control message that makes a UDP answer leave from the address the query went to (the
 * gateway), even on a wildcard socket. Returns its length, 0 without one. */
static size_t pktinfo(const struct dns_job *j, union pktinfo_cmsg *cbuf)
{
	struct msghdr mh;
	struct cmsghdr *cm;

	if (!j->set_source || !j->have_local || j->local.ss_family != j->peer.ss_family)
		return 0;
	memset(cbuf, 0, sizeof *cbuf);
	memset(&mh, 0, sizeof mh);
	mh.msg_control = cbuf->buf;
	mh.msg_controllen = sizeof cbuf->buf;
	cm = CMSG_FIRSTHDR(&mh);
	if (j->local.ss_family == AF_INET) {
		struct in_pktinfo pi;
		memset(&pi, 0, sizeof pi);
		pi.ipi_spec_dst = ((const struct sockaddr_in *)&j->local)->sin_addr;
		cm->cmsg_level = IPPROTO_IP;
		cm->cmsg_type = IP_PKTINFO;
		cm->cmsg_len = CMSG_LEN(sizeof pi);
		memcpy(CMSG_DATA(cm), &pi, sizeof pi);
		return CMSG_SPACE(sizeof pi);
	}
	if (j->local.ss_family == AF_INET6) {
		struct in6_pktinfo pi;
		memset(&pi, 0, sizeof pi);
		pi.ipi6_addr = ((const struct sockaddr_in6 *)&j->local)->sin6_addr;
		cm->cmsg_level = IPPROTO_IPV6;
		cm->cmsg_type = IPV6_PKTINFO;
		cm->cmsg_len = CMSG_LEN(sizeof pi);
		memcpy(CMSG_DATA(cm), &pi, sizeof pi);
		return CMSG_SPACE(sizeof pi);
	}
	return 0;
}

static void send_answer(struct dns_job *j, const uint8_t *msg, size_t len)
{
	unsigned k;
	struct msghdr *mh;

	j->alen = len;
	if (j->tcp) {
		uint8_t hdr[2] = {(uint8_t)(len >> 8), (uint8_t)len};
		if (!j->tcp->closing) {
			bufferevent_write(j->tcp->bev, hdr, 2);
			bufferevent_write(j->tcp->bev, msg, len);
		}
		return;
	}
	if (len > sizeof udp_out.data[0])
		return; /* cannot happen: UDP answers are cut to the client's size, at most DNS_EDNS_SIZE */
	if (udp_out.n == UDP_OUT_MAX)
		proxy_dns_udp_flush();
	k = udp_out.n++;
	memcpy(udp_out.data[k], msg, len);
	udp_out.fd[k] = j->udp_fd;
	udp_out.peer[k] = j->peer;
	udp_out.iov[k].iov_base = udp_out.data[k];
	udp_out.iov[k].iov_len = len;
	mh = &udp_out.msg[k].msg_hdr;
	memset(mh, 0, sizeof *mh);
	mh->msg_name = &udp_out.peer[k];
	mh->msg_namelen = j->peerlen;
	mh->msg_iov = &udp_out.iov[k];
	mh->msg_iovlen = 1;
	mh->msg_controllen = pktinfo(j, &udp_out.cmsg[k]);
	mh->msg_control = mh->msg_controllen ? udp_out.cmsg[k].buf : NULL;
}

static void answer_rcode(struct dns_job *j, int rcode)
{
	uint8_t msg[DNS_REPLY_RCODE_MAX];
	j->rcode = rcode;
	send_answer(j, msg, dns_msg_reply_rcode_buf(&j->q, rcode, msg));
}

static void job_free(struct dns_job *j)
{
	if (j->held) { /* its session ended while the answer waited: it is not sent */
		TAILQ_REMOVE(&held_jobs, j, hold_entry);
		free(j->held);
	}
	if (j->hold_ev)
		event_free(j->hold_ev);
	job_audit(j);
	if (j->rq)
		dns_relay_cancel(j->rq);
	if (j->tcp) {
		TAILQ_REMOVE(&j->tcp->jobs, j, tcp_entry);
		j->tcp->inflight--;
	}
	if (!j->kept)
		return; /* the scratch job: nothing allocated, attached or counted */
	if (j->s)
		j->s->ndns--;
	proxy_session_detach(&j->base);
	free(j);
}

/* The job as one that may wait (relayed, or its answer held): j itself when it is one already, else a copy
 * on the heap, attached and counted, that takes over (the scratch is spent: its record is the copy's).
 * NULL on allocation failure (j is then still the caller's to answer and free). */
static struct dns_job *job_keep(struct dns_job *j)
{
	struct dns_job *k;

	if (j->kept)
		return j;
	k = malloc(sizeof *k);
	if (!k)
		return NULL;
	memcpy(k, j, sizeof *k);
	k->kept = true;
	k->s->ndns++;
	proxy_session_attach(k->s, &k->base, false);
	j->audited = true;
	return k;
}

static void job_session_close(struct proxy_conn *pc)
{
	struct dns_job *j = (struct dns_job *)pc;
	j->error = "session removed";
	job_free(j);
}

static bool keep_addr(const struct sockaddr *sa, void *arg)
{
	struct dns_job *j = arg;
	struct policy_decision d;
	policy_decide_addr(j->s->policy, sa, 0, true, &d);
	return d.verdict == POLICY_ALLOW;
}

/* Sends a held answer and ends its job. */
static void release_answer(struct dns_job *j)
{
	uint8_t *msg = j->held;

	TAILQ_REMOVE(&held_jobs, j, hold_entry);
	j->held = NULL;
	send_answer(j, msg, j->heldlen);
	free(msg);
	proxy_dns_udp_flush(); /* outside the UDP read callback, which would flush it */
	job_free(j);
}

static void hold_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns_job *j = arg;
	(void)fd;
	(void)what;
	log_debug("session %s: the answer for %s went without waiting longer for its direct grants", j->s->id,
	          j->host);
	release_answer(j);
}

/* Holds the answer (takes ownership of msg on success) until `pending` events of seq are done. */
static int hold_answer(struct dns_job *j, uint8_t *msg, size_t len, uint32_t seq, unsigned pending)
{
	struct timeval tv = {0, PROXY_DIRECT_HOLD_MS * 1000};

	j->hold_ev = evtimer_new(j->s->engine->base, hold_timeout_cb, j);
	if (!j->hold_ev || evtimer_add(j->hold_ev, &tv) < 0)
		return -ENOMEM; /* (job_free frees the event) */
	j->held = msg;
	j->heldlen = len;
	j->hold_seq = seq;
	j->hold_pending = pending;
	TAILQ_INSERT_TAIL(&held_jobs, j, hold_entry);
	return 0;
}

void proxy_engine_direct_done(struct proxy_engine *e, uint32_t seq)
{
	struct dns_job *j;

	TAILQ_FOREACH(j, &held_jobs, hold_entry)
		if (j->hold_seq == seq && j->s->engine == e)
			break;
	if (j && --j->hold_pending == 0)
		release_answer(j);
}

/* The most the client takes: a TCP message, or its EDNS size (at most ours), or 512. */
static size_t answer_maxlen(const struct dns_job *j)
{
	if (j->tcp)
		return DNS_MSG_MAX;
	if (j->q.edns)
		return j->q.edns_size < DNS_EDNS_SIZE ? j->q.edns_size : DNS_EDNS_SIZE;
	return DNS_UDP_PLAIN;
}

/* Sends the filtered answer msg (fr: what the filter found) and ends the job. owned is msg when the
 * caller passes it (malloced) to us, else NULL (msg is copied if it must wait). */
static void deliver(struct dns_job *j, const uint8_t *msg, size_t len, const struct dns_filter_result *fr,
                    uint8_t *owned)
{
	unsigned pending;

	j->rcode = fr->rcode;
	util_strlcpy(j->addr, fr->first_addr, sizeof j->addr);
	if (fr->stripped)
		snprintf(j->reason, sizeof j->reason,
		         "%u address record(s) in forbidden ranges removed from the answer", fr->stripped);
	/* direct mode: the grants go to the parent before the client has the addresses, and the answer waits
	 * (at most PROXY_DIRECT_HOLD_MS) until the parent has them in place, so that the client's first
	 * packet (a TCP SYN, or a UDP datagram nobody may send again) finds the flow open */
	if (++last_hold_seq == 0)
		last_hold_seq = 1;
	pending = proxy_direct_learn(j->s, j->host, fr, last_hold_seq, j->error_buf, sizeof j->error_buf);
	if (pending && !owned && (owned = malloc(len)) != NULL)
		memcpy(owned, msg, len);
	if (pending && owned) {
		struct dns_job *k = job_keep(j);
		if (k) {
			j = k; /* (a copy: its own error_buf) */
			if (j->error_buf[0])
				j->error = j->error_buf;
			if (hold_answer(j, owned, len, last_hold_seq, pending) == 0)
				return; /* the job owns the copy now */
		}
	}
	/* flows the parent was not told of stay dropped: the answer goes, and its record says so */
	if (j->error_buf[0])
		j->error = j->error_buf;
	send_answer(j, msg, len);
	free(owned);
	job_free(j);
}

static bool relayed(const uint8_t *ans, size_t len, void *arg)
{
	struct dns_job *j = arg;
	struct dns_filter_result fr;
	uint8_t *out = NULL;
	size_t outlen = 0;
	size_t maxlen;
	int r;

	if (!ans) {
		j->rq = NULL;
		j->error = "the upstream resolver did not answer in time";
		answer_rcode(j, DNS_RC_SERVFAIL);
		job_free(j);
		return true;
	}
	if (len >= 12 && (ans[2] & 0x02) && !j->via_tcp && dns_msg_answer_matches(ans, len, &j->q)) {
		/* Truncated over UDP: ask again over TCP for the whole answer (a UDP client then gets it
		 * truncated to its size, retries over TCP, and gets it whole). */
		uint8_t *up = NULL;
		size_t uplen = 0;
		struct dns_job *k = NULL;
		j->rq = NULL;
		j->via_tcp = true;
		if (dns_msg_build_upstream(&j->q, &up, &uplen) == 0 && (k = job_keep(j)) != NULL &&
		    (k->rq = dns_relay_send_tcp(k->s->engine->relay, up, uplen, relayed, k)) != NULL) {
			free(up);
			return true;
		}
		if (k)
			j = k;
		free(up);
		j->error = "cannot ask the upstream resolver over TCP";
		answer_rcode(j, DNS_RC_SERVFAIL);
		job_free(j);
		return true;
	}
	maxlen = answer_maxlen(j);
	r = dns_msg_filter_answer(ans, len, &j->q, keep_addr, j, maxlen, &out, &outlen, &fr);
	if (r == -EBADMSG) {
		/* the answer to this question, but malformed: nothing of it reaches the client */
		j->rq = NULL;
		snprintf(j->error_buf, sizeof j->error_buf, "the upstream resolver's answer is malformed: %s", fr.bad);
		j->error = j->error_buf;
		answer_rcode(j, DNS_RC_SERVFAIL);
		job_free(j);
		return true;
	}
	if (r != 0)
		return false; /* not the answer to this question: keep waiting (spoofing, or garbage) */
	j->rq = NULL;
	if (!j->from_cache)
		dns_cache_put(j->s->engine->dns_cache, &j->q, ans, len, proxy_mono_ms());
	else
		dns_cache_put_view(j->s->engine->dns_cache, &j->q, &j->ticket, j->s->policy_gen, maxlen, out, outlen,
		                   &fr);
	deliver(j, out, outlen, &fr, out);
	return true;
}

/* Decides one query and answers it or relays it. Takes ownership of j. */
static void handle_query(struct dns_job *j, const uint8_t *wire, size_t len)
{
	const char *why = "";
	int rc = dns_msg_parse_query(wire, len, &j->q, &why);
	enum policy_canon_err ce;
	struct policy_decision d;
	const struct decided *m;
	bool asked;
	struct dns_job *k = NULL;
	uint8_t *up = NULL;
	size_t uplen = 0;

	j->qlen = len;
	if (rc < 0) {
		j->audited = true; /* not a query: nothing to decide, nothing to log */
		job_free(j);
		return;
	}
	if (rc > 0) {
		j->decision = "deny";
		util_strlcpy(j->reason, why, sizeof j->reason);
		answer_rcode(j, rc);
		job_free(j);
		return;
	}
	m = decided_find(j->s->policy_gen, j->q.name, j->q.name_len);
	if (m) {
		memcpy(j->host, m->host, m->host_len + 1);
		memcpy(j->rule, m->rule, m->rule_len + 1);
		j->decision = policy_verdict_name(m->allow ? POLICY_ALLOW : POLICY_DENY);
		if (!m->allow) {
			memcpy(j->reason, m->reason, m->reason_len + 1);
			answer_rcode(j, DNS_RC_REFUSED);
			job_free(j);
			return;
		}
		goto allowed;
	}
	ce = policy_canon_host(j->q.name, j->q.name_len, j->host);
	if (ce != POLICY_CANON_OK) {
		j->host[0] = '\0';
		j->decision = "deny";
		snprintf(j->reason, sizeof j->reason, "bad name: %s", policy_canon_strerror(ce));
		answer_rcode(j, DNS_RC_REFUSED);
		job_free(j);
		return;
	}
	/* Port 0: "may this name be used at all". A denied name is answered here and never sent on. */
	policy_decide(j->s->policy, j->host, 0, 0, &d);
	asked = d.verdict == POLICY_ASK;
	/* "ask" sessions: a name approved in this session resolves; DNS itself is never held (the HTTP or
	 * CONNECT request is what gets approved, docs/proxy.md), so an undecided name is refused now */
	proxy_ask_granted(j->s, j->host, 0, &d, NULL, 0);
	if (d.verdict == POLICY_ASK)
		d.verdict = POLICY_DENY;
	/* copies without stdio: this runs for every query (issue 16) */
	util_strlcpy(j->rule, policy_decision_where(&d), sizeof j->rule);
	j->decision = policy_verdict_name(d.verdict);
	if (d.verdict != POLICY_ALLOW) {
		util_strlcpy(j->reason, policy_decision_reason(&d), sizeof j->reason);
		if (!asked)
			decided_put(j->s->policy_gen, j->q.name, j->q.name_len, j->host, false, j->rule, j->reason);
		answer_rcode(j, DNS_RC_REFUSED);
		job_free(j);
		return;
	}
	if (!asked)
		decided_put(j->s->policy_gen, j->q.name, j->q.name_len, j->host, true, j->rule, NULL);
allowed:
	/* Only now, for a name this session may use: an upstream answer kept earlier (for any session) is
	 * filtered for this one exactly like a fresh answer. */
	if (j->s->engine->dns_cache) {
		static uint8_t cached[DNS_CACHE_ANSWER_MAX];
		struct dns_filter_result fr;
		uint64_t now = j->start_ms; /* read when the datagram was taken: one clock read less per query */
		/* filtered for this session's policy already (by this code, below): a copy */
		size_t n = dns_cache_get_view(j->s->engine->dns_cache, &j->q, j->s->policy_gen, answer_maxlen(j), now,
		                              cached, sizeof cached, &fr);
		if (n) {
			deliver(j, cached, n, &fr, NULL);
			return;
		}
		n = dns_cache_get_ticket(j->s->engine->dns_cache, &j->q, now, cached, sizeof cached, &j->ticket);
		j->from_cache = n > 0;
		if (n && relayed(cached, n, j))
			return;
		j->from_cache = false;
	}
	if (j->s->ndns + (j->kept ? 0 : 1) > PROXY_DNS_PENDING_MAX) { /* (this one counted) */
		j->error = "too many queries in flight for this session";
		answer_rcode(j, DNS_RC_SERVFAIL);
		job_free(j);
		return;
	}
	if (dns_msg_build_upstream(&j->q, &up, &uplen) != 0 || !(k = job_keep(j)) ||
	    !(k->rq = dns_relay_queue(k->s->engine->relay, up, uplen, relayed, k))) {
		if (k)
			j = k;
		j->error = "cannot send the query upstream";
		answer_rcode(j, DNS_RC_SERVFAIL);
		free(up);
		job_free(j);
		return;
	}
	free(up);
}

/* Readies j for a query of s that arrived at rt (wall clock) and mono_ms (proxy_mono_ms), as a scratch job
 * (not kept: job_keep). */
static void job_start(struct dns_job *j, struct proxy_session *s, const struct timespec *rt, uint64_t mono_ms)
{
	memset(j, 0, offsetof(struct dns_job, q));
	j->s = s;
	j->udp_fd = -1;
	j->base.close = job_session_close;
	j->start_rt = *rt;
	j->start_ms = mono_ms;
	j->host[0] = j->rule[0] = j->reason[0] = j->addr[0] = '\0';
}

/* A kept job (allocated, attached, counted), for a query over TCP. */
static struct dns_job *job_new(struct proxy_session *s, const struct timespec *rt, uint64_t mono_ms)
{
	struct dns_job *j = malloc(sizeof *j);
	if (!j)
		return NULL;
	job_start(j, s, rt, mono_ms);
	j->kept = true;
	s->ndns++;
	proxy_session_attach(s, &j->base, false);
	return j;
}

/* ---- UDP ---- */

int proxy_dns_udp_setup(int fd, bool *bound, struct sockaddr_storage *local)
{
	int on = 1;
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -errno;
	/* A socket bound to one address answers from it anyway: naming it in every answer (IP_PKTINFO) was a
	 * control message to copy and parse per datagram. And every query it receives was sent to that address
	 * (the session's gateway), so the kernel is not asked to say so with each one either. */
	*bound = (ss.ss_family == AF_INET && ((struct sockaddr_in *)&ss)->sin_addr.s_addr != htonl(INADDR_ANY)) ||
	         (ss.ss_family == AF_INET6 && !IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr));
	memset(local, 0, sizeof *local);
	if (*bound && ss.ss_family == AF_INET) {
		((struct sockaddr_in *)local)->sin_family = AF_INET;
		((struct sockaddr_in *)local)->sin_addr = ((struct sockaddr_in *)&ss)->sin_addr;
		return 0;
	}
	if (*bound && ss.ss_family == AF_INET6) {
		((struct sockaddr_in6 *)local)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)local)->sin6_addr = ((struct sockaddr_in6 *)&ss)->sin6_addr;
		return 0;
	}
	if (ss.ss_family == AF_INET) {
		if (setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on) != 0)
			return -errno;
	} else if (ss.ss_family == AF_INET6) {
		if (setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on) != 0)
			return -errno;
		(void)setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &on, sizeof on); /* dual-stack */
	} else {
		return -EAFNOSUPPORT;
	}
	return 0;
}

static bool local_from_cmsg(struct msghdr *mh, struct sockaddr_storage *local)
{
	memset(local, 0, sizeof *local);
	if (mh->msg_flags & MSG_CTRUNC)
		return false;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_PKTINFO &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(struct in_pktinfo))) {
			struct in_pktinfo pi;
			memcpy(&pi, CMSG_DATA(cm), sizeof pi);
			((struct sockaddr_in *)local)->sin_family = AF_INET;
			((struct sockaddr_in *)local)->sin_addr = pi.ipi_addr;
			return true;
		}
		if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_PKTINFO &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(struct in6_pktinfo))) {
			struct in6_pktinfo pi;
			memcpy(&pi, CMSG_DATA(cm), sizeof pi);
			((struct sockaddr_in6 *)local)->sin6_family = AF_INET6;
			((struct sockaddr_in6 *)local)->sin6_addr = pi.ipi6_addr;
			return true;
		}
	}
	return false;
}

/* Reads one batch of queries from the listener l's socket fd and answers them (the answers sent, the
 * relayed queries gone upstream). Returns how many datagrams were read, 0 when none was waiting, -1 on
 * error. */
static int udp_read_batch(struct proxy_listener *l, int fd)
{
	static uint8_t buf[UDP_BATCH][UDP_QUERY_MAX];
	static struct sockaddr_storage peer[UDP_BATCH];
	static union {
		char buf[CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(struct in_pktinfo))];
		struct cmsghdr align;
	} cbuf[UDP_BATCH];
	static struct iovec iov[UDP_BATCH];
	static struct mmsghdr msgs[UDP_BATCH];
	static struct dns_job scratch; /* every query of the batch in turn (job_start) */
	struct timespec now_rt;
	uint64_t now_ms;
	int n;

	/* The buffers are the same every time; what the kernel rewrites (the lengths) is set again for each
	 * read (the whole header was cleared and rebuilt for all 128 per wake-up, most of them unused) */
	if (!iov[0].iov_base) {
		for (int i = 0; i < UDP_BATCH; i++) {
			iov[i].iov_base = buf[i];
			iov[i].iov_len = sizeof buf[i];
			msgs[i].msg_hdr.msg_name = &peer[i];
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
	}
	for (int i = 0; i < UDP_BATCH; i++) {
		msgs[i].msg_hdr.msg_namelen = sizeof peer[i];
		/* (a bound socket's queries carry no IP_PKTINFO: proxy_dns_udp_setup) */
		msgs[i].msg_hdr.msg_control = l->dns_bound ? NULL : cbuf[i].buf;
		msgs[i].msg_hdr.msg_controllen = l->dns_bound ? 0 : sizeof cbuf[i].buf;
	}
	n = recvmmsg(fd, msgs, UDP_BATCH, MSG_DONTWAIT, NULL);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		log_warn("dns: recvmmsg");
		return -1;
	}
	/* the datagrams of one read arrived together: their time is read once (two clock reads per query
	 * were 1-2 % of a cached answer's CPU) */
	clock_gettime(CLOCK_REALTIME, &now_rt);
	now_ms = proxy_mono_ms();
	for (int i = 0; i < n; i++) {
		struct msghdr *mh = &msgs[i].msg_hdr;
		struct sockaddr_storage local;
		struct proxy_session *s;
		struct dns_job *j;
		bool have_local;

		if (mh->msg_flags & MSG_TRUNC)
			continue; /* longer than any query we answer */
		if (l->dns_bound) {
			local = l->dns_local;
			have_local = true;
		} else {
			have_local = local_from_cmsg(mh, &local);
		}
		s = proxy_session_find(l->engine, (struct sockaddr *)&peer[i],
		                       have_local ? (struct sockaddr *)&local : NULL);
		if (!s)
			continue;
		if (!proxy_audit_writable(l->engine))
			continue; /* fail closed: no answer without a record */
		j = &scratch;
		job_start(j, s, &now_rt, now_ms);
		j->udp_fd = fd;
		j->peer = peer[i];
		j->peerlen = mh->msg_namelen;
		j->local = local;
		j->have_local = have_local;
		j->set_source = !l->dns_bound;
		handle_query(j, buf[i], msgs[i].msg_len);
	}
	dns_relay_flush(l->engine->relay);
	proxy_dns_udp_flush();
	return n;
}

void proxy_dns_udp_cb(int fd, short what, void *arg)
{
	struct proxy_listener *l = arg;
	(void)what;

	/* Queries that arrived while a batch was answered are read at once, not after a round through
	 * epoll_wait (and, on a busy listener, a sleep and a wake-up). Each batch's audit records are written
	 * before the next batch is read, as the end of the loop iteration writes the last one's, so a batch's
	 * records are never later than they would be otherwise; at most UDP_READS batches, so that the loop's
	 * other events (upstream answers, TCP, timers) wait little. */
	for (int r = 0; r < UDP_READS; r++) {
		if (udp_read_batch(l, fd) <= 0)
			break;
		if (r + 1 < UDP_READS && !audit_log_flush(l->engine->audit)) {
			proxy_audit_failed(l->engine);
			break;
		}
	}
}

/* ---- TCP ---- */

static void tcp_free(struct dns_tcp *t)
{
	struct dns_job *j;
	while ((j = TAILQ_FIRST(&t->jobs)) != NULL) {
		j->error = "the client closed the connection";
		job_free(j);
	}
	if (t->bev)
		bufferevent_free(t->bev);
	if (t->idle)
		event_free(t->idle);
	proxy_session_detach(&t->base);
	free(t);
}

static void tcp_session_close(struct proxy_conn *pc)
{
	tcp_free((struct dns_tcp *)pc);
}

static void tcp_read_cb(struct bufferevent *bev, void *arg)
{
	struct dns_tcp *t = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct timeval tv = {TCP_IDLE_MS / 1000, 0};

	event_add(t->idle, &tv);
	proxy_deadline_start(&t->idle_due, proxy_mono_ms(), TCP_IDLE_MS);
	while (!t->closing && t->inflight < TCP_MAX_INFLIGHT) {
		uint8_t hdr[2];
		size_t mlen;
		uint8_t *msg;
		struct dns_job *j;
		struct timespec rt;

		if (evbuffer_copyout(in, hdr, 2) != 2)
			break;
		mlen = (size_t)hdr[0] << 8 | hdr[1];
		if (mlen < 12) {
			t->closing = true; /* framing is lost: nothing sane to answer */
			break;
		}
		if (evbuffer_get_length(in) < mlen + 2)
			break;
		msg = evbuffer_pullup(in, (ev_ssize_t)mlen + 2);
		if (!msg)
			break;
		if (!proxy_audit_writable(t->s->engine)) {
			t->closing = true;
			break;
		}
		clock_gettime(CLOCK_REALTIME, &rt);
		j = job_new(t->s, &rt, proxy_mono_ms());
		if (!j) {
			t->closing = true;
			break;
		}
		j->tcp = t;
		t->inflight++;
		TAILQ_INSERT_TAIL(&t->jobs, j, tcp_entry);
		handle_query(j, msg + 2, mlen);
		evbuffer_drain(in, mlen + 2);
	}
	dns_relay_flush(t->s->engine->relay);
	if (t->inflight >= TCP_MAX_INFLIGHT)
		bufferevent_disable(bev, EV_READ);
	if (t->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0 && t->inflight == 0)
		tcp_free(t);
}

static void tcp_write_cb(struct bufferevent *bev, void *arg)
{
	struct dns_tcp *t = arg;
	if (t->closing) {
		if (t->inflight == 0)
			tcp_free(t);
		return;
	}
	if (t->inflight < TCP_MAX_INFLIGHT && !(bufferevent_get_enabled(bev) & EV_READ)) {
		bufferevent_enable(bev, EV_READ);
		tcp_read_cb(bev, t);
	}
}

static void tcp_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	tcp_free(arg);
}

/* The idle timeout measures the client, not the engine (docs/proxy.md): a query the socket holds is read
 * (it came in time, unread after a stall), and a timer noticed more than PROXY_STALL_MS late gives the
 * client its time again, once. */
static void tcp_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns_tcp *t = arg;
	struct timeval tv = {TCP_IDLE_MS / 1000, 0};
	(void)fd;
	(void)what;

	if (!t->closing && proxy_bev_read_now(t->bev, 2 * (DNS_MSG_MAX + 2)) > 0) {
		tcp_read_cb(t->bev, t); /* (arms the timer again, or frees t) */
		return;
	}
	if (!t->closing && proxy_deadline_stalled(&t->idle_due, TCP_IDLE_MS, t->s->id, "a DNS-over-TCP connection")) {
		event_add(t->idle, &tv);
		return;
	}
	tcp_free(t);
}

void proxy_dns_tcp_accept(struct proxy_session *s, int fd)
{
	struct dns_tcp *t = calloc(1, sizeof *t);
	struct timeval tv = {TCP_IDLE_MS / 1000, 0};

	if (!t) {
		close(fd);
		return;
	}
	t->s = s;
	TAILQ_INIT(&t->jobs);
	t->base.close = tcp_session_close;
	proxy_session_attach(s, &t->base, true);
	t->bev = bufferevent_socket_new(s->engine->base, fd, BEV_OPT_CLOSE_ON_FREE);
	t->idle = evtimer_new(s->engine->base, tcp_idle_cb, t);
	if (!t->bev || !t->idle) {
		if (!t->bev)
			close(fd);
		tcp_free(t);
		return;
	}
	bufferevent_setcb(t->bev, tcp_read_cb, tcp_write_cb, tcp_event_cb, t);
	bufferevent_setwatermark(t->bev, EV_READ, 0, 2 * (DNS_MSG_MAX + 2));
	bufferevent_enable(t->bev, EV_READ | EV_WRITE);
	event_add(t->idle, &tv);
	proxy_deadline_start(&t->idle_due, proxy_mono_ms(), TCP_IDLE_MS);
}
