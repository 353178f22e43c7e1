/* bench-https-client: a light keep-alive HTTPS client for tools/bench-https.sh, so that the proxies under
 * test, not the client, are what the benchmark measures (four curl processes took ~40% of two CPUs).
 * CONNS threads, each: TCP to the proxy, "CONNECT host:port", TLS (TLS 1.2 or newer, the server's
 * certificate verified against CAFILE and its name checked), then REQS GETs of PATH one after another over
 * that one connection, each response read whole (Content-Length bodies only). With PROXY "-" the
 * connection goes straight to HOST (resolved with getaddrinfo), for scale.
 * Prints "OK SECONDS" (responses with status 200, wall time from the first connect to the last response)
 * on stdout; errors on stderr, exit 1 if any request failed.
 * With "new", each request has a connection (CONNECT, TLS handshake) of its own instead.
 * Usage: bench-https-client PROXY|- PROXY_PORT HOST PORT PATH CAFILE CONNS REQS [new]. Not installed. */
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *proxy, *proxy_port, *host, *port, *path;
static long reqs;
static bool newconn; /* a new connection (and TLS handshake) per request */
static SSL_CTX *ctx;
static atomic_long ok;

static int dial(const char *h, const char *p)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai, *a;
	int fd = -1;
	if (getaddrinfo(h, p, &hints, &ai) != 0) {
		fprintf(stderr, "bench-https-client: cannot resolve %s\n", h);
		return -1;
	}
	for (a = ai; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(ai);
	if (fd < 0)
		fprintf(stderr, "bench-https-client: cannot connect to %s:%s\n", h, p);
	return fd;
}

/* Reads a response head into buf (at most cap bytes with what follows it); returns the head's length
 * and *have the bytes read, or -1. rd is read(2) or SSL_read through the wrapper below. */
typedef int (*reader)(void *io, char *buf, int len);
static int read_head(reader rd, void *io, char *buf, int cap, int *have)
{
	int n = 0;
	for (;;) {
		char *end = n >= 4 ? memmem(buf, n, "\r\n\r\n", 4) : NULL;
		if (end) {
			*have = n;
			return (int)(end - buf) + 4;
		}
		if (n == cap)
			return -1;
		int k = rd(io, buf + n, cap - n);
		if (k <= 0)
			return -1;
		n += k;
	}
}

static int fd_read(void *io, char *buf, int len)
{
	return (int)read(*(int *)io, buf, (size_t)len);
}

static int tls_read(void *io, char *buf, int len)
{
	return SSL_read(io, buf, len);
}

/* A connection to the origin (through the proxy's CONNECT), TLS verified: 0 with *fdp and *sslp set, or -1
 * (what is open is closed). */
static int open_tls(int *fdp, SSL **sslp)
{
	char buf[4096], req[1024];
	int fd, n, have, head;
	SSL *ssl = NULL;

	fd = proxy ? dial(proxy, proxy_port) : dial(host, port);
	if (fd < 0)
		return -1;
	if (proxy) {
		n = snprintf(req, sizeof req, "CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\n\r\n", host, port, host, port);
		if (write(fd, req, (size_t)n) != n || (head = read_head(fd_read, &fd, buf, sizeof buf, &have)) < 0 ||
		    strncmp(buf, "HTTP/1.1 200", 12) != 0 || have != head) {
			fprintf(stderr, "bench-https-client: the proxy refused the CONNECT\n");
			close(fd);
			return -1;
		}
	}
	ssl = SSL_new(ctx);
	if (!ssl || !SSL_set_tlsext_host_name(ssl, host) || !SSL_set1_host(ssl, host) || !SSL_set_fd(ssl, fd) ||
	    SSL_connect(ssl) != 1) {
		fprintf(stderr, "bench-https-client: TLS with %s failed: %s\n", host,
		        ERR_reason_error_string(ERR_get_error()));
		SSL_free(ssl);
		close(fd);
		return -1;
	}
	*fdp = fd;
	*sslp = ssl;
	return 0;
}

/* One GET on ssl, its response read whole: 1 for a 200, 0 for another status, -1 on failure. */
static int get(SSL *ssl, long i)
{
	char buf[16384], req[1024];
	int n, have, head;

	n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: bench-https-client\r\n\r\n", path,
	             host, port);
	if (SSL_write(ssl, req, n) != n || (head = read_head(tls_read, ssl, buf, sizeof buf, &have)) < 0) {
		fprintf(stderr, "bench-https-client: request %ld: no response\n", i + 1);
		return -1;
	}
	/* the body: Content-Length bytes, of which have - head came with the head */
	bool good = strncmp(buf, "HTTP/1.1 200", 12) == 0;
	const char *cl = NULL;
	for (char *p = buf; p < buf + head;) {
		if (strncasecmp(p, "Content-Length:", 15) == 0)
			cl = p + 15;
		char *nl = memchr(p, '\n', (size_t)(buf + head - p));
		p = nl ? nl + 1 : buf + head;
	}
	if (!cl) {
		fprintf(stderr, "bench-https-client: request %ld: no Content-Length\n", i + 1);
		return -1;
	}
	long left = strtol(cl, NULL, 10) - (have - head);
	while (left > 0) {
		int k = SSL_read(ssl, buf, left < (long)sizeof buf ? (int)left : (int)sizeof buf);
		if (k <= 0)
			return -1;
		left -= k;
	}
	if (left < 0) {
		fprintf(stderr, "bench-https-client: request %ld: more bytes than its Content-Length\n", i + 1);
		return -1;
	}
	return good;
}

static void *run(void *arg)
{
	int fd = -1, r = 0;
	SSL *ssl = NULL;
	(void)arg;

	for (long i = 0; i < reqs && r >= 0; i++) {
		if (!ssl && open_tls(&fd, &ssl) != 0)
			break;
		if ((r = get(ssl, i)) > 0)
			atomic_fetch_add(&ok, 1);
		if (newconn || r < 0) {
			SSL_free(ssl);
			close(fd);
			ssl = NULL;
		}
	}
	if (ssl) {
		SSL_free(ssl);
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec t0, t1;
	long conns, i;

	if ((argc != 9 && (argc != 10 || strcmp(argv[9], "new") != 0)) || (conns = atol(argv[7])) <= 0 ||
	    conns > 1024 || (reqs = atol(argv[8])) <= 0) {
		fprintf(stderr,
		        "usage: bench-https-client PROXY|- PROXY_PORT HOST PORT PATH CAFILE CONNS REQS [new]\n");
		return 2;
	}
	newconn = argc == 10;
	proxy = strcmp(argv[1], "-") ? argv[1] : NULL;
	proxy_port = argv[2], host = argv[3], port = argv[4], path = argv[5];
	ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) ||
	    SSL_CTX_load_verify_locations(ctx, argv[6], NULL) != 1) {
		fprintf(stderr, "bench-https-client: cannot load the CA bundle %s\n", argv[6]);
		return 2;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	pthread_t *th = calloc((size_t)conns, sizeof *th);
	if (!th)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < conns; i++)
		if (pthread_create(&th[i], NULL, run, NULL) != 0) {
			fprintf(stderr, "bench-https-client: cannot start thread %ld\n", i);
			return 2;
		}
	for (i = 0; i < conns; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%ld %.6f\n", (long)ok, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(th);
	SSL_CTX_free(ctx);
	return ok == conns * reqs ? 0 : 1;
}
