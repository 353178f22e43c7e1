/* The per-session certificate authority of HTTPS inspection (docs/proxy.md).
 *
 * sluiced makes one CA per session whose policy inspects a host (proxy_mitm_ca_make, at session
 * start): an EC P-256 key and a self-signed certificate. The key stays on the engine side (sluiced
 * and the engine, which gets it with the session); only the certificate goes to the launcher, which
 * adds it to the sandbox's trust. The engine mints a leaf certificate per server name on demand,
 * signed by the session's CA, and keeps the TLS server context for it (bounded cache).
 *
 * Ownership: a proxy_mitm_ca owns its key, certificate and cached contexts; contexts returned by
 * proxy_mitm_ca_server_ctx are borrowed (valid until the CA is freed). */
#pragma once

#include <stddef.h>

typedef struct ssl_ctx_st SSL_CTX;

/* TLS 1.3 cipher suites of both inspected sides, cheapest first: AES-128-GCM (AES-NI), ChaCha20-Poly1305
 * (preferred for a client that lists it first: one without AES in hardware), AES-256-GCM. */
#define PROXY_TLS13_SUITES "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384"

#define PROXY_MITM_PEM_MAX   4096 /* a CA key or certificate in PEM */
#define PROXY_MITM_CACHE_MAX 256  /* leaf contexts kept per session */

/* Makes a CA for session_id: malloced PEM strings in *key_pem and *cert_pem. 0 or -errno with err. */
int proxy_mitm_ca_make(const char *session_id, char **key_pem, char **cert_pem, char *err, size_t errlen);

struct proxy_mitm_ca;
/* Loads a CA from its PEM key and certificate (copied). NULL with err on failure. */
struct proxy_mitm_ca *proxy_mitm_ca_new(const char *key_pem, const char *cert_pem, char *err, size_t errlen);
void proxy_mitm_ca_free(struct proxy_mitm_ca *ca); /* NULL is a no-op */
/* The TLS server context for canonical host name `host`: a leaf certificate for it signed by the CA,
 * TLS 1.2 or newer, ALPN http/1.1 only. Made on first use and cached. NULL with err on failure. */
SSL_CTX *proxy_mitm_ca_server_ctx(struct proxy_mitm_ca *ca, const char *host, char *err, size_t errlen);
