/* The server name (SNI) of a TLS ClientHello, read without terminating TLS: a hand-written, bounds-checked
 * parser (why: docs/proxy.md, "Transparent mode"). Pure function over a byte buffer: no I/O, no
 * allocation, fuzzed (tests/fuzz/fuzz_tls_sni.c).
 *
 * Trust boundary: the bytes come from a sandbox. Every read is bounded by the length given; a hello that
 * is malformed, split over too many records or bigger than the limit is an error (the caller denies),
 * never "no name". */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define TLS_SNI_HELLO_MAX   16384 /* ClientHello message body, bytes */
#define TLS_SNI_RECORDS_MAX 4     /* records a ClientHello may be split over */
#define TLS_SNI_NAME_MAX    255   /* bytes of a host_name */
/* Bytes a reader buffers while looking for a complete ClientHello: its records fit with room to spare. */
#define TLS_SNI_READ_MAX (TLS_SNI_HELLO_MAX + TLS_SNI_RECORDS_MAX * 5 + 4096)

enum tls_sni_result {
	TLS_SNI_MORE = 0, /* a valid prefix: more bytes are needed */
	TLS_SNI_FOUND,    /* a complete ClientHello with exactly one host_name: in `name` */
	TLS_SNI_NONE,     /* a complete, valid ClientHello without a server_name extension */
	TLS_SNI_NOT_TLS,  /* the first byte is not a TLS handshake record */
	TLS_SNI_ERROR,    /* malformed, split beyond the limits, or too big: *why says how */
};

/* Parses the ClientHello at the start of buf. On FOUND, name (name_size >= TLS_SNI_NAME_MAX + 1) holds
 * the host_name, NUL-terminated and free of NUL bytes (not yet canonical: use policy_canon_host). */
enum tls_sni_result tls_sni_parse(const uint8_t *buf, size_t len, char *name, size_t name_size, const char **why);
