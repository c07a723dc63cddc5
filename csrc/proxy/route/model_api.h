#ifndef SANDSTACK_PROXY_CREDENTIAL_H
#define SANDSTACK_PROXY_CREDENTIAL_H
/* The credential route (credential.c): an origin-form request answered through libcurl toward
 * the configured upstream, with the real key in place of the session token. */
#include <curl/curl.h>
#include <stddef.h>

typedef struct proxy_conn proxy_conn;

void credential_begin(proxy_conn *c);
void credential_client_drained(proxy_conn *c);
void credential_abort(proxy_conn *c);

#endif
