/* libcurl's multi-socket API on the proxy's libuv loop: curl says which sockets to watch and
 * when to wake it (socket and timer callbacks); uv_poll and a uv_timer tell it when that
 * happened. One multi handle per server, so upstream connections are reused across requests. */
#include <stdlib.h>

#include "proxy/curl_loop.h"

struct curl_loop {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
};

typedef struct {
  uv_poll_t poll;
  curl_socket_t fd;
  curl_loop *cl;
} sock_watch;

static void check_done(curl_loop *cl) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(cl->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL *easy = m->easy_handle; /* m is not to be read once the handle is removed */
    CURLcode rc = m->data.result;
    curl_loop_transfer *t = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
    if (t && t->done) t->done(t, easy, rc);
  }
}

static void on_poll(uv_poll_t *p, int status, int events) {
  sock_watch *w = p->data;
  int flags = 0, running;
  if (status < 0) flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  curl_loop *cl = w->cl; /* w may be freed inside socket_action */
  curl_multi_socket_action(cl->multi, w->fd, flags, &running);
  check_done(cl);
}

static void on_timer(uv_timer_t *t) {
  curl_loop *cl = t->data;
  int running;
  curl_multi_socket_action(cl->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_done(cl);
}

static void free_watch(uv_handle_t *h) { free(h->data); }

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  (void)easy;
  curl_loop *cl = userp;
  sock_watch *w = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (w) {
      uv_poll_stop(&w->poll);
      uv_close((uv_handle_t *)&w->poll, free_watch);
      curl_multi_assign(cl->multi, fd, NULL);
    }
    return 0;
  }
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) return -1;
    w->fd = fd;
    w->cl = cl;
    if (uv_poll_init_socket(cl->loop, &w->poll, fd) != 0) {
      free(w);
      return -1;
    }
    w->poll.data = w;
    curl_multi_assign(cl->multi, fd, w);
  }
  int events = 0;
  if (what & CURL_POLL_IN) events |= UV_READABLE;
  if (what & CURL_POLL_OUT) events |= UV_WRITABLE;
  uv_poll_start(&w->poll, events, on_poll);
  return 0;
}

static int on_timeout(CURLM *multi, long ms, void *userp) {
  (void)multi;
  curl_loop *cl = userp;
  if (ms < 0) uv_timer_stop(&cl->timer);
  else uv_timer_start(&cl->timer, on_timer, (uint64_t)ms, 0);
  return 0;
}

curl_loop *curl_loop_new(uv_loop_t *loop) {
  curl_loop *cl = calloc(1, sizeof *cl);
  if (!cl) return NULL;
  cl->loop = loop;
  cl->multi = curl_multi_init();
  if (!cl->multi) {
    free(cl);
    return NULL;
  }
  uv_timer_init(loop, &cl->timer);
  cl->timer.data = cl;
  curl_multi_setopt(cl->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(cl->multi, CURLMOPT_SOCKETDATA, cl);
  curl_multi_setopt(cl->multi, CURLMOPT_TIMERFUNCTION, on_timeout);
  curl_multi_setopt(cl->multi, CURLMOPT_TIMERDATA, cl);
  return cl;
}

CURLM *curl_loop_multi(curl_loop *cl) { return cl->multi; }

static void free_loop(uv_handle_t *h) { free(h->data); }

void curl_loop_close(curl_loop *cl) {
  if (!cl) return;
  /* every easy handle was removed with its connection; cleanup closes cached upstream
   * connections, calling on_socket(REMOVE) for each while the loop still runs */
  curl_multi_cleanup(cl->multi);
  uv_timer_stop(&cl->timer);
  uv_close((uv_handle_t *)&cl->timer, free_loop);
}
