/* sluicectl: the operator's command line: policies, the audit log, live and saved sessions, named
 * network namespaces for other sandbox backends. */
#include "config.h"
#include "ctl.h"
#include "netns_cmd.h"
#include "log.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: sluicectl COMMAND [ARGS]\n"
		   "commands:\n"
		   "  policy check FILE...          validate policy files\n"
		   "  policy explain HOST[:PORT]    which rule decides, and why\n"
		   "  log [-f] [--session ID] [--denied] [--json]   show the audit log\n"
		   "  log verify [FILE...]          check the audit log's hash chain\n"
		   "  sessions [--json]             live network sessions (sluiced)\n"
		   "  session end ID                end a live session\n"
		   "  session policy ID --allow P | --deny P | --file F   change a live session's policy\n"
		   "  asks [--json]                 requests held for approval (sluice run --ask)\n"
		   "  approve [ID [--remember user|project [--project DIR]]]\n"
		   "                                let a held request through (no ID: list them)\n"
		   "  deny ID                       refuse a held request (403)\n"
		   "  session save [--patch] ID     apply a saved session's changes to its project (--patch: print them)\n"
		   "  session discard ID            remove a saved session\n"
		   "  netns create [--name N] [--policy P]... [--allow HOST[:PORT]]... [--json]\n"
		   "                                a sluiced-wired netns for firejail/podman; prints its path\n"
		   "  netns delete ID|NAME          remove it\n"
		   "  metrics                       sluiced's counters (Prometheus text)\n"
		   "  version                       print the version\n"
		   "Run `sluicectl COMMAND --help` for a command's options.\n");
}

void ctl_print_plain(const char *s, int width)
{
	int n = 0;
	for (; s && *s; s++, n++)
		putchar(((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) ? '?' : *s);
	for (; n < width; n++)
		putchar(' ');
}

/* Prints a line of JSON (an audit record, a --json listing): the bytes as written, except control bytes
 * (C0, DEL, UTF-8 C1), which valid JSON may only carry inside strings and which are written there as
 * \uXXXX (still the same JSON value, but nothing a terminal acts on: json-c leaves DEL and C1 raw). */
void ctl_print_json(const char *line, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		if (c < 0x20 || c == 0x7f) {
			printf("\\u%04x", c);
		} else if (c == 0xc2 && i + 1 < len && (unsigned char)line[i + 1] >= 0x80 &&
		           (unsigned char)line[i + 1] <= 0x9f) {
			printf("\\u%04x", (unsigned char)line[++i]);
		} else {
			putchar(c);
		}
	}
	putchar('\n');
}

int main(int argc, char **argv)
{
	log_init("sluicectl", LOG_LEVEL_WARN);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("sluicectl %s\n", SLUICE_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "policy") == 0)
		return ctl_policy(argc - 1, argv + 1);
	if (strcmp(argv[1], "log") == 0)
		return ctl_log(argc - 1, argv + 1);
	if (strcmp(argv[1], "sessions") == 0 || strcmp(argv[1], "session") == 0)
		return ctl_session(argc - 1, argv + 1);
	if (strcmp(argv[1], "asks") == 0 || strcmp(argv[1], "approve") == 0 || strcmp(argv[1], "deny") == 0)
		return ctl_ask(argc - 1, argv + 1);
	if (strcmp(argv[1], "metrics") == 0)
		return ctl_metrics(argc - 1, argv + 1);
	if (strcmp(argv[1], "netns") == 0)
		return netd_netns_cmd(argc - 1, argv + 1, "sluicectl");
	fprintf(stderr, "sluicectl: unknown command \"%s\"\n", argv[1]);
	usage(stderr);
	return 2;
}
