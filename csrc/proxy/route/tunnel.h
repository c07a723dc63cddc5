#ifndef SANDSTACK_PROXY_TUNNEL_H
#define SANDSTACK_PROXY_TUNNEL_H
/* The CONNECT route (tunnel.c), after the head is read: the policy, the dial, the ClientHello;
 * then relay.c, splice_relay.c or inspect.c takes the connection over. */
typedef struct proxy_conn proxy_conn;

void tunnel_begin(proxy_conn *c);

#endif
