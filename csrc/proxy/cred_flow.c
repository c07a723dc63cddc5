/* Credentials on a connection's bytes (cred_flow.h, credentials.h): each call looks the table up in
 * c->srv->creds afresh, since a live swap frees the old one; the connection keeps only its
 * streams' undecided bytes. A misplaced placeholder fails closed: the request is refused before
 * anything holding it goes on, and the audit line says security_event "credential_misplaced".
 * The credential's name goes into the answer (the client wrote the placeholder; the name is
 * what it knows it by), never into the audit line, which outlives the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/conn.h"
#include "proxy/cred_flow.h"
#include "proxy/reply.h"

static void refuse(proxy_conn *c, const char *what) {
  c->security_event = "credential_misplaced";
  if (c->bytes_down > 0 || c->status) { /* the answer already began: cutting it is all that is left */
    c->decision = "deny";
    c->reason = "credential_misplaced";
    c->end = "credential_misplaced";
    return conn_close(c);
  }
  char msg[400 + SS_HOST_MAX + 80];
  snprintf(msg, sizeof msg,
           "the placeholder of credential %s may appear only in its own place in a request to its own host; it was "
           "found elsewhere in this request to %s:%d (a header, the request line, the body, or plain http), so the "
           "request was not sent",
           what, c->host, c->port);
  reply_policy(c, "deny", "credential_misplaced", 0, msg);
}

static int outcome(proxy_conn *c, creds_status st, const char *what) {
  if (st == CREDS_OK) return 0;
  if (st == CREDS_MISPLACED) refuse(c, what);
  else conn_close(c);
  return -1;
}

int cred_flow_place(proxy_conn *c, const char *orig, size_t orig_len, char **head, size_t *head_len) {
  char what[80] = "";
  return outcome(c, creds_rewrite_head(c->srv->creds, c->host, c->port, orig, orig_len, head, head_len, what, sizeof what),
                 what);
}

int cred_flow_check_head(proxy_conn *c, const char *head, size_t len) {
  char what[80] = "";
  return outcome(c, creds_check_head(c->srv->creds, head, len, what, sizeof what), what);
}

int cred_flow_body(proxy_conn *c, const char *data, size_t n, int final, char **out, size_t *out_len) {
  char what[80] = "";
  creds_status st = creds_stream_feed(c->srv->creds, c->host, c->port, CREDS_SCAN, &c->cred_body, data, n, final, out,
                                      out_len, what, sizeof what);
  return outcome(c, st, what);
}

int cred_flow_response(proxy_conn *c, creds_stream *st, const char *data, size_t n, int final, char **out,
                       size_t *out_len) {
  char what[80] = "";
  return outcome(c, creds_stream_feed(c->srv->creds, c->host, c->port, CREDS_SCRUB, st, data, n, final, out, out_len,
                                      what, sizeof what),
                 what);
}

void cred_flow_free(proxy_conn *c) {
  creds_stream_free(&c->cred_body);
  creds_stream_free(&c->cred_response);
}
