/* Unit tests of the audit log reader (common/audit_read.c): records and their events (old logs
 * without one too), flow ids, what is not a record (NUL, trailing bytes, not an object, too long), a
 * range from an offset (rotated, cut by a byte bound), a torn tail, following a growing file, the
 * session filter (a value cannot mimic the key), outcomes (one record per exchange; a decision the
 * engine never closed is delivered once, at the end), and the open-flow table against a naive one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "audit_read.h"

/* A memfd holding text; its /proc path in path. */
static int mem_log(const char *text, char path[64])
{
	int fd = memfd_create("audit-read-test", MFD_CLOEXEC);
	assert_true(fd >= 0);
	if (text)
		assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	snprintf(path, 64, "/proc/self/fd/%d", fd);
	return fd;
}

static void append(int fd, const char *text)
{
	assert_int_equal(pwrite(fd, text, strlen(text), lseek(fd, 0, SEEK_END)), (ssize_t)strlen(text));
}

#define REC(ev, flow, sess, host, dec)                                                                                 \
	"{\"time\":\"t\",\"event\":\"" ev "\",\"flow\":\"" flow "\",\"session\":\"" sess "\",\"protocol\":\"http\","   \
	"\"host\":\"" host "\",\"port\":80,\"method\":\"GET\",\"decision\":\"" dec "\",\"status\":200}\n"

static void test_parse(void **state)
{
	struct audit_entry e;
	const char *l;
	(void)state;

	l = "{\"time\":\"2026-11-22T00:00:00.000Z\",\"event\":\"close\",\"flow\":\"00ab00000000002a\",\"session\":"
	    "\"s1\","
	    "\"uid\":1000,\"command\":\"c\",\"protocol\":\"connect\",\"host\":\"h.test\",\"port\":443,\"method\":"
	    "\"CONNECT\","
	    "\"decision\":\"allow\",\"rule\":\"p:1:2\",\"reason\":null,\"address\":\"1.2.3.4:443\",\"status\":200,"
	    "\"bytes_out\":5,\"bytes_in\":7,\"duration_ms\":3,\"error\":null}";
	assert_int_equal(audit_entry_parse(l, strlen(l), &e), 0);
	assert_int_equal(e.event, AUDIT_EV_CLOSE);
	assert_true(e.flow == 0x00ab00000000002aull);
	assert_string_equal(e.session, "s1");
	assert_string_equal(e.host, "h.test");
	assert_string_equal(e.rule, "p:1:2");
	assert_null(e.reason);
	assert_null(e.error);
	assert_int_equal(e.uid, 1000);
	assert_int_equal(e.port, 443);
	assert_int_equal(e.bytes_in, 7);
	assert_int_equal(e.duration_ms, 3);
	audit_entry_release(&e);
	assert_null(e.obj);

	/* a log from before events: every record is complete and has no flow */
	l = "{\"time\":\"t\",\"session\":\"s1\",\"decision\":\"deny\",\"port\":-3}";
	assert_int_equal(audit_entry_parse(l, strlen(l), &e), 0);
	assert_int_equal(e.event, AUDIT_EV_COMPLETE);
	assert_true(e.flow == 0);
	assert_int_equal(e.port, -1); /* negative: not a number we use */
	assert_int_equal(e.status, -1);
	audit_entry_release(&e);

	l = "{\"event\":\"decision\",\"flow\":\"00AB00000000002A\"}"; /* the engine writes lower case */
	assert_int_equal(audit_entry_parse(l, strlen(l), &e), 0);
	assert_int_equal(e.event, AUDIT_EV_DECISION);
	assert_true(e.flow == 0);
	audit_entry_release(&e);
	l = "{\"event\":\"no-sandbox\",\"flow\":\"2a\"}";
	assert_int_equal(audit_entry_parse(l, strlen(l), &e), 0);
	assert_int_equal(e.event, AUDIT_EV_OTHER);
	assert_true(e.flow == 0);
	audit_entry_release(&e);
	l = "{\"event\":7}";
	assert_int_equal(audit_entry_parse(l, strlen(l), &e), 0);
	assert_int_equal(e.event, AUDIT_EV_OTHER);
	audit_entry_release(&e);

	/* not records */
	assert_int_equal(audit_entry_parse("{\"a\":1}\0{", 9, &e), -EBADMSG);
	assert_int_equal(audit_entry_parse("{\"a\":1} x", 9, &e), -EBADMSG);
	assert_int_equal(audit_entry_parse("{\"a\":1}{}", 9, &e), -EBADMSG);
	assert_int_equal(audit_entry_parse("[1,2]", 5, &e), -EBADMSG);
	assert_int_equal(audit_entry_parse("{\"a\":", 5, &e), -EBADMSG);
	assert_int_equal(audit_entry_parse("", 0, &e), -EBADMSG);
	assert_null(e.obj);
}

static void test_lines(void **state)
{
	char path[64], *big;
	int fd, err;
	struct audit_reader_opts o = {0};
	struct audit_reader *r;
	struct audit_entry e;
	(void)state;

	/* a record, an over-long line (reported once), a record, junk, a torn tail */
	big = malloc(AUDIT_READ_LINE_MAX * 3 + 2);
	assert_non_null(big);
	memset(big, 'x', AUDIT_READ_LINE_MAX * 3);
	big[AUDIT_READ_LINE_MAX * 3] = '\n';
	big[AUDIT_READ_LINE_MAX * 3 + 1] = '\0';
	fd = mem_log(REC("complete", "0000000000000001", "s1", "a.test", "deny"), path);
	append(fd, big);
	append(fd, REC("complete", "0000000000000002", "s1", "b.test", "deny"));
	append(fd, "not json\n{\"torn\":");
	free(big);
	r = audit_reader_open(path, &o, &err);
	assert_non_null(r);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_string_equal(e.host, "a.test");
	assert_int_equal(audit_reader_lineno(r), 1);
	audit_entry_release(&e);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_BAD);
	assert_int_equal(e.len, AUDIT_READ_LINE_MAX);
	assert_int_equal(audit_reader_lineno(r), 2);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_string_equal(e.host, "b.test");
	assert_int_equal(audit_reader_lineno(r), 3);
	audit_entry_release(&e);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_BAD);
	assert_string_equal(e.line, "not json");
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_TORN);
	assert_string_equal(e.line, "{\"torn\":");
	assert_int_equal(audit_reader_lineno(r), 5);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_END);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_END);
	audit_reader_free(r);
	close(fd);

	/* not a regular file; not there */
	assert_null(audit_reader_open("/dev/null", &o, &err));
	assert_int_equal(err, -EINVAL);
	assert_null(audit_reader_open("/nonexistent/audit.log", &o, &err));
	assert_int_equal(err, -ENOENT);
}

static void test_range(void **state)
{
	char path[64];
	const char *a = REC("complete", "0000000000000001", "s1", "a.test", "deny");
	const char *b = REC("complete", "0000000000000002", "s1", "b.test", "deny");
	int fd = mem_log(a, path), err;
	long long mark = audit_reader_mark(path);
	struct audit_reader_opts o = {.from = mark};
	struct audit_reader *r;
	struct audit_entry e;
	(void)state;

	assert_int_equal(mark, (long long)strlen(a));
	append(fd, b);
	/* from the mark: only what came after */
	r = audit_reader_open(path, &o, &err);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_string_equal(e.host, "b.test");
	audit_entry_release(&e);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_END);
	audit_reader_free(r);
	/* a mark beyond the end: the log was rotated, the records are at the start of the new one */
	o.from = 1 << 20;
	r = audit_reader_open(path, &o, &err);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_string_equal(e.host, "a.test");
	audit_entry_release(&e);
	audit_reader_free(r);
	/* a byte bound that cuts the first line: the fragment is skipped, not reported */
	o.from = 0;
	o.max_bytes = strlen(b) + 5;
	r = audit_reader_open(path, &o, &err);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_string_equal(e.host, "b.test");
	audit_entry_release(&e);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_END);
	audit_reader_free(r);
	/* ... and one that falls on a line's start skips nothing */
	o.max_bytes = strlen(b);
	r = audit_reader_open(path, &o, &err);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_string_equal(e.host, "b.test");
	audit_entry_release(&e);
	audit_reader_free(r);
	close(fd);
}

static void test_follow(void **state)
{
	char path[64];
	const char *a = REC("decision", "0000000000000001", "s1", "a.test", "allow");
	int fd = mem_log(NULL, path), err;
	struct audit_reader_opts o = {.follow = true};
	struct audit_reader *r;
	struct audit_entry e;
	(void)state;

	append(fd, "{\"time\":");
	r = audit_reader_open(path, &o, &err);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_END); /* half a line waits */
	append(fd, a + 8);
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_string_equal(e.host, "a.test");
	audit_entry_release(&e);
	assert_int_equal(audit_flows_open(audit_reader_flows(r)), 1);
	append(fd, REC("close", "0000000000000001", "s1", "a.test", "allow"));
	assert_int_equal(audit_reader_next(r, &e), AUDIT_READ_RECORD);
	assert_int_equal(e.event, AUDIT_EV_CLOSE);
	audit_entry_release(&e);
	assert_int_equal(audit_flows_open(audit_reader_flows(r)), 0);
	assert_false(audit_reader_replaced(r, path));
	assert_int_equal(ftruncate(fd, 3), 0);
	assert_true(audit_reader_replaced(r, path));
	audit_reader_free(r);
	close(fd);
}

static void test_session(void **state)
{
	char path[64];
	int fd, err, n = 0;
	struct audit_reader_opts o = {.session = "s1"};
	struct audit_reader *r;
	struct audit_entry e;
	(void)state;

	fd = mem_log(REC("complete", "0000000000000001", "s2", "a.test", "deny"), path);
	/* another session's line whose host carries the key and s1 (escaped quotes) */
	append(fd,
	       "{\"time\":\"t\",\"session\":\"s2\",\"host\":\"\\\"session\\\":\\\"s1\\\"\",\"decision\":\"deny\"}\n");
	/* the key in another field's value, unescaped quotes impossible: a string containing the needle */
	append(fd, "{\"time\":\"t\",\"session\":\"s3\",\"reason\":\"x\",\"y\":{\"session\":\"s1\"}}\n");
	append(fd, REC("complete", "0000000000000002", "s1", "b.test", "deny"));
	append(fd, REC("complete", "0000000000000003", "s10", "c.test", "deny"));
	r = audit_reader_open(path, &o, &err);
	while (audit_reader_next(r, &e) == AUDIT_READ_RECORD) {
		assert_string_equal(e.session, "s1");
		assert_string_equal(e.host, "b.test");
		audit_entry_release(&e);
		n++;
	}
	assert_int_equal(n, 1);
	audit_reader_free(r);
	close(fd);
}

static void test_outcomes(void **state)
{
	char path[64], got[512] = "";
	int fd, err;
	struct audit_reader_opts o = {.session = "s1", .outcomes = true};
	struct audit_reader *r;
	struct audit_entry e;
	(void)state;

	fd = mem_log(NULL, path);
	append(fd, REC("decision", "0000000000000001", "s1", "a.test", "allow")); /* closed below */
	append(fd, REC("decision", "0000000000000002", "s1", "b.test", "ask"));   /* held ... */
	append(fd, REC("decision", "0000000000000003", "s1", "c.test", "allow")); /* never closed */
	append(fd, REC("complete", "0000000000000004", "s1", "d.test", "deny"));  /* denied at once */
	append(fd, REC("decision", "0000000000000002", "s1", "b.test", "allow")); /* ... approved, never closed */
	append(fd, REC("close", "0000000000000001", "s1", "a.test", "allow"));
	append(fd, REC("decision", "0000000000000005", "s1", "e.test", "ask"));   /* held ... */
	append(fd, REC("complete", "0000000000000005", "s1", "e.test", "deny"));  /* ... and denied */
	append(fd, REC("decision", "0000000000000006", "s1", "f.test", "ask"));   /* held, never closed */
	append(fd, REC("decision", "0000000000000006", "s1", "f.test", "allow")); /* approved, never closed */
	append(fd, "{\"time\":\"t\",\"session\":\"s1\",\"host\":\"old.test\",\"decision\":\"allow\"}\n"); /* old log */
	r = audit_reader_open(path, &o, &err);
	for (int k; (k = audit_reader_next(r, &e)) != AUDIT_READ_END;) {
		char one[64];
		assert_int_equal(k, AUDIT_READ_RECORD);
		snprintf(one, sizeof one, "%s/%s%s ", e.host, e.decision, e.unclosed ? "/unclosed" : "");
		strcat(got, one);
		audit_entry_release(&e);
	}
	/* each exchange once, with its final record; the unclosed ones at the end, in log order */
	assert_string_equal(got, "d.test/deny a.test/allow e.test/deny old.test/allow b.test/allow/unclosed "
	                         "c.test/allow/unclosed f.test/allow/unclosed ");
	audit_reader_free(r);
	close(fd);
}

/* The open-flow table against a naive list, over many opens and closes (collisions, backward shift). */
static void test_flows(void **state)
{
	struct audit_flows *f = audit_flows_new();
	static uint8_t naive[20000];
	size_t open = 0;
	uint64_t x = 88172645463325252ull;
	(void)state;

	assert_non_null(f);
	for (int i = 0; i < 200000; i++) {
		struct audit_entry e = {0};
		uint64_t id;
		bool closed;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		id = x % 20000;
		e.flow = (id * 0x10000000000ull) | 1; /* ids that share their low bits */
		e.event = (x >> 40) % 3 == 0   ? AUDIT_EV_DECISION
		          : (x >> 40) % 3 == 1 ? AUDIT_EV_CLOSE
		                               : AUDIT_EV_COMPLETE;
		closed = audit_flows_note(f, &e);
		if (e.event == AUDIT_EV_DECISION) {
			open += !naive[id];
			naive[id] = 1;
			assert_false(closed);
		} else {
			assert_int_equal(closed, naive[id]);
			open -= naive[id];
			naive[id] = 0;
		}
		assert_int_equal(audit_flows_open(f), open);
	}
	assert_false(audit_flows_overflowed(f));
	audit_flows_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse),  cmocka_unit_test(test_lines),   cmocka_unit_test(test_range),
	        cmocka_unit_test(test_follow), cmocka_unit_test(test_session), cmocka_unit_test(test_outcomes),
	        cmocka_unit_test(test_flows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
