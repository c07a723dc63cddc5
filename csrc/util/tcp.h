#ifndef SANDSTACK_TCP_H
#define SANDSTACK_TCP_H
/* Plain TCP from the host, for the isolation probes (sandstack.conformance): a listener that
 * the kernel completes handshakes for (nobody accepts: a probe only asks whether a connect
 * gets through), and a bounded connect. Numeric addresses only, IPv4 or IPv6; no name lookup,
 * so a probe never waits on DNS. */
#include "util/error.h"

/* Binds addr:port (port 0: the kernel picks) and listens. Returns the listening descriptor
 * (close-on-exec; an IPv6 listener is IPv6 only) and writes the bound port, or -1 with err:
 * kind "invalid" (not a numeric address, port out of range) or "io" (the socket calls; reason
 * the errno name). */
int ss_tcp_listen(const char *addr, int port, int *bound_port, ss_error *err);

/* Connects to addr:port within timeout seconds and closes again. Returns 0 when the connection
 * was established, or -1 with err: kind "transport" with reason "refused", "timeout",
 * "unreachable" or "failed" (and field errno), or kind "invalid" for a bad address or port. */
int ss_tcp_connect(const char *addr, int port, double timeout, ss_error *err);

#endif
