/* The scripted libcurl (see mem_curl.h). */
#define CURL_DISABLE_TYPECHECK
#define CURL_STRICTER /* CURL and CURLM as the structs below */
#include "fuzz/events/mem_curl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MC_MAX_EASY 4
#define MC_HELD_MAX 65536

struct Curl_easy {
  struct Curl_multi *multi;
  char *url, *custom;
  void *priv;
  curl_write_callback header_fn, write_fn;
  curl_read_callback read_fn;
  void *header_ud, *write_ud, *read_ud;
  struct curl_slist *headers;
  int post, nobody;
  long long postsize, pulled;
  long status;
  int paused, in_cb, started, in_status, headers_done, upload_done, done_queued;
  char held[MC_HELD_MAX]; /* a body chunk the write callback paused on */
  size_t held_len;
};

typedef struct {
  mc_action action;
  size_t n;
} queued_action;

struct Curl_multi {
  curl_multi_timer_callback timer_fn;
  void *timer_ud;
  struct Curl_easy *easy[MC_MAX_EASY];
  int n, in_action;
  CURLMsg msgs[MC_MAX_EASY], last;
  int nmsgs;
  queued_action next;
  int has_next;
  mc_hooks hooks;
};

static void fail(const char *what) {
  fprintf(stderr, "mem_curl: %s\n", what);
  abort();
}

/* ---------------------------------------------------------------- lists ---- */

struct curl_slist *curl_slist_append(struct curl_slist *list, const char *data) {
  struct curl_slist *item = malloc(sizeof *item);
  char *copy = strdup(data);
  if (!item || !copy) {
    free(item);
    free(copy);
    return NULL;
  }
  item->data = copy;
  item->next = NULL;
  if (!list) return item;
  struct curl_slist *last = list;
  while (last->next) last = last->next;
  last->next = item;
  return list;
}

void curl_slist_free_all(struct curl_slist *list) {
  while (list) {
    struct curl_slist *next = list->next;
    free(list->data);
    free(list);
    list = next;
  }
}

const char *curl_easy_strerror(CURLcode code) { return code == CURLE_OK ? "no error" : "a scripted curl error"; }

/* ----------------------------------------------------------------- easy ---- */

CURL *curl_easy_init(void) {
  struct Curl_easy *e = calloc(1, sizeof *e);
  if (e) e->postsize = -1;
  return e;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

CURLcode curl_easy_setopt(CURL *e, CURLoption option, ...) {
  va_list ap;
  va_start(ap, option);
  long l = 0;
  void *p = NULL;
  void (*f)(void) = NULL;
  curl_off_t o = 0;
  switch ((int)option / 10000 * 10000) {
  case CURLOPTTYPE_LONG: l = va_arg(ap, long); break;
  case CURLOPTTYPE_OBJECTPOINT: p = va_arg(ap, void *); break;
  case CURLOPTTYPE_FUNCTIONPOINT: f = va_arg(ap, void (*)(void)); break;
  case CURLOPTTYPE_OFF_T: o = va_arg(ap, curl_off_t); break;
  default: fail("a blob option (not modelled)");
  }
  va_end(ap);
  if (e->in_cb) fail("curl_easy_setopt inside a callback");
  switch (option) {
  case CURLOPT_URL:
    free(e->url);
    e->url = dup_or_null(p);
    break;
  case CURLOPT_CUSTOMREQUEST:
    free(e->custom);
    e->custom = dup_or_null(p);
    break;
  case CURLOPT_PRIVATE: e->priv = p; break;
  case CURLOPT_HTTPHEADER: e->headers = p; break; /* not copied: it must live as long as the transfer */
  case CURLOPT_HEADERFUNCTION: e->header_fn = (curl_write_callback)f; break;
  case CURLOPT_HEADERDATA: e->header_ud = p; break;
  case CURLOPT_WRITEFUNCTION: e->write_fn = (curl_write_callback)f; break;
  case CURLOPT_WRITEDATA: e->write_ud = p; break;
  case CURLOPT_READFUNCTION: e->read_fn = (curl_read_callback)f; break;
  case CURLOPT_READDATA: e->read_ud = p; break;
  case CURLOPT_NOBODY: e->nobody = l != 0; break;
  case CURLOPT_POST: e->post = l != 0; break;
  case CURLOPT_POSTFIELDSIZE_LARGE: e->postsize = (long long)o; break;
  default: break; /* timeouts, TLS trust, protocols: nothing to model without a network */
  }
  return CURLE_OK;
}

CURLcode curl_easy_getinfo(CURL *e, CURLINFO info, ...) {
  va_list ap;
  va_start(ap, info);
  CURLcode rc = CURLE_OK;
  if (info == CURLINFO_PRIVATE) *va_arg(ap, char **) = e->priv;
  else if (info == CURLINFO_RESPONSE_CODE) *va_arg(ap, long *) = e->status;
  else rc = CURLE_UNKNOWN_OPTION;
  va_end(ap);
  return rc;
}

static void queue_done(struct Curl_easy *e, CURLcode rc) {
  struct Curl_multi *m = e->multi;
  if (e->done_queued || !m) return;
  e->done_queued = 1;
  m->msgs[m->nmsgs].msg = CURLMSG_DONE;
  m->msgs[m->nmsgs].easy_handle = e;
  m->msgs[m->nmsgs].data.result = rc;
  m->nmsgs++;
}

/* A header or write callback; a short return fails the transfer. */
static int give(struct Curl_easy *e, curl_write_callback fn, void *ud, const char *data, size_t n, int may_pause) {
  char copy[MC_HELD_MAX];
  if (n > sizeof copy) fail("chunk too large");
  memcpy(copy, data, n); /* the callback may not keep or change curl's buffer */
  e->in_cb++;
  size_t r = fn(copy, 1, n, ud);
  e->in_cb--;
  if (may_pause && r == CURL_WRITEFUNC_PAUSE) {
    e->paused |= CURLPAUSE_RECV;
    memcpy(e->held, data, n);
    e->held_len = n;
    return 0;
  }
  if (r != n) queue_done(e, CURLE_WRITE_ERROR);
  return r == n;
}

static void deliver_held(struct Curl_easy *e) {
  if (!e->held_len || (e->paused & CURLPAUSE_RECV) || e->done_queued) return;
  char chunk[MC_HELD_MAX];
  size_t n = e->held_len;
  memcpy(chunk, e->held, n);
  e->held_len = 0;
  give(e, e->write_fn, e->write_ud, chunk, n, 1);
}

CURLcode curl_easy_pause(CURL *e, int bitmask) {
  int was = e->paused;
  e->paused = bitmask & (CURLPAUSE_RECV | CURLPAUSE_SEND);
  /* unpausing receive hands over the held bytes at once, from inside this call */
  if ((was & CURLPAUSE_RECV) && !(e->paused & CURLPAUSE_RECV)) deliver_held(e);
  if (e->multi && e->multi->timer_fn && was != e->paused) e->multi->timer_fn(e->multi, 0, e->multi->timer_ud);
  return CURLE_OK;
}

static void detach(struct Curl_easy *e) {
  struct Curl_multi *m = e->multi;
  if (!m) return;
  if (e->in_cb) fail("a transfer removed from inside its own callback (libcurl refuses: CURLM_RECURSIVE_API_CALL)");
  if (m->in_action) fail("curl_multi_remove_handle inside curl_multi_socket_action");
  for (int i = 0; i < m->n; i++)
    if (m->easy[i] == e) {
      memmove(&m->easy[i], &m->easy[i + 1], (size_t)(m->n - i - 1) * sizeof e);
      m->n--;
      break;
    }
  for (int i = 0; i < m->nmsgs; i++)
    if (m->msgs[i].easy_handle == e) {
      memmove(&m->msgs[i], &m->msgs[i + 1], (size_t)(m->nmsgs - i - 1) * sizeof m->msgs[0]);
      m->nmsgs--;
      i--;
    }
  e->multi = NULL;
  if (m->n == 0) {
    m->has_next = 0;
    if (m->timer_fn) m->timer_fn(m, -1, m->timer_ud);
  }
}

void curl_easy_cleanup(CURL *e) {
  if (!e) return;
  if (e->in_cb) fail("curl_easy_cleanup inside the handle's own callback");
  detach(e);
  free(e->url);
  free(e->custom);
  free(e);
}

/* ---------------------------------------------------------------- multi ---- */

CURLM *curl_multi_init(void) { return calloc(1, sizeof(struct Curl_multi)); }

CURLMcode curl_multi_setopt(CURLM *m, CURLMoption option, ...) {
  va_list ap;
  va_start(ap, option);
  switch (option) {
  case CURLMOPT_TIMERFUNCTION: m->timer_fn = va_arg(ap, curl_multi_timer_callback); break;
  case CURLMOPT_TIMERDATA: m->timer_ud = va_arg(ap, void *); break;
  case CURLMOPT_SOCKETFUNCTION: (void)va_arg(ap, curl_socket_callback); break; /* no sockets here */
  case CURLMOPT_SOCKETDATA: (void)va_arg(ap, void *); break;
  default: break;
  }
  va_end(ap);
  return CURLM_OK;
}

CURLMcode curl_multi_assign(CURLM *m, curl_socket_t fd, void *p) {
  (void)m;
  (void)fd;
  (void)p;
  fail("curl_multi_assign: no socket was ever announced");
  return CURLM_BAD_SOCKET;
}

CURLMcode curl_multi_add_handle(CURLM *m, CURL *e) {
  if (e->multi) return CURLM_ADDED_ALREADY;
  if (m->n == MC_MAX_EASY) fail("too many transfers");
  if (!e->url || !e->write_fn || !e->header_fn || !e->read_fn) fail("a transfer added without its URL or callbacks");
  m->easy[m->n++] = e;
  e->multi = m;
  if (m->timer_fn) m->timer_fn(m, 0, m->timer_ud); /* as libcurl: "call me at once" */
  return CURLM_OK;
}

CURLMcode curl_multi_remove_handle(CURLM *m, CURL *e) {
  if (e->multi != m) return CURLM_BAD_EASY_HANDLE;
  detach(e);
  return CURLM_OK;
}

CURLMcode curl_multi_cleanup(CURLM *m) {
  if (!m) return CURLM_OK;
  while (m->n) detach(m->easy[0]);
  free(m);
  return CURLM_OK;
}

CURLMsg *curl_multi_info_read(CURLM *m, int *left) {
  if (!m->nmsgs) {
    *left = 0;
    return NULL;
  }
  m->last = m->msgs[0];
  memmove(&m->msgs[0], &m->msgs[1], (size_t)(m->nmsgs - 1) * sizeof m->msgs[0]);
  m->nmsgs--;
  *left = m->nmsgs;
  return &m->last;
}

static const char *const HEADER_LINES[] = {
    "Content-Type: text/event-stream\r\n", "Content-Length: 5\r\n", "Transfer-Encoding: chunked\r\n",
    "Connection: keep-alive\r\n",          "X-Request-Id: req_1\r\n", "Content-Length: 0\r\n",
    "Set-Cookie: a=b\r\n",                  "Keep-Alive: timeout=5\r\n",
};

static void header_line(struct Curl_easy *e, const char *line) {
  give(e, e->header_fn, e->header_ud, line, strlen(line), 0);
}

static void status_line(struct Curl_easy *e, long code) {
  char line[64];
  snprintf(line, sizeof line, "HTTP/1.1 %ld Scripted\r\n", code);
  e->status = code;
  e->in_status = 1;
  header_line(e, line);
}

static void end_headers(struct Curl_easy *e) {
  if (!e->in_status) status_line(e, 200);
  if (e->done_queued) return;
  header_line(e, "\r\n");
  e->in_status = 0;
  if (e->status >= 200) e->headers_done = 1;
}

static void perform(struct Curl_easy *e, mc_action a, size_t n) {
  struct Curl_multi *m = e->multi;
  if (e->done_queued) return;
  switch (a) {
  case MC_PULL: {
    if ((e->paused & CURLPAUSE_SEND) || e->upload_done) return;
    char buf[65536];
    if (n == 0 || n > sizeof buf) n = sizeof buf;
    memset(buf, 0xEE, n);
    e->in_cb++;
    size_t r = e->read_fn(buf, 1, n, e->read_ud);
    e->in_cb--;
    if (r == CURL_READFUNC_PAUSE) e->paused |= CURLPAUSE_SEND;
    else if (r == CURL_READFUNC_ABORT) queue_done(e, CURLE_ABORTED_BY_CALLBACK);
    else if (r > n) fail("the read callback returned more bytes than curl asked for");
    else if (r == 0) e->upload_done = 1;
    else {
      e->pulled += (long long)r;
      if (m->hooks.body) m->hooks.body(m->hooks.ctx, buf, r);
    }
    return;
  }
  case MC_STATUS: {
    static const long codes[] = {200, 404, 500, 100, 201, 429, 204, 304};
    if (e->headers_done) return;
    if (e->in_status) end_headers(e); /* one head at a time */
    if (!e->done_queued && !e->headers_done) status_line(e, codes[n % 8]);
    return;
  }
  case MC_HEADER:
    if (e->headers_done) return;
    if (!e->in_status) status_line(e, 200);
    if (!e->done_queued) header_line(e, HEADER_LINES[n % 8]);
    return;
  case MC_END_HEADERS:
    if (!e->headers_done) end_headers(e);
    return;
  case MC_BODY: {
    while (!e->headers_done && !e->done_queued) end_headers(e); /* a 1xx head then a final one */
    if (e->done_queued || (e->paused & CURLPAUSE_RECV) || e->held_len) return;
    char chunk[MC_HELD_MAX];
    if (n == 0 || n > sizeof chunk) n = sizeof chunk;
    for (size_t i = 0; i < n; i++) chunk[i] = (char)('a' + i % 26);
    give(e, e->write_fn, e->write_ud, chunk, n, 1);
    return;
  }
  case MC_DONE_OK:
    /* a transfer paused on receiving cannot finish: curl has not read the end yet */
    if ((e->paused & CURLPAUSE_RECV) || e->held_len) return;
    while (!e->headers_done && !e->done_queued) end_headers(e);
    queue_done(e, CURLE_OK);
    return;
  case MC_DONE_ERROR: queue_done(e, e->headers_done ? CURLE_RECV_ERROR : CURLE_COULDNT_CONNECT); return;
  case MC_DONE_TIMEOUT: queue_done(e, CURLE_OPERATION_TIMEDOUT); return;
  }
}

CURLMcode curl_multi_socket_action(CURLM *m, curl_socket_t s, int ev, int *running) {
  (void)s;
  (void)ev;
  if (m->in_action) fail("curl_multi_socket_action called recursively");
  m->in_action = 1;
  struct Curl_easy *e = m->n ? m->easy[0] : NULL;
  if (e && !e->started) {
    e->started = 1; /* the request goes out: curl reads the URL and the header list now */
    mc_request req = {e->url, e->headers, e->custom, e->post, e->nobody, e->postsize};
    if (m->hooks.started) m->hooks.started(m->hooks.ctx, &req);
  }
  if (e && m->has_next) {
    m->has_next = 0;
    perform(e, m->next.action, m->next.n);
  }
  m->in_action = 0;
  int live = 0;
  for (int i = 0; i < m->n; i++) live += !m->easy[i]->done_queued;
  *running = live;
  if (m->timer_fn) m->timer_fn(m, live ? 1000 : -1, m->timer_ud);
  return CURLM_OK;
}

void mc_set_hooks(CURLM *m, const mc_hooks *hooks) { m->hooks = *hooks; }

int mc_queue(CURLM *m, mc_action action, size_t n) {
  if (!m || !m->n) return 0;
  m->next.action = action;
  m->next.n = n;
  m->has_next = 1;
  if (m->timer_fn) m->timer_fn(m, 0, m->timer_ud); /* as libcurl with work to do: "call me at once" */
  return 1;
}

int mc_active(CURLM *m) { return m ? m->n : 0; }
