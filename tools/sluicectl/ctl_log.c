/* `sluicectl log`: read the audit log (human-readable or JSON, filtered, followed) and verify its
 * hash chain (`sluicectl log verify`). The log is untrusted input here too: lines are parsed with
 * json-c and printed with control bytes escaped, never raw. */
#include "audit_chain.h"
#include "ctl.h"

#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_AUDIT_LOG "/var/log/sluice/audit.log"
#define LINE_MAX_BYTES (1u << 20)

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

static const char *get_str(json_object *o, const char *key)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return NULL;
	return json_object_get_string(v);
}

static long long get_num(json_object *o, const char *key)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return -1;
	return (long long)json_object_get_int64(v);
}

struct log_filter {
	const char *session; /* borrowed; NULL = all */
	bool denied_only;
	bool json;
};

/* Prints a record line for --json: the bytes as written, except control bytes (C0, DEL, UTF-8 C1),
 * which a record may only carry inside strings and which are written there as \uXXXX (still the same
 * JSON value, but nothing a terminal acts on). */
static void print_json_line(const char *line, size_t len)
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

/* Prints one record; returns 1 if printed, 0 if filtered out, -1 if the line is not a record. */
static int show_line(const struct log_filter *f, const char *line, size_t len)
{
	/* a NUL would hide the rest of the line from the parser, not from --json output */
	json_object *o = memchr(line, '\0', len) ? NULL : json_tokener_parse(line);
	int rc = 0;

	if (!o || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return -1;
	}
	const char *decision = get_str(o, "decision");
	const char *session = get_str(o, "session");
	if (f->denied_only && (!decision || strcmp(decision, "allow") == 0))
		goto out;
	if (f->session && (!session || strcmp(session, f->session) != 0))
		goto out;
	rc = 1;
	if (f->json) {
		print_json_line(line, len);
		goto out;
	}
	const char *host = get_str(o, "host");
	long long port = get_num(o, "port");
	char target[600];
	if (host && port > 0)
		snprintf(target, sizeof target, "%s:%lld", host, port);
	else
		snprintf(target, sizeof target, "%s", host ? host : "-");
	print_safe(get_str(o, "time"), 25);
	putchar(' ');
	print_safe(session ? session : "-", 14);
	putchar(' ');
	print_safe(decision ? decision : "?", 6);
	putchar(' ');
	print_safe(get_str(o, "protocol"), 8);
	putchar(' ');
	const char *method = get_str(o, "method");
	if (method) {
		print_safe(method, 0);
		putchar(' ');
	}
	print_safe(target, 0);
	long long status = get_num(o, "status");
	if (status > 0)
		printf(" %lld", status);
	long long out_b = get_num(o, "bytes_out"), in_b = get_num(o, "bytes_in");
	if (out_b >= 0 || in_b >= 0)
		printf(" up %lld down %lld", out_b < 0 ? 0 : out_b, in_b < 0 ? 0 : in_b);
	const char *rule = get_str(o, "rule");
	if (rule) {
		printf("  [");
		print_safe(rule, 0);
		putchar(']');
	}
	const char *reason = get_str(o, "reason");
	if (reason && decision && strcmp(decision, "allow") != 0) {
		printf("  ");
		print_safe(reason, 0);
	}
	putchar('\n');
out:
	json_object_put(o);
	return rc;
}

/* Reads complete lines from f, calling show_line; keeps a partial last line in *partial. */
static void drain(FILE *fp, const struct log_filter *flt, char **buf, size_t *cap)
{
	ssize_t n;

	while ((n = getline(buf, cap, fp)) > 0) {
		if ((*buf)[n - 1] != '\n') {
			/* a line still being written: rewind and wait for the rest */
			fseeko(fp, -(off_t)n, SEEK_CUR);
			break;
		}
		(*buf)[--n] = '\0';
		if (n == 0)
			continue;
		if ((size_t)n > LINE_MAX_BYTES || show_line(flt, *buf, (size_t)n) < 0)
			fprintf(stderr, "sluicectl: skipping a line that is not an audit record\n");
	}
	clearerr(fp);
	fflush(stdout);
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
	const char *path = default_log();
	bool follow = false;
	int c;

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
	FILE *fp = fopen(path, "re");
	if (!fp) {
		fprintf(stderr, "sluicectl: cannot open audit log %s: %s (give another with --file, or set SLUICE_AUDIT_LOG)\n",
			path, strerror(errno));
		return 1;
	}
	char *buf = NULL;
	size_t cap = 0;
	struct stat st0;
	fstat(fileno(fp), &st0);
	drain(fp, &flt, &buf, &cap);
	while (follow) {
		struct stat st;
		usleep(200 * 1000);
		drain(fp, &flt, &buf, &cap);
		/* rotated (new inode) or truncated: reopen from the start of the new file */
		if (stat(path, &st) == 0 && (st.st_ino != st0.st_ino || st.st_size < ftello(fp))) {
			FILE *nf = fopen(path, "re");
			if (nf) {
				drain(fp, &flt, &buf, &cap);
				fclose(fp);
				fp = nf;
				fstat(fileno(fp), &st0);
			}
		}
	}
	free(buf);
	fclose(fp);
	return 0;
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
	unsigned long total = 0;
	int bad = 0;
	const char *deflt[] = { default_log() };
	char **files = argc > 1 ? argv + 1 : (char **)deflt;
	int nfiles = argc > 1 ? argc - 1 : 1;
	bool first = true;

	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		printf("usage: sluicectl log verify [FILE...]\n"
		       "Checks the audit log's hash chain; give rotated files oldest first.\n"
		       "Exit: 0 intact, 1 tampered or malformed, 2 cannot read.\n");
		return 0;
	}
	audit_chain_init(&chain);
	for (int i = 0; i < nfiles; i++) {
		FILE *fp = fopen(files[i], "re");
		char *buf = NULL;
		size_t cap = 0;
		ssize_t n;
		unsigned long lineno = 0;

		if (!fp) {
			fprintf(stderr, "sluicectl: cannot open %s: %s\n", files[i], strerror(errno));
			return 2;
		}
		while ((n = getline(&buf, &cap, fp)) > 0) {
			lineno++;
			if (buf[n - 1] != '\n') {
				printf("%s:%lu: last line is incomplete (torn write)\n", files[i], lineno);
				bad = 1;
				break;
			}
			buf[--n] = '\0';
			bool continued = false;
			enum audit_verify_result r = audit_chain_verify_line(&chain, buf, (size_t)n, first, &continued);
			if (continued)
				printf("%s:%lu: log continues an earlier file (its first line's predecessor is not here)\n",
				       files[i], lineno);
			if (r != AUDIT_VERIFY_OK) {
				printf("%s:%lu: %s\n", files[i], lineno, verify_msg(r));
				bad = 1;
				/* resynchronise on this line so one edit is reported once, not for every line after */
				first = audit_chain_resync(&chain, buf, (size_t)n);
			} else {
				first = false;
			}
			total++;
		}
		free(buf);
		fclose(fp);
	}
	printf("%lu record%s checked: %s\n", total, total == 1 ? "" : "s", bad ? "TAMPERED or damaged" : "chain intact");
	return bad;
}

int ctl_log(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "verify") == 0)
		return log_verify(argc - 1, argv + 1);
	return log_show(argc, argv);
}
