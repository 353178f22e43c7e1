/* Fuzz target: the proxy's HTTP head handling (proxy/http_parse.c). The input is fed to the head
 * scanner in pieces (the first byte picks the piece size), the head it finds is parsed as a request
 * and as a response, and whatever follows goes through the chunked-body framer (chunk data now fed, now
 * skipped as when it is spliced). The input is also read as a tunnel's first bytes
 * (http_request_line_prefix). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The scanner as it was written first, one byte at a time: the real one counts runs of line content at
 * once (issue 16), and must end, fail and count exactly as this does, fed in any pieces. */
struct ref_scanner {
	size_t total, line_len;
	unsigned lines;
	bool cr;
	int status;
};

static enum http_scan_result ref_feed(struct ref_scanner *s, const uint8_t *buf, size_t len, size_t *used)
{
	*used = 0;
	if (s->status)
		return HTTP_SCAN_ERROR;
	for (size_t i = 0; i < len; i++) {
		uint8_t c = buf[i];
		s->total++;
		if (s->total > HTTP_HEAD_MAX)
			return s->status = 431, HTTP_SCAN_ERROR;
		if (c == '\n') {
			if (!s->cr)
				return s->status = 400, HTTP_SCAN_ERROR;
			s->cr = false;
			if (s->line_len == 0) {
				if (s->lines == 0)
					return s->status = 400, HTTP_SCAN_ERROR;
				*used = i + 1;
				return HTTP_SCAN_DONE;
			}
			s->lines++;
			s->line_len = 0;
			if (s->lines > HTTP_HEADERS_MAX + 1)
				return s->status = 431, HTTP_SCAN_ERROR;
			continue;
		}
		if (s->cr)
			return s->status = 400, HTTP_SCAN_ERROR;
		if (c == '\r') {
			s->cr = true;
			continue;
		}
		if (c == '\0')
			return s->status = 400, HTTP_SCAN_ERROR;
		s->line_len++;
		if (s->lines == 0 && s->line_len > HTTP_REQLINE_MAX)
			return s->status = 414, HTTP_SCAN_ERROR;
	}
	*used = len;
	return HTTP_SCAN_MORE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_scanner sc;
	struct http_request *req;
	struct http_response *resp;
	struct http_chunked ch;
	const char *why;
	size_t step, off = 0, used = 0;
	enum http_scan_result r = HTTP_SCAN_MORE;

	if (size < 1)
		return 0;
	step = (size_t)(data[0] % 16) + 1;
	data++;
	size--;
	http_scanner_init(&sc, false);
	struct ref_scanner ref = {0};
	while (off < size && r == HTTP_SCAN_MORE) {
		size_t n = size - off < step ? size - off : step, ref_used = 0;
		enum http_scan_result rr = ref_feed(&ref, data + off, n, &ref_used);
		r = http_scanner_feed(&sc, (const char *)data + off, n, &used);
		if (r != rr || sc.total != ref.total || (r != HTTP_SCAN_ERROR && used != ref_used) ||
		    (r == HTTP_SCAN_ERROR && sc.status != ref.status))
			abort();
		off += used;
	}
	/* A tunnel's first bytes (connect.c): the answer for a prefix, once known, is the answer for all of
	 * it (the bytes read later never turn "no request line" into one, nor back); a parsable request
	 * head is always read as one. */
	{
		int full = http_request_line_prefix((const char *)data, size);
		for (size_t k = 0; k < size && k < 96; k++) {
			int part = http_request_line_prefix((const char *)data, k);
			if (part != -1 && part != full)
				abort();
		}
		if (r == HTTP_SCAN_DONE && (req = malloc(sizeof *req)) != NULL) {
			if (http_parse_request((const char *)data, sc.total, HTTP_PARSE_ORIGIN_OK, req, &why) == 0 && full != 1)
				abort();
			free(req);
		}
	}
	req = malloc(sizeof *req);
	resp = malloc(sizeof *resp);
	if (!req || !resp)
		goto out;
	/* The parsers must be safe on any bytes, not only on what the scanner accepts. */
	(void)http_parse_request((const char *)data, off, 0, req, &why);
	(void)http_parse_request((const char *)data, off, HTTP_PARSE_ORIGIN_OK, req, &why);
	(void)http_parse_response((const char *)data, off, false, resp, &why);
	if (r == HTTP_SCAN_DONE && http_parse_request((const char *)data, sc.total, 0, req, &why) == 0) {
		/* every pointer the parser returns lies inside the head */
		for (unsigned i = 0; i < req->nheaders; i++) {
			if (req->headers[i].name < (const char *)data ||
			    req->headers[i].value + req->headers[i].value_len > (const char *)data + sc.total)
				abort();
		}
	}
	http_chunked_init(&ch);
	while (off < size) {
		size_t n = size - off < step ? size - off : step;
		uint64_t left = http_chunked_data_left(&ch);
		if (left > 0 && (off & 1)) {
			/* as the proxy splices chunk data: passed on without being fed */
			size_t k = (uint64_t)(size - off) < left ? size - off : (size_t)left;
			http_chunked_skip(&ch, k);
			if (http_chunked_data_left(&ch) != left - k)
				abort();
			off += k;
			continue;
		}
		if (http_chunked_feed(&ch, (const char *)data + off, n, &used) != HTTP_CHUNK_MORE)
			break;
		if (used != n)
			abort();
		off += n;
	}
out:
	free(req);
	free(resp);
	return 0;
}
