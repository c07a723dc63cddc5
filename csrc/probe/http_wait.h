#ifndef SANDSTACK_PROBE_HTTP_WAIT_H
#define SANDSTACK_PROBE_HTTP_WAIT_H
/* The readiness wait: probes (http_probe.c) until an answer is 2xx, the deadline passes, or the
 * slice of this call is used up, pausing between attempts. A start whose agent is already up
 * costs one call; a slow one returns to its caller once per slice, which checks meanwhile that
 * no service died and, under a warm pool, lets the others run. The deadline is absolute on the
 * monotonic clock and stays with the caller between calls. No Lua here. */
#include "probe/http_probe.h"
#include "util/clock.h"

typedef struct ss_wait_opts {
  double deadline;    /* absolute, monotonic seconds */
  double slice;       /* seconds this call may take; 0: one attempt */
  double attempt_cap; /* seconds of one attempt at most */
  double min_attempt; /* seconds of one attempt at least (so a late attempt still gets a chance) */
  double pause;       /* seconds between attempts */
  size_t max_bytes;   /* as ss_probe_opts */
} ss_wait_opts;

typedef struct ss_wait_result {
  int ready;          /* an attempt answered 2xx */
  double now;         /* the monotonic clock when the call returned */
  char last[1100];    /* the last attempt: "HTTP <status>" or "<kind>: <message>" */
  char answer[32];    /* the last attempt that got an answer, "HTTP <status>"; "" if none did. The
                       * last attempt before the deadline may be cut short (min_attempt), and an
                       * error that says "timeout" then hides what the agent kept answering. */
} ss_wait_result;

void ss_http_wait(const char *url, const ss_wait_opts *o, ss_wait_result *r);

#endif
