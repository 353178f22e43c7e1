/* Shared between the files of netd's client library (client.c, client_cni.c): connecting to sluiced and
 * reading one checked reply. Not for callers outside netd/. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "ipc.h"

/* Connects to sluiced at $SLUICE_RUN_DIR/control.sock: an fd (CLOEXEC, 30 s receive timeout), or -errno
 * (ENOENT/ECONNREFUSED: not running) with a one-line message in err. */
int netd_client_connect(char *err, size_t errlen);
/* Receives and checks the reply to request seq; an ERROR reply becomes -errno with its message in err. */
int netd_client_recv_reply(int fd, uint32_t seq, struct ipc_msg *m, char *err, size_t errlen);
/* A SESSION reply's fields. */
void netd_client_fill_reply(const struct ipc_msg *m, struct netd_session_reply *r);
