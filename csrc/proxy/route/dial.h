#ifndef SANDSTACK_PROXY_DIAL_H
#define SANDSTACK_PROXY_DIAL_H
/* Resolve (pinned), classify, connect (dial.c); then on_connected(c). */
typedef struct proxy_conn proxy_conn;

void dial_start(proxy_conn *c, void (*on_connected)(proxy_conn *c));

#endif
