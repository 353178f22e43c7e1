/* Reports the effective uid and capability sets; exec'd through setuid / file-capability copies
 * by the tests, it must still show no capabilities and the caller's uid. Exits 1 if it has any
 * capability or runs as a different euid than ruid. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char line[256];
	int bad = geteuid() != getuid();
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 2;
	while (fgets(line, sizeof line, f)) {
		unsigned long long v;
		if ((sscanf(line, "CapEff: %llx", &v) == 1 || sscanf(line, "CapPrm: %llx", &v) == 1) && v)
			bad = 1;
	}
	fclose(f);
	printf("%s: ruid=%u euid=%u\n", bad ? "ESCAPE" : "SAFE", getuid(), geteuid());
	return bad;
}
