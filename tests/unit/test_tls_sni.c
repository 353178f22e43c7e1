/* Unit tests of the TLS ClientHello SNI parser (proxy/tls_sni.c): hellos built field by field, each
 * malformation the parser must refuse, reassembly across records and its limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tls_sni.h"

/* A growing byte buffer for building hellos. */
struct b {
	uint8_t d[40000];
	size_t n;
};

static void put(struct b *b, const void *p, size_t n)
{
	memcpy(b->d + b->n, p, n);
	b->n += n;
}
static void u8(struct b *b, unsigned v) { b->d[b->n++] = (uint8_t)v; }
static void u16(struct b *b, unsigned v) { u8(b, v >> 8); u8(b, v & 0xff); }

/* ext: extensions block (NULL = no extensions field at all). Returns the handshake message. */
static void hello_msg(struct b *m, const struct b *ext, size_t pad)
{
	struct b body = {.n = 0};
	uint8_t rnd[32] = {0};

	u16(&body, 0x0303);
	put(&body, rnd, 32);
	u8(&body, 0);            /* session id */
	u16(&body, 2 + 2 * pad); /* cipher suites */
	u16(&body, 0x1301);
	for (size_t i = 0; i < pad; i++)
		u16(&body, 0x1302);
	u8(&body, 1); /* compression */
	u8(&body, 0);
	if (ext) {
		u16(&body, (unsigned)ext->n);
		put(&body, ext->d, ext->n);
	}
	m->n = 0;
	u8(m, 1);
	u8(m, (unsigned)(body.n >> 16));
	u16(m, (unsigned)(body.n & 0xffff));
	put(m, body.d, body.n);
}

static void sni_ext(struct b *e, const char *name, size_t len)
{
	u16(e, 0); /* server_name */
	u16(e, (unsigned)(len + 5));
	u16(e, (unsigned)(len + 3));
	u8(e, 0);
	u16(e, (unsigned)len);
	put(e, name, len);
}

/* Frames msg into records of at most `chunk` bytes. */
static void records(struct b *out, const struct b *msg, size_t chunk)
{
	out->n = 0;
	for (size_t off = 0; off < msg->n; off += chunk) {
		size_t n = msg->n - off < chunk ? msg->n - off : chunk;
		u8(out, 0x16);
		u16(out, 0x0301);
		u16(out, (unsigned)n);
		put(out, msg->d + off, n);
	}
}

static enum tls_sni_result parse(const struct b *in, char *name)
{
	const char *why = NULL;
	enum tls_sni_result r = tls_sni_parse(in->d, in->n, name, TLS_SNI_NAME_MAX + 1, &why);
	if (r == TLS_SNI_ERROR)
		assert_non_null(why);
	return r;
}

static struct b ext, msg, in;

static void test_found(void **st)
{
	char name[TLS_SNI_NAME_MAX + 1];
	(void)st;
	ext.n = 0;
	u16(&ext, 0x002b); /* supported_versions before the SNI */
	u16(&ext, 3);
	u8(&ext, 2);
	u16(&ext, 0x0304);
	sni_ext(&ext, "Allowed.Test", 12);
	hello_msg(&msg, &ext, 0);
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_FOUND);
	assert_string_equal(name, "Allowed.Test");
	/* every strict prefix is incomplete, never a verdict */
	for (size_t n = 0; n < in.n; n++) {
		struct b p = in;
		p.n = n;
		assert_int_equal(parse(&p, name), TLS_SNI_MORE);
	}
}

static void test_none(void **st)
{
	char name[TLS_SNI_NAME_MAX + 1];
	(void)st;
	hello_msg(&msg, NULL, 0);
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_NONE);
	ext.n = 0;
	u16(&ext, 0x000a);
	u16(&ext, 0);
	hello_msg(&msg, &ext, 0);
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_NONE);
}

static void test_not_tls(void **st)
{
	char name[TLS_SNI_NAME_MAX + 1];
	struct b g = {.n = 0};
	(void)st;
	put(&g, "SSH-2.0-x\r\n", 11);
	assert_int_equal(parse(&g, name), TLS_SNI_NOT_TLS);
}

static void test_split(void **st)
{
	char name[TLS_SNI_NAME_MAX + 1];
	size_t per;
	(void)st;
	ext.n = 0;
	sni_ext(&ext, "a.test", 6);
	hello_msg(&msg, &ext, 20);
	per = (msg.n + TLS_SNI_RECORDS_MAX - 1) / TLS_SNI_RECORDS_MAX;
	records(&in, &msg, per); /* exactly the limit */
	assert_int_equal(parse(&in, name), TLS_SNI_FOUND);
	assert_string_equal(name, "a.test");
	records(&in, &msg, 2); /* tiny records (the header itself split): far too many */
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	records(&in, &msg, (msg.n + TLS_SNI_RECORDS_MAX) / (TLS_SNI_RECORDS_MAX + 1)); /* one too many */
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
}

static void test_limits(void **st)
{
	char name[TLS_SNI_NAME_MAX + 1];
	(void)st;
	ext.n = 0;
	sni_ext(&ext, "a.test", 6);
	hello_msg(&msg, &ext, 8200); /* > TLS_SNI_HELLO_MAX */
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	{
		char big[TLS_SNI_NAME_MAX + 1];
		memset(big, 'a', sizeof big);
		ext.n = 0;
		sni_ext(&ext, big, sizeof big); /* 256 bytes */
		hello_msg(&msg, &ext, 0);
		records(&in, &msg, 16384);
		assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	}
}

static void test_malformed(void **st)
{
	char name[TLS_SNI_NAME_MAX + 1];
	(void)st;
	/* a NUL inside the name */
	ext.n = 0;
	sni_ext(&ext, "evil.test\0allowed.test", 22);
	hello_msg(&msg, &ext, 0);
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	/* two server_name extensions */
	ext.n = 0;
	sni_ext(&ext, "a.test", 6);
	sni_ext(&ext, "b.test", 6);
	hello_msg(&msg, &ext, 0);
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	/* two host_names in one list */
	ext.n = 0;
	u16(&ext, 0);
	u16(&ext, 2 + 9 + 9);
	u16(&ext, 9 + 9);
	u8(&ext, 0), u16(&ext, 6), put(&ext, "a.test", 6);
	u8(&ext, 0), u16(&ext, 6), put(&ext, "b.test", 6);
	hello_msg(&msg, &ext, 0);
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	/* extension length beyond the block */
	ext.n = 0;
	sni_ext(&ext, "a.test", 6);
	ext.d[3] += 1;
	hello_msg(&msg, &ext, 0);
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	/* not a ClientHello */
	ext.n = 0;
	sni_ext(&ext, "a.test", 6);
	hello_msg(&msg, &ext, 0);
	msg.d[0] = 2;
	records(&in, &msg, 16384);
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	/* a record of another type in the middle */
	msg.d[0] = 1;
	records(&in, &msg, 40);
	in.d[45] = 0x17;
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	/* a bad record version, an empty record */
	records(&in, &msg, 16384);
	in.d[1] = 2;
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
	records(&in, &msg, 16384);
	in.d[3] = in.d[4] = 0;
	assert_int_equal(parse(&in, name), TLS_SNI_ERROR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_found),     cmocka_unit_test(test_none),   cmocka_unit_test(test_not_tls),
		cmocka_unit_test(test_split),     cmocka_unit_test(test_limits), cmocka_unit_test(test_malformed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
