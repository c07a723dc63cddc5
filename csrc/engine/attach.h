#ifndef SANDSTACK_ENGINE_ATTACH_H
#define SANDSTACK_ENGINE_ATTACH_H
/* A hijacked connection to the daemon: the HTTP request that upgrades it (an exec's start with
 * `Upgrade: tcp`) is written by hand over a connection libcurl opened (CURLOPT_CONNECT_ONLY:
 * curl resolves DOCKER_HOST's unix socket, TCP or TLS with the client's certificates, then
 * hands over), and from then on the connection is a raw two-way byte stream: curl_easy_send
 * and curl_easy_recv, each bounded by a timeout through poll(2) on curl's socket, and a TCP
 * half-close (shutdown SHUT_WR) for the end of stdin. One owner thread; no shared state. */
#include <stddef.h>
#include <sys/types.h>

#include "engine/client.h"

typedef struct sse_attach sse_attach;

/* The request that failed to upgrade: its status and the daemon's message. */
typedef struct sse_attach_refusal {
  long status;
  char message[512];
} sse_attach_refusal;

/* Connects, sends method target with body (JSON) and the upgrade headers, and reads the answer
 * head within timeout seconds. Returns the connection when the daemon answered 101 or 200 (the
 * stream follows); NULL with err set on a transport failure, or NULL with refusal->status set
 * (err untouched) when the daemon answered anything else. */
sse_attach *sse_attach_open(const sse_config *cfg, const char *method, const char *target, const char *body,
                            size_t body_len, double timeout, sse_attach_refusal *refusal, ss_error *err);

/* Up to n bytes of the stream: > 0 bytes read; 0 at the end of the stream; -1 with err set;
 * -2 when nothing came within timeout seconds (0: do not wait). */
ssize_t sse_attach_recv(sse_attach *a, char *buf, size_t n, double timeout, ss_error *err);
/* Sends all n bytes within timeout seconds: 0, or -1 with err set (reason "timeout" when the
 * daemon did not take them in time; part may have been sent). */
int sse_attach_send(sse_attach *a, const char *p, size_t n, double timeout, ss_error *err);
/* Sends what the connection takes now of p[0..n), without waiting: the count (0 when it takes
 * nothing now: poll sse_attach_fd for POLLOUT), or -1 with err set (reason "closed": the daemon
 * closed its end, as it does once the process has ended). A caller that got 0 offers the same
 * bytes again (TLS wants a retried write to start where the refused one did). */
ssize_t sse_attach_send_some(sse_attach *a, const char *p, size_t n, ss_error *err);
/* The end of what we send (stdin's EOF): shutdown(SHUT_WR); reading goes on. 0 or -1, err. */
int sse_attach_shutdown_write(sse_attach *a, ss_error *err);
/* The socket curl opened, for poll(2) by an owner that waits on several things; -1 if none.
 * Bytes may already be buffered (see sse_attach_buffered): check that before polling. */
int sse_attach_fd(const sse_attach *a);
/* Bytes read with the answer's head that sse_attach_recv has not handed out yet. */
size_t sse_attach_buffered(const sse_attach *a);
void sse_attach_free(sse_attach *a);

#endif
