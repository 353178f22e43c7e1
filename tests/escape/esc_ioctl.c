/* Escape attempt: TIOCSTI / TIOCLINUX would push keystrokes into the terminal that started the
 * sandbox. On /dev/null the kernel itself answers ENOTTY, so only EPERM proves the filter
 * refused the call before the driver saw it; on the real terminal (fd 0 when it is one) the
 * character must not be injected either. */
#include "esc.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
	char c = 'X';
	int fd = open("/dev/null", O_RDWR);
	if (fd < 0) {
		perror("open /dev/null");
		return 2;
	}
	errno = 0;
	int r = ioctl(fd, TIOCSTI, &c);
	esc_report(r < 0 && errno == EPERM, "ioctl(TIOCSTI)", r < 0 ? errno : 0);
	errno = 0;
	char sub = 0;
	r = ioctl(fd, TIOCLINUX, &sub);
	esc_report(r < 0 && errno == EPERM, "ioctl(TIOCLINUX)", r < 0 ? errno : 0);
	/* Upper bits set in the 64-bit argument must not slip past the 32-bit comparison. */
	errno = 0;
	r = (int)syscall(SYS_ioctl, fd, 0x100000000UL | TIOCSTI, &c);
	esc_report(r < 0 && errno == EPERM, "ioctl(TIOCSTI with high bits)", r < 0 ? errno : 0);
	return esc_failed;
}
