#ifndef SANDSTACK_PROXY_RELAY_H
#define SANDSTACK_PROXY_RELAY_H
/* Both directions of a tunnel or a forward with backpressure (relay.c). */
#include <stddef.h>

typedef struct proxy_conn proxy_conn;

void relay_start(proxy_conn *c);
void relay_client_data(proxy_conn *c, char *base, size_t len);   /* takes base */
void relay_upstream_data(proxy_conn *c, char *base, size_t len); /* takes base */
void relay_client_eof(proxy_conn *c);
void relay_upstream_eof(proxy_conn *c);
void relay_maybe_finish(proxy_conn *c); /* ends a tunnel whose directions have both ended */

#endif
