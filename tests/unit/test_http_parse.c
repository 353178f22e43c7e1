/* Unit tests of the proxy's strict HTTP head parsing (proxy/http_parse.c): the scanner's limits, the
 * request parser's 400/414/431/501/505 cases, hop-by-hop handling, the authority parser, the response
 * parser's framing, and the chunked framer fed byte by byte and all at once; the head rewritten for the
 * upstream with each port spelt (test_rewrite_port). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http_parse.h"
#include "http_rewrite.h"

static int parse(const char *s, struct http_request *req)
{
	const char *why;
	return http_parse_request(s, strlen(s), 0, req, &why);
}

static int scan_all(const char *s, size_t len, int *status)
{
	struct http_scanner sc;
	size_t used;
	enum http_scan_result r;
	http_scanner_init(&sc, false);
	r = http_scanner_feed(&sc, s, len, &used);
	*status = sc.status;
	return r;
}

static void test_good_request(void **state)
{
	struct http_request *req = malloc(sizeof *req);
	(void)state;
	assert_int_equal(
	        parse("GET http://Example.COM:8080/a/b?c=d HTTP/1.1\r\nHost: example.com:8080\r\n"
	              "Connection: X-Foo, keep-alive\r\nX-Foo: 1\r\nProxy-Authorization: x\r\nAccept: */*\r\n\r\n",
	              req),
	        0);
	assert_int_equal(req->form, HTTP_FORM_ABSOLUTE);
	assert_int_equal(req->authority.port, 8080);
	assert_int_equal(req->authority.host_len, 11);
	assert_memory_equal(req->authority.host, "Example.COM", 11);
	assert_int_equal(req->path_len, 8);
	assert_memory_equal(req->path, "/a/b?c=d", 8);
	assert_true(req->keep_alive);
	assert_int_equal(req->content_length, -1);
	assert_int_equal(req->nheaders, 5);
	assert_true(req->headers[0].hop);  /* Host: rewritten */
	assert_true(req->headers[1].hop);  /* Connection */
	assert_true(req->headers[2].hop);  /* X-Foo: named by Connection */
	assert_true(req->headers[3].hop);  /* Proxy-Authorization */
	assert_false(req->headers[4].hop); /* Accept */
	free(req);
}

static void test_connect(void **state)
{
	struct http_request *req = malloc(sizeof *req);
	(void)state;
	assert_int_equal(parse("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", req), 0);
	assert_int_equal(req->form, HTTP_FORM_AUTHORITY);
	assert_int_equal(req->authority.port, 443);
	assert_int_equal(parse("CONNECT [2001:db8::1]:443 HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n", req), 0);
	assert_true(req->authority.bracketed);
	assert_int_equal(req->authority.host_len, 11);
	assert_int_equal(parse("CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n", req), 400);
	assert_int_equal(parse("CONNECT example.com:443 HTTP/1.1\r\nHost: e.com:443\r\nContent-Length: 5\r\n\r\n", req),
	                 400);
	free(req);
}

static void test_bad_requests(void **state)
{
	static const struct {
		const char *req;
		int status;
	} cases[] = {
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: "
	         "chunked\r\n\r\n",
	         400},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3, 4\r\n\r\n", 400},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: -1\r\n\r\n", 400},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: 1\r\n folded\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/1.1\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: a\rb\r\n\r\n", 400},
	        {"GET http://user@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", 400},
	        {"GET http://a.test:80/ HTTP/1.1\r\nHost: a.test:81\r\n\r\n", 400},
	        {"GET http://a.test:0/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test:65536/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test:080/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test:/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a%2etest/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/1.1\r\nHost : a.test\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/1.1\r\n\r\n", 400},
	        {"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test/#frag HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET  http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/1.1 \r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://::1/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"G@T http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"GET http://a.test/ HTTP/2.0\r\nHost: a.test\r\n\r\n", 505},
	        {"GET http://a.test/ HTTX/1.1\r\nHost: a.test\r\n\r\n", 400},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
	        {"POST http://a.test/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
	         "chunked\r\n\r\n",
	         400},
	        /* a framing field named by Connection (it would be dropped while its body goes on) */
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nConnection: content-length\r\n\r\n",
	         400},
	        {"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: close, Transfer-Encoding\r\n"
	         "Transfer-Encoding: chunked\r\n\r\n",
	         400},
	};
	struct http_request *req = malloc(sizeof *req);
	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int st = parse(cases[i].req, req);
		if (st != cases[i].status)
			fail_msg("case %zu: got %d, want %d: %s", i, st, cases[i].status, cases[i].req);
	}
	/* NUL and control bytes in the authority */
	{
		static const char nul[] = "GET http://a.test\0.evil/ HTTP/1.1\r\nHost: a.test\r\n\r\n";
		const char *why;
		assert_int_equal(http_parse_request(nul, sizeof nul - 1, 0, req, &why), 400);
	}
	assert_int_equal(parse("GET http://a\x01.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", req), 400);
	free(req);
}

static void test_equal_duplicate_cl_and_http10(void **state)
{
	struct http_request *req = malloc(sizeof *req);
	(void)state;
	assert_int_equal(
	        parse("POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
	              req),
	        0);
	assert_int_equal(req->content_length, 5);
	assert_int_equal(parse("GET http://a.test/ HTTP/1.0\r\n\r\n", req), 0);
	assert_false(req->keep_alive);
	assert_int_equal(parse("GET http://a.test/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", req), 0);
	assert_true(req->keep_alive);
	assert_int_equal(parse("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", req), 0);
	assert_false(req->keep_alive);
	assert_int_equal(parse("GET http://a.test?x HTTP/1.1\r\nHost: a.test\r\n\r\n", req), 0);
	assert_int_equal(req->path_len, 2);
	assert_int_equal(parse("GET http://a.test./ HTTP/1.1\r\nHost: A.TEST\r\n\r\n", req), 0);
	assert_int_equal(
	        parse("POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: Chunked\r\n\r\n", req), 0);
	assert_true(req->chunked);
	assert_false(req->headers[1].hop);
	free(req);
}

static void test_scanner_limits(void **state)
{
	char *buf = malloc(HTTP_HEAD_MAX + 100);
	int st;
	(void)state;
	memset(buf, 'a', HTTP_HEAD_MAX + 100);
	assert_int_equal(scan_all(buf, HTTP_REQLINE_MAX + 1, &st), HTTP_SCAN_ERROR);
	assert_int_equal(st, 414);
	memcpy(buf, "GET http://a/ HTTP/1.1\r\nX: ", 27);
	for (size_t i = 4000; i + 8 < HTTP_HEAD_MAX + 100; i += 4000)
		memcpy(buf + i, "\r\nX: ", 5);
	assert_int_equal(scan_all(buf, HTTP_HEAD_MAX + 100, &st), HTTP_SCAN_ERROR);
	assert_int_equal(st, 431);
	assert_int_equal(scan_all("GET http://a/ HTTP/1.1\nHost: a\n\n", 33, &st), HTTP_SCAN_ERROR);
	assert_int_equal(st, 400);
	assert_int_equal(scan_all("\r\n", 2, &st), HTTP_SCAN_ERROR);
	assert_int_equal(scan_all("GET http://a/ HTTP/1.1\r\nHost: a\r\n", 33, &st), HTTP_SCAN_MORE);
	{
		/* Fed one byte at a time, the head ends exactly at its CRLF CRLF. */
		const char *h = "GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nNEXT";
		struct http_scanner sc;
		size_t used = 0, i;
		http_scanner_init(&sc, false);
		for (i = 0; i < strlen(h); i++)
			if (http_scanner_feed(&sc, h + i, 1, &used) == HTTP_SCAN_DONE)
				break;
		assert_int_equal(sc.total, 35);
		assert_int_equal(used, 1);
	}
	free(buf);
}

static void test_authority(void **state)
{
	struct http_authority a;
	const char *why;
	(void)state;
	assert_int_equal(http_parse_authority("a.test", 6, false, 80, &a, &why), 0);
	assert_int_equal(a.port, 80);
	assert_false(a.has_port);
	assert_int_equal(http_parse_authority("a.test:65535", 12, true, 0, &a, &why), 0);
	assert_int_equal(a.port, 65535);
	assert_int_equal(http_parse_authority("[::ffff:127.0.0.1]:80", 21, true, 0, &a, &why), 0);
	assert_true(a.bracketed);
	assert_int_equal(http_parse_authority("[::1%eth0]:80", 13, true, 0, &a, &why), -EINVAL);
	assert_int_equal(http_parse_authority("[::1]x", 6, false, 80, &a, &why), -EINVAL);
	assert_int_equal(http_parse_authority("a.test:+80", 10, false, 80, &a, &why), -EINVAL);
	assert_int_equal(http_parse_authority("a test:80", 9, false, 80, &a, &why), -EINVAL);
	assert_int_equal(http_parse_authority("", 0, false, 80, &a, &why), -EINVAL);
	assert_int_equal(http_parse_authority(":80", 3, false, 80, &a, &why), -EINVAL);
	assert_int_equal(http_parse_authority("a.test:123456", 13, false, 80, &a, &why), -EINVAL);
	assert_int_equal(http_parse_authority("\xc3\xa9.test", 7, false, 80, &a, &why), -EINVAL);
}

static void test_response(void **state)
{
	struct http_response *r = malloc(sizeof *r);
	const char *why;
#define RESP(s, head) http_parse_response(s, strlen(s), head, r, &why)
	(void)state;
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", false), 0);
	assert_int_equal(r->body, HTTP_BODY_LENGTH);
	assert_int_equal(r->content_length, 10);
	assert_true(r->keep_alive);
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true), 0);
	assert_int_equal(r->body, HTTP_BODY_NONE);
	assert_int_equal(RESP("HTTP/1.1 204 No Content\r\n\r\n", false), 0);
	assert_int_equal(r->body, HTTP_BODY_NONE);
	assert_int_equal(RESP("HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", false), 0);
	assert_int_equal(r->body, HTTP_BODY_NONE);
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false), 0);
	assert_int_equal(r->body, HTTP_BODY_CHUNKED);
	assert_false(r->headers[0].hop);
	assert_int_equal(RESP("HTTP/1.0 200 OK\r\n\r\n", false), 0);
	assert_int_equal(r->body, HTTP_BODY_CLOSE);
	assert_false(r->keep_alive);
	assert_int_equal(RESP("HTTP/1.1 302\r\nLocation: http://b/\r\nContent-Length: 0\r\n\r\n", false), 0);
	assert_int_equal(r->status, 302);
	assert_int_equal(RESP("HTTP/1.1 100 Continue\r\n\r\n", false), 0);
	assert_int_equal(r->body, HTTP_BODY_NONE);
	/* a framing field named by Connection (it would be dropped while the body goes on) */
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: content-length\r\n\r\n", false),
	                 -EINVAL);
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n",
	                      false),
	                 -EINVAL);
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", false),
	                 -EINVAL);
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", false), -EINVAL);
	assert_int_equal(RESP("HTTP/1.1 20 OK\r\n\r\n", false), -EINVAL);
	assert_int_equal(RESP("HTTP/1.1 200 OK\nX: y\r\n\r\n", false), -EINVAL);
	assert_int_equal(RESP("ICY 200 OK\r\n\r\n", false), -EINVAL);
	assert_int_equal(RESP("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false), 0);
	assert_false(r->keep_alive);
	assert_true(r->headers[0].hop);
	free(r);
}

static enum http_chunk_result chunk_all(const char *s, size_t len, bool bytewise, size_t *total_used)
{
	struct http_chunked c;
	enum http_chunk_result r = HTTP_CHUNK_MORE;
	size_t used;
	http_chunked_init(&c);
	*total_used = 0;
	if (!bytewise) {
		r = http_chunked_feed(&c, s, len, &used);
		*total_used = used;
		return r;
	}
	for (size_t i = 0; i < len && r == HTTP_CHUNK_MORE; i++) {
		r = http_chunked_feed(&c, s + i, 1, &used);
		*total_used += used;
	}
	return r;
}

static void test_chunked(void **state)
{
	static const char good[] = "5\r\nhello\r\n1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: v\r\n\r\nNEXT";
	size_t used;
	(void)state;
	for (int bw = 0; bw < 2; bw++) {
		assert_int_equal(chunk_all(good, sizeof good - 1, bw, &used), HTTP_CHUNK_DONE);
		assert_int_equal(used, sizeof good - 1 - 4);
		assert_int_equal(chunk_all("0\r\n\r\n", 5, bw, &used), HTTP_CHUNK_DONE);
		assert_int_equal(chunk_all("5\r\nhello\r\n", 10, bw, &used), HTTP_CHUNK_MORE);
		assert_int_equal(chunk_all("5\nhello\r\n0\r\n\r\n", 15, bw, &used), HTTP_CHUNK_ERROR);
		assert_int_equal(chunk_all("5\r\nhelloX\r\n", 11, bw, &used), HTTP_CHUNK_ERROR);
		assert_int_equal(chunk_all("g\r\n", 3, bw, &used), HTTP_CHUNK_ERROR);
		assert_int_equal(chunk_all("\r\n", 2, bw, &used), HTTP_CHUNK_ERROR);
		assert_int_equal(chunk_all(" 5\r\n", 4, bw, &used), HTTP_CHUNK_ERROR);
		assert_int_equal(chunk_all("fffffffffffffffff\r\n", 19, bw, &used), HTTP_CHUNK_ERROR);
		assert_int_equal(chunk_all("0\r\n folded\r\n\r\n", 15, bw, &used), HTTP_CHUNK_ERROR);
		assert_int_equal(chunk_all("1;\x01\r\nx\r\n0\r\n\r\n", 13, bw, &used), HTTP_CHUNK_ERROR);
	}
}

/* The spliced path: the framer sees the framing, the data is skipped (passed on without being fed). */
static void test_chunked_skip(void **state)
{
	struct http_chunked c;
	size_t used;
	(void)state;
	http_chunked_init(&c);
	assert_int_equal(http_chunked_feed(&c, "1a;ext=1\r\nabc", 13, &used), HTTP_CHUNK_MORE);
	assert_int_equal(http_chunked_data_left(&c), 23);
	http_chunked_skip(&c, 0); /* nothing passed: no change */
	http_chunked_skip(&c, 20);
	assert_int_equal(http_chunked_data_left(&c), 3);
	http_chunked_skip(&c, 3);
	assert_int_equal(http_chunked_data_left(&c), 0);
	assert_int_equal(http_chunked_feed(&c, "\r\n0\r\n\r\nNEXT", 11, &used), HTTP_CHUNK_DONE);
	assert_int_equal(used, 7);
	/* more than the chunk holds, or outside chunk data: the framer fails and stays failed */
	http_chunked_init(&c);
	assert_int_equal(http_chunked_feed(&c, "5\r\n", 3, &used), HTTP_CHUNK_MORE);
	http_chunked_skip(&c, 6);
	assert_int_equal(http_chunked_feed(&c, "\r\n0\r\n\r\n", 7, &used), HTTP_CHUNK_ERROR);
	http_chunked_init(&c);
	http_chunked_skip(&c, 1);
	assert_int_equal(http_chunked_feed(&c, "0\r\n\r\n", 5, &used), HTTP_CHUNK_ERROR);
}

/* A CONNECT tunnel's first bytes (connect.c): request lines however a lenient server spaces them, and
 * what is not one. */
static int line_prefix(const char *s)
{
	return http_request_line_prefix(s, strlen(s));
}

static void test_request_line_prefix(void **state)
{
	(void)state;
	assert_int_equal(line_prefix("GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"), 1);
	assert_int_equal(line_prefix("GET http://evil.test/ HTTP/1.1\r\n"), 1);
	assert_int_equal(line_prefix("\r\n\r\nget  /x\thttp/1.0"), 1); /* empty lines, blanks, case */
	assert_int_equal(line_prefix("PRI * HTTP/2.0\r\n"), 1);
	assert_int_equal(line_prefix("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"), 0);
	/* HTTP/0.9 (no version): nginx serves "GET http://evil.test/x" as evil.test */
	assert_int_equal(line_prefix("GET http://evil.test/x\r\n"), 1);
	assert_int_equal(line_prefix("GET /\r\n"), 1);
	assert_int_equal(line_prefix("\r\nGET\t/"), 1);
	assert_int_equal(line_prefix("get key\r\n"), 0); /* memcached */
	assert_int_equal(line_prefix("GETS /x\r\n"), 0);
	assert_int_equal(line_prefix("GE /x\r\n"), 0);
	assert_int_equal(line_prefix("\x16\x03\x01"), 0);
	/* Python's http.server splits a request line on any white space and skips it before the method */
	assert_int_equal(line_prefix(" GET / HTTP/1.1"), 1);
	assert_int_equal(line_prefix("GET\x0b/\x0bHTTP/1.1\r\n"), 1);
	assert_int_equal(line_prefix("GET\r/\rHTTP/1.1\r\n"), 1);
	assert_int_equal(line_prefix("POST\r/\rHTTP/1.1\r\n"), 1);
	assert_int_equal(line_prefix("POST\xa0/\xa0HTTP/1.1\r\n"), 1);
	assert_int_equal(line_prefix("\x1c\x0cPOST /x HTTP/1.1\r\n"), 1);
	assert_int_equal(line_prefix("GET\n"), 0);
	assert_int_equal(http_request_line_prefix("\0\0\0\x08\x04\xd2\x16\x2f", 8), 0); /* PostgreSQL's SSLRequest */
	assert_int_equal(line_prefix("{\"jsonrpc\": 1}\n"), 0);
	/* not known yet */
	assert_int_equal(line_prefix(""), -1);
	assert_int_equal(line_prefix("\r\n"), -1);
	assert_int_equal(line_prefix("GET"), -1);
	assert_int_equal(line_prefix("GE"), -1);
	assert_int_equal(line_prefix("POST /a"), -1);
	assert_int_equal(line_prefix("POST /a HTT"), -1);
	assert_int_equal(line_prefix("hello world"), -1);
	assert_int_equal(line_prefix("hello world\r"), -1); /* (a bare CR does not end the line) */
	assert_int_equal(line_prefix(" \x0b"), -1);
}

struct sink {
	char b[512];
	size_t n;
};

static void sink_put(void *ctx, const void *data, size_t len)
{
	struct sink *k = ctx;
	assert_true(k->n + len < sizeof k->b);
	memcpy(k->b + k->n, data, len);
	k->n += len;
	k->b[k->n] = '\0';
}

static void test_rewrite_port(void **state)
{
	struct http_request *req = malloc(sizeof *req);
	static const struct {
		uint16_t port;
		bool v6, tls, absolute;
		const char *want;
	} cases[] = {
	        {80, false, false, false, "GET /p HTTP/1.1\r\nHost: h.test\r\nVia: 1.1 sluice\r\n\r\n"},
	        {8080, false, false, false, "GET /p HTTP/1.1\r\nHost: h.test:8080\r\nVia: 1.1 sluice\r\n\r\n"},
	        {1, false, false, false, "GET /p HTTP/1.1\r\nHost: h.test:1\r\nVia: 1.1 sluice\r\n\r\n"},
	        {65535, true, false, false, "GET /p HTTP/1.1\r\nHost: [h.test]:65535\r\nVia: 1.1 sluice\r\n\r\n"},
	        {443, false, true, false, "GET /p HTTP/1.1\r\nHost: h.test\r\nVia: 1.1 sluice\r\n\r\n"},
	        {80, false, true, false, "GET /p HTTP/1.1\r\nHost: h.test:80\r\nVia: 1.1 sluice\r\n\r\n"},
	        {9080, false, false, true, "GET http://h.test:9080/p HTTP/1.1\r\nHost: h.test:9080\r\nVia: 1.1 sluice\r\n\r\n"},
	        {80, false, false, true, "GET http://h.test/p HTTP/1.1\r\nHost: h.test\r\nVia: 1.1 sluice\r\n\r\n"},
	};
	(void)state;
	assert_int_equal(parse("GET http://a.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n", req), 0);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct http_rewrite rw = {.host = "h.test", .port = cases[i].port, .v6 = cases[i].v6,
		                          .tls = cases[i].tls, .absolute = cases[i].absolute};
		struct sink k = {.n = 0};
		http_rewrite_head(req, &rw, sink_put, &k);
		assert_string_equal(k.b, cases[i].want);
	}
	free(req);
}

/* Header values and reason phrases: HTAB and obs-text (0x80-0xff) pass, other control bytes and DEL do not. */
static void test_value_bytes(void **state)
{
	struct http_request *req = malloc(sizeof *req);
	struct http_response *resp = malloc(sizeof *resp);
	static const char *bad[] = {"a\x01" "b", "a\x1f", "\x7f", "a\x0b" "b"};
	char head[128];
	const char *why;
	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(head, sizeof head, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: %s\r\n\r\n", bad[i]);
		assert_int_equal(parse(head, req), 400);
		snprintf(head, sizeof head, "HTTP/1.1 200 O%sK\r\nContent-Length: 0\r\n\r\n", bad[i]);
		assert_int_equal(http_parse_response(head, strlen(head), false, resp, &why), -EINVAL);
	}
	assert_int_equal(parse("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: a\tb\x80\xff\r\n\r\n", req), 0);
	assert_int_equal(req->headers[1].value_len, 5);
	snprintf(head, sizeof head, "HTTP/1.1 200 O\tK\x80\r\nContent-Length: 0\r\n\r\n");
	assert_int_equal(http_parse_response(head, strlen(head), false, resp, &why), 0);
	free(req);
	free(resp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_good_request),   cmocka_unit_test(test_connect),
	        cmocka_unit_test(test_bad_requests),   cmocka_unit_test(test_equal_duplicate_cl_and_http10),
	        cmocka_unit_test(test_scanner_limits), cmocka_unit_test(test_rewrite_port), cmocka_unit_test(test_value_bytes), cmocka_unit_test(test_authority),
	        cmocka_unit_test(test_response),       cmocka_unit_test(test_chunked),
	        cmocka_unit_test(test_chunked_skip),   cmocka_unit_test(test_request_line_prefix),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
