#include "engine/attach.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "engine/errmsg.h"
#include "engine/transfer.h"
#include "engine/upgrade.h"
#include "util/clock.h"

/* A head longer than this is not Docker's: refused rather than buffered without end. */
#define HEAD_MAX (16 * 1024)
/* What is kept of an error answer's body: the daemon's message is short. */
#define ERROR_BODY_MAX (16 * 1024)

struct sse_attach {
  CURL *easy;
  curl_socket_t fd;
  char *pending;      /* stream bytes that came with the head */
  size_t pending_len, pending_off;
  char what[300];     /* "POST /exec/ID/start", for error messages */
  char host[512];     /* the Host header */
};

static void fail(ss_error *err, const sse_attach *a, const char *reason, const char *fmt, const char *detail) {
  ss_error_set(err, "transport", reason, "%s: %s%s%s", a->what, fmt, detail ? ": " : "", detail ? detail : "");
}

/* Waits until fd is ready for events or timeout passes: 1 ready, 0 timeout, -1 poll failed. */
static int wait_fd(curl_socket_t fd, short events, double timeout) {
  double deadline = ss_monotonic_now() + timeout;
  for (;;) {
    double left = deadline - ss_monotonic_now();
    int ms = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    return rc > 0;
  }
}

ssize_t sse_attach_recv(sse_attach *a, char *buf, size_t n, double timeout, ss_error *err) {
  if (a->pending_off < a->pending_len) {
    size_t k = a->pending_len - a->pending_off;
    if (k > n) k = n;
    memcpy(buf, a->pending + a->pending_off, k);
    a->pending_off += k;
    return (ssize_t)k;
  }
  double deadline = ss_monotonic_now() + (timeout > 0 ? timeout : 0);
  for (;;) {
    size_t got = 0;
    CURLcode rc = curl_easy_recv(a->easy, buf, n, &got);
    if (rc == CURLE_OK) return (ssize_t)got; /* 0: the daemon closed the stream */
    if (rc != CURLE_AGAIN) {
      fail(err, a, "closed", "the connection was dropped", curl_easy_strerror(rc));
      return -1;
    }
    double left = deadline - ss_monotonic_now();
    if (left <= 0) return -2;
    int w = wait_fd(a->fd, POLLIN, left);
    if (w < 0) {
      fail(err, a, "closed", "poll failed", strerror(errno));
      return -1;
    }
    if (w == 0) return -2;
  }
}

int sse_attach_send(sse_attach *a, const char *p, size_t n, double timeout, ss_error *err) {
  double deadline = ss_monotonic_now() + timeout;
  while (n > 0) {
    size_t sent = 0;
    CURLcode rc = curl_easy_send(a->easy, p, n, &sent);
    if (rc == CURLE_OK) {
      p += sent;
      n -= sent;
      continue;
    }
    if (rc != CURLE_AGAIN) {
      fail(err, a, "closed", "the connection was dropped", curl_easy_strerror(rc));
      return -1;
    }
    double left = deadline - ss_monotonic_now();
    int w = left > 0 ? wait_fd(a->fd, POLLOUT, left) : 0;
    if (w <= 0) {
      fail(err, a, "timeout", "the daemon did not take the bytes in time", NULL);
      return -1;
    }
  }
  return 0;
}

ssize_t sse_attach_send_some(sse_attach *a, const char *p, size_t n, ss_error *err) {
  size_t sent = 0;
  CURLcode rc = curl_easy_send(a->easy, p, n, &sent);
  if (rc == CURLE_OK) return (ssize_t)sent;
  if (rc == CURLE_AGAIN) return 0;
  fail(err, a, "closed", "the connection was dropped", curl_easy_strerror(rc));
  return -1;
}

int sse_attach_shutdown_write(sse_attach *a, ss_error *err) {
  /* Under TLS too: the daemon's TLS reader sees the FIN at a record boundary as a clean EOF
   * (the Docker CLI closes stdin the same way). */
  if (shutdown(a->fd, SHUT_WR) == 0) return 0;
  fail(err, a, "closed", "shutdown failed", strerror(errno));
  return -1;
}

int sse_attach_fd(const sse_attach *a) { return a ? (int)a->fd : -1; }

size_t sse_attach_buffered(const sse_attach *a) { return a->pending_len - a->pending_off; }

void sse_attach_free(sse_attach *a) {
  if (!a) return;
  if (a->easy) curl_easy_cleanup(a->easy);
  free(a->pending);
  free(a);
}

/* The Host header: the authority of the base URL ("localhost" for a unix socket). */
static void host_of(const sse_host *h, char *out, size_t outsz) {
  const char *p = strstr(h->base, "://");
  snprintf(out, outsz, "%s", p ? p + 3 : "localhost");
}

static int connect_curl(sse_attach *a, const sse_config *cfg, double timeout, ss_error *err) {
  sse_endpoint ep;
  memset(&ep, 0, sizeof ep);
  if (sse_host_parse(cfg->host, cfg->tls, &ep.host, err) != 0) return -1;
  host_of(&ep.host, a->host, sizeof a->host);
  ep.tls_verify = cfg->tls_verify;
  ep.ca = (char *)cfg->ca; /* read only: setopt copies the strings */
  ep.cert = (char *)cfg->cert;
  ep.key = (char *)cfg->key;
  a->easy = curl_easy_init();
  if (!a->easy) {
    ss_error_set(err, "transport", "curl", "could not set up the connection");
    return -1;
  }
  long ms = (long)(timeout * 1000.0 + 0.5);
  int ok = sse_endpoint_setopt(a->easy, &ep);
  ok = ok && curl_easy_setopt(a->easy, CURLOPT_URL, ep.host.base) == CURLE_OK;
  ok = ok && curl_easy_setopt(a->easy, CURLOPT_CONNECT_ONLY, 1L) == CURLE_OK;
  ok = ok && curl_easy_setopt(a->easy, CURLOPT_CONNECTTIMEOUT_MS, ms > 0 ? ms : 1L) == CURLE_OK;
  /* Through an HTTP proxy (tcp:// hosts honour http_proxy as the client does), tunnel. */
  ok = ok && curl_easy_setopt(a->easy, CURLOPT_HTTPPROXYTUNNEL, 1L) == CURLE_OK;
  if (!ok) {
    ss_error_set(err, "transport", "curl", "could not set up the connection");
    return -1;
  }
  CURLcode rc = curl_easy_perform(a->easy);
  if (rc != CURLE_OK) {
    const char *reason = rc == CURLE_OPERATION_TIMEDOUT ? "timeout"
                         : rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ? "unreachable"
                         : rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION ? "tls"
                                                                                               : "protocol";
    fail(err, a, reason, "cannot reach the engine", curl_easy_strerror(rc));
    return -1;
  }
  if (curl_easy_getinfo(a->easy, CURLINFO_ACTIVESOCKET, &a->fd) != CURLE_OK || a->fd == CURL_SOCKET_BAD) {
    fail(err, a, "protocol", "no socket after connecting", NULL);
    return -1;
  }
  return 0;
}

/* Reads until the answer's head is whole (the stream's first bytes may come with it). Returns
 * the parsed head's status, or -1 with err set; buf holds *len bytes read. */
static long read_head(sse_attach *a, char *buf, size_t *len, sse_upgrade_head *head, double deadline,
                      ss_error *err) {
  for (;;) {
    int st = sse_upgrade_parse(buf, *len, head);
    if (st == 1) return head->status;
    if (st < 0 || *len == HEAD_MAX) {
      fail(err, a, "protocol", "the daemon's answer is not an HTTP head", NULL);
      return -1;
    }
    double left = deadline - ss_monotonic_now();
    ssize_t got = left > 0 ? sse_attach_recv(a, buf + *len, HEAD_MAX - *len, left, err) : -2;
    if (got == -1) return -1;
    if (got == -2) {
      fail(err, a, "timeout", "no answer in time", NULL);
      return -1;
    }
    if (got == 0) {
      fail(err, a, "closed", "the daemon closed the connection before answering", NULL);
      return -1;
    }
    *len += (size_t)got;
  }
}

/* An error answer: its body (up to Content-Length, or to the end) for the daemon's message. */
static void read_refusal(sse_attach *a, char *buf, size_t len, const sse_upgrade_head *head, double deadline,
                         sse_attach_refusal *refusal) {
  size_t body = len - head->head_len;
  size_t want = head->content_length >= 0 && head->content_length < ERROR_BODY_MAX
                    ? (size_t)head->content_length : ERROR_BODY_MAX;
  memmove(buf, buf + head->head_len, body);
  ss_error ignored;
  ss_error_init(&ignored);
  while (body < want) {
    double left = deadline - ss_monotonic_now();
    if (left <= 0) break;
    ssize_t got = sse_attach_recv(a, buf + body, want - body, left, &ignored);
    if (got <= 0) break; /* what came is enough for a message */
    body += (size_t)got;
  }
  ss_error_clear(&ignored);
  refusal->status = head->status;
  sse_error_message(buf, body, refusal->message, sizeof refusal->message);
}

sse_attach *sse_attach_open(const sse_config *cfg, const char *method, const char *target, const char *body,
                            size_t body_len, double timeout, sse_attach_refusal *refusal, ss_error *err) {
  refusal->status = 0;
  refusal->message[0] = '\0';
  if (sse_curl_init(err) != 0) return NULL;
  sse_attach *a = calloc(1, sizeof *a);
  char *buf = malloc(HEAD_MAX > ERROR_BODY_MAX ? HEAD_MAX : ERROR_BODY_MAX);
  if (!a || !buf) {
    free(a);
    free(buf);
    ss_error_set(err, "transport", "nomem", "out of memory");
    return NULL;
  }
  a->fd = CURL_SOCKET_BAD;
  snprintf(a->what, sizeof a->what, "%.15s %.*s", method, (int)strcspn(target, "?"), target);
  double deadline = ss_monotonic_now() + timeout;
  if (connect_curl(a, cfg, timeout, err) != 0) goto fail;
  int n = snprintf(buf, HEAD_MAX,
                   "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sandstack\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
                   method, target, a->host, body_len);
  if (n < 0 || n >= HEAD_MAX) {
    ss_error_set(err, "invalid", "bad_path", "the request target is too long");
    goto fail;
  }
  double left = deadline - ss_monotonic_now();
  if (sse_attach_send(a, buf, (size_t)n, left, err) != 0) goto fail;
  if (body_len && sse_attach_send(a, body, body_len, deadline - ss_monotonic_now(), err) != 0) goto fail;
  size_t len = 0;
  sse_upgrade_head head;
  long status = read_head(a, buf, &len, &head, deadline, err);
  if (status < 0) goto fail;
  if (status != 101 && status != 200) {
    read_refusal(a, buf, len, &head, deadline, refusal);
    goto fail;
  }
  /* The stream's first bytes, when they came with the head, are handed out first. */
  a->pending_len = len - head.head_len;
  if (a->pending_len) {
    memmove(buf, buf + head.head_len, a->pending_len);
    a->pending = buf;
  } else {
    free(buf);
  }
  return a;
fail:
  free(buf);
  sse_attach_free(a);
  return NULL;
}
