/* The one relay path of the engine: decide, dial, splice. Every front door that ends in "may this
 * session reach host:port, and if so carry its bytes there" goes through it: the forward proxy's
 * requests (http.c), CONNECT (connect.c), redirected TLS (transparent.c), and the fronts still to come
 * (a SOCKS5 front, HTTPS inspection's inner requests). A front parses its protocol, names the
 * destination and says how to answer; the relay does the rest the same way for all of them:
 *
 *   proxy_relay_begin      a new exchange (one request or tunnel): start time, audit flow id
 *   proxy_relay_decide     canonical name or IP literal -> policy (+ session verdicts)
 *   proxy_relay_proceed    deny: ops->refuse | ask: held (ops->held), then as below | allow:
 *                          decision record written, ops->allowed (default proxy_relay_dial)
 *   (policy replaced)      proxy_relay_redecide: a held exchange stays held (ask), is released (allow)
 *                          or refused (deny); a tunnel not allowed any more ends
 *   proxy_relay_dial       resolve, check every address, connect (dial.c) -> ops->connected with r->up,
 *                          or ops->refuse with 403 (forbidden address) / 502 / 504
 *   proxy_relay_tunnel     client and upstream bytes both ways, unparsed (tunnel.c; splice for bulk)
 *   proxy_relay_finish     the exchange's close record (bytes, status, duration, error)
 *   proxy_relay_end        everything freed, ops->free
 *
 * Audit: a decision record when the exchange goes on (allowed, or held), written before anything is
 * dialled; a close record with the same flow id when it ends; an exchange refused at once writes one
 * record (event "complete"). See docs/audit-log.md.
 *
 * Ownership: the relay owns the client and upstream bufferevents, the dial, the ask wait and the
 * tunnel; the front embeds the relay in its own struct and frees that in ops->free. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "proxy_int.h"

struct proxy_relay;

struct proxy_relay_ops {
	const char *protocol; /* the audit log's "protocol": http, connect, tls-sni */
	bool hold_asks;       /* POLICY_ASK holds the exchange for an operator (else it is a denial) */
	bool redecide;        /* a policy change decides the destination again (a tunnel; still_allowed) */
	bool speaks_http;     /* the upstream gets HTTP requests from the front (a parent proxy gets them in
	                       * absolute form), not a tunnel (a parent proxy is asked for CONNECT) */
	/* Tells the client no and ends the exchange (proxy_relay_close_after_flush, or, HTTP keep-alive,
	 * proxy_relay_finish and the next request). status: 400, 403, 502, 504, 503...; decision: the
	 * X-Sluice-Decision verdict ("deny" or "error"); body: plain text for humans (a 403 explains how
	 * to allow it). A front that cannot carry text (a TLS alert, a SOCKS reply code) maps status. */
	void (*refuse)(struct proxy_relay *r, int status, const char *decision, const char *body);
	/* Allowed (at once or approved): go on. NULL: proxy_relay_dial. */
	void (*allowed)(struct proxy_relay *r);
	/* NULL, or: the exchange is now held for approval (ask.c); a verdict comes later. */
	void (*held)(struct proxy_relay *r);
	/* NULL, or: the session's policy was replaced (by p) while the exchange is held. NULL when its
	 * destination alone decides it again (proxy_relay_redecide); else why it is refused instead: a check
	 * made under the old policy when it was read, beyond its destination, that is not made again (an
	 * inspected request's HTTP rules and credential, a search for credential placeholders). */
	const char *(*held_bound)(struct proxy_relay *r, const struct policy *p);
	/* r->up is connected to a checked address of the destination. */
	void (*connected)(struct proxy_relay *r);
	/* The relay is done (its resources are freed): free the front's own state and the struct the
	 * relay is embedded in. */
	void (*free)(struct proxy_relay *r);
};

struct proxy_relay {
	struct proxy_conn conn;            /* attached to the session from proxy_relay_init to proxy_relay_end */
	struct proxy_session *s;           /* borrowed */
	struct proxy_engine *e;            /* borrowed */
	const struct proxy_relay_ops *ops; /* borrowed (static) */
	struct bufferevent *client;        /* owned; NULL once a tunnel took it */
	struct bufferevent *up;            /* owned: the connected upstream, or NULL (HTTP keeps it across requests) */
	struct sockaddr_storage up_addr;   /* where the last dial connected r->up (with its port) */
	bool up_via_parent;                /* ... and whether that is the parent proxy */
	struct proxy_dial *dial;           /* owned while dialing */
	struct proxy_ask_wait wait;        /* while held for approval */
	struct tunnel *tunnel;             /* owned once the bytes flow unparsed */
	struct event *handshake_timer;     /* owned: a handshake front's deadline (proxy_relay_accept_handshake), or NULL */
	/* ... the deadline (a grace after a stall of the engine), the front's own timeout, the most the client's
	 * input holds, and whether the timer read the socket and the rest must come now (handshake_timer_cb) */
	struct proxy_deadline handshake_due;
	void (*handshake_timeout)(int, short, void *);
	size_t handshake_read_max;
	bool handshake_late;
	bool ending;                       /* proxy_relay_end runs: callbacks must not end it again */
	bool bad_target;                   /* the destination was not acceptable (400) */
	bool upstream_tls;                 /* the front speaks TLS to the upstream itself (HTTPS inspection):
	                                    * a parent proxy is asked for a tunnel, whatever ops->speaks_http */

	/* ---- the current exchange (one request, or one tunnel) and its audit fields ---- */
	bool active; /* begun and its last record (close or complete) not yet written */
	struct timespec start_rt;
	uint64_t start_ms;
	uint64_t flow;         /* the audit flow id linking the exchange's records */
	struct proxy_target t; /* destination and the policy's decision */
	unsigned method_bit;   /* as decided (still_allowed decides again with it) */
	char method[33];       /* "" = none */
	char path[1024];       /* inspected requests: the normalised path (query elided unless log_query); "" = none */
	const char *decision;  /* static: "allow", "deny", "ask"; NULL = not decided (written as deny) */
	const char *logged;    /* static: the decision of the last decision record written, or NULL */
	char rule[POLICY_WHERE_MAX];
	char address[PROXY_ADDRSTR_MAX]; /* connected to, or refused */
	char reason[512];                /* overrides t.reason / t.why when set */
	char error[512];
	int status;
	uint64_t bytes_out, bytes_in; /* besides what a tunnel counts */
};

/* Attaches r (zeroed by the caller) to s; takes ownership of client (may be NULL and set later). */
void proxy_relay_init(struct proxy_relay *r, struct proxy_session *s, const struct proxy_relay_ops *ops,
                      struct bufferevent *client);
/* Starts an exchange that arrived at start_rt/start_ms (NULL: now); method NULL = none. An exchange
 * still open is finished first. */
void proxy_relay_begin(struct proxy_relay *r, const struct timespec *start_rt, uint64_t start_ms, const char *method);

/* Flags of proxy_relay_decide. */
#define PROXY_RELAY_NAME_ONLY 1u /* the destination must be a name (an SNI): literals and bad names are refused */
/* Decides the destination host (len bytes, read during the call only; bracketed: it was "[v6]") and
 * port for method_bit: ALLOW, ASK (to be held) or DENY (also for a host that is not acceptable). Does
 * nothing else, so the front may still use the bytes host points into; proxy_relay_proceed acts. */
enum policy_verdict proxy_relay_decide(struct proxy_relay *r, const char *host, size_t len, bool bracketed,
                                       uint16_t port, unsigned method_bit, unsigned flags);
/* The exchange's destination decided again under p (a policy that replaces the session's; a verdict given
 * earlier in the session settles an ask): ALLOW, ASK or DENY, the decision in *d (its rule borrowed from
 * p). Sets nothing in r. The one re-decision of a live exchange: a tunnel and a held exchange both go
 * through it when the session's policy is replaced (proxy_conn.still_allowed): a held one still undecided
 * stays held, one allowed now is released as if approved, one denied now is refused. */
enum policy_verdict proxy_relay_redecide(const struct proxy_relay *r, const struct policy *p,
                                         struct policy_decision *d);
/* Acts on the decision: refuses (400 for a host that is not acceptable, 403), holds, or writes the
 * decision record and goes on (ops->allowed). Nothing was resolved or sent before. The front may be
 * gone when this returns. */
void proxy_relay_proceed(struct proxy_relay *r);
/* Refuses the exchange with status and reason (the 400 of a malformed request, say): decision deny,
 * a plain-text body, ops->refuse. */
void proxy_relay_deny(struct proxy_relay *r, int status, const char *reason);
/* Dials the decided destination (dial.c); ops->connected or ops->refuse follows from the loop. */
void proxy_relay_dial(struct proxy_relay *r);
/* Writes the decision record now if the decision changed since the last one (a front that goes on
 * after a decision of its own). */
void proxy_relay_log_decision(struct proxy_relay *r);
/* Moves the client's and the upstream's bytes both ways until both sides closed (tunnel.c). Bytes
 * already in the client's input go first. Ends the relay when the tunnel ends. */
void proxy_relay_tunnel(struct proxy_relay *r);
/* Frees the upstream connection and a dial in progress. */
void proxy_relay_drop_upstream(struct proxy_relay *r);

/* Ends the exchange: its close record (or "complete" when the decision changed since the last
 * decision record). No-op when none is open. */
void proxy_relay_finish(struct proxy_relay *r);
/* Finishes the exchange, drops the upstream and closes the client once what is queued for it was
 * written (at most the header timeout), then ends the relay. */
void proxy_relay_close_after_flush(struct proxy_relay *r);
/* Sends data to the client, then proxy_relay_close_after_flush. */
void proxy_relay_send_close(struct proxy_relay *r, const void *data, size_t len);
/* Refuses with a fatal TLS alert (access_denied): for a client that expects a TLS server (transparent
 * mode, a CONNECT tunnel after its 200). With a reason, a denial for that reason; NULL: the decision
 * stands (an upstream failure after an allow). */
void proxy_relay_refuse_tls(struct proxy_relay *r, const char *reason);
/* Finishes the exchange and frees everything; calls ops->free. */
void proxy_relay_end(struct proxy_relay *r);

/* Starts a front whose client must send a handshake before anything can be decided (a TLS ClientHello,
 * a SOCKS5 greeting and request) within the header timeout. r is embedded first in a zeroed struct the
 * front allocated (freed by ops->free); takes ownership of fd. The client's bytes go to read_cb, its
 * close or error to event_cb, the deadline to timer_cb, all with r as their argument; at most read_max
 * bytes are buffered. Returns 0, or -ENOMEM with the relay already ended (ops->free called). */
int proxy_relay_accept_handshake(struct proxy_relay *r, struct proxy_session *s, const struct proxy_relay_ops *ops,
                                 int fd, size_t read_max, void (*read_cb)(struct bufferevent *, void *),
                                 void (*event_cb)(struct bufferevent *, short, void *),
                                 void (*timer_cb)(int, short, void *));
/* The handshake arrived (or the front refuses): its deadline no longer applies. */
void proxy_relay_handshake_done(struct proxy_relay *r);
/* The client closed before its handshake was complete: reason ("... before a complete ClientHello")
 * is recorded and the relay ends. */
void proxy_relay_handshake_gone(struct proxy_relay *r, const char *reason);

/* An event callback for the client while nothing is expected from it (dialing, held): it closed or
 * failed, so the exchange ends with "the client closed the connection". arg: the relay. */
void proxy_relay_client_gone_cb(struct bufferevent *bev, short what, void *arg);
