/* The per-session CA of HTTPS inspection and the leaf certificates it mints (mitm_ca.h). Anchored
 * on mitmproxy's certs.py and Squid's ssl/gadgets.cc: one CA, one leaf key reused for every leaf of
 * the session, a leaf per server name carrying it as its subject alternative name. */
#include "mitm_ca.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

#define CA_DAYS   30
#define LEAF_DAYS 7

struct leaf {
	char host[POLICY_HOST_MAX + 1];
	SSL_CTX *ctx; /* owned */
	unsigned long used;
};

struct proxy_mitm_ca {
	EVP_PKEY *key;      /* owned: the CA's */
	X509 *cert;         /* owned */
	EVP_PKEY *leaf_key; /* owned: shared by every leaf of the session */
	struct leaf cache[PROXY_MITM_CACHE_MAX];
	size_t ncache;
	unsigned long tick;
};

static void ssl_err(char *err, size_t errlen, const char *what)
{
	unsigned long e = ERR_get_error();
	char buf[256];

	ERR_error_string_n(e, buf, sizeof buf);
	snprintf(err, errlen, "%s: %s", what, e ? buf : "failed");
	ERR_clear_error();
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;

	X509V3_set_ctx_nodb(&v3);
	X509V3_set_ctx(&v3, issuer, cert, NULL, NULL, 0);
	ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
	if (!ext)
		return -1;
	int r = X509_add_ext(cert, ext, -1) ? 0 : -1;
	X509_EXTENSION_free(ext);
	return r;
}

static int random_serial(X509 *cert)
{
	unsigned char b[16];
	BIGNUM *bn;
	int r = -1;

	if (RAND_bytes(b, sizeof b) != 1)
		return -1;
	b[0] &= 0x7f; /* positive */
	bn = BN_bin2bn(b, sizeof b, NULL);
	if (bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)))
		r = 0;
	BN_free(bn);
	return r;
}

static char *pem_of(int (*write)(BIO *, void *), void *obj)
{
	BIO *bio = BIO_new(BIO_s_mem());
	char *data, *out = NULL;
	long n;

	if (!bio)
		return NULL;
	if (write(bio, obj) == 1 && (n = BIO_get_mem_data(bio, &data)) > 0 && n < PROXY_MITM_PEM_MAX) {
		out = malloc((size_t)n + 1);
		if (out) {
			memcpy(out, data, (size_t)n);
			out[n] = '\0';
		}
	}
	BIO_free(bio);
	return out;
}

static int write_key(BIO *b, void *k)
{
	return PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL);
}

static int write_cert(BIO *b, void *c)
{
	return PEM_write_bio_X509(b, c);
}

int proxy_mitm_ca_make(const char *session_id, char **key_pem, char **cert_pem, char *err, size_t errlen)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = X509_new();
	X509_NAME *name = NULL;
	char cn[128];
	int r = -EIO;

	*key_pem = *cert_pem = NULL;
	if (!key || !cert) {
		ssl_err(err, errlen, "making the session CA key");
		goto out;
	}
	snprintf(cn, sizeof cn, "sluice session %.64s inspection CA", session_id);
	name = X509_get_subject_name(cert);
	if (!X509_set_version(cert, 2) || random_serial(cert) < 0 || !X509_gmtime_adj(X509_getm_notBefore(cert), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(cert), (long)CA_DAYS * 86400) ||
	    !X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"sluice", -1, -1, 0) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) ||
	    !X509_set_issuer_name(cert, name) || !X509_set_pubkey(cert, key) ||
	    add_ext(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
	    add_ext(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
	    add_ext(cert, cert, NID_subject_key_identifier, "hash") < 0 || !X509_sign(cert, key, EVP_sha256())) {
		ssl_err(err, errlen, "making the session CA certificate");
		goto out;
	}
	*key_pem = pem_of(write_key, key);
	*cert_pem = pem_of(write_cert, cert);
	if (!*key_pem || !*cert_pem) {
		snprintf(err, errlen, "writing the session CA as PEM: out of memory");
		r = -ENOMEM;
		goto out;
	}
	r = 0;
out:
	if (r < 0) {
		if (*key_pem)
			explicit_bzero(*key_pem, strlen(*key_pem));
		free(*key_pem);
		free(*cert_pem);
		*key_pem = *cert_pem = NULL;
	}
	X509_free(cert);
	EVP_PKEY_free(key);
	return r;
}

struct proxy_mitm_ca *proxy_mitm_ca_new(const char *key_pem, const char *cert_pem, char *err, size_t errlen)
{
	struct proxy_mitm_ca *ca = calloc(1, sizeof *ca);
	BIO *kb = BIO_new_mem_buf(key_pem, -1), *cb = BIO_new_mem_buf(cert_pem, -1);

	if (!ca || !kb || !cb) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	ca->key = PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL);
	ca->cert = PEM_read_bio_X509(cb, NULL, NULL, NULL);
	if (!ca->key || !ca->cert || X509_check_private_key(ca->cert, ca->key) != 1) {
		ssl_err(err, errlen, "loading the session CA");
		goto fail;
	}
	ca->leaf_key = EVP_EC_gen("P-256");
	if (!ca->leaf_key) {
		ssl_err(err, errlen, "making the leaf key");
		goto fail;
	}
	BIO_free(kb);
	BIO_free(cb);
	return ca;
fail:
	BIO_free(kb);
	BIO_free(cb);
	proxy_mitm_ca_free(ca);
	return NULL;
}

void proxy_mitm_ca_free(struct proxy_mitm_ca *ca)
{
	if (!ca)
		return;
	for (size_t i = 0; i < ca->ncache; i++)
		SSL_CTX_free(ca->cache[i].ctx);
	EVP_PKEY_free(ca->leaf_key);
	EVP_PKEY_free(ca->key);
	X509_free(ca->cert);
	free(ca);
}

static X509 *mint_leaf(struct proxy_mitm_ca *ca, const char *host)
{
	X509 *cert = X509_new();
	char san[POLICY_HOST_MAX + 8];
	X509_NAME *name;

	if (!cert)
		return NULL;
	snprintf(san, sizeof san, "DNS:%s", host);
	name = X509_get_subject_name(cert);
	if (!X509_set_version(cert, 2) || random_serial(cert) < 0 || !X509_gmtime_adj(X509_getm_notBefore(cert), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(cert), (long)LEAF_DAYS * 86400) ||
	    !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)host, -1, -1, 0) ||
	    !X509_set_issuer_name(cert, X509_get_subject_name(ca->cert)) || !X509_set_pubkey(cert, ca->leaf_key) ||
	    add_ext(cert, ca->cert, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
	    add_ext(cert, ca->cert, NID_key_usage, "critical,digitalSignature") < 0 ||
	    add_ext(cert, ca->cert, NID_ext_key_usage, "serverAuth") < 0 ||
	    add_ext(cert, ca->cert, NID_subject_alt_name, san) < 0 ||
	    add_ext(cert, ca->cert, NID_authority_key_identifier, "keyid:always") < 0 ||
	    !X509_sign(cert, ca->key, EVP_sha256())) {
		X509_free(cert);
		return NULL;
	}
	return cert;
}

/* ALPN: HTTP/1.1 only (rules apply per request; there is no HTTP/2 front). A client that offers no
 * http/1.1 gets none selected and falls back to HTTP/1.1 or gives up. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
		       unsigned inlen, void *arg)
{
	static const unsigned char h11[] = "\x08http/1.1";
	unsigned char *sel;
	(void)ssl;
	(void)arg;
	if (SSL_select_next_proto(&sel, outlen, h11, sizeof h11 - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

SSL_CTX *proxy_mitm_ca_server_ctx(struct proxy_mitm_ca *ca, const char *host, char *err, size_t errlen)
{
	struct leaf *slot = NULL;
	SSL_CTX *ctx = NULL;
	X509 *leaf = NULL;

	ca->tick++;
	for (size_t i = 0; i < ca->ncache; i++) {
		if (strcmp(ca->cache[i].host, host) == 0) {
			ca->cache[i].used = ca->tick;
			return ca->cache[i].ctx;
		}
	}
	if (!(leaf = mint_leaf(ca, host))) {
		ssl_err(err, errlen, "minting a certificate");
		return NULL;
	}
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) || SSL_CTX_use_certificate(ctx, leaf) != 1 ||
	    SSL_CTX_add_extra_chain_cert(ctx, X509_dup(ca->cert)) != 1 || SSL_CTX_use_PrivateKey(ctx, ca->leaf_key) != 1) {
		ssl_err(err, errlen, "setting up the TLS server");
		SSL_CTX_free(ctx);
		X509_free(leaf);
		return NULL;
	}
	X509_free(leaf);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE |
	                                 SSL_OP_PRIORITIZE_CHACHA);
	(void)SSL_CTX_set_ciphersuites(ctx, PROXY_TLS13_SUITES); /* (the defaults, in our order) */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
	if (ca->ncache < PROXY_MITM_CACHE_MAX) {
		slot = &ca->cache[ca->ncache++];
	} else {
		slot = &ca->cache[0]; /* the least recently used goes (its connections hold their own reference) */
		for (size_t i = 1; i < ca->ncache; i++)
			if (ca->cache[i].used < slot->used)
				slot = &ca->cache[i];
		SSL_CTX_free(slot->ctx);
	}
	snprintf(slot->host, sizeof slot->host, "%s", host);
	slot->ctx = ctx;
	slot->used = ca->tick;
	return ctx;
}
