/* The METRICS request of the client library (client_metrics.h). */
#include "client_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client_int.h"
#include "proto.h"

int netd_metrics_fetch(FILE *out, char *err, size_t errlen)
{
	int fd = netd_client_connect(err, errlen), r;

	if (fd < 0)
		return fd;
	r = ipc_send_empty(fd, NETD_MSG_METRICS, 1);
	if (r < 0)
		snprintf(err, errlen, "sending the request to sluiced: %s", strerror(-r));
	while (r == 0) {
		struct ipc_msg m = {0};

		r = netd_client_recv_reply(fd, 1, &m, err, errlen);
		if (r == 0 && m.type == NETD_MSG_LIST_END) {
			ipc_msg_clear(&m);
			break;
		}
		if (r == 0 && m.type != NETD_MSG_LINES) {
			snprintf(err, errlen, "unexpected answer from sluiced");
			r = -EPROTO;
		}
		if (r == 0) {
			const char *s = ipc_get_str(&m, NETD_A_LINES);

			if (fputs(s, out) < 0) {
				r = -EIO;
				snprintf(err, errlen, "writing the metrics: %s", strerror(errno));
			}
		}
		ipc_msg_clear(&m);
	}
	close(fd);
	return r;
}
