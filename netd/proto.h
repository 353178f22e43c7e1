/* The two message protocols of netd: the control protocol (launcher/sluicectl <-> sluiced over
 * /run/sluice/control.sock) and the engine protocol (sluiced <-> its unprivileged proxy engine child
 * over a socketpair). Message and attribute numbers are wire format: append, never renumber.
 * The permission tables (which message may arrive in which state, with how many fds and which
 * attributes of which size) live in proto.c and are applied by ipc_msg_check(). docs/netd.md
 * documents them. */
#pragma once

#include "ipc.h"

#define NETD_ID_MAX 12 /* session id (hex); the link is "sl-" + id */
#define NETD_ID_BUF (NETD_ID_MAX + 1)
#define NETD_COMMAND_MAX 4096
#define NETD_SANDBOX_MAX 16 /* the sandbox type's name: [a-z0-9-] */
#define NETD_PATH_MAX 4095
#define NETD_ADDR_MAX 45      /* INET6_ADDRSTRLEN - 1 */
#define NETD_ERRMSG_MAX 1023
#define NETD_RESOLV_MAX 511
#define NETD_CA_PEM_MAX 4096 /* a session CA certificate or key in PEM (proxy/mitm_ca.h) */
#define NETD_NAME_MAX 32
#define NETD_ASK_ID_MAX 8     /* PROXY_ASK_ID_LEN */
#define NETD_HOST_MAX 253
#define NETD_METHOD_MAX 32
#define NETD_METRICS_DATA_MAX 4096 /* METRICS attribute; its exact size is sizeof(struct proxy_metrics) */
#define NETD_CNI_KEY_MAX 272  /* container id (at most 256) + "/" + interface name (at most 15) */
#define NETD_LINES_MAX (60 * 1024) /* a netlink attribute holds at most 64 KiB */
/* the policy JSON (sluiced's org layer can be large): inline up to IPC_TEXT_INLINE_MAX, else in a
 * sealed memfd (NETD_A_POLICY_FD, see ipc_buf_put_text) */
#define NETD_POLICY_MAX IPC_TEXT_MAX

/* ---- control protocol ---- */

/* connection states (bits) */
enum {
	NETD_CS_OPEN = 1u << 0,     /* connected, no attached session */
	NETD_CS_ATTACHED = 1u << 1, /* this connection holds an attached session */
	NETD_CS_CLIENT = 1u << 2,   /* client side: every reply is allowed */
};

enum netd_msg {
	NETD_MSG_ATTACH = 1,  /* client -> d: wire the netns passed as fd; ends when the connection closes */
	NETD_MSG_CREATE = 2,  /* client -> d: make a named netns under /run/sluice/netns and wire it */
	NETD_MSG_LIST = 3,    /* client -> d: list sessions (root: all; others: their own) */
	NETD_MSG_END = 4,     /* client -> d: end a session by id (root: any; others: their own) */
	NETD_MSG_ASKS = 5,    /* client -> d: list held requests (root: all; others: their own sessions') */
	NETD_MSG_DECIDE = 6,  /* client -> d: approve or deny a held request by its ask id */
	NETD_MSG_POLICY = 7,  /* client -> d: replace a session's policy (its attaching connection, or root) */
	NETD_MSG_RECORDS = 8, /* client -> d: the attached session's audit records (its command has ended) */
	NETD_MSG_WATCH = 9,   /* client -> d: send ASK (seq 0) whenever a request of this session is held */
	/* 10, 11: free */
	NETD_MSG_METRICS = 12,   /* client -> d: Prometheus text of sluiced's counters (LINES..., LIST_END) */
	NETD_MSG_CNI_ADD = 13,   /* client (root) -> d: wire the netns passed as fd as a session that outlives the
	                          * connection, keyed by CNI_KEY (container id / ifname); ended by CNI_DEL */
	NETD_MSG_CNI_DEL = 14,   /* client (root) -> d: end the session of CNI_KEY, if any (OK either way) */
	NETD_MSG_CNI_CHECK = 15, /* client (root) -> d: the session of CNI_KEY, if wired in the netns passed as fd */
	NETD_MSG_SESSION = 16,  /* d -> client: a session (reply to ATTACH/CREATE, and LIST entries) */
	NETD_MSG_OK = 17,       /* d -> client: END done */
	NETD_MSG_ERROR = 18,    /* d -> client: request refused or failed */
	NETD_MSG_LIST_END = 19, /* d -> client: end of a LIST reply */
	NETD_MSG_ASK = 20,      /* d -> client: a held request (ASKS entries, and the reply to DECIDE) */
	NETD_MSG_LINES = 21,    /* d -> client: audit records of a RECORDS reply; LIST_END ends it */
	NETD_MSG_COUNT_,
};

enum netd_attr {
	NETD_A_UNSPEC = 0,
	NETD_A_COMMAND = 1,
	NETD_A_POLICY = 2,
	NETD_A_AUDIT_LOG = 3,
	NETD_A_NAME = 4,
	NETD_A_ID = 5,
	NETD_A_ADDR4 = 6,
	NETD_A_GW4 = 7,
	NETD_A_ADDR6 = 8,
	NETD_A_GW6 = 9,
	NETD_A_PROXY_PORT = 10,
	NETD_A_RESOLV_CONF = 11,
	NETD_A_NETNS_PATH = 12,
	NETD_A_IFNAME = 13,
	NETD_A_UID = 14,
	NETD_A_PID = 15,
	NETD_A_CREATED = 16,
	NETD_A_ERRNO = 17,
	NETD_A_ERRMSG = 18,
	NETD_A_KIND = 19,
	NETD_A_GID = 20,
	NETD_A_DNS_UPSTREAM = 21,
	NETD_A_SRC = 22,
	NETD_A_DST = 23,
	NETD_A_PROTO = 24,
	NETD_A_SPORT = 25,
	NETD_A_DPORT = 26,
	NETD_A_REASON = 27,
	NETD_A_ASK_ID = 28,   /* str 8: a held request's id (hex) */
	NETD_A_HOST = 29,     /* str 253: canonical host name */
	NETD_A_METHOD = 30,   /* str 32: HTTP method */
	NETD_A_PROTOCOL = 31, /* str 15: "http", "https", "connect" */
	NETD_A_VERDICT = 32,  /* u8: 1 approve, 0 deny */
	NETD_A_TIMEOUT = 33,  /* u32: seconds */
	NETD_A_TTL = 34,      /* u32: seconds a direct-mode grant lasts */
	NETD_A_PORTS = 35,    /* bytes: up to 16 ports, u16 each in network order */
	NETD_A_LINES = 36,    /* str: audit log lines (JSON, newline-terminated), at most NETD_LINES_MAX */
	NETD_A_POLICY_FD = 37, /* u32: index of the extra fd (a sealed memfd) holding a policy too long for NETD_A_POLICY */
	NETD_A_SOCKS_PORT = 38, /* u16: the SOCKS5 port on the gateway (absent: none) */
	NETD_A_UPSTREAM_PROXY = 39, /* str: the parent proxy configuration file the engine loads before it drops privileges */
	NETD_A_POLICY_VERSION = 40, /* u32: the count of a session's policies (1 = the one it started with) */
	NETD_A_SANDBOX = 41,   /* str 16: the launcher's sandbox type ("local", "vm", "firejail"), for `sluicectl sessions` */
	NETD_A_CA_CERT = 42,   /* str: HTTPS inspection's session CA certificate (PEM), when the policy inspects */
	NETD_A_CA_KEY = 43,    /* str: its private key (PEM): sluiced -> engine only, never to a client */
	NETD_A_CNI_KEY = 44,  /* str NETD_CNI_KEY_MAX: "CONTAINERID/IFNAME" of a CNI session */
	NETD_A_SESS_IF = 45,  /* str 15: the session-side interface name (default eth0) */
	NETD_A_METRICS = 46,  /* bytes: the engine's struct proxy_metrics (sluiced checks the exact size) */
	NETD_A_DNS_CACHE = 47, /* u32: DNS answers the engine's cache keeps (absent: no cache) */
	NETD_A_DROPS_OVER_RATE = 48, /* u32: dropped packets over NFLOG's audit rate (DROP_SUMMARY) */
	NETD_A_DROPS_LOST = 49,      /* u32: NFLOG messages the kernel lost (a gap in their sequence numbers) */
	NETD_A_DROPS_UNSENT = 50,    /* u32: drops the engine's socket did not take */
	NETD_A_DIRECT_ENDED = 51,    /* u32: direct flows sluiced ended itself, their engine being dead (audited) */
};

extern const struct ipc_proto netd_control_proto;

/* ---- engine protocol (sluiced <-> proxy engine child) ---- */

enum {
	NETD_ES_INIT = 1u << 0, /* child: before START (privileged, collecting listeners) */
	NETD_ES_RUN = 1u << 1,  /* child: engine running, unprivileged */
	NETD_ES_PARENT = 1u << 2,
};

enum netd_eng_msg {
	NETD_ENG_CONFIG = 1,         /* d -> engine: audit path, upstream DNS, uid/gid to drop to */
	NETD_ENG_LISTENER = 2,       /* d -> engine: one listening socket (fd) of a kind */
	NETD_ENG_START = 3,          /* d -> engine: drop privileges, create the engine, report READY */
	NETD_ENG_SESSION_ADD = 4,    /* d -> engine */
	NETD_ENG_SESSION_REMOVE = 5, /* d -> engine */
	NETD_ENG_AUDIT_DROP = 6,     /* d -> engine: a packet nftables dropped */
	NETD_ENG_REOPEN_LOG = 7,     /* d -> engine: SIGHUP */
	NETD_ENG_VERDICT = 8,        /* d -> engine: an operator's verdict on a held request */
	NETD_ENG_SESSION_POLICY = 9, /* d -> engine: the session's policy was replaced -> RESULT */
	NETD_ENG_GRANT = 10,         /* d -> engine: a verdict given in an earlier engine's life, restored */
	NETD_ENG_DIRECT_DONE = 11,   /* d -> engine: the DIRECT_ADD with this seq was dealt with (answer held for it goes) */
	NETD_ENG_METRICS = 12,       /* d -> engine: send your counters (METRICS_DATA) */
	NETD_ENG_DROP_SUMMARY = 13,  /* d -> engine: the drops not audited one by one since the last (netd/nflog.c) */
	NETD_ENG_READY = 16,         /* engine -> d: running (or ERRNO/ERRMSG if it could not start) */
	NETD_ENG_RESULT = 17,        /* engine -> d: result of the request with the same seq */
	NETD_ENG_ASK = 18,           /* engine -> d: a request is held for approval */
	NETD_ENG_ASK_END = 19,       /* engine -> d: that ask ended (decided, timed out, abandoned) */
	NETD_ENG_DIRECT_ADD = 20,    /* engine -> d: direct mode: DNS answered an allowed name with DST (PROTO, PORTS) */
	NETD_ENG_DIRECT_REVOKE = 21, /* engine -> d: direct mode: the session's PROTO flows to DST:DPORT must end */
	/* 22..25: free */
	NETD_ENG_METRICS_DATA = 26,  /* engine -> d: its counters (METRICS: struct proxy_metrics, exact size) */
	NETD_ENG_COUNT_,
};

extern const struct ipc_proto netd_engine_proto;

/* Builds and sends an ERROR reply. */
int netd_send_error(int sock, uint32_t seq, int err, const char *msg);
