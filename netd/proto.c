/* Permission tables of netd's two protocols: for each message, when it may come, how many fds it
 * always carries (a policy in a memfd adds one, named by NETD_A_POLICY_FD) and the type and size bound
 * of each attribute (applied by ipc_msg_check). */
#include "proto.h"

#include <stdlib.h>

#include "util.h"

#define STR(max) {IPC_T_STR, (max), false}
#define STR_REQ(max) {IPC_T_STR, (max), true}
#define U16 {IPC_T_U16, 0, false}
#define U32 {IPC_T_U32, 0, false}
#define U32_REQ {IPC_T_U32, 0, true}
#define U64 {IPC_T_U64, 0, false}
#define U8_REQ {IPC_T_U8, 0, true}
#define U16_REQ {IPC_T_U16, 0, true}
/* the policy JSON: inline, or in a memfd passed as an extra fd when it is longer (one of the two) */
#define POLICY_REQ                                                                                     \
	[NETD_A_POLICY] = {IPC_T_STR, IPC_TEXT_INLINE_MAX, true, NETD_A_POLICY_FD},                    \
	[NETD_A_POLICY_FD] = {IPC_T_FD, NETD_POLICY_MAX, false, NETD_A_POLICY}

/* a held request: the ask, its session, what it asks for */
#define ASK_ATTRS                                                                                      \
	[NETD_A_ASK_ID] = STR_REQ(NETD_ASK_ID_MAX), [NETD_A_ID] = STR_REQ(NETD_ID_MAX),                \
	[NETD_A_UID] = U32_REQ, [NETD_A_PROTOCOL] = STR_REQ(15), [NETD_A_METHOD] = STR(NETD_METHOD_MAX), \
	[NETD_A_HOST] = STR_REQ(NETD_HOST_MAX), [NETD_A_DPORT] = U16_REQ, [NETD_A_TIMEOUT] = U32

#define SESSION_ATTRS                                                                                  \
	[NETD_A_ID] = STR_REQ(NETD_ID_MAX), [NETD_A_ADDR4] = STR(NETD_ADDR_MAX),                       \
	[NETD_A_GW4] = STR(NETD_ADDR_MAX), [NETD_A_ADDR6] = STR(NETD_ADDR_MAX),                        \
	[NETD_A_GW6] = STR(NETD_ADDR_MAX), [NETD_A_PROXY_PORT] = U16, [NETD_A_SOCKS_PORT] = U16,      \
	[NETD_A_RESOLV_CONF] = STR(NETD_RESOLV_MAX), [NETD_A_NETNS_PATH] = STR(NETD_PATH_MAX),         \
	[NETD_A_IFNAME] = STR(15), [NETD_A_UID] = U32, [NETD_A_PID] = U32, [NETD_A_CREATED] = U64,     \
	[NETD_A_COMMAND] = STR(NETD_COMMAND_MAX), [NETD_A_SANDBOX] = STR(NETD_SANDBOX_MAX), [NETD_A_CA_CERT] = STR(NETD_CA_PEM_MAX)

static const struct ipc_msg_spec control_msgs[NETD_MSG_COUNT_] = {
	[NETD_MSG_ATTACH] = {"ATTACH", NETD_CS_OPEN, 1,
			     {[NETD_A_COMMAND] = STR_REQ(NETD_COMMAND_MAX),
			      POLICY_REQ,
			      [NETD_A_AUDIT_LOG] = STR(NETD_PATH_MAX),
			      [NETD_A_SANDBOX] = STR(NETD_SANDBOX_MAX)}},
	[NETD_MSG_CREATE] = {"CREATE", NETD_CS_OPEN | NETD_CS_ATTACHED, 0,
			     {[NETD_A_COMMAND] = STR_REQ(NETD_COMMAND_MAX),
			      POLICY_REQ,
			      [NETD_A_NAME] = STR(NETD_NAME_MAX)}},
	[NETD_MSG_LIST] = {"LIST", NETD_CS_OPEN | NETD_CS_ATTACHED, 0, {{0}}},
	[NETD_MSG_END] = {"END", NETD_CS_OPEN | NETD_CS_ATTACHED, 0, {[NETD_A_ID] = STR_REQ(NETD_ID_MAX)}},
	[NETD_MSG_ASKS] = {"ASKS", NETD_CS_OPEN | NETD_CS_ATTACHED, 0, {{0}}},
	[NETD_MSG_RECORDS] = {"RECORDS", NETD_CS_ATTACHED, 0, {{0}}},
	[NETD_MSG_DECIDE] = {"DECIDE", NETD_CS_OPEN | NETD_CS_ATTACHED, 0,
			     {[NETD_A_ASK_ID] = STR_REQ(NETD_ASK_ID_MAX), [NETD_A_VERDICT] = U8_REQ}},
	[NETD_MSG_WATCH] = {"WATCH", NETD_CS_OPEN, 0, {[NETD_A_ID] = STR_REQ(NETD_ID_MAX)}},
	[NETD_MSG_POLICY] = {"POLICY", NETD_CS_OPEN | NETD_CS_ATTACHED, 0,
			     {[NETD_A_ID] = STR_REQ(NETD_ID_MAX), POLICY_REQ, [NETD_A_KIND] = U32}},
	[NETD_MSG_METRICS] = {"METRICS", NETD_CS_OPEN | NETD_CS_ATTACHED, 0, {{0}}},
	[NETD_MSG_CNI_ADD] = {"CNI_ADD", NETD_CS_OPEN, 1,
			      {[NETD_A_COMMAND] = STR_REQ(NETD_COMMAND_MAX),
			       POLICY_REQ,
			       [NETD_A_CNI_KEY] = STR_REQ(NETD_CNI_KEY_MAX),
			       [NETD_A_SESS_IF] = STR(15)}},
	[NETD_MSG_CNI_DEL] = {"CNI_DEL", NETD_CS_OPEN, 0, {[NETD_A_CNI_KEY] = STR_REQ(NETD_CNI_KEY_MAX)}},
	[NETD_MSG_CNI_CHECK] = {"CNI_CHECK", NETD_CS_OPEN, 1, {[NETD_A_CNI_KEY] = STR_REQ(NETD_CNI_KEY_MAX)}},
	[NETD_MSG_SESSION] = {"SESSION", NETD_CS_CLIENT, 0, {SESSION_ATTRS}},
	[NETD_MSG_OK] = {"OK", NETD_CS_CLIENT, 0, {{0}}},
	[NETD_MSG_ERROR] = {"ERROR", NETD_CS_CLIENT, 0,
			    {[NETD_A_ERRNO] = U32_REQ, [NETD_A_ERRMSG] = STR_REQ(NETD_ERRMSG_MAX)}},
	[NETD_MSG_LIST_END] = {"LIST_END", NETD_CS_CLIENT, 0, {{0}}},
	[NETD_MSG_ASK] = {"ASK", NETD_CS_CLIENT, 0, {ASK_ATTRS, [NETD_A_CREATED] = U64}},
	[NETD_MSG_LINES] = {"LINES", NETD_CS_CLIENT, 0, {[NETD_A_LINES] = STR_REQ(NETD_LINES_MAX)}},
};

const struct ipc_proto netd_control_proto = {"control", control_msgs, NETD_MSG_COUNT_};

static const struct ipc_msg_spec engine_msgs[NETD_ENG_COUNT_] = {
	[NETD_ENG_CONFIG] = {"CONFIG", NETD_ES_INIT, 1,
			     {[NETD_A_AUDIT_LOG] = STR_REQ(NETD_PATH_MAX),
			      [NETD_A_DNS_UPSTREAM] = STR_REQ(NETD_ADDR_MAX),
			      [NETD_A_DPORT] = U16, [NETD_A_UID] = U32_REQ, [NETD_A_GID] = U32_REQ,
			      [NETD_A_UPSTREAM_PROXY] = STR(NETD_PATH_MAX), [NETD_A_DNS_CACHE] = U32}},
	[NETD_ENG_LISTENER] = {"LISTENER", NETD_ES_INIT, 1, {[NETD_A_KIND] = U32_REQ}},
	[NETD_ENG_START] = {"START", NETD_ES_INIT, 0, {{0}}},
	[NETD_ENG_SESSION_ADD] = {"SESSION_ADD", NETD_ES_RUN, 0,
				  {[NETD_A_ID] = STR_REQ(NETD_ID_MAX), [NETD_A_UID] = U32_REQ,
				   [NETD_A_COMMAND] = STR_REQ(NETD_COMMAND_MAX),
				   [NETD_A_ADDR4] = STR(NETD_ADDR_MAX), [NETD_A_GW4] = STR(NETD_ADDR_MAX),
				   [NETD_A_ADDR6] = STR(NETD_ADDR_MAX), [NETD_A_GW6] = STR(NETD_ADDR_MAX),
				   [NETD_A_CA_CERT] = STR(NETD_CA_PEM_MAX), [NETD_A_CA_KEY] = STR(NETD_CA_PEM_MAX),
				   POLICY_REQ, [NETD_A_POLICY_VERSION] = U32, [NETD_A_DIRECT_ENDED] = U32}},
	[NETD_ENG_SESSION_REMOVE] = {"SESSION_REMOVE", NETD_ES_RUN, 0,
				     {[NETD_A_ID] = STR_REQ(NETD_ID_MAX), [NETD_A_ADDR4] = STR(NETD_ADDR_MAX),
				      [NETD_A_ADDR6] = STR(NETD_ADDR_MAX)}},
	[NETD_ENG_AUDIT_DROP] = {"AUDIT_DROP", NETD_ES_RUN, 0,
				 {[NETD_A_SRC] = STR_REQ(NETD_ADDR_MAX), [NETD_A_DST] = STR_REQ(NETD_ADDR_MAX),
				  [NETD_A_SPORT] = U16, [NETD_A_DPORT] = U16, [NETD_A_PROTO] = U8_REQ}},
	[NETD_ENG_DROP_SUMMARY] = {"DROP_SUMMARY", NETD_ES_RUN, 0,
				   {[NETD_A_ID] = STR(NETD_ID_MAX), [NETD_A_DROPS_OVER_RATE] = U32_REQ, [NETD_A_DROPS_LOST] = U32_REQ,
				    [NETD_A_DROPS_UNSENT] = U32_REQ}},
	[NETD_ENG_REOPEN_LOG] = {"REOPEN_LOG", NETD_ES_RUN, 1, {{0}}},
	[NETD_ENG_VERDICT] = {"VERDICT", NETD_ES_RUN, 0,
			      {[NETD_A_ASK_ID] = STR_REQ(NETD_ASK_ID_MAX), [NETD_A_VERDICT] = U8_REQ,
			       [NETD_A_UID] = U32_REQ}},
	[NETD_ENG_SESSION_POLICY] = {"SESSION_POLICY", NETD_ES_RUN, 0,
				     {[NETD_A_ID] = STR_REQ(NETD_ID_MAX), [NETD_A_UID] = U32, POLICY_REQ,
				      [NETD_A_POLICY_VERSION] = U32, [NETD_A_DIRECT_ENDED] = U32}},
	[NETD_ENG_GRANT] = {"GRANT", NETD_ES_RUN, 0,
			    {[NETD_A_ID] = STR_REQ(NETD_ID_MAX), [NETD_A_HOST] = STR_REQ(NETD_HOST_MAX),
			     [NETD_A_DPORT] = U16_REQ, [NETD_A_VERDICT] = U8_REQ, [NETD_A_UID] = U32_REQ}},
	[NETD_ENG_METRICS] = {"METRICS", NETD_ES_RUN, 0, {{0}}},
	[NETD_ENG_DIRECT_DONE] = {"DIRECT_DONE", NETD_ES_RUN, 0, {{0}}},
	[NETD_ENG_METRICS_DATA] = {"METRICS_DATA", NETD_ES_PARENT, 0,
				   {[NETD_A_METRICS] = {IPC_T_BYTES, NETD_METRICS_DATA_MAX, true}}},
	[NETD_ENG_READY] = {"READY", NETD_ES_PARENT, 0,
			    {[NETD_A_ERRNO] = U32, [NETD_A_ERRMSG] = STR(NETD_ERRMSG_MAX)}},
	[NETD_ENG_RESULT] = {"RESULT", NETD_ES_PARENT, 0,
			     {[NETD_A_ERRNO] = U32_REQ, [NETD_A_ERRMSG] = STR(NETD_ERRMSG_MAX)}},
	[NETD_ENG_ASK] = {"ASK", NETD_ES_PARENT, 0, {ASK_ATTRS}},
	[NETD_ENG_ASK_END] = {"ASK_END", NETD_ES_PARENT, 0, {[NETD_A_ASK_ID] = STR_REQ(NETD_ASK_ID_MAX)}},
	[NETD_ENG_DIRECT_ADD] = {"DIRECT_ADD", NETD_ES_PARENT, 0,
				 {[NETD_A_ID] = STR_REQ(NETD_ID_MAX), [NETD_A_HOST] = STR_REQ(253),
				  [NETD_A_DST] = STR_REQ(NETD_ADDR_MAX), [NETD_A_PORTS] = {IPC_T_BYTES, 32, true},
				  [NETD_A_PROTO] = U8_REQ, [NETD_A_TTL] = U32_REQ}},
	[NETD_ENG_DIRECT_REVOKE] = {"DIRECT_REVOKE", NETD_ES_PARENT, 0,
				    {[NETD_A_ID] = STR_REQ(NETD_ID_MAX), [NETD_A_DST] = STR_REQ(NETD_ADDR_MAX),
				     [NETD_A_PROTO] = U8_REQ, [NETD_A_DPORT] = {IPC_T_U16, 0, true}}},
};

const struct ipc_proto netd_engine_proto = {"engine", engine_msgs, NETD_ENG_COUNT_};

int netd_send_error(int sock, uint32_t seq, int err, const char *msg)
{
	struct ipc_buf b;
	int r = ipc_buf_init(&b, NETD_MSG_ERROR, seq);

	if (r == 0) {
		ipc_buf_put_u32(&b, NETD_A_ERRNO, (uint32_t)(err < 0 ? -err : err));
		char m[NETD_ERRMSG_MAX + 1];

		util_strlcpy(m, msg ? msg : "error", sizeof m);
		ipc_buf_put_str(&b, NETD_A_ERRMSG, m);
		r = ipc_send(sock, &b);
	}
	ipc_buf_release(&b);
	return r;
}
