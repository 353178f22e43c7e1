/* The SOCKS5 handshake (RFC 1928) of a session's client, read by hand: the method greeting and the
 * request. Pure functions over a byte buffer: no I/O, no allocation, fuzzed (tests/fuzz/fuzz_socks5.c).
 * Why by hand: the two messages are a few fixed fields and one length-prefixed name; no Debian library
 * parses the server side of SOCKS5 without also owning the sockets (docs/proxy.md, "SOCKS5").
 *
 * Trust boundary: the bytes come from a sandbox. Every read is bounded by the length given; a malformed
 * message is an error with the reply code the client gets, never a guess. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SOCKS5_VERSION 5

/* Methods (RFC 1928 section 3). sluice accepts NO AUTHENTICATION only: the session is identified by its
 * address, as on every other front. */
#define SOCKS5_METHOD_NOAUTH 0x00
#define SOCKS5_METHOD_NONE   0xff /* NO ACCEPTABLE METHODS */

/* Commands and address types (section 4). */
#define SOCKS5_CMD_CONNECT   1
#define SOCKS5_CMD_BIND      2
#define SOCKS5_CMD_UDP       3
#define SOCKS5_ATYP_IPV4     1
#define SOCKS5_ATYP_DOMAIN   3
#define SOCKS5_ATYP_IPV6     4

/* Reply codes (section 6). */
#define SOCKS5_REP_OK            0x00
#define SOCKS5_REP_FAILURE       0x01 /* general SOCKS server failure */
#define SOCKS5_REP_NOT_ALLOWED   0x02 /* connection not allowed by ruleset */
#define SOCKS5_REP_NET_UNREACH   0x03
#define SOCKS5_REP_HOST_UNREACH  0x04
#define SOCKS5_REP_REFUSED       0x05
#define SOCKS5_REP_TTL_EXPIRED   0x06
#define SOCKS5_REP_CMD_UNSUP     0x07
#define SOCKS5_REP_ATYP_UNSUP    0x08

#define SOCKS5_GREETING_MAX (2 + 255)           /* VER NMETHODS METHODS[255] */
#define SOCKS5_REQUEST_MAX  (4 + 1 + 255 + 2)   /* VER CMD RSV ATYP LEN NAME[255] PORT */
#define SOCKS5_NAME_MAX     255

enum socks5_result {
	SOCKS5_MORE = 0, /* a valid prefix: more bytes are needed */
	SOCKS5_OK,       /* a complete message; *used says how many bytes it took */
	SOCKS5_ERROR,    /* malformed or unsupported: *why says how, and the request's reply code says what to answer */
};

/* The method greeting at the start of buf: on OK, *used is its length and *noauth whether the client
 * offers NO AUTHENTICATION. */
enum socks5_result socks5_parse_greeting(const uint8_t *buf, size_t len, size_t *used, bool *noauth, const char **why);

struct socks5_request {
	uint8_t cmd;  /* SOCKS5_CMD_* as sent (also on an error about something after it) */
	uint8_t atyp; /* SOCKS5_ATYP_* */
	/* The destination: for ATYP_DOMAIN the name as sent (1..255 bytes, no NUL, NUL-terminated here, not
	 * yet canonical); for an address, its text form (IPv6 without brackets). */
	char host[SOCKS5_NAME_MAX + 1];
	uint16_t port;
	uint8_t rep; /* on ERROR: the reply code to send (SOCKS5_REP_*) */
};

/* The request at the start of buf. On OK, *used is its length and req is filled. On ERROR, req->rep is
 * the reply the client gets: COMMAND NOT SUPPORTED for BIND and UDP ASSOCIATE and unknown commands
 * (only when the rest of the request is well formed), ADDRESS TYPE NOT SUPPORTED, or FAILURE. */
enum socks5_result socks5_parse_request(const uint8_t *buf, size_t len, size_t *used, struct socks5_request *req,
                                        const char **why);
