/* Fuzz target: one record as it arrives on a control or engine socket, through ipc_recv and the
 * permission tables of both protocols in every state. Checks that a message that passes the table
 * only yields attributes of the declared type and size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ipc.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_one(const struct ipc_proto *p, uint32_t state, const uint8_t *data, size_t size)
{
	int sv[2];
	struct ipc_msg m;
	char err[256];

	if (ipc_socketpair(sv, true) < 0)
		abort();
	if (send(sv[0], data, size, 0) == (ssize_t)size && ipc_recv(sv[1], &m) == 0 &&
	    ipc_msg_check(p, &m, state, err, sizeof err) == 0) {
		const struct ipc_msg_spec *s = &p->msgs[m.type];

		for (uint16_t a = 0; a <= IPC_ATTR_MAX; a++) {
			const struct ipc_attr_spec *as = &s->attrs[a];

			if (!ipc_has(&m, a))
				continue;
			if (as->type == IPC_T_NONE)
				abort();
			if (as->type == IPC_T_STR && strlen(ipc_get_str(&m, a)) > as->max_len)
				abort();
		}
	}
	ipc_msg_clear(&m);
	close(sv[0]);
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint32_t cstates[] = {NETD_CS_OPEN, NETD_CS_ATTACHED, NETD_CS_CLIENT};
	static const uint32_t estates[] = {NETD_ES_INIT, NETD_ES_RUN, NETD_ES_PARENT};

	if (size == 0 || size > 65536)
		return 0;
	for (size_t i = 0; i < 3; i++) {
		check_one(&netd_control_proto, cstates[i], data, size);
		check_one(&netd_engine_proto, estates[i], data, size);
	}
	return 0;
}
