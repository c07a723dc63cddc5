#ifndef SANDSTACK_ENGINE_TRANSFER_H
#define SANDSTACK_ENGINE_TRANSFER_H
/* One HTTP transfer: the curl easy handle set up from an sse_spec, and the write/header
 * callbacks that route the body into the mode's parser under its budget. Internal to
 * csrc/engine (client.c drives these). */
#include <curl/curl.h>

#include "engine/client.h"

typedef struct sse_endpoint {
  sse_host host;
  int tls_verify;
  char *ca, *cert, *key;
} sse_endpoint;

/* Why the write callback stopped a transfer. */
enum { SSE_ABORT_NONE, SSE_ABORT_OVER, SSE_ABORT_FRAME, SSE_ABORT_NOMEM, SSE_ABORT_IO };

typedef struct sse_xfer {
  sse_result r; /* first: an sse_result * handed out is the sse_xfer */
  CURL *easy;
  struct curl_slist *hdrs;
  char *body_copy;
  char errbuf[CURL_ERROR_SIZE];
  char method[16];
  char path[256];        /* the target without its query, for error fields */
  char where[128];       /* the engine's address (unix://path or scheme://authority), for errors */
  int unix_socket;
  sse_body_mode mode;
  size_t max_bytes;
  int fd;
  int close_fd;
  int up_fd;                  /* the streamed body's file, or -1 */
  int up_stage;               /* 0: the head (body_copy), 1: the file, 2: the zeros */
  size_t up_head_len, up_off; /* the head's length and what of it was sent */
  unsigned long long up_left, up_zeros;
  const char *up_data; /* the streamed body's bytes when they come from memory */
  ssize_t (*up_read)(void *ctx, void *buf, size_t n); /* or a body made as it is sent */
  void (*up_free)(void *ctx);
  void *up_ctx;
  int paused;
  size_t stream_off;                 /* STREAM mode: bytes of r.body already read */
  unsigned long long stream_total;   /* STREAM mode: body bytes taken in so far */
  int got_headers; /* the final response's header block ended */
  int abort_why;
  int io_errno;
  unsigned long seq;
  struct sse_xfer *next;
} sse_xfer;

/* The endpoint's part of a curl handle's setup: the unix socket, TLS files and verification, no
 * signals. 1 when every option was taken. Shared with the hijacked connection (attach.c). */
int sse_endpoint_setopt(CURL *easy, const sse_endpoint *ep);
sse_xfer *sse_xfer_new(const sse_endpoint *ep, const sse_spec *spec, long id, ss_error *err);
/* Sets r.status and r.err from curl's result and the callbacks' state. */
void sse_xfer_finish(sse_xfer *x, CURLcode rc);
/* Frees the easy handle and request memory (not the result). */
void sse_xfer_release_curl(sse_xfer *x);

#endif
