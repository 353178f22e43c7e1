/* The audit shipper (audit_ship.h). */
#include "audit_ship.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "audit_read.h"
#include "log.h"
#include "util.h"

#define SHIP_POLL_MS 200
#define SHIP_MSG_MAX (AUDIT_READ_LINE_MAX + 2048)
#define SHIP_SD_ID "sluice@32473" /* 32473: the enterprise number RFC 5612 reserves for documentation */

struct netd_ship {
	enum netd_ship_kind kind;
	char log_path[4096];
	struct sockaddr_un addr; /* syslog */
	int sock;                /* owned: syslog datagram socket (unconnected: the receiver may come and go) */
	int stop_fd;             /* owned: eventfd, written to stop the thread */
	pthread_t thread;
	char hostname[256];
	int pid;
	_Atomic uint64_t sent, errors;
};

int netd_ship_kind_parse(const char *s, enum netd_ship_kind *out)
{
	if (strcmp(s, "syslog") == 0)
		*out = NETD_SHIP_SYSLOG;
	else if (strcmp(s, "journald") == 0)
		*out = NETD_SHIP_JOURNALD;
	else
		return -EINVAL;
	return 0;
}

/* RFC 5424 PARAM-VALUE: '"', '\' and ']' escaped; control bytes (never in a record, which escapes them)
 * replaced. Returns -ENOSPC when it does not fit. */
static int sd_param(char *buf, size_t len, size_t *pos, const char *name, const char *v)
{
	int n;

	if (!v)
		return 0;
	n = snprintf(buf + *pos, len - *pos, " %s=\"", name);
	if (n < 0 || (size_t)n >= len - *pos)
		return -ENOSPC;
	*pos += (size_t)n;
	for (; *v; v++) {
		if (*pos + 3 >= len)
			return -ENOSPC;
		if (*v == '"' || *v == '\\' || *v == ']')
			buf[(*pos)++] = '\\';
		buf[(*pos)++] = (unsigned char)*v < 0x20 || *v == 0x7f ? '?' : *v;
	}
	buf[(*pos)++] = '"';
	return 0;
}

int netd_ship_syslog_format(const struct audit_entry *e, const char *hostname, int pid, char *buf, size_t len)
{
	/* facility authpriv (10): egress records say who reached what; deny and ask are warnings */
	int sev = e->decision && strcmp(e->decision, "allow") == 0 ? 6 : 4;
	char port[16] = "", uid[24] = "";
	size_t pos;
	int n;

	if (e->port >= 0)
		snprintf(port, sizeof port, "%lld", e->port);
	if (e->uid >= 0)
		snprintf(uid, sizeof uid, "%lld", e->uid);
	/* TIMESTAMP: the record's own RFC 3339 time (it is one), else NILVALUE */
	n = snprintf(buf, len, "<%d>1 %s %s sluiced %d audit - [" SHIP_SD_ID, 10 * 8 + sev,
		     e->time && strlen(e->time) < 40 && !strchr(e->time, ' ') ? e->time : "-",
		     hostname[0] ? hostname : "-", pid);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	pos = (size_t)n;
	if (sd_param(buf, len, &pos, "event", e->event == AUDIT_EV_DECISION ? "decision"
					       : e->event == AUDIT_EV_CLOSE  ? "close"
									      : "complete") < 0 ||
	    sd_param(buf, len, &pos, "session", e->session) < 0 || sd_param(buf, len, &pos, "uid", uid[0] ? uid : NULL) < 0 ||
	    sd_param(buf, len, &pos, "protocol", e->protocol) < 0 || sd_param(buf, len, &pos, "host", e->host) < 0 ||
	    sd_param(buf, len, &pos, "port", port[0] ? port : NULL) < 0 ||
	    sd_param(buf, len, &pos, "decision", e->decision) < 0 || sd_param(buf, len, &pos, "rule", e->rule) < 0)
		return -ENOSPC;
	/* MSG: the record's line as the file has it (UTF-8 JSON, hash fields included) */
	n = snprintf(buf + pos, len - pos, "] %.*s", (int)e->len, e->line);
	if (n < 0 || (size_t)n >= len - pos)
		return -ENOSPC;
	return (int)(pos + (size_t)n);
}

static int send_syslog(struct netd_ship *s, const struct audit_entry *e)
{
	static char buf[SHIP_MSG_MAX]; /* the shipper thread's only */
	int n = netd_ship_syslog_format(e, s->hostname, s->pid, buf, sizeof buf);

	if (n < 0)
		return n;
	if (sendto(s->sock, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&s->addr, sizeof s->addr) < 0)
		return -errno;
	return 0;
}

/* Trust boundary: values are the record's decoded strings, and some are chosen by others (a session's
 * command line is whatever its client sent to control.sock): C0 controls and DEL become '?', as in the
 * syslog form (the exact value is in MESSAGE, where the record escapes it). A value with a newline used
 * to be refused, and with it every record of such a session. */
static void field(struct iovec *iov, size_t *n, char (*bufs)[320], const char *name, const char *v)
{
	if (!v)
		return;
	snprintf(bufs[*n], sizeof bufs[0], "%s=%s", name, v);
	for (char *c = bufs[*n] + strlen(name) + 1; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	iov[*n].iov_base = bufs[*n];
	iov[*n].iov_len = strlen(bufs[*n]);
	(*n)++;
}

static void field_num(struct iovec *iov, size_t *n, char (*bufs)[320], const char *name, long long v)
{
	char num[24];

	if (v < 0)
		return;
	snprintf(num, sizeof num, "%lld", v);
	field(iov, n, bufs, name, num);
}

/* Structured fields (journalctl SLUICE_HOST=evil.example), MESSAGE the record's line. Field values are
 * cut at 300 bytes; the line is whole. */
static int send_journald(struct netd_ship *s, const struct audit_entry *e)
{
	static char bufs[20][320];
	static char msg[AUDIT_READ_LINE_MAX + 16];
	struct iovec iov[22];
	size_t n = 0;
	int r;

	snprintf(msg, sizeof msg, "MESSAGE=%.*s", (int)e->len, e->line);
	iov[n].iov_base = msg;
	iov[n++].iov_len = strlen(msg);
	field(iov, &n, bufs, "PRIORITY", e->decision && strcmp(e->decision, "allow") == 0 ? "6" : "4");
	field(iov, &n, bufs, "SYSLOG_FACILITY", "10");
	field(iov, &n, bufs, "SYSLOG_IDENTIFIER", "sluiced");
	field(iov, &n, bufs, "SLUICE_EVENT", e->event == AUDIT_EV_DECISION ? "decision" : e->event == AUDIT_EV_CLOSE ? "close" : "complete");
	field(iov, &n, bufs, "SLUICE_TIME", e->time);
	field(iov, &n, bufs, "SLUICE_SESSION", e->session);
	field(iov, &n, bufs, "SLUICE_COMMAND", e->command);
	field(iov, &n, bufs, "SLUICE_PROTOCOL", e->protocol);
	field(iov, &n, bufs, "SLUICE_HOST", e->host);
	field(iov, &n, bufs, "SLUICE_METHOD", e->method);
	field(iov, &n, bufs, "SLUICE_DECISION", e->decision);
	field(iov, &n, bufs, "SLUICE_RULE", e->rule);
	field(iov, &n, bufs, "SLUICE_ADDRESS", e->address);
	field_num(iov, &n, bufs, "SLUICE_UID", e->uid);
	field_num(iov, &n, bufs, "SLUICE_PORT", e->port);
	field_num(iov, &n, bufs, "SLUICE_STATUS", e->status);
	field_num(iov, &n, bufs, "SLUICE_BYTES_OUT", e->bytes_out);
	field_num(iov, &n, bufs, "SLUICE_BYTES_IN", e->bytes_in);
	/* a value with a newline would need the binary form: MESSAGE is the line as the file has it (control
	 * bytes escaped) and the other values have control bytes replaced, so none has */
	for (size_t i = 0; i < n; i++)
		if (memchr(iov[i].iov_base, '\n', iov[i].iov_len))
			return -EINVAL;
	/* The journal's native protocol, which sd_journal_sendv speaks, without libsystemd: linked, it and
	 * the libraries it needs (gcrypt, lzma, zstd, lz4, ...) were loaded and relocated at every start of
	 * sluiced, also an embedded helper's (docs/sandbox.md, start-up profile). One datagram of
	 * FIELD=value lines: no value holds a newline (checked above). */
	static char nl[] = "\n";
	struct iovec out[2 * (sizeof iov / sizeof iov[0])];
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = iov[i];
		out[2 * i + 1] = (struct iovec){nl, 1};
	}
	struct msghdr mh = {.msg_name = &s->addr, .msg_namelen = sizeof s->addr, .msg_iov = out, .msg_iovlen = 2 * n};
	r = sendmsg(s->sock, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
	return r;
}

static void ship_one(struct netd_ship *s, const struct audit_entry *e)
{
	int r = s->kind == NETD_SHIP_SYSLOG ? send_syslog(s, e) : send_journald(s, e);

	if (r == 0) {
		atomic_fetch_add(&s->sent, 1);
		return;
	}
	/* the first failure of a run is logged; the count says how many followed */
	if (atomic_fetch_add(&s->errors, 1) == 0)
		log_warnx("audit shipping (%s): a record was not sent: %s (the audit file has it; further failures "
			  "are only counted: sluicectl metrics)", s->kind == NETD_SHIP_SYSLOG ? "syslog" : "journald",
			  strerror(-r));
}

static struct audit_reader *open_reader(const char *path, long long from)
{
	struct audit_reader_opts o = {.from = from, .follow = true};
	int err;

	return audit_reader_open(path, &o, &err);
}

static void *ship_thread(void *arg)
{
	struct netd_ship *s = arg;
	struct audit_reader *r = open_reader(s->log_path, audit_reader_mark(s->log_path));
	bool stopping = false;

	for (;;) {
		struct pollfd p = {.fd = s->stop_fd, .events = POLLIN};
		struct audit_entry e;
		int n;

		if (!r)
			r = open_reader(s->log_path, 0); /* created or rotated in since */
		while (r && (n = audit_reader_next(r, &e)) != AUDIT_READ_END) {
			if (n == AUDIT_READ_RECORD)
				ship_one(s, &e);
			else if (n == AUDIT_READ_BAD)
				atomic_fetch_add(&s->errors, 1);
			audit_entry_release(&e); /* the reader hands each parsed record over */
			if (n < 0)
				break;
		}
		if (r && audit_reader_replaced(r, s->log_path)) {
			/* rotated (logrotate renamed it; SIGHUP made the engine write the new file): the old
			 * file's tail was read above, the new one is read from its start */
			audit_reader_free(r);
			r = open_reader(s->log_path, 0);
			continue;
		}
		if (stopping)
			break;
		if (poll(&p, 1, SHIP_POLL_MS) > 0)
			stopping = true; /* one more pass: what the engine wrote before it stopped */
	}
	audit_reader_free(r);
	return NULL;
}

int netd_ship_start(struct netd_ship **out, enum netd_ship_kind kind, const char *log_path,
		    const char *socket_path, char *err, size_t errlen)
{
	struct netd_ship *s = calloc(1, sizeof *s);
	int r;

	*out = NULL;
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->kind = kind;
	s->sock = s->stop_fd = -1;
	s->pid = (int)getpid();
	gethostname(s->hostname, sizeof s->hostname - 1);
	for (char *c = s->hostname; *c; c++)
		if (*c <= ' ' || *c > '~')
			*c = '-'; /* HOSTNAME is PRINTUSASCII */
	if (util_strlcpy(s->log_path, log_path, sizeof s->log_path) >= sizeof s->log_path) {
		snprintf(err, errlen, "audit log path too long");
		r = -ENAMETOOLONG;
		goto fail;
	}
	if (kind == NETD_SHIP_SYSLOG) {
		const char *path = socket_path ? socket_path : "/dev/log";

		s->addr.sun_family = AF_UNIX;
		if (util_strlcpy(s->addr.sun_path, path, sizeof s->addr.sun_path) >= sizeof s->addr.sun_path) {
			snprintf(err, errlen, "--audit-ship-socket %s: path too long for a socket", path);
			r = -ENAMETOOLONG;
			goto fail;
		}
		s->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s->sock < 0) {
			r = -errno;
			snprintf(err, errlen, "audit shipping: socket: %s", strerror(-r));
			goto fail;
		}
	} else if (socket_path) {
		snprintf(err, errlen, "--audit-ship-socket is for syslog; journald is always reached at "
			 "/run/systemd/journal/socket");
		r = -EINVAL;
		goto fail;
	} else {
		/* as libsystemd does: blocking (the shipper is its own thread), a large send buffer */
		int sndbuf = 8 << 20;

		s->addr.sun_family = AF_UNIX;
		util_strlcpy(s->addr.sun_path, "/run/systemd/journal/socket", sizeof s->addr.sun_path);
		s->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (s->sock < 0) {
			r = -errno;
			snprintf(err, errlen, "audit shipping: socket: %s", strerror(-r));
			goto fail;
		}
		setsockopt(s->sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
	}
	s->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (s->stop_fd < 0 || (r = pthread_create(&s->thread, NULL, ship_thread, s)) != 0) {
		r = s->stop_fd < 0 ? -errno : -r;
		snprintf(err, errlen, "audit shipping: cannot start its thread: %s", strerror(-r));
		goto fail;
	}
	*out = s;
	return 0;
fail:
	if (s->sock >= 0)
		close(s->sock);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	free(s);
	return r;
}

void netd_ship_free(struct netd_ship *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	if (write(s->stop_fd, &one, sizeof one) != sizeof one)
		log_warn("audit shipping: stopping its thread");
	pthread_join(s->thread, NULL);
	if (s->sock >= 0)
		close(s->sock);
	close(s->stop_fd);
	log_info("audit shipping: %llu records sent, %llu not", (unsigned long long)atomic_load(&s->sent),
		 (unsigned long long)atomic_load(&s->errors));
	free(s);
}

void netd_ship_counts(const struct netd_ship *s, uint64_t *sent, uint64_t *errors)
{
	*sent = s ? atomic_load(&s->sent) : 0;
	*errors = s ? atomic_load(&s->errors) : 0;
}
