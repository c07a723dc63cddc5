#ifndef SANDSTACK_PROXY_HEAD_H
#define SANDSTACK_PROXY_HEAD_H
/* The first route of every connection (head.c): its request head, then the route it names. */
typedef struct proxy_conn proxy_conn;

/* Takes a new connection over (conn_accept, through the server's conn_hooks): the cap, then the
 * head's bytes under the handshake deadline. */
void head_begin(proxy_conn *c);

#endif
