#ifndef SANDSTACK_PROXY_CRED_FLOW_H
#define SANDSTACK_PROXY_CRED_FLOW_H
/* Credentials on a connection's bytes (cred_flow.c, credentials.h). A refusal (a misplaced
 * placeholder: 403, security_event "credential_misplaced", or the connection closed when its
 * response already began) has been made when these return -1; the caller just returns. */
#include <stddef.h>

#include "proxy/parse/cred_table.h"

typedef struct proxy_conn proxy_conn;

/* An inspected request's outbound head: the secrets of c->host:c->port placed (*head replaced). */
int cred_flow_place(proxy_conn *c, const char *orig, size_t orig_len, char **head, size_t *head_len);
/* Copies the secrets of c->host:c->port into the connection's own set (creds_keep), so its
 * answers are scrubbed of them for its life. -1: the connection was closed. */
int cred_flow_keep(proxy_conn *c);
/* 1 when answers from c->host:c->port are scrubbed (a credential in force or kept). */
int cred_flow_scrubs(proxy_conn *c);
/* A head that gets no credential (plain HTTP, the credential route): any placeholder refuses. */
int cred_flow_check_head(proxy_conn *c, const char *head, size_t len);
/* Request body bytes (final: the body ends with them): *out is what may go on now. */
int cred_flow_body(proxy_conn *c, const char *data, size_t n, int final, char **out, size_t *out_len);
/* Response bytes from c->host:c->port, secrets (in force and kept) replaced by masks of the same
 * length; with
 * final the held tail is let go (the response ended). -1: out of memory (the connection closed). */
int cred_flow_response(proxy_conn *c, creds_stream *st, const char *data, size_t n, int final, char **out,
                       size_t *out_len);

#endif
