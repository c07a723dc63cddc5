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
#include "proxy/route/cred_scan.h"
#include "proxy/route/reply.h"

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

/* A Basic value the proxy cannot decode for certain: an origin decoding it more leniently
 * could find a placeholder the check did not see. */
static void unreadable(proxy_conn *c) {
  c->security_event = "credential_misplaced";
  c->decision = "bad_request";
  reply_error(c, 400, "invalid_request_error",
              "an Authorization Basic value that is not canonical base64 (or decodes to more than 4608 bytes) is "
              "refused while the proxy places credentials; send it as canonical padded base64");
}

static int outcome(proxy_conn *c, creds_status st, const char *what) {
  if (st == CREDS_OK) return 0;
  if (st == CREDS_MISPLACED) refuse(c, what);
  else if (st == CREDS_UNREADABLE) unreadable(c);
  else conn_close(c);
  return -1;
}

int cred_flow_place(proxy_conn *c, const char *orig, size_t orig_len, char **head, size_t *head_len) {
  char what[80] = "";
  if (cred_flow_keep(c) != 0) return -1;
  return outcome(c, creds_rewrite_head(c->srv->creds, c->host, c->port, orig, orig_len, head, head_len, what, sizeof what),
                 what);
}

int cred_flow_keep(proxy_conn *c) {
  if (creds_keep(&c->cred_kept, c->srv->creds, c->host, c->port) == 0) return 0;
  c->end = "credentials_kept_full";
  conn_close(c);
  return -1;
}

int cred_flow_scrubs(proxy_conn *c) { return creds_scrubs(c->srv->creds, c->cred_kept, c->host, c->port); }

int cred_flow_check_head(proxy_conn *c, const char *head, size_t len) {
  char what[80] = "";
  return outcome(c, creds_check_head(c->srv->creds, head, len, what, sizeof what), what);
}

int cred_flow_body(proxy_conn *c, const char *data, size_t n, int final, char **out, size_t *out_len) {
  char what[80] = "";
  creds_status st = creds_stream_feed(c->srv->creds, c->cred_kept, c->host, c->port, CREDS_SCAN, &c->cred_body, data, n, final, out,
                                      out_len, what, sizeof what);
  return outcome(c, st, what);
}

int cred_flow_response(proxy_conn *c, creds_stream *st, const char *data, size_t n, int final, char **out,
                       size_t *out_len) {
  char what[80] = "";
  return outcome(c, creds_stream_feed(c->srv->creds, c->cred_kept, c->host, c->port, CREDS_SCRUB, st, data, n, final, out, out_len,
                                      what, sizeof what),
                 what);
}

