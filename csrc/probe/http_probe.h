#ifndef SANDSTACK_PROBE_HTTP_PROBE_H
#define SANDSTACK_PROBE_HTTP_PROBE_H
/* The readiness probe: one plain-http GET to an agent, which is an untrusted peer. Only the
 * status matters, so everything else is bounded: one overall deadline (connect, headers and
 * body), no redirects, no proxy, no protocol but http, a cap on header bytes, and a body that
 * is counted and discarded, never kept, up to max_bytes (reaching it ends the transfer, which
 * still counts as an answer: the status is known). Each call has its own easy handle and all
 * its state on the caller's stack, so any number of threads may probe at once. No Lua here. */
#include <stddef.h>

#include "util/error.h"

/* Header bytes of one answer (all its 1xx interim answers included) before it is refused. */
#define SS_PROBE_HEADERS_MAX (64 * 1024)
/* Default body bytes read (and dropped) before the transfer is ended. */
#define SS_PROBE_BODY_DEFAULT (64 * 1024)
#define SS_PROBE_URL_MAX 2048

typedef struct ss_probe_opts {
  double timeout;   /* seconds for the whole transfer, > 0 */
  size_t max_bytes; /* body bytes read at most; 0 ends the transfer at the first body byte */
} ss_probe_opts;

typedef struct ss_probe_result {
  long status;      /* the final answer's HTTP status */
  size_t bytes;     /* body bytes read (and discarded) */
  int truncated;    /* the body went on past max_bytes and the transfer was ended there */
} ss_probe_result;

/* 1: url is an absolute http:// URL of printable ASCII without spaces, under the size cap. */
int ss_probe_url_ok(const char *url);

/* 0 and *r filled when an HTTP answer came; -1 with err set otherwise: kind "invalid" (a URL
 * ss_probe_url_ok refuses), "timeout" (the deadline passed first), "transport" (reason
 * "unreachable", "closed", "headers_too_large", "protocol", "curl"). */
int ss_http_probe(const char *url, const ss_probe_opts *o, ss_probe_result *r, ss_error *err);

#endif
