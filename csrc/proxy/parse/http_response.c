/* Response framing (see http_response.h for the rules and why unclear framing is never guessed). */
#include "proxy/parse/http_response.h"

#include <stdlib.h>
#include <string.h>

void hr_begin(hr_parser *p, int head_request) {
  ss_buf_free(&p->head);
  memset(p, 0, sizeof *p);
  ss_buf_init(&p->head, HR_MAX_HEAD);
  p->phase = HR_HEAD;
  p->head_request = head_request;
  p->keep_alive = 1;
}

void hr_free(hr_parser *p) { ss_buf_free(&p->head); }

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static int name_is(const char *s, size_t n, const char *name) {
  size_t k = strlen(name);
  if (n != k) return 0;
  for (size_t i = 0; i < k; i++)
    if (lower((unsigned char)s[i]) != name[i]) return 0;
  return 1;
}

/* In the comma-separated list v (blanks around items): how many items are the token (any
 * case); *items how many items there are. */
static size_t list_count(const char *v, size_t n, const char *token, size_t *items) {
  size_t i = 0, k = 0;
  *items = 0;
  while (i < n) {
    while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
    size_t s = i;
    while (i < n && v[i] != ',') i++;
    size_t e = i;
    while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
    if (e > s) *items += 1, k += name_is(v + s, e - s, token);
  }
  return k;
}

static int list_has(const char *v, size_t n, const char *token) {
  size_t items;
  return list_count(v, n, token, &items) > 0;
}

/* every item of the list is the token (an empty list is too) */
static int list_only(const char *v, size_t n, const char *token) {
  size_t items;
  return list_count(v, n, token, &items) == items;
}

/* the last item of the list is the token: Transfer-Encoding "gzip, chunked" is chunked */
static int list_ends_with(const char *v, size_t n, const char *token) {
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  size_t s = n;
  while (s && v[s - 1] != ',') s--;
  while (s < n && (v[s] == ' ' || v[s] == '\t')) s++;
  return name_is(v + s, n - s, token);
}

typedef struct {
  int version_minor, status, bad;
  int te, te_chunked, cl_count, cl_bad, conn_close, coded;
  unsigned long long cl;
} resp_head;

static void header(resp_head *h, const char *name, size_t nl, const char *v, size_t vl) {
  if (name_is(name, nl, "content-length")) {
    unsigned long long x = 0;
    if (vl == 0 || vl > 15) h->cl_bad = 1;
    for (size_t i = 0; i < vl && !h->cl_bad; i++) {
      if (v[i] < '0' || v[i] > '9') h->cl_bad = 1;
      else x = x * 10 + (unsigned)(v[i] - '0');
    }
    if (h->cl_count++ && x != h->cl) h->cl_bad = 1;
    h->cl = x;
  } else if (name_is(name, nl, "transfer-encoding")) {
    h->te++;
    h->te_chunked = list_ends_with(v, vl, "chunked"); /* the last field's last coding decides */
    if (!list_only(v, vl, "chunked")) h->coded = 1;
  } else if (name_is(name, nl, "content-encoding")) {
    if (!list_only(v, vl, "identity")) h->coded = 1;
  } else if (name_is(name, nl, "connection")) {
    if (list_has(v, vl, "close")) h->conn_close = 1;
  }
}

/* the head in buf[0..len), CRLF only; a line the parser cannot read sets bad */
static void parse_head(const char *b, size_t len, resp_head *h) {
  memset(h, 0, sizeof *h);
  const char *eol = memchr(b, '\n', len);
  size_t ll = (size_t)(eol - b); /* found: the head ends in CRLFCRLF */
  if (ll < 13 || b[ll - 1] != '\r' || memcmp(b, "HTTP/1.", 7) != 0 || (b[7] != '0' && b[7] != '1') || b[8] != ' ' ||
      (ll > 13 && b[12] != ' ')) {
    h->bad = 1;
    return;
  }
  h->version_minor = b[7] - '0';
  for (int i = 9; i < 12; i++) {
    if (b[i] < '0' || b[i] > '9') h->bad = 1;
    h->status = h->status * 10 + (b[i] - '0');
  }
  size_t pos = ll + 1;
  while (pos < len - 2 && !h->bad) {
    const char *nl = memchr(b + pos, '\n', len - pos);
    size_t e = (size_t)(nl - b);
    if (e == pos || b[e - 1] != '\r' || memchr(b + pos, '\r', e - 1 - pos)) {
      h->bad = 1;
      break;
    }
    const char *colon = memchr(b + pos, ':', e - 1 - pos);
    if (!colon || colon == b + pos || b[pos] == ' ' || b[pos] == '\t') {
      h->bad = 1; /* no name, or a folded line */
      break;
    }
    size_t nl_ = (size_t)(colon - (b + pos));
    if (b[pos + nl_ - 1] == ' ' || b[pos + nl_ - 1] == '\t') {
      h->bad = 1;
      break;
    }
    const char *v = colon + 1, *ve = b + e - 1;
    while (v < ve && (*v == ' ' || *v == '\t')) v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
    header(h, b + pos, nl_, v, (size_t)(ve - v));
    pos = e + 1;
  }
}

/* the head is complete (head_len bytes): choose how the body is framed */
static void framing(hr_parser *p, size_t head_len) {
  resp_head h;
  parse_head(p->head.data, head_len, &h);
  p->heads++;
  if (h.bad) {
    p->unread = 1;
    p->keep_alive = 0;
    p->phase = HR_UNTIL_CLOSE;
    return;
  }
  if (h.status >= 100 && h.status < 200 && h.status != 101) { /* interim: the final response follows */
    p->phase = HR_HEAD;
    return;
  }
  p->status = h.status;
  p->coded = h.coded;
  if (h.version_minor == 0 || h.conn_close) p->keep_alive = 0;
  if (h.status == 101) {
    p->keep_alive = 0;
    p->phase = HR_UNTIL_CLOSE;
  } else if (p->head_request || h.status == 204 || h.status == 304) {
    p->phase = HR_DONE;
  } else if (h.te) {
    if (h.cl_count) p->keep_alive = 0; /* both: Transfer-Encoding wins, and the connection is not reused */
    p->phase = h.te_chunked ? HR_CHUNKED : HR_UNTIL_CLOSE;
    if (!h.te_chunked) p->keep_alive = 0;
    hc_init(&p->chunks, HC_RESPONSE);
  } else if (h.cl_bad) {
    p->keep_alive = 0;
    p->phase = HR_UNTIL_CLOSE;
  } else if (h.cl_count) {
    p->left = h.cl;
    p->phase = h.cl ? HR_LENGTH : HR_DONE;
  } else {
    p->keep_alive = 0;
    p->phase = HR_UNTIL_CLOSE;
  }
}

/* head bytes: gathered until CRLFCRLF; returns how many of data belonged to the head, or -1 */
static size_t head_bytes(hr_parser *p, const char *data, size_t n) {
  size_t before = p->head.len, room = ss_buf_room(&p->head), take = n < room ? n : room;
  if (ss_buf_append(&p->head, data, take) != SS_BUF_OK) return (size_t)-1;
  size_t from = p->scanned > 3 ? p->scanned - 3 : 0, total = p->head.len;
  for (size_t i = from; i + 4 <= total; i++) {
    if (memcmp(p->head.data + i, "\r\n\r\n", 4) == 0) {
      size_t used = i + 4 - before;
      framing(p, i + 4);
      ss_buf_consume(&p->head, p->head.len); /* an interim response's head is followed by another */
      p->scanned = 0;
      return used;
    }
  }
  p->scanned = total;
  if (total >= HR_MAX_HEAD) { /* not parsed: the response runs until the origin closes */
    p->unread = 1;
    p->keep_alive = 0;
    p->phase = HR_UNTIL_CLOSE;
  }
  return take;
}

size_t hr_step(hr_parser *p, const char *data, size_t n, char *body, size_t *body_len) {
  size_t k = 0;
  if (body_len) *body_len = 0;
  switch (p->phase) {
  case HR_HEAD: return head_bytes(p, data, n);
  case HR_LENGTH:
    k = n < p->left ? n : (size_t)p->left;
    p->left -= k;
    if (!p->left) p->phase = HR_DONE;
    break;
  case HR_CHUNKED: {
    hc_result r;
    if (body) {
      k = hc_feed_data(&p->chunks, data, n, &r, body, body_len);
      body = NULL; /* copied */
    } else {
      k = hc_feed(&p->chunks, data, n, &r);
    }
    if (r == HC_END) p->phase = HR_DONE;
    if (r == HC_BAD) { /* the framing is lost: pass the rest on and end with the origin */
      p->unread = 1;
      p->keep_alive = 0;
      p->phase = HR_UNTIL_CLOSE;
    }
    break;
  }
  case HR_UNTIL_CLOSE: k = n; break;
  case HR_DONE: break;
  }
  if (body && k) memcpy(body, data, k), *body_len = k;
  return k;
}

size_t hr_feed(hr_parser *p, const char *data, size_t n, int *ended) {
  size_t i = 0;
  *ended = p->phase == HR_DONE;
  while (i < n && p->phase != HR_DONE) {
    size_t k = hr_step(p, data + i, n - i, NULL, NULL);
    if (k == (size_t)-1) return k;
    i += k;
  }
  if (p->phase == HR_DONE) {
    *ended = 1;
    hr_free(p);
  }
  return i;
}
