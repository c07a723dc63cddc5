#ifndef SANDSTACK_PROXY_RELAY_H
#define SANDSTACK_PROXY_RELAY_H
/* Both directions of a tunnel or a forward with backpressure (relay.c). */
typedef struct proxy_conn proxy_conn;

/* Takes the connection over (ST_RELAY): splice_relay.c's kernel relay for a raw tunnel where it
 * can, else libuv reads both ways. */
void relay_start(proxy_conn *c);
void relay_maybe_finish(proxy_conn *c); /* ends a tunnel whose directions have both ended */

#endif
