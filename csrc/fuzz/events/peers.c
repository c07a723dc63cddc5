/* The fuzzer's client and destination (see peers.h). */
#include "fuzz/events/peers.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pb_add(pbuf *b, const void *data, size_t n) {
  if (!n) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) abort();
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
}

void pb_drop(pbuf *b, size_t n) {
  if (n > b->n) n = b->n;
  if (!n) return; /* b->p may be NULL */
  memmove(b->p, b->p + n, b->n - n);
  b->n -= n;
}

void pb_free(pbuf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

/* what TLS produced goes out */
static void flush_tls(peer *p) {
  char buf[16384];
  int n;
  while ((n = BIO_read(SSL_get_wbio(p->ssl), buf, sizeof buf)) > 0) pb_add(&p->out, buf, (size_t)n);
}

static void pump(peer *p) {
  if (!p->ssl || p->tls_dead) return;
  ERR_clear_error();
  if (!p->hs_done) {
    int r = SSL_do_handshake(p->ssl);
    if (r == 1) p->hs_done = 1;
    else if (SSL_get_error(p->ssl, r) != SSL_ERROR_WANT_READ) p->tls_dead = 1;
  }
  if (p->hs_done && !p->tls_dead) {
    char buf[16384];
    for (;;) {
      int n = SSL_read(p->ssl, buf, sizeof buf);
      if (n > 0) {
        pb_add(&p->plain_in, buf, (size_t)n);
        continue;
      }
      int e = SSL_get_error(p->ssl, n);
      if (e != SSL_ERROR_WANT_READ) p->tls_dead = e != SSL_ERROR_ZERO_RETURN ? 1 : p->tls_dead;
      break;
    }
  }
  flush_tls(p);
  ERR_clear_error();
}

static int start(peer *p, SSL_CTX *ctx, int max_version) {
  p->ssl = SSL_new(ctx);
  BIO *r = BIO_new(BIO_s_mem()), *w = BIO_new(BIO_s_mem());
  if (!p->ssl || !r || !w) abort();
  BIO_set_mem_eof_return(r, -1);
  SSL_set_bio(p->ssl, r, w);
  if (max_version) SSL_set_max_proto_version(p->ssl, max_version);
  p->tls_from = -1;
  return 0;
}

int peer_tls_client(peer *p, SSL_CTX *ctx, const char *sni, int max_version) {
  start(p, ctx, max_version);
  if (sni) SSL_set_tlsext_host_name(p->ssl, sni);
  SSL_set_alpn_protos(p->ssl, (const unsigned char *)"\x08http/1.1", 9);
  SSL_set_connect_state(p->ssl);
  pump(p);
  return 0;
}

int peer_tls_server(peer *p, SSL_CTX *ctx, int max_version) {
  start(p, ctx, max_version);
  SSL_set_accept_state(p->ssl);
  return 0;
}

void peer_tls_begin(peer *p, size_t from) {
  if (!p->ssl || p->tls_from >= 0) return;
  p->tls_from = (long)from;
  if (from < p->in.n) BIO_write(SSL_get_rbio(p->ssl), p->in.p + from, (int)(p->in.n - from));
  pump(p);
}

void peer_receive(peer *p, const char *data, size_t n) {
  size_t before = p->in.n;
  pb_add(&p->in, data, n);
  if (!p->ssl || p->tls_from < 0) return;
  size_t from = (size_t)p->tls_from > before ? (size_t)p->tls_from - before : 0;
  if (from < n) {
    BIO_write(SSL_get_rbio(p->ssl), data + from, (int)(n - from));
    pump(p);
  }
}

int peer_tls_write(peer *p, const char *data, size_t n) {
  if (!p->ssl || !p->hs_done || p->tls_dead || n == 0) return -1;
  ERR_clear_error();
  int r = SSL_write(p->ssl, data, (int)n);
  flush_tls(p);
  ERR_clear_error();
  return r == (int)n ? 0 : -1;
}

void peer_tls_close_notify(peer *p) {
  if (!p->ssl || !p->hs_done || p->tls_dead) return;
  ERR_clear_error();
  SSL_shutdown(p->ssl);
  flush_tls(p);
  ERR_clear_error();
}

void peer_free(peer *p) {
  SSL_free(p->ssl);
  pb_free(&p->out);
  pb_free(&p->in);
  pb_free(&p->sent);
  pb_free(&p->plain_in);
  memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------ PKI ---- */

static X509 *make_cert(long serial, EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key, int is_ca,
                       const char *const *names, size_t nnames) {
  X509 *x = X509_new();
  if (!x) return NULL;
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400L * 30);
  X509_set_pubkey(x, key);
  X509_NAME *name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
  char san[1024] = "";
  for (size_t i = 0; i < nnames; i++) {
    size_t l = strlen(san);
    snprintf(san + l, sizeof san - l, "%sDNS:%s", i ? "," : "", names[i]);
  }
  const char *bc = is_ca ? "critical,CA:TRUE" : "CA:FALSE";
  X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, bc);
  if (ext) X509_add_ext(x, ext, -1), X509_EXTENSION_free(ext);
  if (is_ca) {
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_key_usage, "critical,keyCertSign,cRLSign");
    if (ext) X509_add_ext(x, ext, -1), X509_EXTENSION_free(ext);
  }
  if (nnames) {
    ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
    if (ext) X509_add_ext(x, ext, -1), X509_EXTENSION_free(ext);
  }
  if (!X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256())) {
    X509_free(x);
    return NULL;
  }
  return x;
}

static SSL_CTX *server_ctx(X509 *cert, EVP_PKEY *key) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx || SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1) return NULL;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_num_tickets(ctx, 0);
  return ctx;
}

int peer_pki_make(peer_pki *pki, const char *const *names, size_t nnames) {
  memset(pki, 0, sizeof *pki);
  EVP_PKEY *ca_key = EVP_EC_gen("P-256"), *key = EVP_EC_gen("P-256"), *rogue_key = EVP_EC_gen("P-256");
  if (!ca_key || !key || !rogue_key) return -1;
  X509 *ca = make_cert(1, ca_key, "fuzz-events-test-ca", NULL, NULL, 1, NULL, 0);
  X509 *leaf = ca ? make_cert(2, key, names[0], ca, ca_key, 0, names, nnames) : NULL;
  X509 *rogue = make_cert(3, rogue_key, names[0], NULL, NULL, 0, names, nnames);
  if (!ca || !leaf || !rogue) return -1;
  pki->origin = server_ctx(leaf, key);
  pki->rogue = server_ctx(rogue, rogue_key);
  pki->client = SSL_CTX_new(TLS_client_method());
  if (!pki->origin || !pki->rogue || !pki->client) return -1;
  SSL_CTX_set_verify(pki->client, SSL_VERIFY_NONE, NULL);
  BIO *mem = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(mem, ca);
  char *text;
  long len = BIO_get_mem_data(mem, &text);
  pki->ca_pem = malloc((size_t)len + 1);
  if (!pki->ca_pem) return -1;
  memcpy(pki->ca_pem, text, (size_t)len);
  pki->ca_pem[len] = '\0';
  BIO_free(mem);
  X509_free(ca);
  X509_free(leaf);
  X509_free(rogue);
  EVP_PKEY_free(ca_key);
  EVP_PKEY_free(key);
  EVP_PKEY_free(rogue_key);
  ERR_clear_error();
  return 0;
}
