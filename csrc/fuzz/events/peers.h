/* The two peers of the connection fuzz_proxy_events drives: the sandbox's client and the
 * destination. Each keeps what it will send to the proxy (out), what the proxy sent it (in),
 * and, when it speaks TLS, an OpenSSL endpoint over memory BIOs that turns what arrives into
 * plaintext and handshake replies (appended to out) at once, as a real peer's stack would. */
#ifndef SANDSTACK_FUZZ_PEERS_H
#define SANDSTACK_FUZZ_PEERS_H

#include <openssl/ssl.h>
#include <stddef.h>

typedef struct pbuf {
  char *p;
  size_t n, cap;
} pbuf;

void pb_add(pbuf *b, const void *data, size_t n);
void pb_drop(pbuf *b, size_t n); /* removes n bytes from the front */
void pb_free(pbuf *b);

typedef struct peer {
  pbuf out;      /* to send to the proxy, in order */
  pbuf in;       /* every byte the proxy sent */
  pbuf sent;     /* every byte this peer sent (after its plain head, for a client: see head_len) */
  pbuf plain_in; /* TLS: the plaintext the proxy sent */
  int eof;       /* FIN once out is sent */
  int reset;     /* the connection is reset */
  int fin_seen;  /* the proxy sent FIN */
  SSL *ssl;      /* NULL: plain */
  int hs_done, tls_dead;
  long tls_from; /* TLS starts at this offset of in; -1: not known yet (bytes are held) */
} peer;

/* A TLS client (sni may be NULL) or server on p; its first flight (a client's hello) goes to
 * out at once. What the proxy sends is held until peer_tls_begin says where TLS starts. */
int peer_tls_client(peer *p, SSL_CTX *ctx, const char *sni, int max_version);
int peer_tls_server(peer *p, SSL_CTX *ctx, int max_version);
/* TLS starts at offset `from` of in: what already arrived from there on is fed in now. */
void peer_tls_begin(peer *p, size_t from);
/* Bytes from the proxy: recorded, and fed to TLS past tls_from (when there is TLS). */
void peer_receive(peer *p, const char *data, size_t n);
/* n plaintext bytes as one TLS record (or more, above the record size) into out; -1 when the
 * session cannot carry them (no handshake yet, or it failed). */
int peer_tls_write(peer *p, const char *data, size_t n);
void peer_tls_close_notify(peer *p);
void peer_free(peer *p);

/* What the fuzzer's TLS peers run with: made once (EC P-256 keys, a test CA). */
typedef struct peer_pki {
  SSL_CTX *client;       /* verifies nothing: the proxy's leaf is not what is under test */
  SSL_CTX *origin;       /* a server certificate for the test hosts, signed by the test CA */
  SSL_CTX *rogue;        /* a self-signed one the proxy must refuse */
  char *ca_pem;          /* the test CA (the proxy's SANDSTACK_UPSTREAM_CA) */
} peer_pki;

int peer_pki_make(peer_pki *pki, const char *const *names, size_t nnames);

#endif
