/* Unit tests of HTTPS inspection through the engine's loop: the sandboxed client, the parent proxy and the
 * upstream's TLS server are played by the test on loopback (tls_rig): the timeouts of both TLS handshakes
 * measure the peer, not the engine, after stalls (docs/proxy.md, "The header timeout measures the client"). */
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine.h"
#include "engine_test.h"
#include "mitm_ca.h"
#include "parent.h"
#include "policy.h"
#include "proxy_int.h"

/* ---- HTTPS inspection through the engine: the sandboxed client, the parent proxy and the upstream's TLS
 * server are the test's, on loopback. The engine reaches cached.test through the parent (no resolver), the
 * parent's tunnel is the upstream's TLS server; its CA (another inspection CA) is the engine's trust
 * (SLUICE_TLS_TRUST), the session's CA the client's. ---- */
struct tls_rig {
	char path[40];  /* the audit log */
	char trust[40]; /* the upstream CA's certificate */
	struct event_base *base;
	struct proxy_engine *e;
	struct policy *p;
	struct proxy_mitm_ca *up_ca;
	SSL_CTX *client_ctx; /* owned */
	SSL_CTX *server_ctx; /* borrowed from up_ca */
	int pfd;             /* the parent's listener */
	struct sockaddr_storage gw;
};

struct tls_flow {
	int c, u;     /* the client's socket; the parent's accepted one (the upstream's TLS runs on it) */
	SSL *cs, *us; /* the client's TLS, the upstream server's (NULL until it answers) */
	bool up_done, served, done, closed;
	char resp[4096]; /* what the client read */
	size_t len;
};

static void rig_start(struct tls_rig *g, const char *policy_json)
{
	struct proxy_config cfg;
	struct proxy_session_info info;
	struct proxy_parent *parent = calloc(1, sizeof *parent);
	char err[256], *key = NULL, *cert = NULL, *up_key = NULL, *up_cert = NULL;
	int fd, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t len = sizeof g->gw;
	BIO *bio;
	X509 *x;
	FILE *f;

	memset(g, 0, sizeof *g);
	snprintf(g->path, sizeof g->path, "/tmp/sluice-engine-test-XXXXXX");
	snprintf(g->trust, sizeof g->trust, "/tmp/sluice-engine-ca-XXXXXX");
	fd = mkstemp(g->path);
	assert_true(fd >= 0);
	assert_non_null(parent);
	/* the upstream's CA: the engine trusts it (read when its first inspected request makes its context) */
	assert_int_equal(proxy_mitm_ca_make("upstream", &up_key, &up_cert, err, sizeof err), 0);
	g->up_ca = proxy_mitm_ca_new(up_key, up_cert, err, sizeof err);
	assert_non_null(g->up_ca);
	g->server_ctx = proxy_mitm_ca_server_ctx(g->up_ca, "cached.test", err, sizeof err);
	assert_non_null(g->server_ctx);
	f = fdopen(mkstemp(g->trust), "w");
	assert_non_null(f);
	fputs(up_cert, f);
	fclose(f);
	assert_int_equal(setenv("SLUICE_TLS_TRUST", g->trust, 1), 0);
	/* the session's CA: the client trusts it */
	assert_int_equal(proxy_mitm_ca_make("s1", &key, &cert, err, sizeof err), 0);
	g->client_ctx = SSL_CTX_new(TLS_client_method());
	assert_non_null(g->client_ctx);
	bio = BIO_new_mem_buf(cert, -1);
	x = PEM_read_bio_X509(bio, NULL, NULL, NULL);
	assert_non_null(x);
	assert_int_equal(X509_STORE_add_cert(SSL_CTX_get_cert_store(g->client_ctx), x), 1);
	X509_free(x);
	BIO_free(bio);
	SSL_CTX_set_verify(g->client_ctx, SSL_VERIFY_PEER, NULL);

	g->base = proxy_event_base_new();
	assert_non_null(g->base);
	g->p = json_policy(policy_json);
	memset(&cfg, 0, sizeof cfg);
	cfg.audit_fd = fd;
	sin4(&cfg.upstream_dns, "127.0.0.4", 53);
	cfg.upstream_dns_len = sizeof(struct sockaddr_in);
	g->e = proxy_engine_new(g->base, &cfg, err, sizeof err);
	assert_non_null(g->e);
	memset(&info, 0, sizeof info);
	info.id = "s1";
	info.command = "test";
	info.policy = g->p;
	info.ca_key_pem = key;
	info.ca_cert_pem = cert;
	sin4(&info.addr4, "127.0.0.2", 0);
	sin4(&info.gw4, "127.0.0.3", 0);
	assert_int_equal(proxy_engine_session_add(g->e, &info), 0);
	free(key);
	free(cert);
	free(up_key);
	free(up_cert);

	g->pfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sin4(&parent->addr, "127.0.0.4", 0);
	assert_int_equal(bind(g->pfd, (struct sockaddr *)&parent->addr, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(listen(g->pfd, 16), 0);
	parent->addrlen = sizeof(struct sockaddr_in);
	assert_int_equal(getsockname(g->pfd, (struct sockaddr *)&parent->addr, &parent->addrlen), 0);
	snprintf(parent->where, sizeof parent->where, "127.0.0.4:%u",
	         ntohs(((struct sockaddr_in *)&parent->addr)->sin_port));
	g->e->parent = parent; /* (the engine frees it) */
	sin4(&g->gw, "127.0.0.3", 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&g->gw, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(listen(lfd, 16), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&g->gw, &len), 0);
	assert_int_equal(proxy_engine_add_listener(g->e, lfd, PROXY_LISTEN_HTTP), 0);
}

static void rig_end(struct tls_rig *g)
{
	proxy_engine_free(g->e);
	policy_unref(g->p);
	event_base_free(g->base);
	proxy_mitm_ca_free(g->up_ca);
	SSL_CTX_free(g->client_ctx);
	close(g->pfd);
	unsetenv("SLUICE_TLS_TRUST");
	unlink(g->trust);
	unlink(g->path);
}

/* The number of the audit log's records whose field `key` holds `what`. */
static int audit_count(const char *path, const char *key, const char *what)
{
	FILE *f = fopen(path, "r");
	char line[8192];
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		json_object *o = json_tokener_parse(line), *v;
		assert_non_null(o);
		if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) &&
		    strstr(json_object_get_string(v), what))
			n++;
		json_object_put(o);
	}
	fclose(f);
	return n;
}

/* A client of session s1 asks for an inspected tunnel to cached.test:443: the parent is asked for it and
 * answers 200, so does the engine; the client's TLS is ready to start (its socket non-blocking). */
static void flow_open(struct tls_rig *g, struct tls_flow *f)
{
	static const char head[] = "CONNECT cached.test:443 HTTP/1.1\r\nHost: cached.test:443\r\n\r\n";
	struct sockaddr_storage src;
	char buf[512];
	ssize_t n;

	memset(f, 0, sizeof *f);
	f->c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sin4(&src, "127.0.0.2", 0);
	assert_int_equal(bind(f->c, (struct sockaddr *)&src, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(connect(f->c, (struct sockaddr *)&g->gw, sizeof(struct sockaddr_in)), 0);
	assert_int_equal(send(f->c, head, sizeof head - 1, 0), (ssize_t)sizeof head - 1);
	loop_until(g->base, g->pfd);
	f->u = accept4(g->pfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	assert_true(f->u >= 0);
	loop_until(g->base, f->u);
	n = recv(f->u, buf, sizeof buf, 0);
	assert_true(n > 22);
	assert_memory_equal(buf, "CONNECT cached.test:443 ", 24);
	assert_int_equal(send(f->u, "HTTP/1.1 200 OK\r\n\r\n", 19, 0), 19);
	loop_until(g->base, f->c);
	n = recv(f->c, buf, sizeof buf, 0);
	assert_true(n >= 12);
	assert_memory_equal(buf, "HTTP/1.1 200", 12);
	assert_int_equal(fcntl(f->c, F_SETFL, fcntl(f->c, F_GETFL) | O_NONBLOCK), 0);
	f->cs = SSL_new(g->client_ctx);
	assert_non_null(f->cs);
	assert_int_equal(SSL_set_fd(f->cs, f->c), 1);
	assert_int_equal(SSL_set_tlsext_host_name(f->cs, "cached.test"), 1);
	assert_int_equal(SSL_set1_host(f->cs, "cached.test"), 1);
}

/* The client's TLS handshake with the engine, up to the client's Finished: sent, the engine has not read it. */
static void flow_client_tls(struct tls_rig *g, struct tls_flow *f)
{
	for (int i = 0; i < 8; i++) {
		int r = SSL_connect(f->cs);
		if (r == 1)
			return;
		assert_int_equal(SSL_get_error(f->cs, r), SSL_ERROR_WANT_READ);
		loop_until(g->base, f->c);
	}
	fail_msg("no TLS handshake with the engine");
}

static void flow_send(struct tls_flow *f, const char *req)
{
	assert_int_equal(SSL_write(f->cs, req, (int)strlen(req)), (int)strlen(req));
}

/* The upstream's TLS server takes the engine's ClientHello (waiting in its socket) and answers: its first
 * flight waits in the engine's socket. */
static void flow_server_hello(struct tls_rig *g, struct tls_flow *f)
{
	int r;

	f->us = SSL_new(g->server_ctx);
	assert_non_null(f->us);
	assert_int_equal(SSL_set_fd(f->us, f->u), 1);
	r = SSL_accept(f->us);
	assert_true(r <= 0);
	assert_int_equal(SSL_get_error(f->us, r), SSL_ERROR_WANT_READ);
}

/* Whether the response in buf is complete (its head and Content-Length bytes of body). */
static bool response_complete(const char *buf, size_t len)
{
	const char *end = strstr(buf, "\r\n\r\n"), *cl = strstr(buf, "Content-Length: ");

	return end && cl && cl < end && len - (size_t)(end + 4 - buf) >= strtoul(cl + 16, NULL, 10);
}

/* One step of each end of f the test plays: the upstream's server completes its handshake, answers the request
 * with 200 "ok"; the client reads a response, or finds the connection closed. */
static void flow_step(struct tls_flow *f)
{
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
	char buf[2048];
	int r;

	if (f->us && !f->served) {
		if (!f->up_done && SSL_accept(f->us) == 1)
			f->up_done = true;
		if (f->up_done && (r = SSL_read(f->us, buf, sizeof buf - 1)) > 0) {
			buf[r] = '\0';
			assert_non_null(strstr(buf, "\r\n\r\n")); /* (one small request: one record) */
			assert_int_equal(SSL_write(f->us, ok, sizeof ok - 1), (int)sizeof ok - 1);
			f->served = true;
		}
	}
	while (!f->done) {
		r = SSL_read(f->cs, f->resp + f->len, (int)(sizeof f->resp - 1 - f->len));
		if (r <= 0) {
			r = SSL_get_error(f->cs, r);
			if (r != SSL_ERROR_WANT_READ && r != SSL_ERROR_WANT_WRITE)
				f->done = f->closed = true;
			break;
		}
		f->len += (size_t)r;
		f->resp[f->len] = '\0';
		f->done = response_complete(f->resp, f->len);
	}
	ERR_clear_error();
}

/* Runs the engine and the test's ends of the n flows until each has its response or was closed (at most 3 s). */
static void pump(struct tls_rig *g, struct tls_flow *fs, int n)
{
	for (int i = 0; i < 600; i++) {
		bool all = true;
		event_base_loop(g->base, EVLOOP_NONBLOCK);
		for (int k = 0; k < n; k++) {
			flow_step(&fs[k]);
			all = all && fs[k].done;
		}
		if (all)
			return;
		nanosleep(&(struct timespec){0, 5000000}, NULL);
	}
}

static void flow_close(struct tls_flow *f)
{
	SSL_free(f->cs);
	SSL_free(f->us);
	close(f->c);
	if (f->u >= 0)
		close(f->u);
}

static void filler_cb(evutil_socket_t fd, short what, void *arg)
{
	char b[16];
	(void)what;
	(void)arg;
	(void)!recv(fd, b, sizeof b, MSG_DONTWAIT);
}

static const char inspect_policy[] = "{\"allow\": [\"cached.test\"], \"inspect\": [{\"host\": \"cached.test\", "
                                     "\"deny\": [\"GET /denied\"]}]}";

/* The upstream's TLS handshake of HTTPS inspection, with a connect timeout of 300 ms, measures the upstream,
 * not the engine. (1) An upstream that answered in time, its flight unread when the timer fires 250 ms late
 * (too little for the grace: the engine's epoll batch of 32 was full of other ready sockets): the timer has
 * the handshake read it first, and the request is answered (before: 502). (2) A stall of the whole machine,
 * 1 s, the upstreams stalled too: their timers, 700 ms late, give them their time again; the one that answers
 * then is used, the one that stays silent gets one 502 that says it timed out, the one that closed gets one
 * that says so (before: all three 502 the moment the engine ran, "closed the connection"). About 2 s. */
static void test_inspect_upstream_stall(void **state)
{
	enum { FILL = 40 };
	struct tls_rig g;
	struct tls_flow a, f[3];
	struct event *ev[FILL];
	int sp[FILL][2];
	struct timeval tv = {0, 300000};
	const char *why = "the TLS handshake with the upstream cached.test timed out (no answer within 300 ms)";
	(void)state;

	rig_start(&g, inspect_policy);
	g.e->connect_timeout_ms = 300;
	g.e->tv_connect = event_base_init_common_timeout(g.base, &tv);
	for (int i = 0; i < FILL; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp[i]), 0);
		ev[i] = event_new(g.base, sp[i][0], EV_READ | EV_PERSIST, filler_cb, NULL);
		assert_non_null(ev[i]);
		assert_int_equal(event_add(ev[i], NULL), 0);
	}

	/* (1) */
	flow_open(&g, &a);
	flow_client_tls(&g, &a);
	flow_send(&a, "GET /ok HTTP/1.1\r\nHost: cached.test\r\n\r\n");
	loop_until(g.base, a.u); /* the engine's ClientHello */
	for (int i = 0; i < FILL; i++)
		assert_int_equal(send(sp[i][1], "x", 1, 0), 1); /* ready before the upstream's answer */
	flow_server_hello(&g, &a);
	nanosleep(&(struct timespec){0, 550000000}, NULL);
	pump(&g, &a, 1);
	assert_true(a.done);
	assert_false(a.closed);
	assert_memory_equal(a.resp, "HTTP/1.1 200 OK\r\n", 17);
	assert_non_null(strstr(a.resp, "\r\n\r\nok"));

	/* (2) */
	for (int k = 0; k < 3; k++) {
		flow_open(&g, &f[k]);
		flow_client_tls(&g, &f[k]);
	}
	for (int k = 0; k < 3; k++) /* (their upstream handshakes, and timers, start together) */
		flow_send(&f[k], "GET /ok HTTP/1.1\r\nHost: cached.test\r\n\r\n");
	for (int k = 0; k < 3; k++)
		loop_until(g.base, f[k].u);
	nanosleep(&(struct timespec){1, 0}, NULL); /* nobody ran */
	for (int i = 0; i < 5; i++)
		event_base_loop(g.base, EVLOOP_NONBLOCK); /* the engine first: its timers are late */
	for (int k = 0; k < 3; k++) {
		flow_step(&f[k]); /* (reads the session tickets of the client's TLS) */
		assert_false(f[k].done);
		assert_int_equal(f[k].len, 0); /* no 502 */
	}
	flow_server_hello(&g, &f[0]); /* the upstreams run: one answers, one stays silent, one closes */
	assert_int_equal(shutdown(f[2].u, SHUT_WR), 0);
	pump(&g, f, 3);
	assert_true(f[0].done && !f[0].closed);
	assert_memory_equal(f[0].resp, "HTTP/1.1 200 OK\r\n", 17);
	assert_true(f[1].done && !f[1].closed);
	assert_memory_equal(f[1].resp, "HTTP/1.1 502 ", 13);
	assert_non_null(strstr(f[1].resp, why));
	assert_true(f[2].done && !f[2].closed);
	assert_memory_equal(f[2].resp, "HTTP/1.1 502 ", 13);
	assert_non_null(strstr(f[2].resp, "the upstream cached.test closed the connection during the TLS handshake"));
	/* once: nothing more comes, and one record says it */
	nanosleep(&(struct timespec){0, 400000000}, NULL);
	f[1].done = false;
	f[1].len = 0;
	f[1].resp[0] = '\0';
	for (int i = 0; i < 5; i++) {
		event_base_loop(g.base, EVLOOP_NONBLOCK);
		flow_step(&f[1]);
	}
	assert_int_equal(f[1].len, 0);
	assert_false(f[1].closed);
	assert_int_equal(audit_count(g.path, "error", why), 1);
	assert_int_equal(audit_count(g.path, "error", "closed the connection during the TLS handshake"), 1);

	for (int i = 0; i < FILL; i++) {
		event_free(ev[i]);
		close(sp[i][0]);
		close(sp[i][1]);
	}
	flow_close(&a);
	for (int k = 0; k < 3; k++)
		flow_close(&f[k]);
	rig_end(&g);
}

/* The client's side of an inspected TLS handshake is under the header timeout (300 ms here), which measures
 * the client, not the engine: clients whose Finished and request came in time but wait unread when the timer
 * fires 100 ms late (too little for the grace): the timer has OpenSSL read the socket first, the handshake's
 * rest and then the request, which is answered (a 403 of the HTTP rules; before: the handshake was completed
 * and the request left in the socket, the connection closed as having sent none). A client that completed
 * its handshake in time but sent no request is still closed, once, without an answer and with its record. */
static void test_inspect_client_read_first(void **state)
{
	struct tls_rig g;
	struct tls_flow f[2];
	struct timeval tv = {0, 300000};
	(void)state;

	rig_start(&g, inspect_policy);
	g.e->header_timeout_ms = 300;
	g.e->tv_header = event_base_init_common_timeout(g.base, &tv);
	for (int k = 1; k >= 0; k--) {
		flow_open(&g, &f[k]);
		flow_client_tls(&g, &f[k]);
	}
	/* the request right behind the client's Finished; then the engine does not run for 400 ms */
	flow_send(&f[0], "GET /denied HTTP/1.1\r\nHost: cached.test\r\n\r\n");
	nanosleep(&(struct timespec){0, 400000000}, NULL);
	pump(&g, f, 2);
	assert_true(f[0].done && !f[0].closed);
	assert_memory_equal(f[0].resp, "HTTP/1.1 403 ", 13);
	assert_true(f[1].done && f[1].closed);
	assert_int_equal(f[1].len, 0);
	assert_int_equal(audit_count(g.path, "error", "no request within the header timeout (300 ms)"), 1);

	for (int k = 0; k < 2; k++)
		flow_close(&f[k]);
	rig_end(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_inspect_upstream_stall),
	        cmocka_unit_test(test_inspect_client_read_first),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
