#include "engine/transfer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* What is kept of a non-2xx body in the streaming modes: enough for the daemon's message. */
#define SSE_ERROR_BODY_MAX (64 * 1024)
#define SSE_HEADERS_MAX (64 * 1024)

static int is_2xx(long code) { return code >= 200 && code < 300; }

static size_t keep_error_body(sse_xfer *x, const char *p, size_t n) {
  ss_buf *b = &x->r.body;
  size_t room = b->limit - b->len;
  ss_buf_append(b, p, n < room ? n : room); /* silently truncated: only the message matters */
  return n;
}

static size_t write_file(sse_xfer *x, const char *p, size_t n) {
  if (n > x->max_bytes - x->r.file_bytes) {
    x->abort_why = SSE_ABORT_OVER;
    return 0;
  }
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(x->fd, p + off, n - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      x->io_errno = w < 0 ? errno : EIO;
      x->abort_why = SSE_ABORT_IO;
      return 0;
    }
    off += (size_t)w;
  }
  x->r.file_bytes += n;
  return n;
}

/* STREAM mode: the piece joins the window whole, or curl holds it (paused) until the reader has
 * emptied the window; sse_client_read resumes it. */
static size_t stream_in(sse_xfer *x, const char *p, size_t n) {
  if (n > x->max_bytes - x->stream_total) {
    x->abort_why = SSE_ABORT_OVER;
    return 0;
  }
  if (ss_buf_room(&x->r.body) < n) {
    if (x->r.body.len > x->stream_off) {
      x->paused = 1;
      return CURL_WRITEFUNC_PAUSE;
    }
    x->abort_why = SSE_ABORT_NOMEM; /* a piece larger than the window: never, with BUFFERSIZE below it */
    return 0;
  }
  int rc = ss_buf_append(&x->r.body, p, n);
  if (rc != SS_BUF_OK) {
    x->abort_why = rc == SS_BUF_OVER ? SSE_ABORT_OVER : SSE_ABORT_NOMEM;
    return 0;
  }
  x->stream_total += n;
  return n;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud) {
  sse_xfer *x = ud;
  size_t n = size * nmemb;
  long code = 0;
  curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
  x->r.status = code;
  if (x->mode == SSE_BODY_BUFFER) {
    int rc = ss_buf_append(&x->r.body, p, n);
    if (rc == SS_BUF_OK) return n;
    x->abort_why = rc == SS_BUF_OVER ? SSE_ABORT_OVER : SSE_ABORT_NOMEM;
    return 0;
  }
  if (!is_2xx(code)) return keep_error_body(x, p, n);
  switch (x->mode) {
    case SSE_BODY_DEMUX: {
      int st = sse_demux_feed(&x->r.demux, p, n);
      if (st == SSE_DEMUX_OK) return n;
      x->abort_why = st == SSE_DEMUX_OVER ? SSE_ABORT_OVER : st == SSE_DEMUX_BAD ? SSE_ABORT_FRAME : SSE_ABORT_NOMEM;
      return 0;
    }
    case SSE_BODY_FILE:
      return write_file(x, p, n);
    case SSE_BODY_STREAM:
      return stream_in(x, p, n);
    case SSE_BODY_LINES: {
      int st = sse_lines_feed(&x->r.lines, p, n);
      if (st == SSE_LINES_OK) return n;
      if (st == SSE_LINES_FULL && sse_lines_ready(&x->r.lines)) {
        x->paused = 1; /* backpressure: curl keeps this piece until lines are taken */
        return CURL_WRITEFUNC_PAUSE;
      }
      x->abort_why = st == SSE_LINES_FULL ? SSE_ABORT_OVER : SSE_ABORT_NOMEM;
      return 0;
    }
    default:
      return n;
  }
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud) {
  sse_xfer *x = ud;
  size_t n = size * nmemb;
  if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
    /* A new response (after a 100 Continue, say): keep only the final one's headers. */
    ss_buf_consume(&x->r.headers, x->r.headers.len);
    x->r.content_type[0] = '\0';
    return n;
  }
  if (n <= 2 && (p[0] == '\r' || p[0] == '\n')) {
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200) { /* not after a 1xx: the real answer follows */
      x->got_headers = 1;
      x->r.status = code; /* a stream's reader looks at it before the body comes */
    }
    return n;
  }
  if (ss_buf_append(&x->r.headers, p, n) != SS_BUF_OK) return n; /* over the cap: dropped */
  static const char ct[] = "content-type:";
  if (n > sizeof ct - 1 && strncasecmp(p, ct, sizeof ct - 1) == 0) {
    const char *v = p + sizeof ct - 1;
    size_t l = n - (sizeof ct - 1);
    while (l && (*v == ' ' || *v == '\t')) v++, l--;
    while (l && (unsigned char)v[l - 1] <= ' ') l--;
    if (l >= sizeof x->r.content_type) l = sizeof x->r.content_type - 1;
    memcpy(x->r.content_type, v, l);
    x->r.content_type[l] = '\0';
  }
  return n;
}

int sse_endpoint_setopt(CURL *easy, const sse_endpoint *ep) {
  int ok = 1;
#define ESET(opt, val) ok = ok && curl_easy_setopt(easy, opt, val) == CURLE_OK
  if (ep->host.unix_path[0]) ESET(CURLOPT_UNIX_SOCKET_PATH, ep->host.unix_path);
  if (strncmp(ep->host.base, "https:", 6) == 0) {
    if (ep->ca) ESET(CURLOPT_CAINFO, ep->ca);
    if (ep->cert) ESET(CURLOPT_SSLCERT, ep->cert);
    if (ep->key) ESET(CURLOPT_SSLKEY, ep->key);
    ESET(CURLOPT_SSL_VERIFYPEER, ep->tls_verify ? 1L : 0L);
    ESET(CURLOPT_SSL_VERIFYHOST, ep->tls_verify ? 2L : 0L);
  }
  ESET(CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: we run in threads of a host process */
#undef ESET
  return ok;
}

static int valid_method(const char *m) {
  size_t n = strlen(m);
  if (n == 0 || n >= sizeof ((sse_xfer *)0)->method) return 0;
  for (size_t i = 0; i < n; i++)
    if (m[i] < 'A' || m[i] > 'Z') return 0;
  return 1;
}

static int valid_target(const char *t) {
  if (t[0] != '/') return 0;
  for (const unsigned char *p = (const unsigned char *)t; *p; p++)
    if (*p <= ' ' || *p == 0x7f) return 0; /* callers URL-encode; raw spaces would split the request line */
  return 1;
}

static int add_header(sse_xfer *x, const char *line) {
  struct curl_slist *l = curl_slist_append(x->hdrs, line);
  if (!l) return -1;
  x->hdrs = l;
  return 0;
}

#define SET(opt, val) ok = ok && curl_easy_setopt(x->easy, opt, val) == CURLE_OK

/* The streamed body: the head, the file's bytes, the zeros. A read error or a file that ends
 * early aborts the transfer (reported as kind "io"). */
static size_t on_upload(char *buf, size_t size, size_t nitems, void *ud) {
  sse_xfer *x = ud;
  size_t cap = size * nitems, n = 0;
  while (n < cap) {
    if (x->up_stage == 0) {
      size_t k = x->up_head_len - x->up_off < cap - n ? x->up_head_len - x->up_off : cap - n;
      if (k) memcpy(buf + n, x->body_copy + x->up_off, k);
      n += k;
      x->up_off += k;
      if (x->up_off == x->up_head_len) x->up_stage = 1;
    } else if (x->up_stage == 1) {
      if (x->up_left == 0) {
        x->up_stage = 2;
        continue;
      }
      size_t want = cap - n < x->up_left ? cap - n : (size_t)x->up_left;
      if (x->up_data) {
        memcpy(buf + n, x->up_data, want);
        x->up_data += want;
        n += want;
        x->up_left -= want;
        continue;
      }
      ssize_t r = read(x->up_fd, buf + n, want);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        x->abort_why = SSE_ABORT_IO;
        x->io_errno = r < 0 ? errno : ENODATA; /* ENODATA: the file is shorter than it was */
        return CURL_READFUNC_ABORT;
      }
      n += (size_t)r;
      x->up_left -= (unsigned long long)r;
    } else {
      size_t k = x->up_zeros < cap - n ? (size_t)x->up_zeros : cap - n;
      memset(buf + n, 0, k);
      n += k;
      x->up_zeros -= k;
      break;
    }
  }
  return n;
}

/* A body made as it is sent (spec's upload_read): curl sends it chunked. */
static size_t on_upload_source(char *buf, size_t size, size_t nitems, void *ud) {
  sse_xfer *x = ud;
  for (;;) {
    ssize_t r = x->up_read(x->up_ctx, buf, size * nitems);
    if (r >= 0) return (size_t)r;
    if (errno == EINTR) continue;
    x->abort_why = SSE_ABORT_IO;
    x->io_errno = errno;
    return CURL_READFUNC_ABORT;
  }
}

/* What every streamed body sets: the upload, its reader, the method and the content type. */
static int setup_streamed(sse_xfer *x, const sse_spec *spec, curl_read_callback reader) {
  int ok = 1;
  SET(CURLOPT_UPLOAD, 1L);
  SET(CURLOPT_READFUNCTION, reader);
  SET(CURLOPT_READDATA, x);
  if (strcmp(spec->method, "PUT") != 0) SET(CURLOPT_CUSTOMREQUEST, spec->method);
  char line[160];
  snprintf(line, sizeof line, "Content-Type: %.128s",
           spec->content_type && *spec->content_type ? spec->content_type : "application/octet-stream");
  return ok && add_header(x, line) == 0;
}

static int setup_upload(sse_xfer *x, const sse_spec *spec) {
  int ok = 1;
  if (spec->upload_file) {
    x->up_fd = open(spec->upload_file, O_RDONLY | O_CLOEXEC);
    if (x->up_fd < 0) return 0;
  } else {
    x->up_data = spec->upload_data;
  }
  x->body_copy = malloc(spec->body_len ? spec->body_len : 1);
  if (!x->body_copy) return 0;
  if (spec->body_len) memcpy(x->body_copy, spec->body, spec->body_len);
  x->up_head_len = spec->body_len;
  x->up_left = spec->upload_len;
  x->up_zeros = spec->upload_zeros;
  SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)(spec->body_len + spec->upload_len + spec->upload_zeros));
  return ok && setup_streamed(x, spec, on_upload);
}

static int setup_method(sse_xfer *x, const sse_spec *spec) {
  int ok = 1;
  const char *m = spec->method;
  if (spec->upload_read) return setup_streamed(x, spec, on_upload_source); /* no length: chunked */
  if (spec->upload_file || spec->upload_data) return setup_upload(x, spec);
  int wants_body = spec->body || strcmp(m, "POST") == 0 || strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0;
  if (strcmp(m, "GET") == 0 && !spec->body) {
    SET(CURLOPT_HTTPGET, 1L);
  } else if (strcmp(m, "HEAD") == 0) {
    SET(CURLOPT_NOBODY, 1L);
  } else if (wants_body) {
    /* An explicit size, zero for a body-less POST: otherwise libcurl >= 7.66 sends a chunked
     * body, and /containers/{id}/start answers 400 to any non-empty or chunked body. */
    x->body_copy = malloc(spec->body_len ? spec->body_len : 1);
    if (!x->body_copy) return 0;
    if (spec->body_len) memcpy(x->body_copy, spec->body, spec->body_len);
    SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)spec->body_len);
    SET(CURLOPT_POSTFIELDS, x->body_copy);
    if (strcmp(m, "POST") != 0) SET(CURLOPT_CUSTOMREQUEST, m);
    if (spec->body) {
      char line[160];
      snprintf(line, sizeof line, "Content-Type: %.128s",
               spec->content_type && *spec->content_type ? spec->content_type : "application/json");
      ok = ok && add_header(x, line) == 0;
    } else {
      ok = ok && add_header(x, "Content-Type:") == 0; /* not curl's form type */
    }
  } else {
    SET(CURLOPT_CUSTOMREQUEST, m);
  }
  return ok;
}

static int setup(sse_xfer *x, const sse_endpoint *ep, const sse_spec *spec) {
  int ok = 1;
  size_t ulen = strlen(ep->host.base) + strlen(spec->target) + 1;
  char *url = malloc(ulen);
  if (!url) return 0;
  snprintf(url, ulen, "%s%s", ep->host.base, spec->target);
  SET(CURLOPT_URL, url);
  free(url); /* libcurl copies string options */
  ok = ok && sse_endpoint_setopt(x->easy, ep);
  SET(CURLOPT_PRIVATE, (char *)x);
  SET(CURLOPT_ERRORBUFFER, x->errbuf);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, x);
  /* a body written to a file (an archive of a container's files, often large): fewer, larger
   * reads and writes than curl's 16 KiB default */
  if (spec->mode == SSE_BODY_FILE) SET(CURLOPT_BUFFERSIZE, 512L * 1024);
  if (spec->mode == SSE_BODY_STREAM) SET(CURLOPT_BUFFERSIZE, (long)SSE_STREAM_WINDOW / 4);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, x);
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_ACCEPT_ENCODING, NULL);
  double ct = spec->connect_timeout > 0 ? spec->connect_timeout : spec->timeout > 0 ? spec->timeout : 30.0;
  SET(CURLOPT_CONNECTTIMEOUT_MS, (long)(ct * 1000.0 + 0.5) > 0 ? (long)(ct * 1000.0 + 0.5) : 1L);
  if (spec->timeout > 0) SET(CURLOPT_TIMEOUT_MS, (long)(spec->timeout * 1000.0 + 0.5) > 0 ? (long)(spec->timeout * 1000.0 + 0.5) : 1L);
  ok = ok && setup_method(x, spec);
  ok = ok && add_header(x, "Expect:") == 0; /* no 100-continue round trip for large bodies */
  for (size_t i = 0; ok && i < spec->nheaders; i++) ok = add_header(x, spec->headers[i]) == 0;
  SET(CURLOPT_HTTPHEADER, x->hdrs);
  return ok;
}

static sse_xfer *refuse(const sse_spec *spec) {
  if (spec->close_fd && spec->fd >= 0) close(spec->fd); /* the result would have owned it */
  if (spec->upload_free && spec->upload_ctx) spec->upload_free(spec->upload_ctx); /* so would the transfer */
  return NULL;
}

sse_xfer *sse_xfer_new(const sse_endpoint *ep, const sse_spec *spec, long id, ss_error *err) {
  if (!valid_method(spec->method)) {
    ss_error_set(err, "invalid", "bad_method", "bad HTTP method '%.32s'", spec->method);
    return refuse(spec);
  }
  if (!valid_target(spec->target)) {
    ss_error_set(err, "invalid", "bad_path", "bad request path '%.200s' (must start with '/', no spaces)",
                 spec->target);
    return refuse(spec);
  }
  sse_xfer *x = calloc(1, sizeof *x);
  if (!x) {
    ss_error_set(err, "transport", "nomem", "out of memory");
    return refuse(spec);
  }
  x->r.id = id;
  x->mode = spec->mode;
  x->max_bytes = spec->max_bytes;
  x->fd = spec->fd;
  x->close_fd = spec->close_fd;
  x->up_fd = -1;
  x->up_read = spec->upload_read;
  x->up_free = spec->upload_free;
  x->up_ctx = spec->upload_ctx;
  snprintf(x->method, sizeof x->method, "%s", spec->method);
  snprintf(x->path, sizeof x->path, "%.*s", (int)strcspn(spec->target, "?"), spec->target);
  x->unix_socket = ep->host.unix_path[0] != '\0';
  if (x->unix_socket)
    snprintf(x->where, sizeof x->where, "unix://%.100s", ep->host.unix_path);
  else
    snprintf(x->where, sizeof x->where, "%.120s", ep->host.base);
  ss_buf_init(&x->r.body, spec->mode == SSE_BODY_BUFFER   ? spec->max_bytes
                          : spec->mode == SSE_BODY_STREAM ? SSE_STREAM_WINDOW
                                                          : SSE_ERROR_BODY_MAX);
  ss_buf_init(&x->r.headers, SSE_HEADERS_MAX);
  sse_demux_init(&x->r.demux, spec->mode == SSE_BODY_DEMUX ? spec->max_bytes : 0);
  /* One byte over the budget so a clean end of stream can always terminate the last line. */
  sse_lines_init(&x->r.lines, spec->mode == SSE_BODY_LINES ? spec->max_bytes + 1 : 0);
  x->easy = curl_easy_init();
  if (!x->easy || !setup(x, ep, spec)) {
    if (spec->upload_file && x->up_fd < 0) {
      int e = errno;
      const char *ename = strerrorname_np(e);
      ss_error_set(err, "io", ename ? ename : "EIO", "cannot open '%.200s' to send it: %s", spec->upload_file,
                   strerror(e));
      ss_error_field_str(err, "path", spec->upload_file);
    } else {
      ss_error_set(err, "transport", "curl", "could not set up the request");
    }
    sse_result_free(&x->r);
    return NULL;
  }
  return x;
}

/* Names the engine's address: over a unix socket curl's own text says "localhost port 80", so a
 * failed connect there is told by the socket's errno (no such file, refused, permission). */
static void transport_error(sse_xfer *x, const char *reason, const char *what, CURLcode rc) {
  const char *detail = x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc);
  long os = 0;
  if (x->unix_socket && rc == CURLE_COULDNT_CONNECT && curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os) == CURLE_OK &&
      os != 0)
    detail = strerror((int)os);
  ss_error_set(&x->r.err, "transport", reason, "%s %s: %s at %s (%s)", x->method, x->path, what, x->where, detail);
  ss_error_field_str(&x->r.err, "engine", x->where);
}

static void budget_error(sse_xfer *x, const char *what) {
  ss_error_set(&x->r.err, "output_limit", NULL, "%s %s: %s over the budget of %zu bytes", x->method,
               x->path, what, x->max_bytes);
  ss_error_field_num(&x->r.err, "limit", (double)x->max_bytes);
}

void sse_xfer_finish(sse_xfer *x, CURLcode rc) {
  long code = 0;
  curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code); /* reap releases easy only after this */
  x->r.status = code;
  switch (x->abort_why) {
    case SSE_ABORT_OVER: budget_error(x, x->mode == SSE_BODY_DEMUX ? "output" : "response body"); break;
    case SSE_ABORT_FRAME:
      ss_error_set(&x->r.err, "transport", "bad_stream", "%s %s: the output is not a framed stdout/stderr stream",
                   x->method, x->path);
      break;
    case SSE_ABORT_NOMEM: ss_error_set(&x->r.err, "transport", "nomem", "%s %s: out of memory", x->method, x->path); break;
    case SSE_ABORT_IO: { /* host I/O: kind "io", reason the errno name, as everywhere */
      const char *ename = strerrorname_np(x->io_errno);
      ss_error_set(&x->r.err, "io", ename ? ename : "EIO", "%s %s: %s the body failed: %s", x->method, x->path,
                   x->up_fd >= 0 || x->up_read ? "reading" : "writing", strerror(x->io_errno));
      ss_error_field_num(&x->r.err, "errno", x->io_errno);
      break;
    }
    default:
      switch (rc) {
        case CURLE_OK: break;
        case CURLE_OPERATION_TIMEDOUT: transport_error(x, "timeout", "no answer in time", rc); break;
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY: transport_error(x, "unreachable", "cannot reach the engine", rc); break;
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR: transport_error(x, "closed", "the connection was dropped", rc); break;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE: transport_error(x, "tls", "TLS failed", rc); break;
        default: transport_error(x, "protocol", "the request failed", rc); break;
      }
  }
  if (!ss_error_isset(&x->r.err) && x->mode == SSE_BODY_DEMUX && is_2xx(code) &&
      sse_demux_finish(&x->r.demux) == SSE_DEMUX_TRUNCATED)
    ss_error_set(&x->r.err, "transport", "closed", "%s %s: the stream ended inside a frame", x->method, x->path);
  if (!ss_error_isset(&x->r.err) && x->mode == SSE_BODY_LINES) {
    const char *rest;
    size_t n = sse_lines_rest(&x->r.lines, &rest);
    if (n > 0 && rest[n - 1] != '\n')
      sse_lines_feed(&x->r.lines, "\n", 1); /* the last line had no newline */
  }
  if (ss_error_isset(&x->r.err)) {
    ss_error_field_str(&x->r.err, "method", x->method);
    ss_error_field_str(&x->r.err, "path", x->path);
    if (code) ss_error_field_num(&x->r.err, "status", (double)code);
  }
}

void sse_xfer_release_curl(sse_xfer *x) {
  if (x->easy) curl_easy_cleanup(x->easy);
  x->easy = NULL;
  curl_slist_free_all(x->hdrs);
  x->hdrs = NULL;
  free(x->body_copy);
  x->body_copy = NULL;
  if (x->up_fd >= 0) close(x->up_fd);
  x->up_fd = -1;
  if (x->up_free && x->up_ctx) x->up_free(x->up_ctx);
  x->up_ctx = NULL;
}

void sse_result_free(sse_result *r) {
  if (!r) return;
  sse_xfer *x = (sse_xfer *)r;
  sse_xfer_release_curl(x);
  if (x->close_fd && x->fd >= 0) close(x->fd);
  ss_buf_free(&r->body);
  ss_buf_free(&r->headers);
  sse_demux_free(&r->demux);
  sse_lines_free(&r->lines);
  ss_error_clear(&r->err);
  free(x);
}
