/* Unit tests of common/log.c: a message is one line whatever its arguments hold. A session's command
 * line (any local user's client chooses it) went into sluiced's log raw, so a newline forged a line of
 * its own in the journal and an escape sequence reached the reader's terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* What log_warnx("%s", arg) writes to stderr, into out. */
static void capture(const char *arg, char *out, size_t len)
{
	int p[2], saved = dup(2);
	ssize_t n;

	assert_int_equal(pipe(p), 0);
	assert_true(saved >= 0);
	fflush(stderr);
	assert_int_equal(dup2(p[1], 2), 2);
	close(p[1]);
	log_warnx("session x: %s", arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = read(p[0], out, len - 1);
	close(p[0]);
	assert_true(n > 0);
	out[n] = '\0';
}

static void test_one_line(void **state)
{
	char out[8192];

	(void)state;
	log_init("sluiced", LOG_LEVEL_WARN);
	capture("test\nsluiced: session forged: uid 0\r\x1b[2J\x7f", out, sizeof out);
	assert_string_equal(out, "sluiced: session x: test\\x0asluiced: session forged: uid 0\\x0d\\x1b[2J\\x7f\n");
	/* UTF-8 passes, its C1 controls (U+009B is a CSI to many terminals) do not */
	capture("caf\xc3\xa9 \xc2\x9b"
	        "2J \xc2\xa0",
	        out, sizeof out);
	assert_string_equal(out, "sluiced: session x: caf\xc3\xa9 \\xc2\\x9b"
	                         "2J \xc2\xa0\n");
	/* a message at the size limit (1023 control bytes) is escaped whole, still one line */
	char big[1100];
	memset(big, '\n', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	capture(big, out, sizeof out);
	assert_non_null(strchr(out, '\n'));
	assert_true(strchr(out, '\n') == out + strlen(out) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_one_line)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
