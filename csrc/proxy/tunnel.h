#ifndef SANDSTACK_PROXY_TUNNEL_H
#define SANDSTACK_PROXY_TUNNEL_H
/* The CONNECT route (tunnel.c), after the head is read: the policy, the dial, the ClientHello. */
#include <stddef.h>

typedef struct proxy_conn proxy_conn;

void tunnel_begin(proxy_conn *c);
void tunnel_client_data(proxy_conn *c, const char *data, size_t len);
void tunnel_upstream_spoke(proxy_conn *c);

#endif
