/* Internal types the proxy engine's files share: the engine, sessions, the connection base every
 * live connection embeds (so removing a session can close them all), and the helpers between
 * files. Not a public interface: netd uses engine.h only. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>

#include "audit.h"
#include "engine.h"
#include "metrics.h"
#include "policy.h"

struct bufferevent;
struct event;
struct http_request;

#define PROXY_ADDRSTR_MAX     64           /* "[v6]:port" */
#define PROXY_BUF_HIGH        (256 * 1024) /* per direction: stop reading above this much queued output */
#define PROXY_DNS_PENDING_MAX 256          /* relayed DNS queries in flight per session */

struct proxy_conn;
struct proxy_ask;
struct proxy_grant;
struct proxy_direct_grant;
struct proxy_parent;
struct proxy_mitm_ca;
struct proxy_relay;
struct ssl_ctx_st;

/* A session's place in the engine's address index (session.c): one per address it has. */
struct proxy_addr_node {
	struct proxy_addr_node *next;  /* in its bucket */
	struct proxy_session *session; /* borrowed: the session it is part of */
	int family;                    /* 0: unused (the session has no such address) */
	uint8_t bytes[16];             /* normalised: an IPv4-mapped IPv6 address as IPv4 */
};

#define PROXY_ADDR_BUCKETS 4096

struct proxy_session {
	TAILQ_ENTRY(proxy_session) entry;
	struct proxy_addr_node by_addr[2]; /* addr4's and addr6's entries in engine->by_addr */
	struct proxy_engine *engine; /* borrowed */
	char *id;                    /* owned */
	uid_t uid;
	char *command; /* owned */
	struct sockaddr_storage addr4, addr6, gw4, gw6;
	struct policy *policy; /* owned reference */
	unsigned nconns;       /* counted connections */
	unsigned ndns;         /* DNS queries in flight */
	TAILQ_HEAD(, proxy_conn) conns;
	struct proxy_direct_grant *direct; /* owned: direct-mode (address, protocol, port) grants (direct.c) */
	size_t ndirect;
	TAILQ_HEAD(, proxy_ask) asks; /* held host:port pairs waiting for a verdict (ask.c) */
	unsigned nasks;
	struct proxy_grant *grants; /* owned: verdicts given in this session (ask.c) */
	size_t ngrants;
	uint32_t policy_version;    /* the parent's version of s->policy (audit field), 0 = none */
	uint64_t policy_gen; /* new for every policy the session is given, never reused in the process: what the DNS
	                      * cache keys answers filtered for this policy by (dns_cache.h), and what a kept
	                      * upstream connection was checked under (http.c) */
	struct proxy_mitm_ca *ca; /* owned: the HTTPS inspection CA (mitm_ca.h); NULL when nothing is inspected */
	struct proxy_addr_cache *addr_cache; /* owned: names resolved for the session (addr_cache.c), or NULL */
	struct proxy_up_pool *up_pool;       /* owned: idle upstream connections (up_pool.c), or NULL */
};

/* Embedded in every live connection or query; the session closes what is left when it goes. */
struct proxy_conn {
	TAILQ_ENTRY(proxy_conn) entry;
	struct proxy_session *session; /* borrowed; set while attached */
	bool counted;                  /* counts against max_conns_per_session */
	/* Ends the connection now: writes its audit record, detaches and frees it. */
	void (*close)(struct proxy_conn *c);
	/* NULL, or whether the connection's destination is still allowed by p (the session's policy was
	 * replaced, p is s->policy already): false closes it. Set by connections that carry bytes to one host
	 * (tunnels) and by exchanges held for approval (which it may release or refuse itself, returning true:
	 * relay.c). May end this connection itself, never another. */
	bool (*still_allowed)(struct proxy_conn *c, const struct policy *p);
};

struct dns_relay;
struct evconnlistener;

struct proxy_listener {
	TAILQ_ENTRY(proxy_listener) entry;
	struct proxy_engine *engine; /* borrowed */
	enum proxy_listener_kind kind;
	int fd;                     /* owned through lev or ev */
	struct evconnlistener *lev; /* owned (TCP kinds; LEV_OPT_CLOSE_ON_FREE) */
	struct event *ev;           /* owned (UDP) */
	struct event *backoff;      /* owned: re-enables accepting after EMFILE */
	unsigned backoff_ms;
	bool dns_bound; /* DNS over UDP: bound to one address, so answers leave from it without IP_PKTINFO */
	struct sockaddr_storage dns_local; /* dns_bound: that address (port 0), every query's destination */
};

/* Work that waits for the end of the current loop iteration (proxy_later_add): the HTTP front's small
 * sends (http_forward.c), made together after every callback due in the iteration, so that a peer woken
 * by one finds the others' bytes too. Embedded in its owner, which cancels it before it is freed. */
struct proxy_later {
	struct proxy_later *next, **pprev; /* in the engine's list while queued (pprev NULL: not queued) */
	void (*run)(struct proxy_later *l);
};

struct proxy_engine {
	struct event_base *base;     /* borrowed */
	struct audit_log *audit;     /* owned */
	struct event *audit_retry;   /* owned: retries a failing audit log */
	struct event *audit_flush;   /* owned: writes the batch at the end of a loop iteration, then runs `later` */
	struct proxy_later *later;   /* borrowed: queued by proxy_later_add, run by audit_flush's callback */
	struct dns_relay *relay;     /* owned: relays allowed DNS queries upstream */
	struct dns_cache *dns_cache; /* owned: upstream answers (dns_cache.c); NULL = no cache */
	struct sockaddr_storage upstream_dns;
	socklen_t upstream_dns_len;
	unsigned max_conns, header_timeout_ms, idle_timeout_ms, connect_timeout_ms;
	unsigned up_idle; /* idle upstream connections in all sessions' pools (up_pool.c) */
	const struct timeval *tv_header, *tv_idle, *tv_connect; /* common timeouts of the base */
	TAILQ_HEAD(, proxy_session) sessions;
	/* the sessions by source address (session.c): a connection's session in one probe rather than a scan
	 * of every session (at 1000 sessions the scan was most of the engine's cost of a session's setup) */
	struct proxy_addr_node *by_addr[PROXY_ADDR_BUCKETS];
	TAILQ_HEAD(, proxy_listener) listeners; /* owned */
	proxy_ask_notify_fn ask_notify;         /* NULL: "ask" decisions are denials */
	void *ask_arg;                          /* borrowed */
	proxy_direct_notify_fn direct_notify;   /* NULL: direct mode cannot open flows here */
	void *direct_arg;                       /* borrowed */
	uint64_t flow_next;                     /* the next audit flow id (random top bits per engine) */
	struct proxy_parent *parent;            /* owned: the parent proxy (parent.h), or NULL */
	struct proxy_metrics metrics;           /* every record written, counted (metrics.h) */
	struct ssl_ctx_st *tls_up;              /* owned: HTTPS inspection's upstream TLS client (inspect.c); on first use */
};

/* ---- session.c ---- */
int proxy_session_add(struct proxy_engine *e, const struct proxy_session_info *info);
int proxy_session_remove(struct proxy_engine *e, const char *id);
/* Replaces s's policy (see proxy_engine_session_set_policy). */
int proxy_session_set_policy(struct proxy_engine *e, const char *id, struct policy *p, uint32_t version);
/* The live session with this id, or NULL. */
struct proxy_session *proxy_session_by_id(struct proxy_engine *e, const char *id);
/* Remembers a verdict on host:port for the rest of the session (ask.c). */
void proxy_ask_grant_add(struct proxy_session *s, const char *host, uint16_t port, bool allow, uid_t by);
void proxy_session_free_all(struct proxy_engine *e);
/* The session whose own address is `peer` and, when it has a gateway of that family, whose gateway
 * is `local` (NULL = not checked). IPv4-mapped IPv6 peers are matched as IPv4. */
struct proxy_session *proxy_session_find(struct proxy_engine *e, const struct sockaddr *peer,
                                         const struct sockaddr *local);
/* 0 when a new connection may start; -EMFILE over the session cap, -EIO while the audit log fails. */
int proxy_session_admit(struct proxy_session *s);
void proxy_session_attach(struct proxy_session *s, struct proxy_conn *c, bool counted);
void proxy_session_detach(struct proxy_conn *c);
/* Fills the session fields of r (and a flow id when it has none) and appends it to the audit log. */
void proxy_session_audit(struct proxy_session *s, struct audit_record *r);

/* ---- engine.c helpers ---- */
/* Writes "a.b.c.d:port" / "[v6]:port" (port 0: address only). */
const char *proxy_addr_str(const struct sockaddr *sa, char buf[PROXY_ADDRSTR_MAX], bool with_port);
uint64_t proxy_mono_ms(void);
/* A client's deadline (a request head's or a handshake's header timeout), which measures the client, not
 * the engine (docs/proxy.md, "The header timeout measures the client"): a timer the engine notices more
 * than PROXY_STALL_MS after it was due means the engine did not run meanwhile, and on a loaded or paused
 * machine nor did the client. Far more than a busy loop's lag (tens of ms on a loaded 2-core machine), far
 * less than a timeout. */
#define PROXY_STALL_MS 500
struct proxy_deadline {
	uint64_t due_ms; /* proxy_mono_ms clock; 0: none (no grace after a stall) */
	bool spared;     /* the grace was given once */
};
/* The deadline is timeout_ms from now_ms (proxy_mono_ms(), read by the caller), with its grace. */
void proxy_deadline_start(struct proxy_deadline *d, uint64_t now_ms, unsigned timeout_ms);
/* d's timer fired: true when it fired more than PROXY_STALL_MS late and had no grace yet; then the client
 * has timeout_ms again from now (the caller arms its timer again), what (a connection of session sid) is
 * logged at debug level. */
bool proxy_deadline_stalled(struct proxy_deadline *d, unsigned timeout_ms, const char *sid, const char *what);
/* A new audit flow id: unique in the log, also across engine restarts (24 random bits per engine, then a
 * counter). */
uint64_t proxy_flow_next(struct proxy_engine *e);
void proxy_audit_failed(struct proxy_engine *e);   /* arms the retry timer */
/* Whether the audit log takes records now (healthy, or what waits was written): every new decision asks
 * first, fail closed (a new connection, a request of a kept-alive one, a DNS query). False: the retry is
 * armed. */
bool proxy_audit_writable(struct proxy_engine *e);
void proxy_audit_schedule(struct proxy_engine *e); /* flush the batch once this iteration ends */
/* l->run(l) once this iteration ends (before the audit batch is written); queued once however often
 * added. proxy_later_cancel takes it out (when it has run or was never queued: nothing). */
void proxy_later_add(struct proxy_engine *e, struct proxy_later *l);
void proxy_later_cancel(struct proxy_later *l);
/* Sets `fd` (accepted, non-blocking) up for the HTTP proxy: the session was admitted. */
void proxy_http_accept(struct proxy_session *s, int fd);
/* The same for a connection redirected from the session's port orig_port (transparent mode): requests
 * are origin-form and the Host header names the destination. orig_port 0 = forward proxy. */
void proxy_http_accept_transparent(struct proxy_session *s, int fd, uint16_t orig_port);
/* ---- bev_read.c ---- */
/* bev (a plain socket bufferevent with its final fd) reads without libevent's ioctl(FIONREAD) before
 * each read, otherwise as before (bev_read.c). Other bufferevents (TLS) are left alone. */
void proxy_bev_fast_read(struct bufferevent *bev);
/* Reads what bev's socket (a plain socket bufferevent) holds now into its input, one recv without a round
 * through the event loop, so that the input holds at most max bytes: the bytes read, 0 when there were
 * none (end of file and errors stay for the bufferevent to find). A timer that fires after a stall reads
 * first: the bytes may have come in time, unread (after a stall epoll hands the loop a batch of ready
 * sockets at a time, and the expired timers run behind the first batch). */
ssize_t proxy_bev_read_now(struct bufferevent *bev, size_t max);
/* ---- transparent.c ---- */
/* Serves fd (accepted on the transparent listener at local; taken over) for an admitted session. */
void proxy_transparent_accept(struct proxy_session *s, int fd, const struct sockaddr_storage *local);

/* ---- resolve.c: asynchronous A+AAAA resolution through the engine's DNS relay ---- */
#define PROXY_RESOLVE_MAX 16
enum proxy_resolve_err {
	PROXY_RESOLVE_NXDOMAIN = 1,
	PROXY_RESOLVE_NODATA,
	PROXY_RESOLVE_TIMEOUT,
	PROXY_RESOLVE_SERVFAIL,
	PROXY_RESOLVE_REFUSED,
	PROXY_RESOLVE_NOTIMP,
	PROXY_RESOLVE_BADANSWER,
	PROXY_RESOLVE_SENDFAIL,
};
struct proxy_resolve;
/* err: 0, or a PROXY_RESOLVE_* code when neither family produced an address. */
/* ttl: the smallest TTL of the addresses given (seconds; the records' and their CNAME chain's). */
typedef void (*proxy_resolve_cb)(int err, const struct sockaddr_storage *addrs, size_t n, uint32_t ttl, void *arg);
struct proxy_resolve *proxy_resolve_start(struct proxy_engine *e, const char *name, proxy_resolve_cb cb, void *arg);
void proxy_resolve_cancel(struct proxy_resolve *r); /* cb is not called afterwards */
const char *proxy_resolve_strerror(int err);

/* ---- addr_cache.c: the session's resolved addresses, kept for their TTL (addresses, never decisions:
 * every one is checked with the policy again when it is used) ---- */
#define PROXY_ADDR_CACHE_ENTRIES 8
#define PROXY_ADDR_CACHE_TTL_MAX 300 /* seconds */
/* Copies the fresh addresses kept for name (canonical) into out (PROXY_RESOLVE_MAX of room) and returns
 * how many; 0 when none are kept. */
size_t proxy_addr_cache_get(struct proxy_session *s, const char *name, struct sockaddr_storage *out);
/* Keeps n addresses (port 0) answered for name for ttl seconds (nothing when n or ttl is 0). */
void proxy_addr_cache_put(struct proxy_session *s, const char *name, const struct sockaddr_storage *addrs, size_t n,
                          uint32_t ttl);
void proxy_addr_cache_session_free(struct proxy_session *s);

/* ---- up_pool.c: the session's idle plain-HTTP upstream connections, taken by its next request to the
 * same host and port instead of a dial (re-checked at every use, never shared between sessions) ---- */
#define PROXY_UP_POOL_MAX 8          /* per session; a full pool closes its oldest */
#define PROXY_UP_POOL_ENGINE_MAX 256 /* in all sessions together; beyond, a connection is not kept */
#define PROXY_UP_POOL_IDLE_MS 4000   /* an idle connection is closed after this (under the 5 s that
                                      * servers such as Apache keep an idle connection) */
struct proxy_target;
/* Keeps bev (owned from now: freed at once when it cannot be kept), an upstream connection to host:port
 * (as decided) at addr (with its port; address: its audit spelling) that has nothing queued either
 * way and may carry another request. The caller vouches that its last response was read to its last
 * byte (http_forward.c) and that it goes to the destination itself, not through a parent proxy. */
void proxy_up_pool_put(struct proxy_session *s, struct bufferevent *bev, const char *host, uint16_t port,
                       const struct sockaddr_storage *addr, const char *address);
/* An idle connection for t's request (t just allowed) whose address t's name still resolves to for the
 * session (a literal: is) and the session's policy allows now, with nothing waiting on it: the caller
 * owns it (no callbacks set); its address in addr and address. NULL when there is none. */
struct bufferevent *proxy_up_pool_take(struct proxy_session *s, const struct proxy_target *t,
                                       struct sockaddr_storage *addr, char address[PROXY_ADDRSTR_MAX]);
/* Whether the session's policy allows t's request on a connection to addr now (a kept-alive upstream
 * is checked with it before each request, like a pooled one). */
bool proxy_up_pool_allows(struct proxy_session *s, const struct proxy_target *t, const struct sockaddr_storage *addr);
size_t proxy_up_pool_count(const struct proxy_session *s);
/* Closes every idle connection (the session's policy changed). */
void proxy_up_pool_flush(struct proxy_session *s);
void proxy_up_pool_session_free(struct proxy_session *s);

/* ---- target.c: the canonical destination of a request and the policy's decision on it ---- */
struct proxy_target {
	char host[POLICY_HOST_MAX + 1]; /* canonical name, or the address for IP literals */
	uint16_t port;
	bool literal;                 /* the client named an address (any spelling) */
	struct sockaddr_storage addr; /* the literal's address */
	struct policy_decision dec;
	char reason[POLICY_ERR_MAX]; /* the decision's reason, formatted */
	char why[192];               /* when the host is not acceptable */
};
/* Canonicalises host (len bytes; bracketed: it was written "[v6]") with policy_canon_host (IP literals
 * in every spelling through policy_parse_ip_literal) and decides: names with policy_decide before any
 * resolution, literals with policy_decide_addr; a verdict given earlier in the session settles an ask.
 * name_only: an IP literal is not acceptable (a TLS server name). Returns 0, or -EINVAL with t->why for
 * a host that is not acceptable. */
int proxy_target_decide(struct proxy_session *s, const char *host, size_t len, bool bracketed, uint16_t port,
                        unsigned method_bit, bool name_only, struct proxy_target *t);

/* ---- ask.c: requests held for an operator's verdict (policy option "ask") ---- */
/* A held request; embedded in the connection that waits. */
struct proxy_ask_wait;
typedef void (*proxy_ask_cb)(struct proxy_ask_wait *w, bool allow, const char *reason, void *arg);
struct proxy_ask_wait {
	TAILQ_ENTRY(proxy_ask_wait) entry;
	struct proxy_ask *ask; /* borrowed; NULL when not waiting */
	proxy_ask_cb cb;
	void *arg;
};
/* Holds a request of s for host:port (a POLICY_ASK decision) and, for the first request of that
 * host:port, tells the parent. cb runs once, later, with the verdict (or a timeout denial). Returns 0
 * with why saying how it is held ("held for approval as ID: ...", the reason of the request's "ask"
 * audit record), or -EBUSY (too many held host:port pairs in the session) / -ENOTSUP (nobody can
 * approve here) / -ENOMEM / the notify function's -errno (the parent cannot be told) with why set: the
 * caller denies. */
int proxy_ask_hold(struct proxy_session *s, struct proxy_ask_wait *w, const char *protocol, const char *method,
                   const char *host, uint16_t port, proxy_ask_cb cb, void *arg, char *why, size_t whylen);
/* Stops waiting (the connection goes away); cb is not called. Safe when not waiting. */
void proxy_ask_unhold(struct proxy_ask_wait *w);
/* Applies a verdict given earlier in this session to an ASK decision d for host:port (port 0: the
 * name at all, DNS; only approvals count). True when one applied: d becomes ALLOW or DENY and, with
 * reason, says who decided. */
bool proxy_ask_granted(struct proxy_session *s, const char *host, uint16_t port, struct policy_decision *d,
                       char *reason, size_t reasonlen);
/* Session teardown: forgets its asks (no request waits any more by then) and grants. */
void proxy_ask_session_free(struct proxy_session *s);

/* ---- dial.c: resolve, check every address with the policy, connect to exactly what was checked ---- */
struct proxy_dial;
struct proxy_dial_result {
	int status; /* 0 connected; 403 address denied; 502 failed; 504 timed out */
	char reason[512];
	char address[PROXY_ADDRSTR_MAX]; /* the address connected to (or refused) */
	char rule[POLICY_WHERE_MAX];     /* rule that decided an address denial */
	struct sockaddr_storage addr;    /* connected: the address (with its port) */
	bool via_parent;                 /* connected: to the parent proxy */
};
/* bev: the connected upstream (caller owns it) or NULL on failure. */
typedef void (*proxy_dial_cb)(struct bufferevent *bev, const struct proxy_dial_result *res, void *arg);
/* Dials t's destination: its canonical name, resolved here, every address checked with the session's
 * policy, or, for a literal, exactly that address (already decided). The one place the engine opens
 * upstream connections. Through the engine's parent proxy (unless no_proxy names the host): with
 * `tunnel`, the connection is a CONNECT tunnel to the destination once the callback has it; without,
 * the caller speaks HTTP to the parent in absolute form (proxy_parent_for tells). The callback always
 * runs later, from the event loop. */
struct proxy_dial *proxy_dial_start(struct proxy_session *s, const struct proxy_target *t, bool tunnel,
                                    proxy_dial_cb cb, void *arg);
/* The parent proxy t's destination is reached through, or NULL (none, or no_proxy). */
const struct proxy_parent *proxy_parent_for(const struct proxy_engine *e, const struct proxy_target *t);
void proxy_dial_cancel(struct proxy_dial *d); /* cb is not called afterwards; NULL no-op */

/* ---- connect.c: CONNECT requests ---- */
/* Takes over client (bev, owned from now) after http.c parsed a CONNECT head whose head_len bytes are
 * still at the front of the bev's input (req points into them); bytes beyond the head are the
 * client's first tunnel bytes. start_* are when the request began. */
void proxy_connect_begin(struct proxy_session *s, struct bufferevent *client, const struct http_request *req,
                         size_t head_len, const struct timespec *start_rt, uint64_t start_ms);
struct proxy_relay;
/* After a tunnel's success reply (CONNECT's 200, SOCKS5's success): the client's first bytes, when
 * they are a TLS ClientHello, must name the decided host (no domain fronting), then the tunnel. */
void proxy_connect_tunnel_checked(struct proxy_relay *r);
/* A connection on a SOCKS5 listener (socks5.c). Takes ownership of fd. */
void proxy_socks5_accept(struct proxy_session *s, int fd);

/* ---- inspect.c: HTTPS inspection (policy "inspect") ---- */
/* The CONNECT of r (connected, answered 200, its ClientHello checked) is to a host the policy inspects:
 * its exchange ends (close record) and its client becomes a TLS server connection with a leaf of the
 * session's CA, whose requests http.c reads and decides one by one (proxy_http_accept_inspected). */
void proxy_inspect_begin(struct proxy_relay *r);
/* Takes over tls (the client's TLS server bufferevent, owned from now) for inspected requests to host:port.
 * up (owned from now, or NULL): the connection the CONNECT dialled to host:port (at address, its audit
 * form), still without TLS: the first allowed request starts its verified TLS on it instead of dialling
 * again. */
void proxy_http_accept_inspected(struct proxy_session *s, struct bufferevent *tls, const char *host, uint16_t port,
                                 struct bufferevent *up, const char *address);
void proxy_inspect_engine_free(struct proxy_engine *e);
/* Takes over client (owned from now: a CONNECT tunnel to host:port, answered, whose first bytes are an
 * HTTP request) for plain HTTP requests, read, decided and forwarded one by one; each must name host. */
void proxy_http_accept_tunnel(struct proxy_session *s, struct bufferevent *client, const char *host, uint16_t port);

/* ---- our own HTTP responses (http.c) ---- */
/* Queues a complete response on out: status, X-Sluice-Decision value (sanitised), plain-text body. */
void proxy_http_error(struct bufferevent *out, int status, const char *decision_hdr, const char *body, bool close);
const char *proxy_http_status_text(int status);
/* The X-Sluice-Decision value for a verdict and rule ("deny; rule=FILE:LINE:COL"). */
void proxy_decision_header(char *buf, size_t len, const char *decision, const char *rule);

/* ---- tunnel.c: moves bytes both ways between two connected bufferevents ---- */
struct tunnel;
/* err: NULL on a clean close both ways, else a static reason. */
typedef void (*tunnel_done_cb)(struct tunnel *t, const char *err, void *arg);
/* Takes ownership of a and b (BEV_OPT_CLOSE_ON_FREE sockets). Bytes already in a's input are sent to b. */
struct tunnel *tunnel_new(struct proxy_engine *e, struct bufferevent *a, struct bufferevent *b, tunnel_done_cb cb,
                          void *arg);
void tunnel_free(struct tunnel *t); /* NULL no-op */
void tunnel_bytes(const struct tunnel *t, uint64_t *a_to_b, uint64_t *b_to_a);

/* ---- direct.c: direct mode (policy option "direct") ---- */
struct dns_filter_result;
/* The DNS proxy answered the allowed name host (canonical) with fr's addresses: grants the session
 * direct TCP or UDP flows to them on the (protocol, port) pairs the policy allows for host, for their TTL (clamped), through
 * the engine's direct_notify, one event per address and protocol, each carrying seq (0: nobody waits);
 * one "direct" audit line per address, protocol and port. An event the parent could not be told of opens
 * nothing and is not remembered: its lines carry the error "direct flows not opened: ...", and so does err
 * (errlen bytes; may be NULL), which is empty when every event went. Returns how many events were sent (0
 * without the option): the parent answers each (proxy_engine_direct_done). */
unsigned proxy_direct_learn(struct proxy_session *s, const char *host, const struct dns_filter_result *fr, uint32_t seq,
                            char *err, size_t errlen);
/* After s->policy changed: revokes grants the new policy does not allow, offers the others again. */
void proxy_direct_policy_changed(struct proxy_session *s);
void proxy_direct_session_free(struct proxy_session *s);

/* ---- dns.c / dns_relay.c ---- */
/* Prepares a bound UDP socket: *bound says whether it is bound to one address (then *local is that address,
 * port 0, which every query is sent to); otherwise it is made to tell each query's destination address
 * (IP_PKTINFO). */
int proxy_dns_udp_setup(int fd, bool *bound, struct sockaddr_storage *local);
void proxy_dns_udp_cb(int fd, short what, void *arg /* struct proxy_listener */);
/* Sends the UDP answers queued by the callback that is ending (one sendmmsg per socket); every callback
 * that can answer a UDP client (the listener, the relay's reads, timeouts and TCP retries) calls it before
 * it returns. */
void proxy_dns_udp_flush(void);
/* Serves DNS over TCP on fd (accepted, non-blocking; taken over) for an admitted session. */
void proxy_dns_tcp_accept(struct proxy_session *s, int fd);
struct dns_relay *dns_relay_new(struct proxy_engine *e);
void dns_relay_free(struct dns_relay *r);
struct dns_relay_query;
/* wire: the rebuilt query (the relay writes a fresh random id into it); answer: a reply carrying
 * that id from the upstream's address, or NULL on timeout/error. Returns false to reject an answer
 * that does not match the question (the query keeps waiting); true when it was consumed. After a
 * consumed answer or a timeout the query is gone. */
typedef bool (*dns_relay_cb)(const uint8_t *answer, size_t len, void *arg);
struct dns_relay_query *dns_relay_send(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg);
/* Like dns_relay_send, but the datagram waits for dns_relay_flush(), which sends everything queued with one
 * sendmmsg(2) per socket; the caller flushes before it returns to the event loop. A query that cannot be
 * sent then gets its callback with NULL. */
struct dns_relay_query *dns_relay_queue(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg);
void dns_relay_flush(struct dns_relay *r);
/* The same over a TCP connection of its own (for answers that came back truncated over UDP). */
struct dns_relay_query *dns_relay_send_tcp(struct dns_relay *r, uint8_t *wire, size_t len, dns_relay_cb cb, void *arg);
void dns_relay_cancel(struct dns_relay_query *q); /* NULL no-op */
/* Reads the answers waiting in the relay's UDP sockets now and hands them to their queries' callbacks (a
 * timer about to give up on a query looks first: the answer may have come in time, unread after a stall). */
void dns_relay_read_now(struct dns_relay *r);

/* ---- dns_msg.c, dns_answer.c, dns_wire.c: DNS message checks and rewriting (pure, fuzzable); dns_cache.c ---- */
#include "dns_cache.h"
#include "dns_msg.h"
