/* `sluicectl metrics`: prints sluiced's Prometheus text exposition (docs/operations.md, "Metrics"). */
#include <stdio.h>
#include <string.h>

#include "client_metrics.h"
#include "ctl.h"

int ctl_metrics(int argc, char **argv)
{
	char err[1024];

	if (argc > 1) {
		fprintf(argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? stdout : stderr,
			"usage: sluicectl metrics\n"
			"prints sluiced's counters in the Prometheus text format (also served on RUN_DIR/metrics.sock)\n");
		return argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? 0 : 2;
	}
	if (netd_metrics_fetch(stdout, err, sizeof err) < 0) {
		fprintf(stderr, "sluicectl: metrics: %s\n", err);
		return 1;
	}
	return fflush(stdout) == 0 ? 0 : 1;
}
