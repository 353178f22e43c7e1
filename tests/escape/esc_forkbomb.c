/* Resource attempt: fork until the kernel refuses, keeping every child alive; prints how many
 * forks succeeded. The session's pids limit must stop it well below argv[1]. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int max = argc > 1 ? atoi(argv[1]) : 10000, n = 0;
	for (; n < max; n++) {
		pid_t p = fork();
		if (p < 0)
			break;
		if (p == 0) {
			pause();
			_exit(0);
		}
	}
	printf("forks=%d\n", n);
	fflush(stdout);
	return 0; /* the children die with the session's pid namespace */
}
