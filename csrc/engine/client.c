/* The multi-handle driver: submit, run, take, cancel. The per-transfer curl setup and the
 * callbacks that feed the parsers live in transfer.c. */
#include "engine/client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/transfer.h"
#include "util/clock.h"

struct sse_client {
  CURLM *multi;
  sse_endpoint ep;
  long next_id;
  unsigned long seq;   /* completion order */
  size_t running;
  sse_xfer *head;      /* every transfer not yet taken, in submission order */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_ALL); }

static char *dup_or_null(const char *s) { return s && *s ? strdup(s) : NULL; }

int sse_curl_init(ss_error *err) {
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc == CURLE_OK) return 0;
  ss_error_set(err, "transport", "curl_init", "curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
  return -1;
}

sse_client *sse_client_new(const sse_config *cfg, ss_error *err) {
  if (sse_curl_init(err) != 0) return NULL;
  sse_client *c = calloc(1, sizeof *c);
  if (!c) {
    ss_error_set(err, "transport", "nomem", "out of memory");
    return NULL;
  }
  if (sse_host_parse(cfg->host, cfg->tls, &c->ep.host, err) != 0) {
    free(c);
    return NULL;
  }
  c->ep.tls_verify = cfg->tls_verify;
  c->ep.ca = dup_or_null(cfg->ca);
  c->ep.cert = dup_or_null(cfg->cert);
  c->ep.key = dup_or_null(cfg->key);
  c->multi = curl_multi_init();
  if (!c->multi) {
    ss_error_set(err, "transport", "curl_init", "curl_multi_init failed");
    sse_client_free(c);
    return NULL;
  }
  /* Bounded sockets: past this many at once, submitted transfers queue (their deadline runs
   * while they wait) and reuse connections as they free up. */
  curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)SSE_MAX_CONNECTIONS);
  return c;
}

static void unlink_xfer(sse_client *c, sse_xfer *x) {
  for (sse_xfer **p = &c->head; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      x->next = NULL;
      return;
    }
}

/* A transfer holds its easy handle exactly while it is not done (reap releases it). */
static void detach(sse_client *c, sse_xfer *x) {
  if (!x->r.done) {
    curl_multi_remove_handle(c->multi, x->easy);
    c->running--;
  }
  sse_xfer_release_curl(x);
}

void sse_client_free(sse_client *c) {
  if (!c) return;
  while (c->head) {
    sse_xfer *x = c->head;
    detach(c, x);
    unlink_xfer(c, x);
    sse_result_free(&x->r);
  }
  if (c->multi) curl_multi_cleanup(c->multi);
  free(c->ep.ca);
  free(c->ep.cert);
  free(c->ep.key);
  free(c);
}

long sse_client_submit(sse_client *c, const sse_spec *spec, ss_error *err) {
  sse_xfer *x = sse_xfer_new(&c->ep, spec, c->next_id + 1, err);
  if (!x) return -1;
  CURLMcode mc = curl_multi_add_handle(c->multi, x->easy);
  if (mc != CURLM_OK) {
    ss_error_set(err, "transport", "curl", "curl_multi_add_handle: %s", curl_multi_strerror(mc));
    sse_result_free(&x->r);
    return -1;
  }
  c->next_id++;
  c->running++;
  sse_xfer **p = &c->head;
  while (*p) p = &(*p)->next;
  *p = x;
  return x->r.id;
}

static sse_xfer *find(const sse_client *c, long id) {
  for (sse_xfer *x = c->head; x; x = x->next)
    if (x->r.id == id) return x;
  return NULL;
}

/* Moves every transfer curl reports as done to the finished state. */
static void reap(sse_client *c) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(c->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    sse_xfer *x = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x); /* set by sse_xfer_new */
    CURLcode rc = m->data.result;
    curl_multi_remove_handle(c->multi, m->easy_handle); /* m is invalid after this */
    c->running--;
    sse_xfer_finish(x, rc);
    x->r.done = 1;
    x->seq = ++c->seq;
    sse_xfer_release_curl(x);
  }
}

static int is_2xx(long code) { return code >= 200 && code < 300; }

/* STREAM mode: bytes of a 2xx body wait in the window. */
static int stream_ready(const sse_xfer *x) {
  return x->mode == SSE_BODY_STREAM && is_2xx(x->r.status) && x->r.body.len > x->stream_off;
}

static int satisfied(const sse_client *c, long id, int headers) {
  if (id < 0) return 0;
  if (headers) {
    sse_xfer *x = find(c, id);
    return !x || x->r.done || x->got_headers;
  }
  if (id == 0) return sse_client_finished(c) > 0;
  sse_xfer *x = find(c, id);
  if (!x || x->r.done) return 1;
  return (x->mode == SSE_BODY_LINES && sse_lines_ready(&x->r.lines)) || stream_ready(x);
}

static int run(sse_client *c, long id, double timeout, int headers) {
  double deadline = timeout >= 0 ? ss_monotonic_now() + timeout : -1;
  for (;;) {
    int still;
    if (curl_multi_perform(c->multi, &still) != CURLM_OK) return 0; /* a broken multi: give up */
    reap(c);
    if (satisfied(c, id, headers)) return 1;
    if (id == 0 && c->running == 0) return 0; /* nothing left that could finish */
    if (id < 0 && deadline < 0) return 0;
    double left = deadline < 0 ? 1.0 : deadline - ss_monotonic_now();
    if (left <= 0) return 0;
    int ms = left >= 1.0 ? 1000 : (int)(left * 1000.0) + 1;
    curl_multi_poll(c->multi, NULL, 0, ms, NULL);
  }
}

int sse_client_run(sse_client *c, long id, double timeout) { return run(c, id, timeout, 0); }

int sse_client_await_headers(sse_client *c, long id, double timeout) {
  return id > 0 ? run(c, id, timeout, 1) : 0;
}

sse_result *sse_client_take(sse_client *c, long id) {
  sse_xfer *pick = NULL;
  for (sse_xfer *x = c->head; x; x = x->next) {
    if (!x->r.done) continue;
    if (id ? x->r.id == id : (!pick || x->seq < pick->seq)) pick = x;
  }
  if (!pick) return NULL;
  unlink_xfer(c, pick);
  return &pick->r;
}

sse_result *sse_client_peek(sse_client *c, long id) {
  sse_xfer *x = find(c, id);
  return x ? &x->r : NULL;
}

int sse_client_line(sse_client *c, long id, const char **line, size_t *len) {
  sse_xfer *x = find(c, id);
  if (!x || x->mode != SSE_BODY_LINES) return 0;
  if (sse_lines_next(&x->r.lines, line, len)) return 1;
  if (x->paused && !x->r.done) {
    /* Room was made by the lines taken since the pause: let curl deliver the held piece. */
    x->paused = 0;
    curl_easy_pause(x->easy, CURLPAUSE_CONT);
    return sse_lines_next(&x->r.lines, line, len);
  }
  return 0;
}

size_t sse_client_read(sse_client *c, long id, void *buf, size_t n) {
  sse_xfer *x = find(c, id);
  if (!x || x->mode != SSE_BODY_STREAM) return 0;
  if (!stream_ready(x)) {
    if (x->r.done) return 0;
    run(c, id, -1, 0); /* the transfer's own deadline ends this wait */
    if (!stream_ready(x)) return 0;
  }
  ss_buf *b = &x->r.body;
  size_t k = b->len - x->stream_off < n ? b->len - x->stream_off : n;
  memcpy(buf, b->data + x->stream_off, k);
  x->stream_off += k;
  if (x->stream_off == b->len) {
    /* The window is empty: start it over, and let curl deliver the piece it held. */
    ss_buf_consume(b, b->len);
    x->stream_off = 0;
    if (x->paused && !x->r.done) {
      x->paused = 0;
      curl_easy_pause(x->easy, CURLPAUSE_CONT);
    }
  }
  return k;
}

void sse_client_cancel(sse_client *c, long id) {
  sse_xfer *x = find(c, id);
  if (!x) return;
  detach(c, x);
  unlink_xfer(c, x);
  sse_result_free(&x->r);
}

size_t sse_client_finished(const sse_client *c) {
  size_t n = 0;
  for (sse_xfer *x = c->head; x; x = x->next) n += x->r.done ? 1 : 0;
  return n;
}
