#ifndef SANDSTACK_PROXY_SPLICE_RELAY_H
#define SANDSTACK_PROXY_SPLICE_RELAY_H
/* A CONNECT tunnel relayed socket -> pipe -> socket by splice(2) (Linux, splice_relay.c). */
typedef struct proxy_conn proxy_conn;

/* 0 when it took the tunnel over, -1 when relay.c relays it (no splice, or no fds for the pipes) */
int splice_relay_start(proxy_conn *c);
void splice_relay_stop(proxy_conn *c); /* conn_close: its handles and fds are closed */

#endif
