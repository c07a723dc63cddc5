#ifndef SANDSTACK_PROXY_INSPECT_H
#define SANDSTACK_PROXY_INSPECT_H
/* An inspected CONNECT (inspect.c): TLS terminated, each request checked on method and path. */
#include <stddef.h>

typedef struct proxy_conn proxy_conn;

void inspect_start(proxy_conn *c); /* after the ClientHello in c->in passed tunnel.c's SNI check */
/* The answer data (may be empty) sealed into the sandbox's TLS session, then close_notify:
 * 0 with the ciphertext in *out (NULL when none), or -1 when c has no TLS session. */
int inspect_seal(proxy_conn *c, const char *data, size_t len, char **out, size_t *out_len);

#endif
