/* Fuzz target: the audit log reader (common/audit_read.c), which reads what the proxy engine wrote
 * (the engine is the exposed part: its log is untrusted bytes to sluiced, the launcher and
 * sluicectl). The input is a whole log file: it is read raw, filtered to a session with outcomes
 * (once at once, once with a byte bound that cuts it), and followed in two halves. Invariants: every
 * line fits the bound and is terminated, a record has no NUL, line numbers grow, only decisions are
 * "unclosed", outcomes
 * deliver no more records than the raw read, and following in halves reads the same records. */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "audit_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads everything; returns the number of records, aborts on a broken invariant. */
static unsigned read_all(const char *path, const struct audit_reader_opts *o)
{
	struct audit_reader *r = audit_reader_open(path, o, &(int){0});
	struct audit_entry e;
	unsigned long last = 0;
	unsigned records = 0;
	int k;

	if (!r)
		abort();
	while ((k = audit_reader_next(r, &e)) > 0) {
		if (!e.line || e.len > AUDIT_READ_LINE_MAX || e.line[e.len] != '\0')
			abort();
		if (k == AUDIT_READ_RECORD) {
			if (!e.obj || memchr(e.line, '\0', e.len) || (e.unclosed && e.event != AUDIT_EV_DECISION))
				abort();
			if (!e.unclosed && audit_reader_lineno(r) <= last && last)
				abort();
			records++;
		}
		if (!e.unclosed)
			last = audit_reader_lineno(r);
		audit_entry_release(&e);
	}
	if (k < 0)
		abort();
	audit_reader_free(r);
	return records;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-audit-log", MFD_CLOEXEC);
	struct audit_reader_opts raw = {0}, sess = {.session = "s1", .outcomes = true};
	struct audit_reader_opts cut = {.session = "s1", .outcomes = true, .max_bytes = size / 2 + 1};
	struct audit_reader_opts fol = {.follow = true};
	struct audit_reader *r;
	struct audit_entry e;
	unsigned all, followed = 0;
	char path[64];
	size_t half = size / 2;
	int k;

	if (fd < 0)
		return 0;
	if (write(fd, data, half) != (ssize_t)half)
		abort();
	/* following: the first half, then the rest as it is appended */
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd); /* each reader its own file offset */
	r = audit_reader_open(path, &fol, &(int){0});
	if (!r)
		abort();
	while ((k = audit_reader_next(r, &e)) > 0) {
		followed += k == AUDIT_READ_RECORD;
		audit_entry_release(&e);
	}
	if (write(fd, data + half, size - half) != (ssize_t)(size - half))
		abort();
	while ((k = audit_reader_next(r, &e)) > 0) {
		followed += k == AUDIT_READ_RECORD;
		audit_entry_release(&e);
	}
	audit_reader_free(r);

	all = read_all(path, &raw);
	/* a torn last line is not a record either way; a followed reader waits for its end instead */
	if (followed != all)
		abort();
	if (read_all(path, &sess) > all || read_all(path, &cut) > all)
		abort();
	close(fd);
	return 0;
}
