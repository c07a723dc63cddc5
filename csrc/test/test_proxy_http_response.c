/* Response framing (csrc/proxy/parse/http_response.c): where a response ends, whether the
 * connection may carry another request, and that unclear framing is never guessed at: such a
 * response runs until the origin closes and the connection is not reused. */
#include <stdlib.h>

#include "proxy/parse/http_response.h"
#include "test/unit.h"

typedef struct {
  size_t used;
  int ended, status, keep_alive, coded, unread;
  unsigned heads;
  hr_phase phase;
} outcome;

/* Feeds s whole (head_request: the request was HEAD), and says what came of it. */
static outcome run(const char *s, size_t n, int head_request) {
  hr_parser p;
  memset(&p, 0, sizeof p);
  hr_begin(&p, head_request);
  outcome o = {0};
  o.used = hr_feed(&p, s, n, &o.ended);
  o.status = p.status;
  o.keep_alive = p.keep_alive;
  o.coded = p.coded;
  o.unread = p.unread;
  o.heads = p.heads;
  o.phase = p.phase;
  hr_free(&p);
  return o;
}

static outcome run_str(const char *s) { return run(s, strlen(s), 0); }

static void ends_by_length_or_chunks(ut_run *t) {
  static const char cl[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1";
  outcome o = run_str(cl);
  CHECK_EQ(o.ended, 1);
  CHECK_EQ(o.used, sizeof cl - 1 - 8);
  CHECK_EQ(o.status, 200);
  CHECK_EQ(o.keep_alive, 1);
  CHECK_EQ(o.unread, 0);
  static const char chunked[] = "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nX";
  o = run_str(chunked);
  CHECK_EQ(o.ended, 1);
  CHECK_EQ(o.used, sizeof chunked - 2);
  CHECK_EQ(o.status, 201);
  CHECK_EQ(o.keep_alive, 1);
  CHECK_EQ(o.coded, 0);
  o = run_str("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n");
  CHECK_EQ(o.ended, 1);
  CHECK_EQ(o.coded, 1); /* the body is not plain text */
  o = run_str("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"); /* equal repeats */
  CHECK_EQ(o.ended, 1);
  CHECK_EQ(o.keep_alive, 1);
  o = run_str("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  CHECK_EQ(o.ended, 1);
}

static void ends_with_the_head_by_rule(ut_run *t) {
  static const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
  outcome o = run(head, sizeof head - 1, 1); /* the answer to HEAD */
  CHECK_EQ(o.ended, 1);
  CHECK_EQ(o.used, sizeof head - 1);
  CHECK_EQ(o.keep_alive, 1);
  CHECK_EQ(run_str("HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n").ended, 1);
  CHECK_EQ(run_str("HTTP/1.1 304 Not Modified\r\n\r\n").ended, 1);
  /* an interim 100 is followed by the final response */
  o = run_str("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  CHECK_EQ(o.ended, 1);
  CHECK_EQ(o.status, 200);
  CHECK_EQ(o.heads, 2);
}

static void runs_until_close_without_reuse(ut_run *t) {
  static const struct {
    const char *in;
    int ended, unread;
  } cases[] = {
      {"HTTP/1.1 200 OK\r\n\r\nbody", 0, 0},                                              /* no length */
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nbody", 0, 0},                   /* not chunked last */
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab", 0, 0},      /* differing */
      {"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nab", 0, 0},
      {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nraw", 0, 0},
      {"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", 0, 1},                                    /* no colon */
      {"HTTP/1.1 200 OK\r\nA: 1\r\n folded: 2\r\n\r\n", 0, 1},
      {"HTTP/1.1 200 OK\r\nA : 1\r\n\r\n", 0, 1},                                         /* blank before ':' */
      {"HTTP/1.1 200 OK\r\nA: 1\nB: 2\r\n\r\n", 0, 1},                                    /* bare LF */
      {"HTTP/2 200 OK\r\n\r\n", 0, 1},
      {"HTTP/1.1 2x0 OK\r\n\r\n", 0, 1},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, 1},              /* a bad chunk */
      /* these end, but the connection is not reused */
      {"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", 1, 0},
      {"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n", 1, 0},
      {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    outcome o = run_str(cases[i].in);
    int ok = CHECK_EQ(o.ended, cases[i].ended) & CHECK_EQ(o.keep_alive, 0) & CHECK_EQ(o.unread, cases[i].unread);
    if (!cases[i].ended) ok &= CHECK_EQ(o.phase, HR_UNTIL_CLOSE) & CHECK_EQ(o.used, strlen(cases[i].in));
    if (!ok) NOTE("case %zu", i);
  }
}

/* A head is gathered up to HR_MAX_HEAD bytes: one that ends there is read, a longer one is not. */
static void bounds_the_head(ut_run *t) {
  char *big = malloc(HR_MAX_HEAD + 16);
  REQUIRE(CHECK(big != NULL));
  static const char start[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: ";
  memcpy(big, start, sizeof start - 1);
  memset(big + sizeof start - 1, 'a', HR_MAX_HEAD - (sizeof start - 1) - 4);
  memcpy(big + HR_MAX_HEAD - 4, "\r\n\r\n", 4);
  outcome o = run(big, HR_MAX_HEAD, 0);
  CHECK_EQ(o.ended, 1);
  CHECK_EQ(o.keep_alive, 1);
  big[HR_MAX_HEAD - 4] = 'a'; /* its end one byte later: past the limit */
  memcpy(big + HR_MAX_HEAD - 3, "\r\n\r\n", 4);
  o = run(big, HR_MAX_HEAD + 1, 0);
  CHECK_EQ(o.ended, 0);
  CHECK_EQ(o.phase, HR_UNTIL_CLOSE);
  CHECK_EQ(o.unread, 1);
  CHECK_EQ(o.keep_alive, 0);
  CHECK_EQ(o.status, 0);
  free(big);
}

/* hr_step hands out a body's bytes without its framing. */
static void steps_out_the_body(ut_run *t) {
  static const char in[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n";
  hr_parser p;
  memset(&p, 0, sizeof p);
  hr_begin(&p, 0);
  char body[sizeof in], all[sizeof in];
  size_t at = 0, all_len = 0, body_len = 0;
  while (at < sizeof in - 1 && p.phase != HR_DONE) {
    size_t k = hr_step(&p, in + at, 4 < sizeof in - 1 - at ? 4 : sizeof in - 1 - at, body, &body_len);
    REQUIRE(CHECK(k != (size_t)-1));
    memcpy(all + all_len, body, body_len);
    all_len += body_len;
    at += k;
  }
  CHECK_EQ(p.phase, HR_DONE);
  CHECK_EQ(at, sizeof in - 1);
  CHECK_MEM(all, all_len, "abcde", 5);
  hr_free(&p);
}

int main(void) {
  ut_run t;
  ut_begin(&t, "proxy_http_response");
  UT_RUN(&t, ends_by_length_or_chunks);
  UT_RUN(&t, ends_with_the_head_by_rule);
  UT_RUN(&t, runs_until_close_without_reuse);
  UT_RUN(&t, bounds_the_head);
  UT_RUN(&t, steps_out_the_body);
  return ut_end(&t);
}
