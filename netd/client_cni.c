/* The CNI requests of the client library (client_cni.h): CNI_ADD, CNI_DEL, CNI_CHECK. */
#include "client_cni.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client_int.h"
#include "proto.h"
#include "util.h"

/* Sends b (released here) on a new connection and reads the reply into m; the connection is closed. */
static int request(struct ipc_buf *b, int r, struct ipc_msg *m, char *err, size_t errlen)
{
	int fd = r < 0 ? r : netd_client_connect(err, errlen);

	if (r < 0)
		snprintf(err, errlen, "building the request: %s", strerror(-r));
	if (fd < 0) {
		ipc_buf_release(b);
		return fd;
	}
	r = ipc_send(fd, b);
	ipc_buf_release(b);
	if (r < 0)
		snprintf(err, errlen, "sending the request to sluiced: %s", strerror(-r));
	else
		r = netd_client_recv_reply(fd, 1, m, err, errlen);
	close(fd);
	return r;
}

/* request() for a request answered with SESSION: fills *reply. */
static int session_request(struct ipc_buf *b, int r, struct netd_session_reply *reply, char *err, size_t errlen)
{
	struct ipc_msg m = {0};

	r = request(b, r, &m, err, errlen);
	if (r == 0 && m.type != NETD_MSG_SESSION) {
		snprintf(err, errlen, "unexpected answer from sluiced");
		r = -EPROTO;
	}
	if (r == 0)
		netd_client_fill_reply(&m, reply);
	ipc_msg_clear(&m);
	return r;
}

int netd_cni_add(const char *key, int netns_fd, const char *sess_if, const char *command, const char *policy_json,
		 struct netd_session_reply *reply, char *err, size_t errlen)
{
	char cmd[NETD_COMMAND_MAX + 1];
	struct ipc_buf b = {0};
	int r = ipc_buf_init(&b, NETD_MSG_CNI_ADD, 1);

	if (r == 0) {
		util_strlcpy(cmd, command, sizeof cmd);
		ipc_buf_put_str(&b, NETD_A_CNI_KEY, key);
		ipc_buf_put_str(&b, NETD_A_COMMAND, cmd);
		if (sess_if)
			ipc_buf_put_str(&b, NETD_A_SESS_IF, sess_if);
		ipc_buf_put_fd(&b, netns_fd); /* fd 0; a long policy's memfd comes after it */
		ipc_buf_put_text(&b, NETD_A_POLICY, NETD_A_POLICY_FD, policy_json);
	}
	return session_request(&b, r, reply, err, errlen);
}

int netd_cni_del(const char *key, char *err, size_t errlen)
{
	struct ipc_msg m = {0};
	struct ipc_buf b = {0};
	int r = ipc_buf_init(&b, NETD_MSG_CNI_DEL, 1);

	if (r == 0)
		ipc_buf_put_str(&b, NETD_A_CNI_KEY, key);
	r = request(&b, r, &m, err, errlen);
	if (r == 0 && m.type != NETD_MSG_OK) {
		snprintf(err, errlen, "unexpected answer from sluiced");
		r = -EPROTO;
	}
	ipc_msg_clear(&m);
	return r;
}

int netd_cni_check(const char *key, int netns_fd, struct netd_session_reply *reply, char *err, size_t errlen)
{
	struct ipc_buf b = {0};
	int r = ipc_buf_init(&b, NETD_MSG_CNI_CHECK, 1);

	if (r == 0) {
		ipc_buf_put_str(&b, NETD_A_CNI_KEY, key);
		ipc_buf_put_fd(&b, netns_fd);
	}
	return session_request(&b, r, reply, err, errlen);
}
