#ifndef SANDSTACK_PROXY_CONTROL_H
#define SANDSTACK_PROXY_CONTROL_H
/* The control socket (control.c, control_address.c, control_client.c). */
#include <stddef.h>
#include <sys/socket.h>

/* Where the control listens when the path it was given cannot be used (the image's default) */
#define CONTROL_FALLBACK "@sandstack-control"

typedef struct proxy_server proxy_server;
struct sockaddr_un;

/* SANDSTACK_CONTROL_SOCKET as an address: a path, or "@name" (abstract) */
socklen_t control_address(const char *where, struct sockaddr_un *sa);
/* the proxy's own unix socket (see control.c) */
int control_start(proxy_server *s, const char *path, char *why, size_t why_len);
void control_stop(proxy_server *s);
/* `sandstack-proxy --control VERB` (payload in SANDSTACK_CONTROL_PAYLOAD) */
int control_client(const char *verb);

#endif
