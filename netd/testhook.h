/* Fault injection for tests (tests/integration/faults_netd.sh, docs/reliability.md).
 *
 * With SLUICED_TEST_STOP_AT=STEP in its environment, sluiced (or the embedded helper) stops itself with
 * SIGSTOP when session setup reaches STEP, so that a test can kill -9 it at exactly that point and check
 * that the next start reconciles to zero residue. STEP is one of: netns (a named namespace was created),
 * lease (an address lease was taken), nft (the session's filter elements were added), link (the veth
 * exists, down), host-up, session-up (both ends up), engine (wired; the engine, told right after the
 * lease, may not have answered; the client not yet).
 *
 * With SLUICED_TEST_DIRECT_DELAY_MS=N (at most 1000), sluiced waits N ms before it puts a direct-mode grant
 * in place, as a loaded sluiced would: the engine must hold the DNS answer until the grant is in
 * (tests/integration/direct_udp.sh).
 *
 * Compiled only into debug and debugoptimized builds (NETD_TEST_HOOKS, netd/meson.build); a release or
 * plain build (what packages use) has no hook and ignores the variable. Even where compiled, only whoever
 * sets sluiced's environment can use it, which is root (or the systemd unit); a client of the control
 * socket cannot, and the worst it does is stop the daemon, which root can do anyway. */
#ifndef SLUICE_NETD_TESTHOOK_H
#define SLUICE_NETD_TESTHOOK_H

#ifdef NETD_TEST_HOOKS
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

static inline void netd_test_stop_at(const char *step)
{
	const char *want = getenv("SLUICED_TEST_STOP_AT");

	if (want && strcmp(want, step) == 0) {
		log_warnx("test hook: SLUICED_TEST_STOP_AT=%s: stopping (SIGSTOP)", step);
		raise(SIGSTOP);
	}
}

static inline void netd_test_direct_delay(void)
{
	const char *v = getenv("SLUICED_TEST_DIRECT_DELAY_MS");
	long ms = v ? strtol(v, NULL, 10) : 0;

	if (ms > 0 && ms <= 1000) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
}
#else
static inline void netd_test_stop_at(const char *step)
{
	(void)step;
}
static inline void netd_test_direct_delay(void)
{
}
#endif

#endif
