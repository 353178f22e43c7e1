/* `sluicectl log`: read the audit log (human-readable or JSON, filtered, followed) and verify its
 * hash chain (`sluicectl log verify`), through the common reader (common/audit_read.h). The log is
 * untrusted input here too: lines are bounded, parsed with json-c and printed with control bytes
 * escaped, never raw. */
#include "audit_chain.h"
#include "audit_read.h"
#include "ctl.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_AUDIT_LOG "/var/log/sluice/audit.log"

static const char *default_log(void)
{
	const char *e = getenv("SLUICE_AUDIT_LOG");
	return e && *e ? e : DEFAULT_AUDIT_LOG;
}

/* Prints s with anything outside printable ASCII escaped, so a hostile log cannot drive the terminal. */
static void print_safe(const char *s, int width)
{
	int n = 0;

	for (; s && *s; s++, n++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c >= 0x7f) {
			n += 3;
			printf("\\x%02x", c);
		} else {
			putchar(c);
		}
	}
	for (; n < width; n++)
		putchar(' ');
}

struct log_filter {
	const char *session; /* borrowed; NULL = all */
	bool denied_only;
	bool json;
};

/* Prints one record unless the filter drops it. A decision record shows what was decided (its status
 * and bytes are not known yet); its close record shows how the exchange ended. */
static void show_entry(const struct log_filter *f, const struct audit_entry *e)
{
	char target[600];

	if (f->denied_only && (!e->decision || strcmp(e->decision, "allow") == 0))
		return;
	if (f->json) {
		ctl_print_json(e->line, e->len);
		return;
	}
	if (e->host && e->port > 0)
		snprintf(target, sizeof target, "%s:%lld", e->host, e->port);
	else
		snprintf(target, sizeof target, "%s", e->host ? e->host : "-");
	print_safe(e->time, 25);
	putchar(' ');
	print_safe(e->session ? e->session : "-", 14);
	putchar(' ');
	print_safe(e->event == AUDIT_EV_CLOSE ? "closed" : e->decision ? e->decision : "?", 6);
	putchar(' ');
	print_safe(e->protocol, 8);
	putchar(' ');
	if (e->method) {
		print_safe(e->method, 0);
		putchar(' ');
	}
	print_safe(target, 0);
	if (e->event != AUDIT_EV_DECISION) {
		if (e->status > 0)
			printf(" %lld", e->status);
		if (e->bytes_out >= 0 || e->bytes_in >= 0)
			printf(" up %lld down %lld", e->bytes_out < 0 ? 0 : e->bytes_out,
			       e->bytes_in < 0 ? 0 : e->bytes_in);
	}
	if (e->event == AUDIT_EV_CLOSE) {
		if (e->duration_ms >= 0)
			printf(" in %lld ms", e->duration_ms);
		if (e->error) {
			printf("  ");
			print_safe(e->error, 0);
		}
		putchar('\n');
		return;
	}
	if (e->rule) {
		printf("  [");
		print_safe(e->rule, 0);
		putchar(']');
	}
	if (e->reason && e->decision && strcmp(e->decision, "allow") != 0) {
		printf("  ");
		print_safe(e->reason, 0);
	}
	if (e->error) { /* a failure after the decision: a DNS answer whose direct flows were not opened, say */
		printf("  ");
		print_safe(e->error, 0);
	}
	putchar('\n');
}

/* Shows what the reader has now; false when reading failed. */
static bool drain(struct audit_reader *rd, const struct log_filter *flt)
{
	struct audit_entry e;
	int k;

	while ((k = audit_reader_next(rd, &e)) > 0) {
		if (k == AUDIT_READ_RECORD)
			show_entry(flt, &e);
		else if (k == AUDIT_READ_BAD)
			fprintf(stderr, "sluicectl: skipping a line that is not an audit record\n");
		audit_entry_release(&e);
	}
	fflush(stdout);
	if (k < 0)
		fprintf(stderr, "sluicectl: reading the audit log: %s\n", strerror(-k));
	return k == 0;
}

static int log_show(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "follow", no_argument, NULL, 'f' },   { "session", required_argument, NULL, 's' },
		{ "denied", no_argument, NULL, 'd' },   { "json", no_argument, NULL, 'j' },
		{ "file", required_argument, NULL, 'F' }, { "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct log_filter flt = { 0 };
	struct audit_reader_opts ro = {0};
	struct audit_reader *rd;
	const char *path = default_log();
	bool follow = false, ok;
	size_t open_flows;
	int c, err;

	optind = 1;
	while ((c = getopt_long(argc, argv, "fs:djF:h", opts, NULL)) != -1) {
		switch (c) {
		case 'f': follow = true; break;
		case 's': flt.session = optarg; break;
		case 'd': flt.denied_only = true; break;
		case 'j': flt.json = true; break;
		case 'F': path = optarg; break;
		case 'h':
			printf("usage: sluicectl log [-f] [--session ID] [--denied] [--json] [--file PATH]\n"
			       "Shows the audit log (default %s, or $SLUICE_AUDIT_LOG).\n"
			       "       sluicectl log verify [FILE...]   checks the hash chain\n", DEFAULT_AUDIT_LOG);
			return 0;
		default: return 2;
		}
	}
	if (optind < argc)
		path = argv[optind];
	ro.session = flt.session;
	ro.follow = follow;
	if (!(rd = audit_reader_open(path, &ro, &err))) {
		fprintf(stderr,
		        "sluicectl: cannot open audit log %s: %s (give another with --file, or set SLUICE_AUDIT_LOG)\n",
		        path, err == -EINVAL ? "not a regular file" : strerror(-err));
		return 1;
	}
	ok = drain(rd, &flt);
	while (follow && ok) {
		usleep(200 * 1000);
		ok = drain(rd, &flt);
		/* rotated (new inode) or truncated: what is left of the old file, then the new one */
		if (ok && audit_reader_replaced(rd, path)) {
			struct audit_reader *nr = audit_reader_open(path, &ro, &err);
			if (nr) {
				ok = drain(rd, &flt);
				audit_reader_free(rd);
				rd = nr;
			}
		}
	}
	open_flows = audit_flows_open(audit_reader_flows(rd));
	if (!follow && !flt.json && open_flows)
		fprintf(stderr,
		        "sluicectl: %zu request%s decided without a close record: still open, or the engine was "
		        "killed before %s ended\n",
		        open_flows, open_flows == 1 ? " was" : "s were", open_flows == 1 ? "it" : "they");
	audit_reader_free(rd);
	return ok ? 0 : 1;
}

static const char *verify_msg(enum audit_verify_result r)
{
	switch (r) {
	case AUDIT_VERIFY_MALFORMED: return "not a chained audit record (truncated, or written by something else)";
	case AUDIT_VERIFY_EDITED: return "hash mismatch: the line was edited";
	case AUDIT_VERIFY_BROKEN: return "chain broken: the previous line was removed, or lines were reordered";
	default: return "ok";
	}
}

static int log_verify(int argc, char **argv)
{
	struct audit_chain chain;
	struct audit_flows *flows = audit_flows_new();
	unsigned long total = 0;
	int bad = 0;
	const char *deflt[] = { default_log() };
	char **files = argc > 1 ? argv + 1 : (char **)deflt;
	int nfiles = argc > 1 ? argc - 1 : 1;
	bool first = true;
	size_t unclosed;

	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		printf("usage: sluicectl log verify [FILE...]\n"
		       "Checks the audit log's hash chain; give rotated files oldest first.\n"
		       "Exit: 0 intact, 1 tampered or malformed, 2 cannot read.\n");
		audit_flows_free(flows);
		return 0;
	}
	if (!flows) {
		fprintf(stderr, "sluicectl: out of memory\n");
		return 2;
	}
	audit_chain_init(&chain);
	for (int i = 0; i < nfiles; i++) {
		/* one chain, and one set of open flows, over all files: a close may be in the next file */
		struct audit_reader_opts ro = {.flows = flows};
		struct audit_reader *rd;
		struct audit_entry e;
		int k, err;

		if (!(rd = audit_reader_open(files[i], &ro, &err))) {
			fprintf(stderr, "sluicectl: cannot open %s: %s\n", files[i],
			        err == -EINVAL ? "not a regular file" : strerror(-err));
			audit_flows_free(flows);
			return 2;
		}
		while ((k = audit_reader_next(rd, &e)) > 0) {
			unsigned long lineno = audit_reader_lineno(rd);
			bool continued = false;
			enum audit_verify_result r;

			if (k == AUDIT_READ_TORN) {
				printf("%s:%lu: last line is incomplete (torn write)\n", files[i], lineno);
				bad = 1;
				break;
			}
			/* a line that is not a record is checked too: it cannot be chained, which says so */
			r = audit_chain_verify_line(&chain, e.line, e.len, first, &continued);
			if (continued)
				printf("%s:%lu: log continues an earlier file (its first line's predecessor is not here)\n",
				       files[i], lineno);
			if (r != AUDIT_VERIFY_OK) {
				printf("%s:%lu: %s\n", files[i], lineno, verify_msg(r));
				bad = 1;
				/* resynchronise on this line so one edit is reported once, not for every line after */
				first = audit_chain_resync(&chain, e.line, e.len);
			} else {
				first = false;
			}
			total++;
			audit_entry_release(&e);
		}
		audit_reader_free(rd);
		if (k < 0) {
			fprintf(stderr, "sluicectl: reading %s: %s\n", files[i], strerror(-k));
			audit_flows_free(flows);
			return 2;
		}
	}
	/* Not tampering: a request still open, or one the engine did not live to close (kill -9, a
	 * crash); its decision was written before anything was sent, and the chain holds it. */
	unclosed = audit_flows_open(flows);
	if (unclosed)
		printf("%zu decision%s without a close record (engine killed or restarted while %s open, or still "
		       "open)%s\n",
		       unclosed, unclosed == 1 ? "" : "s", unclosed == 1 ? "it was" : "they were",
		       audit_flows_overflowed(flows) ? "; at least, too many to track all" : "");
	printf("%lu record%s checked: %s\n", total, total == 1 ? "" : "s", bad ? "TAMPERED or damaged" : "chain intact");
	audit_flows_free(flows);
	return bad;
}

int ctl_log(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "verify") == 0)
		return log_verify(argc - 1, argv + 1);
	return log_show(argc, argv);
}
