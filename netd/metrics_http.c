/* Serving sluiced's metrics over HTTP (netd_metrics.h) with libevent's evhttp: GET /metrics on
 * RUN_DIR/metrics.sock (mode 0660: root and the socket's group, for a node's collector) and, when asked,
 * on one loopback TCP address. Nothing but GET /metrics is answered; the exposition is built per request.
 * Not on other addresses: the counters describe every session of the host, so they stay local unless
 * an operator forwards them (a collector on the node, or a reverse proxy). */
#include "netd_metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "netd.h"
#include "util.h"

struct netd_metrics_http {
	struct evhttp *http; /* owned: both listeners */
	char path[PATH_MAX]; /* the Unix socket, unlinked at the end */
};

static void request_cb(struct evhttp_request *req, void *arg)
{
	struct netd *d = arg;
	const char *uri = evhttp_request_get_uri(req);
	struct evbuffer *out;
	char *text;

	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET && evhttp_request_get_command(req) != EVHTTP_REQ_HEAD) {
		evhttp_send_error(req, 405, "only GET /metrics");
		return;
	}
	if (!uri || (strcmp(uri, "/metrics") != 0 && strncmp(uri, "/metrics?", 9) != 0)) {
		evhttp_send_error(req, 404, "only /metrics");
		return;
	}
	if (!(text = netd_metrics_render(d)) || !(out = evbuffer_new())) {
		free(text);
		evhttp_send_error(req, 500, "out of memory");
		return;
	}
	evbuffer_add(out, text, strlen(text));
	free(text);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	evhttp_send_reply(req, 200, "OK", out);
	evbuffer_free(out);
}

static int listen_unix(struct netd *d, struct netd_metrics_http *h, char *err, size_t errlen)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd, r;

	if ((size_t)snprintf(h->path, sizeof h->path, "%s/metrics.sock", d->cfg.run_dir) >= sizeof sun.sun_path) {
		snprintf(err, errlen, "run directory path too long for a socket: %s", d->cfg.run_dir);
		return -ENAMETOOLONG;
	}
	util_strlcpy(sun.sun_path, h->path, sizeof sun.sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	unlink(h->path);
	if (bind(fd, (struct sockaddr *)&sun, sizeof sun) < 0 || chmod(h->path, 0660) < 0 || listen(fd, 64) < 0) {
		r = -errno;
		snprintf(err, errlen, "metrics: listening on %s: %s", h->path, strerror(-r));
		close(fd);
		h->path[0] = '\0';
		return r;
	}
	if (!evhttp_accept_socket_with_handle(h->http, fd)) {
		close(fd);
		snprintf(err, errlen, "metrics: cannot serve %s", h->path);
		return -ENOMEM;
	}
	return 0;
}

/* "127.0.0.1:9477" or "[::1]:9477": a loopback address and a port. */
static int parse_tcp(const char *s, char host[64], unsigned *port)
{
	const char *colon = strrchr(s, ':');
	size_t n;
	char *end;
	unsigned long p;
	struct in_addr a4;
	struct in6_addr a6;

	if (!colon || colon == s)
		return -EINVAL;
	n = (size_t)(colon - s);
	if (s[0] == '[') {
		if (n < 3 || s[n - 1] != ']' || n - 2 >= 64)
			return -EINVAL;
		memcpy(host, s + 1, n - 2);
		host[n - 2] = '\0';
	} else {
		if (n >= 64)
			return -EINVAL;
		memcpy(host, s, n);
		host[n] = '\0';
	}
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || !colon[1] || *end || p == 0 || p > 65535)
		return -EINVAL;
	*port = (unsigned)p;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127 ? 0 : -EPERM;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ? 0 : -EPERM;
	return -EINVAL;
}

int netd_metrics_http_start(struct netd *d, struct netd_metrics_http **out, const char *tcp, char *err,
			    size_t errlen)
{
	struct netd_metrics_http *h = calloc(1, sizeof *h);
	char host[64];
	unsigned port;
	int r;

	*out = NULL;
	if (!h || !(h->http = evhttp_new(d->base))) {
		free(h);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_max_headers_size(h->http, 8192);
	evhttp_set_max_body_size(h->http, 0);
	evhttp_set_timeout(h->http, 10);
	evhttp_set_gencb(h->http, request_cb, d);
	if ((r = listen_unix(d, h, err, errlen)) < 0)
		goto fail;
	if (tcp) {
		r = parse_tcp(tcp, host, &port);
		if (r < 0) {
			snprintf(err, errlen, r == -EPERM ? "--metrics-listen %s: only a loopback address (127.0.0.1:PORT, [::1]:PORT)"
							  : "--metrics-listen %s: want ADDR:PORT (127.0.0.1:9477)", tcp);
			goto fail;
		}
		if (!evhttp_bind_socket_with_handle(h->http, host, (uint16_t)port)) {
			snprintf(err, errlen, "--metrics-listen %s: cannot listen there (in use?)", tcp);
			r = -EADDRINUSE;
			goto fail;
		}
	}
	log_info("metrics: http://unix:%s/metrics%s%s", h->path, tcp ? " and http://" : "", tcp ? tcp : "");
	*out = h;
	return 0;
fail:
	netd_metrics_http_free(h);
	return r;
}

void netd_metrics_http_free(struct netd_metrics_http *h)
{
	if (!h)
		return;
	evhttp_free(h->http);
	if (h->path[0])
		unlink(h->path);
	free(h);
}
