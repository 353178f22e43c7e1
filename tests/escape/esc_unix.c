/* Escape attempt: connect to unix sockets of the host, given as arguments: a path, or
 * "@name" for an abstract socket (those live in the network namespace). Every connect must fail. */
#include "esc.h"

#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		size_t n = strlen(argv[i]);
		if (n >= sizeof sa.sun_path)
			return 2;
		memcpy(sa.sun_path, argv[i], n);
		socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
		if (argv[i][0] == '@')
			sa.sun_path[0] = '\0';
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		errno = 0;
		int r = connect(fd, (struct sockaddr *)&sa, len);
		char what[200];
		snprintf(what, sizeof what, "connect(%s)", argv[i]);
		esc_report(r < 0, what, r < 0 ? errno : 0);
		close(fd);
	}
	return esc_failed;
}
