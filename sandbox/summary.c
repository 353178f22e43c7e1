/* Reading this session's records back from the audit log (from where the log ended when the
 * session started): sb_summary_each() is the one reader, used by the denial summary `sluice run
 * --allow-network` prints at exit (here: groups the denials by destination and rule, and says for
 * each the exact flag or policy line that would allow it) and by learn mode (learn.c). The log is
 * written by netd's proxy but is still read as untrusted text, through the common reader
 * (common/audit_read.h: bounded lines parsed with json-c), and every string is printed with control
 * bytes escaped. */
#include "session.h"

#include "audit_read.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUMMARY_MAX_ROWS  32
#define SUMMARY_READ_MAX  (256ull << 20) /* never read more than this of one log at exit */

struct denial {
	char host[256];
	long port;       /* 0 = none (a DNS name) */
	char rule[256];  /* "" = no rule decided: not in the policy */
	char reason[512];
	unsigned count;
};

struct denials {
	struct denial row[SUMMARY_MAX_ROWS];
	size_t n;
	unsigned more; /* denials of destinations beyond the table */
};

/* Copies s into dst with anything outside printable ASCII replaced by '?'. */
static void copy_safe(char *dst, size_t len, const char *s)
{
	size_t i = 0;
	for (; s && *s && i + 1 < len; s++)
		dst[i++] = ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) ? '?' : *s;
	dst[i] = '\0';
}

static void add_record(const struct audit_entry *e, void *arg)
{
	struct denials *d = arg;
	const char *dec = e->decision, *host = e->host, *proto = e->protocol, *rule = e->rule;
	long port;

	if (!dec || strcmp(dec, "deny") != 0 || !host || !*host)
		return;
	port = (long)e->port;
	/* A DNS query names no port: the flag to suggest is the bare host. */
	if ((proto && strcmp(proto, "dns") == 0) || port < 0 || port > 65535)
		port = 0;
	char h[256], r[256];
	copy_safe(h, sizeof h, host);
	copy_safe(r, sizeof r, rule ? rule : "");
	/* DNS lookups and the connection that follows are one destination to the user. */
	for (size_t i = 0; i < d->n; i++) {
		struct denial *x = &d->row[i];
		if (strcmp(x->host, h) == 0 && strcmp(x->rule, r) == 0 && (x->port == port || !port || !x->port)) {
			if (port)
				x->port = port;
			x->count++;
			return;
		}
	}
	if (d->n == SUMMARY_MAX_ROWS) {
		d->more++;
		return;
	}
	struct denial *x = &d->row[d->n++];
	util_strlcpy(x->host, h, sizeof x->host);
	util_strlcpy(x->rule, r, sizeof x->rule);
	copy_safe(x->reason, sizeof x->reason, e->reason);
	x->port = port;
	x->count = 1;
}

long long sb_summary_mark(const char *log_path)
{
	return audit_reader_mark(log_path);
}

/* Whether the host is an address literal (a dropped packet): no --allow names it. */
static bool is_addr(const char *h)
{
	return strspn(h, "0123456789.") == strlen(h) || strchr(h, ':');
}

int sb_summary_each(const char *id, const char *log_path, long long from,
                    void (*fn)(const struct audit_entry *rec, void *arg), void *arg)
{
	/* one record per request, with its final decision (a decision without its close record, when
	 * the engine was killed, counts too) */
	struct audit_reader_opts o = {.from = from, .max_bytes = SUMMARY_READ_MAX, .session = id, .outcomes = true};
	struct audit_reader *rd;
	struct audit_entry e;
	int r;

	if (!(rd = audit_reader_open(log_path, &o, &r)))
		return r;
	while ((r = audit_reader_next(rd, &e)) > 0) {
		if (r == AUDIT_READ_RECORD)
			fn(&e, arg);
		audit_entry_release(&e);
	}
	audit_reader_free(rd);
	return r;
}

int sb_summary_print(FILE *f, const char *id, const char *log_path, long long from)
{
	struct denials *d = calloc(1, sizeof *d);
	int r;

	if (!d)
		return -ENOMEM;
	r = sb_summary_each(id, log_path, from, add_record, d);
	if (r < 0 || d->n == 0)
		goto out;
	unsigned total = d->more;
	for (size_t i = 0; i < d->n; i++)
		total += d->row[i].count;
	fprintf(f, "sluice: session %s: %u request%s denied:\n", id, total, total == 1 ? " was" : "s were");
	for (size_t i = 0; i < d->n; i++) {
		const struct denial *x = &d->row[i];
		char dest[300];
		if (x->port)
			snprintf(dest, sizeof dest, "%s:%ld", x->host, x->port);
		else
			snprintf(dest, sizeof dest, "%s", x->host);
		fprintf(f, "  %-32s %4u x  %s%s\n", dest, x->count, x->rule[0] ? "rule " : "no rule",
		        x->rule[0] ? x->rule : "");
		/* Which fix works depends on why: a deny rule or the organisation's ceiling beats any
		 * --allow, a forbidden address range needs a cidr rule, the rest is simply not allowed. */
		if (is_addr(x->host) || strstr(x->reason, "forbidden range") || strstr(x->reason, "ceiling") ||
		    strstr(x->reason, "IP address"))
			fprintf(f, "      %s\n", x->reason[0] ? x->reason : "a direct connection to an address");
		else if (strstr(x->reason, " denied by "))
			fprintf(f, "      a deny rule decided (%s): --allow cannot override it; change %s\n",
			        x->reason, x->rule[0] ? x->rule : "the deny rule");
		else if (strstr(x->reason, "HTTP rule") || strstr(x->reason, "inspecting proxy") ||
		         strstr(x->reason, "exfiltration"))
			fprintf(f, "      %s\n", x->reason); /* HTTPS inspection: the host is allowed, the request was not */
		else
			fprintf(f, "      to allow it: --allow %s   (or add \"%s\" to \"allow\" in .sluice/policy.json)\n",
			        dest, dest);
	}
	if (d->more)
		fprintf(f, "  ... and %u more denied requests (sluicectl log --session %s --denied)\n", d->more, id);
out:
	free(d);
	return r;
}
