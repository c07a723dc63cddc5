#ifndef SANDSTACK_PROXY_FORWARD_H
#define SANDSTACK_PROXY_FORWARD_H
/* The plain-HTTP forward route (forward.c), after the head is read. */
typedef struct proxy_conn proxy_conn;

void forward_begin(proxy_conn *c);

#endif
