/* Client side of sluiced's METRICS request (`sluicectl metrics`): the Prometheus text exposition of
 * sluiced and its proxy engine (docs/operations.md lists the metrics). */
#pragma once

#include <stddef.h>
#include <stdio.h>

/* Writes the exposition text to out. 0 or -errno with a one-line message in err (-ENOENT or
 * -ECONNREFUSED: sluiced is not running). */
int netd_metrics_fetch(FILE *out, char *err, size_t errlen);
