#ifndef SANDSTACK_PROXY_INSPECT_H
#define SANDSTACK_PROXY_INSPECT_H
/* An inspected CONNECT (inspect.c): TLS terminated, each request checked on method and path. */
#include <stddef.h>

typedef struct proxy_conn proxy_conn;

void inspect_start(proxy_conn *c); /* after the ClientHello in c->in passed tunnel.c's SNI check */

#endif
