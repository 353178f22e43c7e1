/* Embedded mode: the helper process a root launcher forks when no sluiced runs. It runs the same
 * core for one launcher, which is connected over a socketpair and pre-authenticated (the launcher
 * is its parent). When the launcher's end closes (it exited or was killed), the helper tears the
 * session down and exits. It does not reconcile: other embedded helpers may be live.
 *
 * Teardown in two parts: first the session's filter state goes and everything that writes the audit
 * log stops (netd_audit_close), then the helper closes its last copy of the launcher's socket: the
 * launcher, which waits for that end-of-file, returns with the log complete. The kernel clean-up
 * (the link's deletion costs RCU grace periods, the nftables table) follows on its own, ignoring the
 * launcher's going away, and takes its namespace lock against a helper starting meanwhile (core.c). */
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "log.h"
#include "netd.h"
#include "util.h"

static void stop_cb(evutil_socket_t sig, short what, void *arg)
{
	event_base_loopexit(arg, NULL);
}

int netd_embedded_main(int sock, const char *audit_log)
{
	struct netd_config cfg;
	struct netd *d = NULL;
	struct event *term = NULL;
	const char *rd = getenv("SLUICE_RUN_DIR");
	char err[1024];

	log_init("sluice-netd", log_get_level()); /* the launcher's: --quiet, -v */
	netd_config_defaults(&cfg);
	cfg.embedded = true;
	if (rd && rd[0] == '/')
		util_strlcpy(cfg.run_dir, rd, sizeof cfg.run_dir);
	if (audit_log && audit_log[0])
		util_strlcpy(cfg.audit_log, audit_log, sizeof cfg.audit_log);
	signal(SIGPIPE, SIG_IGN);
	if (netd_new(&d, &cfg, false, err, sizeof err) < 0) {
		/* tell the launcher why, then go */
		netd_send_error(sock, 0, EIO, err);
		close(sock);
		return 1;
	}
	/* the launcher's end of file: this copy, closed once the audit log is complete */
	int release = fcntl(sock, F_DUPFD_CLOEXEC, 3);
	if (netd_control_adopt(d, sock, getuid(), getppid()) < 0) {
		if (release >= 0)
			close(release);
		netd_free(d);
		return 1;
	}
	term = evsignal_new(d->base, SIGTERM, stop_cb, d->base);
	if (term)
		event_add(term, NULL);
	event_base_dispatch(d->base);
	/* the clean-up finishes even when the launcher, released below, is gone (its death signal) */
	prctl(PR_SET_PDEATHSIG, 0);
	if (term)
		event_free(term); /* restores SIGTERM's default action: ignored from here on */
	signal(SIGTERM, SIG_IGN);
	netd_audit_close(d);
	if (release >= 0)
		close(release);
	netd_free(d);
	return 0;
}
