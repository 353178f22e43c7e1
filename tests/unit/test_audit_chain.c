/* Unit tests: the audit log hash chain detects edited, removed and reordered lines, and resumes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "audit_chain.h"

#define NLINES 6

static char lines[NLINES][512];

static void make_lines(struct audit_chain *c)
{
	for (int i = 0; i < NLINES; i++) {
		char body[256], suffix[AUDIT_CHAIN_SUFFIX_LEN + 1];
		int n = snprintf(body, sizeof body, "{\"time\":\"2026-11-22T00:00:0%d.000Z\",\"host\":\"h%d.test\",\"decision\":\"%s\"",
				 i, i, i % 2 ? "deny" : "allow");
		assert_int_equal(audit_chain_seal(c, body, (size_t)n, suffix), 0);
		assert_int_equal(strlen(suffix), AUDIT_CHAIN_SUFFIX_LEN);
		snprintf(lines[i], sizeof lines[i], "%s%s", body, suffix);
	}
}

/* Verifies a sequence of line indexes; returns the first failing position or -1. */
static int verify_seq(const int *idx, int n, enum audit_verify_result *why)
{
	struct audit_chain c;
	audit_chain_init(&c);
	for (int i = 0; i < n; i++) {
		bool cont = false;
		enum audit_verify_result r = audit_chain_verify_line(&c, lines[idx[i]], strlen(lines[idx[i]]), i == 0, &cont);
		if (r != AUDIT_VERIFY_OK) {
			*why = r;
			return i;
		}
	}
	return -1;
}

static void test_chain(void **state)
{
	struct audit_chain c;
	enum audit_verify_result why = AUDIT_VERIFY_OK;
	(void)state;

	audit_chain_init(&c);
	make_lines(&c);
	int all[NLINES] = { 0, 1, 2, 3, 4, 5 };
	assert_int_equal(verify_seq(all, NLINES, &why), -1);

	int removed[] = { 0, 1, 3, 4, 5 };
	assert_int_equal(verify_seq(removed, 5, &why), 2);
	assert_int_equal(why, AUDIT_VERIFY_BROKEN);

	int reordered[] = { 0, 2, 1, 3, 4, 5 };
	assert_int_equal(verify_seq(reordered, NLINES, &why), 1);
	assert_int_equal(why, AUDIT_VERIFY_BROKEN);

	/* a tail of the log alone verifies as a continuation */
	int tail[] = { 3, 4, 5 };
	assert_int_equal(verify_seq(tail, 3, &why), -1);

	char *p = strstr(lines[2], "deny");
	if (!p)
		p = strstr(lines[2], "allow");
	assert_non_null(p);
	p[0] ^= 0x20; /* change case of one letter */
	assert_int_equal(verify_seq(all, NLINES, &why), 2);
	assert_int_equal(why, AUDIT_VERIFY_EDITED);

	assert_int_equal(audit_chain_verify_line(&c, "{\"x\":1}", 7, true, NULL), AUDIT_VERIFY_MALFORMED);
	assert_int_equal(audit_chain_verify_line(&c, "", 0, true, NULL), AUDIT_VERIFY_MALFORMED);
}

static void test_resume(void **state)
{
	struct audit_chain c, r;
	char path[] = "/tmp/sluice-chain-XXXXXX";
	int fd = mkstemp(path);
	(void)state;

	assert_true(fd >= 0);
	audit_chain_init(&r);
	assert_int_equal(audit_chain_resume(&r, fd), 0); /* empty file: a fresh chain */
	audit_chain_init(&c);
	make_lines(&c);
	for (int i = 0; i < NLINES; i++) {
		assert_int_equal(write(fd, lines[i], strlen(lines[i])), (ssize_t)strlen(lines[i]));
		assert_int_equal(write(fd, "\n", 1), 1);
	}
	assert_int_equal(write(fd, "{\"torn", 6), 6); /* a torn tail is ignored */
	assert_int_equal(audit_chain_resume(&r, fd), 0);
	assert_memory_equal(r.prev, c.prev, AUDIT_HASH_HEX);
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(pwrite(fd, "not json\n", 9, 0), 9);
	assert_int_equal(audit_chain_resume(&r, fd), -EBADMSG);
	close(fd);
	unlink(path);
}

static atomic_bool sealing_stop;

static void *sealer(void *arg)
{
	struct audit_chain c;
	char suffix[AUDIT_CHAIN_SUFFIX_LEN + 1];
	(void)arg;
	audit_chain_init(&c);
	while (!atomic_load(&sealing_stop))
		if (audit_chain_seal(&c, "{\"host\":\"busy.test\"", 20, suffix) != 0)
			break;
	return NULL;
}

/* A process forked while another thread seals: the child's first seal finishes (the digest lock was
 * not left held in it). Each child gets 2 s; a hang is SIGALRM. 200 forks or 1 to 2 s, whichever comes
 * first (under valgrind a fork takes most of a second); without the fork handlers the first or
 * second child hangs. */
static void test_fork_while_sealing(void **state)
{
	struct audit_chain c;
	char suffix[AUDIT_CHAIN_SUFFIX_LEN + 1];
	pthread_t t;
	int hung = 0;
	(void)state;

	audit_chain_init(&c);
	assert_int_equal(audit_chain_seal(&c, "{\"host\":\"first.test\"", 21, suffix), 0);
	atomic_store(&sealing_stop, false);
	assert_int_equal(pthread_create(&t, NULL, sealer, NULL), 0);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 200; i++) {
		int st;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (i > 0 && now.tv_sec - t0.tv_sec >= 2)
			break;
		pid_t p = fork();
		assert_true(p >= 0);
		if (p == 0) {
			alarm(2);
			_exit(audit_chain_seal(&c, "{\"host\":\"child.test\"", 21, suffix) == 0 ? 0 : 1);
		}
		assert_int_equal(waitpid(p, &st, 0), p);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			hung++;
		if (hung)
			break;
	}
	atomic_store(&sealing_stop, true);
	pthread_join(t, NULL);
	assert_int_equal(hung, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_chain),
	        cmocka_unit_test(test_resume),
	        cmocka_unit_test(test_fork_while_sealing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
