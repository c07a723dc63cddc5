/* CONNECT tunnels. The policy is checked on host and port. A tunnel has no method or path we
 * could see, so a host whose rule names methods or paths is inspected (inspect.c: TLS is
 * terminated with the stack CA and each request checked), or, when inspection is off, refused
 * with a message saying so. After the 200, the first bytes must be a TLS ClientHello whose SNI is the CONNECT
 * host: otherwise a client admitted to one name could speak to another name served at the
 * same address. On ports other than 443 a non-TLS stream is relayed as it is (the policy
 * admitted that host and port for raw TCP), but TLS there is held to the same SNI rule. */
#include <stdlib.h>
#include <string.h>

#include "proxy/clienthello.h"
#include "proxy/proxy.h"
#include "proxy/tls.h"

#define HELLO_BUFFER (CH_MAX_HELLO + 4096) /* the hello plus its record headers */

static int is_ipv4_literal(const char *h) { return strspn(h, "0123456789.") == strlen(h); }

/* A fatal TLS alert: the client is speaking TLS, so an HTTP body would be unreadable to it. */
static void refuse_tls(proxy_conn *c, const char *decision, unsigned char alert) {
  const char rec[7] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, (char)alert};
  c->decision = decision;
  conn_reply_and_linger(c, rec, sizeof rec);
}

static void admit(proxy_conn *c) {
  if (c->kind == KIND_INSPECT) return inspect_start(c); /* the hello is the start of its TLS */
  free(c->hello_scratch);
  c->hello_scratch = NULL;
  if (c->len && conn_write(c, (uv_stream_t *)&c->upstream, c->buf, c->len, NULL) != 0) return;
  c->bytes_up += c->len;
  c->len = 0;
  free(c->buf); /* an idle tunnel keeps no head buffer */
  c->buf = NULL;
  c->cap = 0;
  relay_start(c);
}

static void check_hello(proxy_conn *c) {
  ch_status st = ch_parse((const uint8_t *)c->buf, c->len, c->hello_scratch, c->sni);
  if (st != CH_SNI) c->sni[0] = '\0';
  switch (st) {
  case CH_NEED_MORE:
    if (c->len >= HELLO_BUFFER) refuse_tls(c, "malformed_hello", 50 /* decode_error */);
    return;
  case CH_NOT_TLS:
    if (c->port != 443 && c->kind != KIND_INSPECT) return admit(c);
    return reply_policy(c, "not_tls", "not_tls", c->rule,
                        c->kind == KIND_INSPECT
                            ? "this tunnel is inspected, so it must start with a TLS ClientHello naming the CONNECT host"
                            : "the tunnel to port 443 must start with a TLS ClientHello naming the CONNECT host");
  case CH_MALFORMED: return refuse_tls(c, "malformed_hello", 50);
  case CH_NO_SNI:
    if (is_ipv4_literal(c->host)) return admit(c); /* SNI cannot carry an address (RFC 6066) */
    return refuse_tls(c, "sni_missing", 112 /* unrecognized_name */);
  case CH_SNI:
    if (strcmp(c->sni, c->host) == 0) return admit(c);
    return refuse_tls(c, "sni_mismatch", 112);
  }
}

/* The destination spoke before the client: a TLS client always speaks first, so this is a
 * server-first protocol (SMTP, MySQL...). Off 443 that is a raw stream the policy admitted. */
void tunnel_upstream_spoke(proxy_conn *c) {
  if (c->state == ST_HELLO && c->port != 443 && c->len == 0) admit(c);
}

void tunnel_client_data(proxy_conn *c, const char *data, size_t len) {
  if (c->len + len > HELLO_BUFFER) len = HELLO_BUFFER - c->len;
  if (c->cap < HELLO_BUFFER) {
    char *nb = realloc(c->buf, HELLO_BUFFER);
    if (!nb) return conn_close(c);
    c->buf = nb;
    c->cap = HELLO_BUFFER;
  }
  memcpy(c->buf + c->len, data, len);
  c->len += len;
  check_hello(c);
}

static void connected(proxy_conn *c) {
  static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
  c->hello_scratch = malloc(CH_MAX_HELLO);
  if (!c->hello_scratch) return conn_close(c);
  c->status = 200;
  c->state = ST_HELLO;
  if (conn_write(c, (uv_stream_t *)&c->client, ok, sizeof ok - 1, NULL) != 0) return;
  conn_set_deadline(c, c->srv->cfg->handshake_ms);
  /* bytes the client sent right behind its CONNECT belong to the tunnel */
  size_t early = c->len - c->req.head_len;
  if (early > HELLO_BUFFER) early = HELLO_BUFFER;
  memmove(c->buf, c->buf + c->req.head_len, early);
  c->len = early;
  conn_read_client(c);
  /* a server that speaks first (port != 443) is heard at once; an inspected origin is not
   * read before the proxy's own handshake with it starts */
  if (c->kind != KIND_INSPECT) conn_read_upstream(c);
  if (early) check_hello(c);
}

void tunnel_begin(proxy_conn *c) {
  ss_policy_verdict v;
  ss_policy_check(c->srv->cfg->policy, c->host, strlen(c->host), NULL, 0, NULL, 0, c->port, &v);
  if (!v.admitted) {
    const proxy_tls *t = c->srv->tls;
    if (v.rule && (v.reason == SS_DENY_METHOD || v.reason == SS_DENY_PATH) && t && t->ca) {
      c->kind = KIND_INSPECT; /* each request is checked inside the TLS session */
      c->rule = v.rule;
      return dial_start(c, connected);
    }
    if (v.rule && (v.reason == SS_DENY_METHOD || v.reason == SS_DENY_PATH)) {
      char msg[700];
      snprintf(msg, sizeof msg,
               "rule %d admits only some methods or paths on %s, and those cannot be checked inside a CONNECT "
               "tunnel without TLS inspection (%s), so %s:%d is not reachable over CONNECT",
               v.rule, c->host, t && t->off_reason ? t->off_reason : "inspection is off", c->host, c->port);
      return reply_policy(c, "deny", "needs_inspection", v.rule, msg);
    }
    return reply_policy(c, "deny", ss_deny_reason_name(v.reason), v.rule, NULL);
  }
  c->decision = "allow";
  c->rule = v.rule;
  dial_start(c, connected);
}
