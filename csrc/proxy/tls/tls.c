/* TLS contexts and memory-BIO endpoints for inspected connections (see tls.h). */
#include "proxy/tls/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char ALPN_HTTP11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

static int is_ipv4(const char *h) { return h[0] && strspn(h, "0123456789.") == strlen(h); }

/* Only http/1.1: a client offering h2 alone gets no ALPN answer and must speak HTTP/1.1 or stop. */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned inlen, void *arg) {
  (void)ssl;
  (void)arg;
  unsigned char *sel = NULL;
  if (SSL_select_next_proto(&sel, outlen, ALPN_HTTP11, sizeof ALPN_HTTP11, in, inlen) != OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_NOACK;
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

/* SANDSTACK_UPSTREAM_CA: PEM text, or (as the credential route first took it) a file of PEM. */
static STACK_OF(X509) *load_extra(const char *value, char *why, size_t why_len) {
  STACK_OF(X509) *sk = sk_X509_new_null();
  BIO *b = strstr(value, "-----BEGIN") ? BIO_new_mem_buf(value, -1) : BIO_new_file(value, "r");
  if (!sk || !b) {
    snprintf(why, why_len, "SANDSTACK_UPSTREAM_CA is neither PEM text nor a readable file");
    BIO_free(b);
    sk_X509_free(sk);
    ERR_clear_error();
    return NULL;
  }
  X509 *x;
  while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
    if (!sk_X509_push(sk, x)) X509_free(x);
  }
  ERR_clear_error(); /* the end of the PEM stream reads as an error */
  BIO_free(b);
  if (sk_X509_num(sk) == 0) {
    snprintf(why, why_len, "SANDSTACK_UPSTREAM_CA holds no PEM certificate");
    sk_X509_free(sk);
    return NULL;
  }
  return sk;
}

static void trust_extra(X509_STORE *store, STACK_OF(X509) *extra) {
  for (int i = 0; extra && i < sk_X509_num(extra); i++) X509_STORE_add_cert(store, sk_X509_value(extra, i));
  ERR_clear_error(); /* a certificate already in the store is not an error for us */
}

static CURLcode curl_ctx(CURL *easy, void *ssl_ctx, void *arg) {
  (void)easy;
  trust_extra(SSL_CTX_get_cert_store((SSL_CTX *)ssl_ctx), arg);
  return CURLE_OK;
}

void tls_curl_trust(CURL *easy, proxy_tls *t) {
  if (!t || !t->extra) return;
  curl_easy_setopt(easy, CURLOPT_SSL_CTX_FUNCTION, curl_ctx);
  curl_easy_setopt(easy, CURLOPT_SSL_CTX_DATA, t->extra);
}

static const char *inspection_off_reason(const proxy_config *cfg) {
  if (cfg->policy->no_inspect) return "the policy sets inspect = false";
  if (!cfg->ca_dir) return "this proxy has no SANDSTACK_CA_DIR to publish an inspection CA";
  return NULL;
}

proxy_tls *tls_new(const proxy_config *cfg, char *why, size_t why_len) {
  proxy_tls *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  if (cfg->upstream_ca && !(t->extra = load_extra(cfg->upstream_ca, why, why_len))) goto fail;
  t->serve = SSL_CTX_new(TLS_server_method());
  t->origin = SSL_CTX_new(TLS_client_method());
  if (!t->serve || !t->origin || SSL_CTX_set_min_proto_version(t->serve, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_min_proto_version(t->origin, TLS1_2_VERSION) != 1 || SSL_CTX_set_default_verify_paths(t->origin) != 1) {
    snprintf(why, why_len, "cannot set up OpenSSL");
    goto fail;
  }
  SSL_CTX_set_alpn_select_cb(t->serve, select_alpn, NULL);
  SSL_CTX_set_verify(t->origin, SSL_VERIFY_PEER, NULL);
  trust_extra(SSL_CTX_get_cert_store(t->origin), t->extra);
  t->off_reason = inspection_off_reason(cfg);
  int needs = ca_policy_needs_inspection(cfg->policy) || creds_any_host(cfg->creds);
  if (!t->off_reason && needs && !(t->ca = ca_create(cfg->policy, cfg->creds, cfg->ca_hours, cfg->leaf_cache, why, why_len)))
    goto fail;
  if (cfg->ca_dir) {
    const char *roots = cfg->ca_roots ? cfg->ca_roots : getenv(X509_get_default_cert_file_env());
    if (!roots || !*roots) roots = X509_get_default_cert_file();
    if (ca_write_files(t->ca, t->extra, cfg->ca_dir, roots, why, why_len) != 0) goto fail;
  }
  return t;
fail:
  tls_free(t);
  ERR_clear_error();
  return NULL;
}

void tls_free(proxy_tls *t) {
  if (!t) return;
  SSL_CTX_free(t->serve);
  SSL_CTX_free(t->origin);
  ca_free(t->ca);
  sk_X509_pop_free(t->extra, X509_free);
  free(t);
}

static int end_init(tls_end *e, SSL_CTX *ctx) {
  memset(e, 0, sizeof *e);
  e->ssl = SSL_new(ctx);
  e->in = BIO_new(BIO_s_mem());
  e->out = BIO_new(BIO_s_mem());
  if (!e->ssl || !e->in || !e->out) {
    SSL_free(e->ssl);
    BIO_free(e->in);
    BIO_free(e->out);
    memset(e, 0, sizeof *e);
    return -1;
  }
  /* an empty memory BIO means "no data yet", not end of file */
  BIO_set_mem_eof_return(e->in, -1);
  SSL_set_bio(e->ssl, e->in, e->out); /* the SSL owns both from here */
  return 0;
}

int tls_end_serve(tls_end *e, proxy_tls *t, const char *host, int *fresh) {
  X509 *leaf = t->ca ? ca_leaf(t->ca, host, fresh) : NULL;
  if (!leaf || end_init(e, t->serve) != 0) return -1;
  if (SSL_use_certificate(e->ssl, leaf) != 1 || SSL_use_PrivateKey(e->ssl, ca_leaf_key(t->ca)) != 1) {
    tls_end_free(e);
    ERR_clear_error();
    return -1;
  }
  SSL_set_accept_state(e->ssl);
  return 0;
}

int tls_end_origin(tls_end *e, proxy_tls *t, const char *host) {
  if (end_init(e, t->origin) != 0) return -1;
  int ok = SSL_set_alpn_protos(e->ssl, ALPN_HTTP11, sizeof ALPN_HTTP11) == 0;
  if (is_ipv4(host)) {
    ok = ok && X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(e->ssl), host) == 1;
  } else {
    ok = ok && SSL_set_tlsext_host_name(e->ssl, host) == 1 && SSL_set1_host(e->ssl, host) == 1;
    SSL_set_hostflags(e->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  }
  if (!ok) {
    tls_end_free(e);
    ERR_clear_error();
    return -1;
  }
  SSL_set_connect_state(e->ssl);
  return 0;
}

void tls_end_free(tls_end *e) {
  SSL_free(e->ssl); /* and its BIOs */
  memset(e, 0, sizeof *e);
}

int tls_end_feed(tls_end *e, const char *data, size_t len) {
  return len == 0 || BIO_write(e->in, data, (int)len) == (int)len ? 0 : -1;
}

char *tls_end_take(tls_end *e, size_t *len) {
  size_t n = BIO_ctrl_pending(e->out);
  *len = 0;
  if (n == 0) return NULL;
  char *buf = malloc(n);
  if (!buf) return NULL;
  int got = BIO_read(e->out, buf, (int)n);
  if (got <= 0) {
    free(buf);
    return NULL;
  }
  *len = (size_t)got;
  return buf;
}

const char *tls_verify_reason(long result) {
  switch (result) {
  case X509_V_ERR_HOSTNAME_MISMATCH:
  case X509_V_ERR_IP_ADDRESS_MISMATCH: return "name_mismatch";
  case X509_V_ERR_CERT_HAS_EXPIRED: return "expired";
  case X509_V_ERR_CERT_NOT_YET_VALID: return "not_yet_valid";
  case X509_V_ERR_CERT_REVOKED: return "revoked";
  case X509_V_ERR_CERT_SIGNATURE_FAILURE: return "bad_signature";
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
  case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
  case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
  case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
  case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
  case X509_V_ERR_CERT_UNTRUSTED: return "untrusted";
  }
  return "verify_failed";
}
