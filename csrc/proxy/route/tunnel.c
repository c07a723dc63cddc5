/* CONNECT tunnels. The policy is checked on host and port. A tunnel has no method or path we
 * could see, so a host whose rule names methods or paths is inspected (inspect.c: TLS is
 * terminated with the stack CA and each request checked), or, when inspection is off, refused
 * with a message saying so. After the 200, the first bytes must be a TLS ClientHello whose SNI is
 * the CONNECT host, on every port: otherwise a client admitted to one name could speak to another
 * name served at the same address (plain HTTP with another Host, a hello hidden behind an alert
 * record, Encrypted Client Hello). The destination is not read before that check, so nothing it
 * says first reaches the client either. The one way around it is a raw rule (docs/policy.md): the
 * policy says that raw TCP to this host and this port is intended, and the bytes are relayed as
 * they are, both ways, from the start. */
#include <stdlib.h>
#include <string.h>

#include "proxy/route/ask.h"
#include "proxy/route/ask_grant.h"
#include "proxy/parse/clienthello.h"
#include "proxy/conn.h"
#include "proxy/route/dial.h"
#include "proxy/route/inspect.h"
#include "proxy/control/live_policy.h"
#include "proxy/route/relay.h"
#include "proxy/route/reply.h"
#include "proxy/tls/tls.h"
#include "proxy/route/tunnel.h"

#define HELLO_BUFFER (CH_MAX_HELLO + 4096) /* the hello plus its record headers */

static int is_ipv4_literal(const char *h) { return strspn(h, "0123456789.") == strlen(h); }

/* The audit line's security_event for a hello refused (docs/proxy.md, "Audit lines"). */
static const char *security_event_of(const char *decision) {
  if (strcmp(decision, "ech") == 0) return "ech_refused";
  if (strcmp(decision, "esni") == 0) return "esni_refused";
  if (strcmp(decision, "sni_mismatch") == 0) return "sni_mismatch";
  if (strcmp(decision, "sni_missing") == 0) return "sni_missing";
  return "malformed_hello";
}

/* A fatal TLS alert: the client is speaking TLS, so an HTTP body would be unreadable to it. */
static void refuse_tls(proxy_conn *c, const char *decision, unsigned char alert) {
  const char rec[7] = {0x15, 0x03, 0x03, 0x00, 0x02, 0x02, (char)alert};
  c->decision = decision;
  c->security_event = security_event_of(decision);
  conn_reply_and_linger(c, rec, sizeof rec);
}

static void admit(proxy_conn *c) {
  if (c->kind == KIND_INSPECT) return inspect_start(c); /* the hello is the start of its TLS */
  if (c->in.len && conn_write(c, (uv_stream_t *)&c->upstream, c->in.data, c->in.len, NULL) != 0) return;
  c->bytes_up += c->in.len;
  ss_buf_free(&c->in); /* an idle tunnel keeps no head buffer */
  relay_start(c);
}

static void refuse_not_tls(proxy_conn *c) {
  char msg[4 * SS_HOST_MAX + 300];
  if (c->kind == KIND_INSPECT)
    snprintf(msg, sizeof msg, "this tunnel is inspected, so it must start with a TLS ClientHello naming %s", c->host);
  else
    snprintf(msg, sizeof msg,
             "a tunnel must start with a TLS ClientHello naming %s; raw TCP to %s:%d needs a rule that says so: "
             "{ host = \"%s\", port = %d, raw = true }",
             c->host, c->host, c->port, c->host, c->port);
  c->security_event = "raw_refused";
  reply_policy(c, "not_tls", "not_tls", c->rule, msg);
}

static void check_hello(proxy_conn *c) {
  ch_status st = ch_parse((const uint8_t *)c->in.data, c->in.len, c->route, c->sni);
  if (st != CH_SNI && st != CH_ECH && st != CH_ESNI) c->sni[0] = '\0';
  switch (st) {
  case CH_NEED_MORE:
    if (c->in.len >= HELLO_BUFFER) refuse_tls(c, "malformed_hello", 50 /* decode_error */);
    return;
  case CH_NOT_TLS: return refuse_not_tls(c);
  case CH_MALFORMED: return refuse_tls(c, "malformed_hello", 50);
  /* the SNI is only the outer name: the front end would serve the encrypted inner one */
  case CH_ECH: return refuse_tls(c, "ech", 40 /* handshake_failure */);
  case CH_ESNI: return refuse_tls(c, "esni", 40);
  case CH_NO_SNI:
    if (is_ipv4_literal(c->host)) return admit(c); /* SNI cannot carry an address (RFC 6066) */
    return refuse_tls(c, "sni_missing", 112 /* unrecognized_name */);
  case CH_SNI:
    if (strcmp(c->sni, c->host) == 0) return admit(c);
    return refuse_tls(c, "sni_mismatch", 112);
  }
}

static void hello_bytes(proxy_conn *c, char *data, size_t len) {
  /* every byte is kept: what follows the hello in the same read is the tunnel's too. Reads come
     only while less than HELLO_BUFFER is held (check_hello refuses beyond), so the buffer's
     limit (keep_early_bytes) is never reached; reaching it would end the connection */
  int kept = ss_buf_append(&c->in, data, len);
  free(data);
  if (kept != SS_BUF_OK) return conn_close(c);
  check_hello(c);
}

static void hello_deadline(proxy_conn *c) {
  c->decision = "timeout";
  c->reason = "tls_hello_timeout";
  c->end = "handshake_timeout";
  conn_close(c);
}

/* Waiting for the ClientHello. The destination is read only once the tunnel is admitted (or from
 * the start of a raw one), so it cannot speak while the hello is checked: a server that speaks
 * first (SMTP, SSH, MySQL) is reached only through a raw rule. */
static void hello_close(proxy_conn *c) {
  free(c->route);
  c->route = NULL;
}

static const conn_handlers awaiting_hello = {.client_data = hello_bytes, .deadline = hello_deadline, .close = hello_close,
                                            .seal = live_policy_seal_tunnel};

static const char established[] = "HTTP/1.1 200 Connection established\r\n\r\n";

/* Bytes the client sent right behind its CONNECT belong to the tunnel: moved to the buffer's
 * start, all of them (the head's own limit bounds them). From here the buffer holds the hello:
 * less than HELLO_BUFFER, plus one read. */
static void keep_early_bytes(proxy_conn *c) {
  ss_buf_consume(&c->in, c->req.head_len);
  c->in.limit = (c->in.len > HELLO_BUFFER ? c->in.len : HELLO_BUFFER) + CONN_READ_CHUNK;
}

static void connected(proxy_conn *c) {
  uint8_t *scratch = malloc(CH_MAX_HELLO);
  if (!scratch) return conn_close(c);
  c->status = 200;
  conn_enter(c, ST_HELLO, &awaiting_hello);
  c->route = scratch; /* the ClientHello parser's scratch, freed by hello_close */
  if (conn_write(c, (uv_stream_t *)&c->client, established, sizeof established - 1, NULL) != 0) return;
  conn_set_deadline(c, c->srv->cfg->handshake_ms);
  keep_early_bytes(c);
  conn_read_client(c);
  if (c->in.len) check_hello(c);
}

/* A raw rule: no hello to check, both directions relayed from the start (a server may speak first). */
static void connected_raw(proxy_conn *c) {
  c->status = 200;
  if (conn_write(c, (uv_stream_t *)&c->client, established, sizeof established - 1, NULL) != 0) return;
  keep_early_bytes(c);
  admit(c);
}

/* An admitted host with a credential (credentials.h) is always inspected: its secret goes only
 * into a request the proxy has read. Without a CA to inspect with, the CONNECT is refused (fail
 * closed: a tunnel would carry the placeholder past the proxy, or tempt a raw rule). */
static void credential_host(proxy_conn *c, const ss_policy *p, int rule) {
  const proxy_tls *t = c->srv->tls;
  if (t && t->ca && !p->no_inspect) {
    c->kind = KIND_INSPECT;
    c->rule = rule;
    return dial_start(c, connected);
  }
  char msg[700];
  snprintf(msg, sizeof msg,
           "%s:%d has a credential, which the proxy places only inside an inspected TLS session, and this proxy "
           "cannot inspect (%s), so the tunnel is refused",
           c->host, c->port, t && t->off_reason ? t->off_reason : p->no_inspect ? "the policy sets inspect = false" : "no CA");
  reply_policy(c, "deny", "credential_needs_inspection", rule, msg);
}

void tunnel_begin(proxy_conn *c) {
  ss_policy_verdict v;
  const ss_policy *p = policy_judge(c);
  ss_policy_check(p, c->host, strlen(c->host), NULL, 0, NULL, 0, c->port, &v);
  ask_grant(c, &v);
  if (!v.admitted && ask_hold(c, p, &v, tunnel_begin)) return; /* the host decides (ask.c) */
  if (!v.admitted) {
    const proxy_tls *t = c->srv->tls;
    /* a policy set live may turn inspection off although the start policy made a CA */
    if (v.rule && (v.reason == SS_DENY_METHOD || v.reason == SS_DENY_PATH) && t && t->ca && !p->no_inspect) {
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
      return reply_refused_check(c, "needs_inspection", &v, msg);
    }
    return reply_refused(c, &v);
  }
  if (creds_has_host(c->srv->creds, c->host, c->port)) return credential_host(c, p, v.raw ? v.raw : v.rule);
  c->decision = "allow";
  c->rule = v.raw ? v.raw : v.rule;
  if (v.raw) c->reason = "raw"; /* the audit line says the bytes were not held to TLS */
  dial_start(c, v.raw ? connected_raw : connected);
}
