/* bench-origin: a fast HTTP origin for tools/bench-proxy.sh (libevent evhttp), so the proxies under
 * test, not the origin, are what the benchmark measures. "/" answers a small fixed body; "/bytes/N"
 * streams N bytes with a Content-Length, refilling from a static block as the socket drains;
 * "/chunked/N" the same without a length (chunked, 256 KiB chunks, to an HTTP/1.1 client).
 * Usage: bench-origin ADDR PORT. Not installed; never part of the test suite. */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (256 * 1024)

static char block[BLOCK];

struct stream {
	struct evhttp_request *req;
	unsigned long long left;
};

static void send_more(struct evhttp_connection *conn, void *arg)
{
	struct stream *s = arg;
	struct evbuffer *b;
	size_t n;
	(void)conn;
	if (s->left == 0) {
		evhttp_send_reply_end(s->req);
		free(s);
		return;
	}
	b = evbuffer_new();
	n = s->left < BLOCK ? (size_t)s->left : BLOCK;
	evbuffer_add_reference(b, block, n, NULL, NULL);
	s->left -= n;
	evhttp_send_reply_chunk_with_cb(s->req, b, send_more, s);
	evbuffer_free(b);
}

static void handle(struct evhttp_request *req, void *arg)
{
	const char *uri = evhttp_request_get_uri(req);
	const char *p = strstr(uri, "/bytes/");
	const char *ch = strstr(uri, "/chunked/");
	(void)arg;
	if (p || ch) {
		struct stream *s = calloc(1, sizeof *s);
		char len[32];
		s->req = req;
		s->left = strtoull(p ? p + 7 : ch + 9, NULL, 10);
		snprintf(len, sizeof len, "%llu", s->left);
		if (p)
			evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Length", len);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/octet-stream");
		evhttp_send_reply_start(req, 200, "OK");
		send_more(NULL, s);
		return;
	}
	{
		struct evbuffer *b = evbuffer_new();
		evbuffer_add(b, "{\"ok\":true,\"origin\":\"bench\"}\n", 29);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
		evhttp_send_reply(req, 200, "OK", b);
		evbuffer_free(b);
	}
}

int main(int argc, char **argv)
{
	struct event_base *base;
	struct evhttp *http;

	if (argc != 3) {
		fprintf(stderr, "usage: bench-origin ADDR PORT\n");
		return 2;
	}
	memset(block, 'x', sizeof block);
	base = event_base_new();
	http = base ? evhttp_new(base) : NULL;
	if (!http || evhttp_bind_socket(http, argv[1], (ev_uint16_t)atoi(argv[2])) != 0) {
		fprintf(stderr, "bench-origin: cannot listen on %s:%s\n", argv[1], argv[2]);
		return 1;
	}
	evhttp_set_gencb(http, handle, NULL);
	fprintf(stderr, "bench-origin: listening on %s:%s\n", argv[1], argv[2]);
	event_base_dispatch(base);
	evhttp_free(http);
	event_base_free(base);
	return 0;
}
