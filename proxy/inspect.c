/* HTTPS inspection (policy "inspect", docs/proxy.md): the TLS around the inspected requests. A CONNECT
 * to an inspected host, once answered 200 and its ClientHello checked (connect.c), is turned into a TLS
 * server with a leaf certificate of the session's CA (mitm_ca.c); its requests are then read, decided
 * and forwarded by the HTTP front (http.c, http_forward.c) like any other, one by one, with the
 * policy's HTTP rules. Upstream, each dialled connection gets TLS 1.2 or newer with the server's
 * certificate verified against the host's trust store (or SLUICE_TLS_TRUST) and its name checked; a
 * failure is a 502 that says why, never a silent downgrade.
 *
 * Trust boundary: the CA key never leaves the engine side; the sandbox only sees its certificate. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "http_conn.h"
#include "log.h"
#include "mitm_ca.h"

/* TLS on a socket writes each record as it is made (one SSL_write, one write(2)): with Nagle's algorithm
 * a record that follows a small one waits for the peer's (delayed) ACK, 40 ms a response when its head
 * and body are two records. */
static void set_nodelay(int fd)
{
	int on = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

/* ---- upstream TLS sessions ----
 * A new inspected tunnel dials the upstream again and would pay a full TLS handshake each time (key
 * exchange, certificate chain, verification). The upstream context keeps the last resumable session
 * (TLS 1.3 ticket, or TLS 1.2 session) per session and "host:port", from handshakes that verified the
 * server, and offers it on the next connection of that session (under the same policy: its policy_gen) to
 * exactly that host and port, never another's: one sandbox must not learn from a faster handshake that
 * another reached a host, nor present to the origin a ticket issued to another; a session is taken out when offered
 * (one use: a ticket is not sent twice) and the connection brings new ones. A server that declines makes
 * a full handshake, verified as usual. In memory only, per engine: the UP_SESSIONS_MAX most recently
 * stored, none older than UP_SESSION_MAX_AGE. */
#define UP_SESSIONS_MAX    128
#define UP_SESSION_MAX_AGE 3600 /* s: then a full handshake (the server's ticket lifetime may be longer) */
#define UP_KEY_MAX         (POLICY_HOST_MAX + 32) /* "policy_gen/host:port" */

struct up_session {
	char key[UP_KEY_MAX]; /* "policy_gen/host:port" */
	SSL_SESSION *sess;    /* owned; NULL: a free slot */
	uint64_t stored;
};

struct up_sessions {
	struct up_session s[UP_SESSIONS_MAX];
	uint64_t tick;
};

static int up_ctx_idx = -1, up_ssl_idx = -1; /* ex_data: the SSL_CTX's up_sessions, an SSL's key */

static void free_key(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	(void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
	free(ptr);
}

static int up_new_session(SSL *ssl, SSL_SESSION *sess)
{
	struct up_sessions *c = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), up_ctx_idx);
	const char *key = SSL_get_ex_data(ssl, up_ssl_idx);
	struct up_session *slot = NULL;
	SSL_SESSION *copy;

	/* A copy: the connection's own session is marked not resumable when the connection is freed
	 * without a TLS shutdown (how bufferevents end), which would spoil the one kept here. */
	if (!c || !key || !SSL_SESSION_is_resumable(sess) || SSL_get_verify_result(ssl) != X509_V_OK ||
	    !(copy = SSL_SESSION_dup(sess)))
		return 0;
	for (size_t i = 0; i < UP_SESSIONS_MAX && !slot; i++)
		if (c->s[i].sess && strcmp(c->s[i].key, key) == 0)
			slot = &c->s[i];
	for (size_t i = 0; i < UP_SESSIONS_MAX && !slot; i++)
		if (!c->s[i].sess)
			slot = &c->s[i];
	if (!slot) {
		slot = &c->s[0];
		for (size_t i = 1; i < UP_SESSIONS_MAX; i++)
			if (c->s[i].stored < slot->stored)
				slot = &c->s[i];
	}
	SSL_SESSION_free(slot->sess);
	snprintf(slot->key, sizeof slot->key, "%s", key);
	slot->sess = copy;
	slot->stored = ++c->tick;
	return 0; /* (sess stays the connection's) */
}

/* ssl will connect to host:port for the session whose policy generation is gen: the session stored under
 * that key, if any, is offered (and taken out of the store). */
static bool up_session_offer(SSL_CTX *ctx, SSL *ssl, uint64_t gen, const char *host, uint16_t port)
{
	struct up_sessions *c = SSL_CTX_get_ex_data(ctx, up_ctx_idx);
	char key[UP_KEY_MAX], *dup;

	snprintf(key, sizeof key, "%llu/%s:%u", (unsigned long long)gen, host, port);
	if (!c || !(dup = strdup(key)))
		return false;
	if (!SSL_set_ex_data(ssl, up_ssl_idx, dup)) {
		free(dup);
		return false;
	}
	for (size_t i = 0; i < UP_SESSIONS_MAX; i++) {
		if (c->s[i].sess && strcmp(c->s[i].key, key) == 0) {
			if (time(NULL) - (time_t)SSL_SESSION_get_time(c->s[i].sess) < UP_SESSION_MAX_AGE)
				(void)SSL_set_session(ssl, c->s[i].sess); /* (a failure: a full handshake) */
			SSL_SESSION_free(c->s[i].sess);
			c->s[i].sess = NULL;
			break;
		}
	}
	return true;
}

void proxy_inspect_engine_free(struct proxy_engine *e)
{
	struct up_sessions *c = e->tls_up ? SSL_CTX_get_ex_data(e->tls_up, up_ctx_idx) : NULL;

	if (c) {
		for (size_t i = 0; i < UP_SESSIONS_MAX; i++)
			SSL_SESSION_free(c->s[i].sess);
		free(c);
	}
	SSL_CTX_free(e->tls_up);
	e->tls_up = NULL;
}

/* The upstream TLS client context, made on first use: the host's trust store (or the bundle named by
 * $SLUICE_TLS_TRUST, for a private CA or a test lab), peer verification, TLS 1.2 at least, TLS 1.3's
 * cheapest cipher suite offered first, the sessions above. */
static SSL_CTX *up_ctx(struct proxy_engine *e, char *err, size_t errlen)
{
	static const unsigned char h11[] = "\x08http/1.1";
	const char *trust = getenv("SLUICE_TLS_TRUST");
	struct up_sessions *c = NULL;
	SSL_CTX *ctx;

	if (e->tls_up)
		return e->tls_up;
	/* (the reasons of a failed handshake, for its 502 and record) */
	OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
	if (up_ctx_idx < 0)
		up_ctx_idx = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	if (up_ssl_idx < 0)
		up_ssl_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, free_key);
	ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx || up_ctx_idx < 0 || up_ssl_idx < 0 || !(c = calloc(1, sizeof *c)) ||
	    !SSL_CTX_set_ex_data(ctx, up_ctx_idx, c) || !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) ||
	    (trust && *trust ? SSL_CTX_load_verify_locations(ctx, trust, NULL)
	                     : SSL_CTX_set_default_verify_paths(ctx)) != 1 ||
	    SSL_CTX_set_alpn_protos(ctx, h11, sizeof h11 - 1) != 0 ||
	    !SSL_CTX_set_ciphersuites(ctx, PROXY_TLS13_SUITES)) {
		snprintf(err, errlen, "cannot set up upstream TLS (trust store %s): %s",
		         trust && *trust ? trust : "the system's", ERR_reason_error_string(ERR_get_error()));
		ERR_clear_error();
		free(c);
		SSL_CTX_free(ctx);
		return NULL;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, up_new_session);
	e->tls_up = ctx;
	return ctx;
}

/* ---- client side ---- */

/* The client's TLS runs on its socket itself, not as a filter over the socket's bufferevent: one
 * bufferevent, one copy and the filter's extra SSL_read calls less per request (docs/proxy.md, "HTTPS
 * inspection", the profile). The ClientHello connect.c read and checked is already out of the socket, so
 * the SSL reads through a small BIO that hands out those bytes first and then reads the socket below it
 * (its write side is the socket BIO itself). */
struct prefix_bio {
	unsigned char *buf; /* owned; NULL once handed out */
	size_t len, off;
};

static int prefix_read(BIO *b, char *out, int outl)
{
	struct prefix_bio *p = BIO_get_data(b);
	int n;

	BIO_clear_retry_flags(b);
	if (p && p->buf) {
		n = (size_t)outl < p->len - p->off ? outl : (int)(p->len - p->off);
		memcpy(out, p->buf + p->off, (size_t)n);
		p->off += (size_t)n;
		if (p->off == p->len) {
			free(p->buf);
			p->buf = NULL;
		}
		return n;
	}
	if (!BIO_next(b))
		return 0;
	n = BIO_read(BIO_next(b), out, outl);
	BIO_copy_next_retry(b);
	return n;
}

static int prefix_write(BIO *b, const char *in, int inl)
{
	int n;

	BIO_clear_retry_flags(b);
	if (!BIO_next(b))
		return 0;
	n = BIO_write(BIO_next(b), in, inl);
	BIO_copy_next_retry(b);
	return n;
}

static long prefix_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct prefix_bio *p = BIO_get_data(b);
	long below = BIO_next(b) ? BIO_ctrl(BIO_next(b), cmd, num, ptr) : 0;

	if (cmd == BIO_CTRL_PENDING && p && p->buf)
		return (long)(p->len - p->off) + (below > 0 ? below : 0);
	return below;
}

static int prefix_create(BIO *b)
{
	BIO_set_data(b, NULL);
	BIO_set_init(b, 1);
	return 1;
}

static int prefix_destroy(BIO *b)
{
	struct prefix_bio *p = BIO_get_data(b);

	if (p) {
		free(p->buf);
		free(p);
	}
	BIO_set_data(b, NULL);
	return 1;
}

static BIO_METHOD *prefix_method(void)
{
	static BIO_METHOD *m;

	if (!m && (m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_FILTER, "sluice ClientHello prefix"))) {
		BIO_meth_set_read(m, prefix_read);
		BIO_meth_set_write(m, prefix_write);
		BIO_meth_set_ctrl(m, prefix_ctrl);
		BIO_meth_set_create(m, prefix_create);
		BIO_meth_set_destroy(m, prefix_destroy);
	}
	return m;
}

/* ssl reads first the bytes of in (drained), then fd; it writes to fd. Returns 0 or -ENOMEM. */
static int set_client_bios(SSL *ssl, int fd, struct evbuffer *in)
{
	BIO_METHOD *m = prefix_method();
	BIO *sock = BIO_new_socket(fd, BIO_NOCLOSE), *pre = m ? BIO_new(m) : NULL;
	struct prefix_bio *p = calloc(1, sizeof *p);
	size_t len = evbuffer_get_length(in);

	if (!sock || !pre || !p || (len && !(p->buf = malloc(len))) || !BIO_up_ref(sock)) {
		if (p)
			free(p->buf);
		free(p);
		BIO_free(pre);
		BIO_free(sock);
		return -ENOMEM;
	}
	p->len = (size_t)evbuffer_remove(in, p->buf, len);
	if (p->len == 0) {
		free(p->buf);
		p->buf = NULL;
	}
	BIO_set_data(pre, p);
	BIO_push(pre, sock);
	SSL_set_bio(ssl, pre, sock); /* (one reference of sock each: the chain's and the write side's) */
	return 0;
}

void proxy_inspect_begin(struct proxy_relay *r)
{
	struct proxy_session *s = r->s;
	char err[300], host[POLICY_HOST_MAX + 1], address[PROXY_ADDRSTR_MAX];
	uint16_t port = r->t.port;
	struct bufferevent *up;
	SSL_CTX *ctx = s->ca ? proxy_mitm_ca_server_ctx(s->ca, r->t.host, err, sizeof err) : NULL;
	SSL *ssl = ctx ? SSL_new(ctx) : NULL;
	struct bufferevent *cl, *tls;
	int fd;

	if (!ssl) {
		if (!s->ca)
			snprintf(err, sizeof err, "the session has no inspection CA (its policy inspected nothing when it started)");
		log_warnx("session %s: inspecting %s: %s", s->id, r->t.host, err);
		snprintf(r->error, sizeof r->error, "HTTPS inspection: %s", err);
		proxy_relay_refuse_tls(r, NULL);
		return;
	}
	snprintf(host, sizeof host, "%s", r->t.host);
	snprintf(address, sizeof address, "%s", r->address);
	/* The CONNECT's own exchange ends here (its close record says the tunnel was inspected). The
	 * upstream it dialled (directly, or a parent's CONNECT tunnel) goes to the inspected connection,
	 * still without TLS: its first allowed request starts the verified TLS on it rather than dialling
	 * again; a request refused by the HTTP rules never gets it. */
	snprintf(r->reason, sizeof r->reason, "%s; inspected (requests are decided one by one)",
	         r->t.reason[0] ? r->t.reason : "allowed");
	up = r->up;
	r->up = NULL;
	if (up)
		bufferevent_setcb(up, NULL, NULL, NULL, NULL); /* (its callbacks had r, freed below) */
	if (up && evbuffer_get_length(bufferevent_get_input(up)) > 0) {
		bufferevent_free(up); /* the server spoke before the ClientHello: not a TLS server to reuse */
		up = NULL;
	}
	proxy_relay_finish(r);
	cl = r->client;
	r->client = NULL;
	bufferevent_setcb(cl, NULL, NULL, NULL, NULL);
	proxy_relay_end(r); /* frees r */
	/* What is still queued for the client (the 200, when the ClientHello came right behind the
	 * CONNECT head) goes before our ServerHello; a fresh socket takes these few bytes at once, and one
	 * that does not is closed rather than waited for. (A socket bufferevent keeps its output frozen
	 * for anyone else's reads: cl is freed right after.) */
	struct evbuffer *pending = bufferevent_get_output(cl);
	evbuffer_unfreeze(pending, 1);
	while (evbuffer_get_length(pending) > 0 && evbuffer_write(pending, bufferevent_getfd(cl)) > 0)
		;
	fd = evbuffer_get_length(pending) == 0 ? fcntl(bufferevent_getfd(cl), F_DUPFD_CLOEXEC, 0) : -1;
	if (fd < 0 || set_client_bios(ssl, fd, bufferevent_get_input(cl)) != 0) {
		log_warnx("session %s: inspecting %s: cannot start TLS with the client", s->id, host);
		if (fd >= 0)
			close(fd);
		SSL_free(ssl);
		bufferevent_free(cl);
		if (up)
			bufferevent_free(up);
		return;
	}
	bufferevent_free(cl); /* closes the original descriptor; the duplicate stays open */
	set_nodelay(fd);
	tls = bufferevent_openssl_socket_new(s->engine->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
	                                     BEV_OPT_CLOSE_ON_FREE);
	if (!tls) {
		SSL_free(ssl);
		close(fd);
		if (up)
			bufferevent_free(up);
		return;
	}
	bufferevent_openssl_set_allow_dirty_shutdown(tls, 1);
	proxy_http_accept_inspected(s, tls, host, port, up, address);
}

/* ---- the late-timer rule for TLS (docs/proxy.md, "Limits and timeouts") ----
 *
 * A timeout of a TLS bufferevent's handshake (upstream) or of the header timer over an inspected client
 * measures the peer, not the engine. After a stall, epoll hands the loop a batch of ready sockets at a time
 * and the expired timers run behind the first batch, so the peer's bytes may be waiting unread when the
 * timer fires. They are OpenSSL's to read, not ours (proxy_bev_read_now is for plain sockets): when the
 * socket is readable (bytes, or the peer's close or reset), the bufferevent's own read event is made active,
 * so that its handshake or read step takes them later in this same iteration (no callback of the connection
 * runs from inside the timer's; the struct of a bufferevent is public, bufferevent_struct.h, as bev_read.c
 * uses it). poll, not a peek: a close or a reset is something to read too (the handshake then says what
 * happened). Only the kernel's side counts: bytes that are part of a record go into OpenSSL's buffer, and
 * the handshake's read timer runs from that read, as from any (libevent arms it again at each step); the
 * rest of the record is the peer's to send, in its time. True when the read event was made active. */
static bool tls_read_first(struct bufferevent *bev)
{
	struct pollfd p = {.fd = bufferevent_getfd(bev), .events = POLLIN};

	if (p.fd < 0 || poll(&p, 1, 0) != 1)
		return false;
	event_active(&bev->ev_read, EV_READ, 1);
	return true;
}

bool http_inspect_read_first(struct http_conn *c)
{
	static const struct timeval now = {0, 0};

	if (c->tls_reads_first >= INSPECT_READS_FIRST || !tls_read_first(c->r.client))
		return false;
	c->tls_reads_first++;
	if (c->scan.total > 0)
		c->head_late = true; /* its deadline passed: complete with what was there, or 408 */
	http_set_timer(c, &now);     /* (after the read: the next iteration) */
	return true;
}

/* ---- upstream side ---- */

/* The upstream's handshake timed out: libevent reports it from the read event's timer, also when the socket
 * holds the upstream's answer, unseen (after a stall it was not in the loop's first batch). (1) What the
 * socket holds goes to the handshake first (tls_read_first); again at a later timeout only when OpenSSL took
 * bytes from the socket since (bytes a handshake blocked on a write does not take are not read first
 * forever). (2) With nothing there, a timer noticed more than PROXY_STALL_MS late gives the upstream its
 * time again, once, when the handshake has read nothing from the upstream yet: the timer was armed when the
 * handshake started or wrote its ClientHello, and up_tls_due says when it was due (after a read libevent
 * armed it again from that read, a time not known here: no grace). got is what OpenSSL read from the
 * upstream's socket (the SSL's read BIO is the socket BIO libevent made on it: BIO_number_read counts the
 * bytes its reads returned). The timer then runs from now. True when the handshake goes on. */
static bool up_handshake_spared(struct http_conn *c, struct bufferevent *bev, SSL *ssl)
{
	BIO *rbio = ssl ? SSL_get_rbio(ssl) : NULL;
	uint64_t got = rbio ? BIO_number_read(rbio) : 0;

	if ((!c->up_tls_read_first || got != c->up_tls_read) && tls_read_first(bev)) {
		c->up_tls_read_first = true;
		c->up_tls_read = got;
		bufferevent_set_timeouts(bev, c->r.e->tv_connect, c->r.e->tv_connect);
		return true;
	}
	if (got > 0 || !proxy_deadline_stalled(&c->up_tls_due, c->r.e->connect_timeout_ms, c->r.s->id,
	                                       "the upstream's TLS handshake"))
		return false;
	bufferevent_set_timeouts(bev, c->r.e->tv_connect, c->r.e->tv_connect);
	return true;
}

static void up_handshake_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *c = arg;
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	int err = errno; /* (a socket error: libevent's event callbacks find it in errno) */
	char why[600];

	if (what & BEV_EVENT_CONNECTED) {
		snprintf(c->up_host, sizeof c->up_host, "%s", c->r.t.host);
		c->up_port = c->r.t.port;
		c->up_reused = false;
		http_forward_start(c);
		return;
	}
	if ((what & BEV_EVENT_TIMEOUT) && up_handshake_spared(c, bev, ssl))
		return;
	/* what happened, said as it was: timed out, not trusted, a TLS failure, closed, or a socket error */
	long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
	unsigned long e = 0, q;
	while ((q = bufferevent_get_openssl_error(bev)))
		if (!e && ERR_GET_LIB(q)) /* (libevent queues SSL_get_error's code too: not a reason) */
			e = q;
	if (what & BEV_EVENT_TIMEOUT)
		snprintf(why, sizeof why, "the TLS handshake with the upstream %s timed out (no answer within %u ms)",
		         c->r.t.host, c->r.e->connect_timeout_ms);
	else if (vr != X509_V_OK)
		snprintf(why, sizeof why, "the upstream's TLS certificate for %s is not trusted: %s", c->r.t.host,
		         X509_verify_cert_error_string(vr));
	else if (e && ERR_GET_REASON(e) != SSL_R_UNEXPECTED_EOF_WHILE_READING)
		snprintf(why, sizeof why, "TLS with the upstream %s failed: %s", c->r.t.host,
		         ERR_reason_error_string(e) ? ERR_reason_error_string(e) : "an error of OpenSSL");
	else if (!e && (what & BEV_EVENT_ERROR) && err)
		snprintf(why, sizeof why, "the connection to the upstream %s failed during the TLS handshake: %s",
		         c->r.t.host, strerror(err));
	else
		snprintf(why, sizeof why, "the upstream %s closed the connection during the TLS handshake",
		         c->r.t.host);
	proxy_relay_drop_upstream(&c->r);
	http_fail(c, 502, why);
}

void http_inspect_upstream(struct http_conn *c)
{
	char err[300];
	SSL_CTX *ctx = up_ctx(c->r.e, err, sizeof err);
	SSL *ssl = ctx ? SSL_new(ctx) : NULL;
	struct bufferevent *tls;

	if (!ssl || !SSL_set_tlsext_host_name(ssl, c->r.t.host) || !SSL_set1_host(ssl, c->r.t.host) ||
	    !up_session_offer(ctx, ssl, c->r.s->policy_gen, c->r.t.host, c->r.t.port)) {
		if (ctx)
			snprintf(err, sizeof err, "cannot start TLS with the upstream %s", c->r.t.host);
		SSL_free(ssl);
		proxy_relay_drop_upstream(&c->r);
		http_fail(c, 502, err);
		return;
	}
	SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	/* TLS on the dialled socket itself (not a filter over its bufferevent: one copy less on the bulk
	 * path); nothing was read from or queued on it yet */
	int fd = fcntl(bufferevent_getfd(c->r.up), F_DUPFD_CLOEXEC, 0);
	tls = fd >= 0 ? bufferevent_openssl_socket_new(c->r.e->base, fd, ssl, BUFFEREVENT_SSL_CONNECTING,
	                                               BEV_OPT_CLOSE_ON_FREE)
	              : NULL;
	proxy_relay_drop_upstream(&c->r); /* closes the original descriptor; the duplicate stays open */
	if (fd >= 0)
		set_nodelay(fd);
	if (!tls) {
		if (fd >= 0)
			close(fd);
		SSL_free(ssl);
		http_fail(c, 502, "out of memory starting TLS with the upstream");
		return;
	}
	c->r.up = tls;
	bufferevent_openssl_set_allow_dirty_shutdown(tls, 1);
	bufferevent_setcb(tls, NULL, NULL, up_handshake_cb, c);
	bufferevent_set_timeouts(tls, c->r.e->tv_connect, c->r.e->tv_connect);
	proxy_deadline_start(&c->up_tls_due, proxy_mono_ms(), c->r.e->connect_timeout_ms);
	c->up_tls_read_first = false;
	bufferevent_enable(tls, EV_READ | EV_WRITE);
}

/* A bufferevent over TLS writes only once epoll says the socket is writable: two epoll_ctl calls and a
 * loop iteration per write, and it writes each chain of its output as a record of its own (a response's
 * head and body: two records, two write(2)s). A small write is one record, made at once when nothing
 * is queued ahead of it. If the socket does not take it all, OpenSSL keeps the record and wants the
 * write repeated: the bytes go to the bufferevent's output (the caller queues what is left of data),
 * whose next SSL_write repeats it with at least as many bytes (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER,
 * which libevent sets). A socket error leaves the data queued, so the bufferevent reports it. */
void http_inspect_send_now(struct bufferevent *bev, struct evbuffer *data)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	size_t len = evbuffer_get_length(data);
	unsigned char *p;

	if (len == 0 || len > SSL3_RT_MAX_PLAIN_LENGTH || !(p = evbuffer_pullup(data, -1)))
		return;
	if (!ssl || bufferevent_get_underlying(bev) || evbuffer_get_length(bufferevent_get_output(bev)) > 0 ||
	    !SSL_is_init_finished(ssl))
		return;
	ERR_clear_error();
	if (SSL_write(ssl, p, (int)len) == (int)len)
		evbuffer_drain(data, len);
	ERR_clear_error();
}
