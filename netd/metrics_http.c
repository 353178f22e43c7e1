/* Serving sluiced's metrics over HTTP (netd_metrics.h): GET /metrics on
 * RUN_DIR/metrics.sock (mode 0660: root and the socket's group, for a node's collector) and, when asked,
 * on one loopback TCP address. Nothing but GET /metrics is answered; the exposition is built per request.
 * Not on other addresses: the counters describe every session of the host, so they stay local unless
 * an operator forwards them (a collector on the node, or a reverse proxy). */
#include "netd_metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "http_parse.h" /* proxy/: the strict request-head scanner and parser */
#include "log.h"
#include "netd.h"
#include "util.h"

/* Trust boundary: with --metrics-listen every local user can connect. libevent's evhttp took any number
 * of connections and restarted its 10 s timeout at every byte, so one user holding thousands of
 * slow connections (a byte every few seconds) took sluiced's descriptors and memory, and with them
 * every session's setup. Here a connection has MH_DEADLINE_S from accept to the end of its reply,
 * whatever it sends, a head of at most MH_HEAD_MAX bytes, and at most MH_CONNS_MAX are open: a new
 * one closes the oldest, so a scraper (its exchange takes milliseconds) is still served. */
#define MH_CONNS_MAX  64
#define MH_DEADLINE_S 5
#define MH_HEAD_MAX   8192

struct mh_conn {
	struct netd_metrics_http *h; /* borrowed: the server */
	struct bufferevent *bev;     /* owned: closes the connection */
	struct event *deadline;      /* owned */
	struct http_scanner scan;
	size_t fed;                  /* bytes of the input given to the scanner */
	struct mh_conn *prev, *next; /* the server's list, oldest first */
};

struct netd_metrics_http {
	struct netd *d;                        /* borrowed */
	struct evconnlistener *unix_l, *tcp_l; /* owned */
	struct event *resume;                  /* owned: listening again after EMFILE */
	struct mh_conn *oldest, *newest;       /* owned, each */
	unsigned nconns;
	char path[PATH_MAX]; /* the Unix socket, unlinked at the end */
};

static void conn_free(struct mh_conn *c)
{
	struct netd_metrics_http *h = c->h;

	if (c->prev)
		c->prev->next = c->next;
	else
		h->oldest = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		h->newest = c->prev;
	h->nconns--;
	if (c->deadline)
		event_free(c->deadline);
	bufferevent_free(c->bev);
	free(c);
}

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_free(arg);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		conn_free(arg);
}

/* The reply is out: the connection ends (one exchange per connection). */
static void written_cb(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		conn_free(arg);
}

static const char *reason_phrase(int status)
{
	switch (status) {
	case 200: return "OK";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 505: return "HTTP Version Not Supported";
	default: return "Bad Request";
	}
}

static void reply(struct mh_conn *c, int status, const char *type, const char *body, bool head)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	size_t len = strlen(body);

	bufferevent_disable(c->bev, EV_READ);
	evbuffer_add_printf(out,
	                    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
	                    status, reason_phrase(status), type, len, status == 405 ? "Allow: GET, HEAD\r\n" : "");
	if (!head)
		evbuffer_add(out, body, len);
	bufferevent_setcb(c->bev, NULL, written_cb, event_cb, c);
	bufferevent_enable(c->bev, EV_WRITE);
}

/* Answers a complete head: GET or HEAD of /metrics (a query is ignored), nothing else. */
static void answer(struct mh_conn *c, const char *head, size_t len)
{
	struct http_request req;
	const char *why = NULL;
	int st = http_parse_request(head, len, HTTP_PARSE_ORIGIN_OK, &req, &why);
	bool is_head = st == 0 && http_token_eq(req.method, req.method_len, "HEAD");
	char *text;

	if (st != 0) {
		reply(c, st, "text/plain", "bad request\n", false);
		return;
	}
	if (!is_head && !http_token_eq(req.method, req.method_len, "GET")) {
		reply(c, 405, "text/plain", "only GET /metrics\n", false);
		return;
	}
	if (req.form != HTTP_FORM_ORIGIN || req.path_len < 8 || memcmp(req.path, "/metrics", 8) != 0 ||
	    (req.path_len > 8 && req.path[8] != '?')) {
		reply(c, 404, "text/plain", "only /metrics\n", is_head);
		return;
	}
	if (!(text = netd_metrics_render(c->h->d))) {
		reply(c, 500, "text/plain", "out of memory\n", is_head);
		return;
	}
	reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", text, is_head);
	free(text);
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct mh_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t n = evbuffer_get_length(in), used = 0;
	const char *buf;

	if (n > MH_HEAD_MAX)
		n = MH_HEAD_MAX;
	if (!(buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)n))) {
		conn_free(c);
		return;
	}
	switch (http_scanner_feed(&c->scan, buf + c->fed, n - c->fed, &used)) {
	case HTTP_SCAN_DONE: answer(c, buf, c->scan.total); return;
	case HTTP_SCAN_ERROR: reply(c, c->scan.status, "text/plain", "bad request\n", false); return;
	case HTTP_SCAN_MORE:
		c->fed = n;
		if (n == MH_HEAD_MAX)
			reply(c, 431, "text/plain", "request head too large\n", false);
		return;
	}
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	struct netd_metrics_http *h = arg;
	struct event_base *base = evconnlistener_get_base(l);
	struct timeval dl = {MH_DEADLINE_S, 0};
	struct mh_conn *c;

	(void)sa;
	(void)salen;
	if (h->nconns >= MH_CONNS_MAX)
		conn_free(h->oldest);
	if (!(c = calloc(1, sizeof *c))) {
		evutil_closesocket(fd);
		return;
	}
	c->h = h;
	http_scanner_init(&c->scan, false);
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->bev) {
		evutil_closesocket(fd);
		free(c);
		return;
	}
	/* linked first: conn_free undoes all of it */
	c->prev = h->newest;
	if (h->newest)
		h->newest->next = c;
	else
		h->oldest = c;
	h->newest = c;
	h->nconns++;
	if (!(c->deadline = evtimer_new(base, deadline_cb, c)) || evtimer_add(c->deadline, &dl) < 0) {
		conn_free(c);
		return;
	}
	bufferevent_setwatermark(c->bev, EV_READ, 0, MH_HEAD_MAX);
	bufferevent_setcb(c->bev, read_cb, NULL, event_cb, c);
	bufferevent_enable(c->bev, EV_READ);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct netd_metrics_http *h = arg;

	(void)fd;
	(void)what;
	if (h->unix_l)
		evconnlistener_enable(h->unix_l);
	if (h->tcp_l)
		evconnlistener_enable(h->tcp_l);
}

/* accept(2) failed: out of descriptors (EMFILE, ENFILE) leaves the connection queued, and a listener
 * that stays on would spin; both pause for a second. */
static void accept_error_cb(struct evconnlistener *l, void *arg)
{
	struct netd_metrics_http *h = arg;
	struct timeval sec = {1, 0};
	int e = EVUTIL_SOCKET_ERROR();

	(void)l;
	if (e != EMFILE && e != ENFILE && e != ENOBUFS && e != ENOMEM)
		return;
	log_warnx("metrics: cannot accept a connection: %s; not listening for a second", strerror(e));
	if (h->unix_l)
		evconnlistener_disable(h->unix_l);
	if (h->tcp_l)
		evconnlistener_disable(h->tcp_l);
	evtimer_add(h->resume, &sec);
}

static struct evconnlistener *serve(struct netd_metrics_http *h, int fd)
{
	struct evconnlistener *l =
	        evconnlistener_new(h->d->base, accept_cb, h, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
	if (l)
		evconnlistener_set_error_cb(l, accept_error_cb);
	return l;
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
	if (!(h->unix_l = serve(h, fd))) {
		close(fd);
		snprintf(err, errlen, "metrics: cannot serve %s", h->path);
		return -ENOMEM;
	}
	return 0;
}

/* "127.0.0.1:9477" or "[::1]:9477": a loopback address and a port, into ss. */
static int parse_tcp(const char *s, struct sockaddr_storage *ss, socklen_t *sslen)
{
	const char *colon = strrchr(s, ':');
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	char host[64], *end;
	unsigned long p;
	size_t n;

	if (!colon || colon == s)
		return -EINVAL;
	n = (size_t)(colon - s);
	if (s[0] == '[') {
		if (n < 3 || s[n - 1] != ']' || n - 2 >= sizeof host)
			return -EINVAL;
		memcpy(host, s + 1, n - 2);
		host[n - 2] = '\0';
	} else {
		if (n >= sizeof host)
			return -EINVAL;
		memcpy(host, s, n);
		host[n] = '\0';
	}
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || !colon[1] || *end || p == 0 || p > 65535)
		return -EINVAL;
	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)p);
		*sslen = sizeof *a4;
		return (ntohl(a4->sin_addr.s_addr) >> 24) == 127 ? 0 : -EPERM;
	}
	if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)p);
		*sslen = sizeof *a6;
		return IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr) ? 0 : -EPERM;
	}
	return -EINVAL;
}

int netd_metrics_http_start(struct netd *d, struct netd_metrics_http **out, const char *tcp, char *err,
			    size_t errlen)
{
	struct netd_metrics_http *h = calloc(1, sizeof *h);
	struct sockaddr_storage ss;
	socklen_t sslen = 0;
	int r;

	*out = NULL;
	if (!h || !(h->resume = evtimer_new(d->base, resume_cb, h))) {
		free(h);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	h->d = d;
	if ((r = listen_unix(d, h, err, errlen)) < 0)
		goto fail;
	if (tcp) {
		r = parse_tcp(tcp, &ss, &sslen);
		if (r < 0) {
			snprintf(err, errlen, r == -EPERM ? "--metrics-listen %s: only a loopback address (127.0.0.1:PORT, [::1]:PORT)"
							  : "--metrics-listen %s: want ADDR:PORT (127.0.0.1:9477)", tcp);
			goto fail;
		}
		h->tcp_l = evconnlistener_new_bind(d->base, accept_cb, h,
		                                   LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE,
		                                   64, (struct sockaddr *)&ss, (int)sslen);
		if (!h->tcp_l) {
			snprintf(err, errlen, "--metrics-listen %s: cannot listen there (in use?)", tcp);
			r = -EADDRINUSE;
			goto fail;
		}
		evconnlistener_set_error_cb(h->tcp_l, accept_error_cb);
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
	while (h->oldest)
		conn_free(h->oldest);
	if (h->unix_l)
		evconnlistener_free(h->unix_l);
	if (h->tcp_l)
		evconnlistener_free(h->tcp_l);
	event_free(h->resume);
	if (h->path[0])
		unlink(h->path);
	free(h);
}
