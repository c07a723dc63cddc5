#ifndef SANDSTACK_PROXY_SPLICE_RELAY_H
#define SANDSTACK_PROXY_SPLICE_RELAY_H
/* A CONNECT tunnel relayed socket -> pipe -> socket by splice(2) (Linux, splice_relay.c). */
typedef struct proxy_conn proxy_conn;

/* Called once both directions' EOFs were passed on, as relay.c's libuv path would: the caller's
 * own end check (relay.c hands in relay_maybe_finish, so this file never calls back into it). */
typedef void (*splice_relay_ended_fn)(proxy_conn *c);

/* 0 when it took the tunnel over, -1 when relay.c relays it (no splice, or no fds for the pipes);
 * each direction's end is reported to ended */
int splice_relay_start(proxy_conn *c, splice_relay_ended_fn ended);
void splice_relay_stop(proxy_conn *c); /* conn_close: its handles and fds are closed */

#endif
