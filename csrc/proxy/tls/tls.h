#ifndef SANDSTACK_PROXY_TLS_H
#define SANDSTACK_PROXY_TLS_H
/* TLS for inspected connections, with OpenSSL over memory BIOs: the proxy feeds the
 * ciphertext libuv read into an endpoint and writes out what the endpoint produced, so OpenSSL
 * never touches a socket and never blocks the loop. Two contexts per proxy:
 *   serve:  facing the sandbox, with a leaf for the CONNECT host signed by the stack CA, and
 *           ALPN that selects only http/1.1 (the request reader speaks HTTP/1.1 only);
 *   origin: toward the real host, verifying its chain against the system roots plus
 *           SANDSTACK_UPSTREAM_CA, and its name against the CONNECT host. */
#include <curl/curl.h>
#include <openssl/ssl.h>
#include <stddef.h>

#include "proxy/tls/ca.h"
#include "proxy/config.h"

typedef struct proxy_tls {
  SSL_CTX *serve, *origin;
  proxy_ca *ca;            /* NULL: inspection is off (no CA dir, inspect = false, or no rule needs it) */
  STACK_OF(X509) *extra;   /* the SANDSTACK_UPSTREAM_CA roots, also given to the credential route */
  const char *off_reason;  /* why inspection is off, for the needs_inspection message */
} proxy_tls;

/* Loads the extra roots, makes the CA when the policy needs inspection and SANDSTACK_CA_DIR is
 * set, and writes the CA files. NULL with the reason in why. */
proxy_tls *tls_new(const proxy_config *cfg, char *why, size_t why_len);
void tls_free(proxy_tls *t);

/* The credential route's curl handle trusts the same extra roots (beside the system's). */
void tls_curl_trust(CURL *easy, proxy_tls *t);

/* One TLS endpoint over memory BIOs. */
typedef struct tls_end {
  SSL *ssl;
  BIO *in, *out; /* in: ciphertext received, for OpenSSL to read; out: ciphertext OpenSSL wrote */
} tls_end;

/* The sandbox-facing end for host: *fresh tells whether its leaf was signed just now. */
int tls_end_serve(tls_end *e, proxy_tls *t, const char *host, int *fresh);
/* The origin-facing end: SNI (for a name), name or address verification, ALPN http/1.1. */
int tls_end_origin(tls_end *e, proxy_tls *t, const char *host);
void tls_end_free(tls_end *e);
int tls_end_feed(tls_end *e, const char *data, size_t len);
/* The ciphertext produced so far, malloc'd (NULL when none). */
char *tls_end_take(tls_end *e, size_t *len);

/* A short name for a certificate verification result: "untrusted", "name_mismatch",
 * "expired", "not_yet_valid", "revoked", "bad_signature" or "verify_failed". */
const char *tls_verify_reason(long result);

#endif
