/* bench-policy: load+compile time and lookup latency of the policy matcher with N rules.
 * usage: bench-policy [RULES] [LOOKUPS]   (default 1000000 rules, 1000000 lookups)
 * Writes a plain-text domain list of RULES patterns (70% exact names, 30% wildcards) to a temp file,
 * times loading and compiling it, then times each lookup (half hits, half misses) and prints the
 * median, p99 and mean; load+compile as wall-clock and CPU time. Exits non-zero if a generated host
 * does not get the expected verdict. */
#include "policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void host_for(unsigned long i, bool hit, char *buf, size_t len)
{
	if (i % 10 < 7)
		snprintf(buf, len, "%sh%lu.d%lu.example", hit ? "" : "miss.", i, i % 997);
	else
		snprintf(buf, len, "%ss%lu.d%lu.example", hit ? "api." : "", i, i % 997); /* bare suffix: no match */
}

int main(int argc, char **argv)
{
	unsigned long nrules = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
	unsigned long nlook = argc > 2 ? strtoul(argv[2], NULL, 10) : 1000000;
	char path[] = "/tmp/sluice-bench-policy-XXXXXX.txt";
	int fd = mkstemps(path, 4);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	char host[300];

	if (!f || nrules == 0 || nlook == 0) {
		fprintf(stderr, "bench-policy: usage: bench-policy [RULES] [LOOKUPS]\n");
		return 2;
	}
	for (unsigned long i = 0; i < nrules; i++) {
		if (i % 10 < 7)
			fprintf(f, "h%lu.d%lu.example\n", i, i % 997);
		else
			fprintf(f, "*.s%lu.d%lu.example\n", i, i % 997);
	}
	fclose(f);

	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	double t0 = now_ns(), c0 = cpu_ns();
	if (policy_builder_add_file(b, POLICY_LAYER_USER, path, &err) != 0) {
		char msg[2048];
		fprintf(stderr, "bench-policy: %s\n", policy_error_format(&err, msg, sizeof msg));
		unlink(path);
		return 1;
	}
	struct policy *p = policy_builder_compile(b, &err);
	double t1 = now_ns(), c1 = cpu_ns();
	unlink(path);
	if (!p)
		return 1;

	double *lat = malloc(nlook * sizeof *lat);
	unsigned long bad = 0;
	srandom(42);
	double tstart = now_ns();
	for (unsigned long k = 0; k < nlook; k++) {
		unsigned long i = (unsigned long)random() % nrules;
		bool hit = k % 2 == 0;
		struct policy_decision d;
		host_for(i, hit, host, sizeof host);
		double a = now_ns();
		policy_decide(p, host, 443, POLICY_M_GET, &d);
		lat[k] = now_ns() - a;
		bad += (d.verdict == POLICY_ALLOW) != hit;
	}
	double total = now_ns() - tstart;
	qsort(lat, nlook, sizeof *lat, cmp_double);
	/* CPU time as well: on a shared machine the wall clock also counts other processes' turns */
	printf("rules %lu: load+compile %.3f s (CPU %.3f s)\n", nrules, (t1 - t0) / 1e9, (c1 - c0) / 1e9);
	printf("lookups %lu: median %.0f ns, p99 %.0f ns (each timed alone, timer included); mean %.0f ns (incl. name formatting)\n", nlook,
	       lat[nlook / 2], lat[nlook * 99 / 100], total / (double)nlook);
	free(lat);
	policy_unref(p);
	policy_builder_free(b);
	if (bad) {
		fprintf(stderr, "bench-policy: %lu lookups got the wrong verdict\n", bad);
		return 1;
	}
	return 0;
}
