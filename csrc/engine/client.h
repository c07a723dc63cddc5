#ifndef SANDSTACK_ENGINE_CLIENT_H
#define SANDSTACK_ENGINE_CLIENT_H
/* The Engine API transport: one curl multi handle per client, so requests submitted together
 * run concurrently, finished ones wait in a queue until taken, and idle connections are kept
 * alive in the multi's cache for the next request. Every transfer has a deadline and a byte
 * budget. No Lua here: the binding (csrc/lua/engine.c) and tests drive it. A client is used by
 * one thread at a time; nothing is shared between clients but curl_global_init (run once). */
#include <stddef.h>
#include <sys/types.h>

#include "util/buf.h"
#include "engine/demux.h"
#include "engine/host.h"
#include "engine/lines.h"
#include "util/error.h"

typedef struct sse_client sse_client;

/* Connections one client opens to the daemon at most. */
#define SSE_MAX_CONNECTIONS 32

typedef struct sse_config {
  const char *host;   /* unix:///..., tcp://..., http(s)://... */
  int tls;            /* tcp:// becomes https:// */
  int tls_verify;     /* verify the server certificate and name */
  const char *ca, *cert, *key; /* PEM file paths or NULL */
} sse_config;

typedef enum {
  SSE_BODY_BUFFER, /* keep the body (up to max_bytes) */
  SSE_BODY_DEMUX,  /* a 2xx body is a framed stdout/stderr stream */
  SSE_BODY_FILE,   /* a 2xx body goes to fd */
  SSE_BODY_LINES,  /* a 2xx body is a line stream, taken with sse_client_line */
  SSE_BODY_STREAM  /* a 2xx body is read as it arrives, with sse_client_read (max_bytes: the total) */
} sse_body_mode;

typedef struct sse_spec {
  const char *method;  /* GET, POST, PUT, DELETE, HEAD, ... (never NULL) */
  const char *target;  /* path and query, as sent (never NULL) */
  const char *body;    /* NULL: no body (a POST/PUT then sends an explicit empty one) */
  size_t body_len;
  const char *content_type; /* for a body; default application/json */
  const char *const *headers; /* extra "Name: value" lines */
  size_t nheaders;
  double timeout;      /* seconds for the whole transfer; <= 0: none (streams) */
  double connect_timeout; /* seconds; <= 0: same as timeout, or 30 when that is none */
  size_t max_bytes;    /* the body budget of the mode */
  sse_body_mode mode;
  int fd;              /* SSE_BODY_FILE: where a 2xx body goes */
  int close_fd;        /* the result owns fd: closed when the result is freed */
  /* A PUT body streamed from a file, never held in memory: body (the head), then upload_len
   * bytes of upload_file from its start, then upload_zeros zero bytes (a tar's padding and end).
   * The file is opened at submit; a file that ends early fails the transfer. */
  const char *upload_file;
  unsigned long long upload_len, upload_zeros;
  /* Or, with no upload_file, the upload_len bytes sent from here, not copied: the caller keeps
   * them alive and unchanged until the transfer is done (the engine client's upload waits). */
  const char *upload_data;
  /* Or a PUT body made as it is sent (chunked, its length unknown): upload_read fills buf and
   * returns the count, 0 at the end, -1 with errno set (the transfer fails, kind "io"). The
   * transfer owns upload_ctx from submit on, and calls upload_free on it when it is done (or
   * when the submit is refused). */
  ssize_t (*upload_read)(void *ctx, void *buf, size_t n);
  void (*upload_free)(void *ctx);
  void *upload_ctx;
} sse_spec;

/* A finished (or, for streams, running) transfer. */
typedef struct sse_result {
  long id;
  long status;          /* 0 when no HTTP answer came */
  int done;
  ss_error err;         /* set when the transfer failed: transport, output_limit, ... */
  ss_buf body;         /* BUFFER mode, or a non-2xx answer of any mode */
  ss_buf headers;      /* raw header lines of the final response */
  sse_demux demux;      /* DEMUX mode */
  sse_lines lines;      /* LINES mode */
  size_t file_bytes;    /* FILE mode */
  char content_type[128];
} sse_result;

/* curl_global_init, once per process (thread-safe): 0, or -1 with err set. */
int sse_curl_init(ss_error *err);
sse_client *sse_client_new(const sse_config *cfg, ss_error *err);
void sse_client_free(sse_client *c);

/* Starts a transfer; returns its id (> 0), or -1 with err set. */
long sse_client_submit(sse_client *c, const sse_spec *spec, ss_error *err);
/* Drives transfers for up to timeout seconds (< 0: until the condition holds): until transfer
 * `id` is done (or, LINES mode, holds a line), or with id 0 until any finished result waits
 * (returning 0 at once when nothing runs), or with id < 0 for the whole timeout (a sleep that
 * keeps the other transfers moving).
 * Returns 1 when the condition holds, 0 on timeout. */
int sse_client_run(sse_client *c, long id, double timeout);
/* Drives transfers until transfer id has its response headers (or is done); 0 on timeout.
 * A stream's request is only sent when transfers are driven: this makes it reach the daemon. */
int sse_client_await_headers(sse_client *c, long id, double timeout);
/* Takes the finished result of id (or with id 0 the oldest finished one); NULL if none. The
 * caller frees it with sse_result_free. */
sse_result *sse_client_take(sse_client *c, long id);
/* The running or finished transfer id, not taken (for LINES reading); NULL if unknown. */
sse_result *sse_client_peek(sse_client *c, long id);
/* LINES mode: 1 and the next line, 0 when none is held yet; resumes a paused transfer. */
int sse_client_line(sse_client *c, long id, const char **line, size_t *len);
/* STREAM mode: up to n bytes of the 2xx body into buf, driving transfers until some arrive.
 * Returns the count, or 0 when the body is over (or was never a 2xx one, or the transfer is
 * unknown): the transfer is then done, and its result says why. The body waits in a window of
 * SSE_STREAM_WINDOW bytes; curl is paused while the window is full, so a reader that stops
 * reading holds the engine back, never the memory up. */
#define SSE_STREAM_WINDOW (1024u * 1024u)
size_t sse_client_read(sse_client *c, long id, void *buf, size_t n);
/* Stops and forgets a transfer (running or finished). */
void sse_client_cancel(sse_client *c, long id);
/* Transfers finished but not taken. */
size_t sse_client_finished(const sse_client *c);
void sse_result_free(sse_result *r);

#endif
