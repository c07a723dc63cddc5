/* The chunked-coding validator (csrc/proxy/parse/http_chunked.c): where an accepted body ends,
 * its data without the framing, and for each refusal the reason and the valid prefix. */
#include <stdlib.h>

#include "proxy/parse/http_chunked.h"
#include "test/unit.h"

typedef struct {
  size_t used;
  hc_result res;
  const char *why;
} outcome;

static outcome feed_all(hc_mode mode, const char *s, size_t n) {
  hc_decoder d;
  hc_init(&d, mode);
  outcome o;
  o.used = hc_feed(&d, s, n, &o.res);
  o.why = d.why;
  return o;
}

static void ends_where_the_body_ends(ut_run *t) {
  static const char body[] = "5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\n\r\nGET /next";
  hc_decoder d;
  hc_init(&d, HC_REQUEST);
  char data[sizeof body];
  size_t data_len = 0;
  hc_result res;
  size_t used = hc_feed_data(&d, body, sizeof body - 1, &res, data, &data_len);
  CHECK_EQ(res, HC_END);
  CHECK_EQ(used, sizeof body - 1 - strlen("GET /next"));
  CHECK_MEM(data, data_len, "hello0123456789", 15);
  /* after the end nothing more is taken */
  CHECK_EQ(hc_feed(&d, "0\r\n\r\n", 5, &res), 0);
  CHECK_EQ(res, HC_END);
}

/* One byte at a time: more until the last byte of the final CRLF, and the data split anywhere. */
static void reads_a_body_byte_by_byte(ut_run *t) {
  static const char body[] = "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  hc_decoder d;
  hc_init(&d, HC_REQUEST);
  char data[8], one[1];
  size_t data_len = 0;
  for (size_t i = 0; i < sizeof body - 1; i++) {
    hc_result res;
    size_t got = 0;
    CHECK_EQ(hc_feed_data(&d, body + i, 1, &res, one, &got), 1);
    if (got) data[data_len++] = one[0];
    CHECK_EQ(res, i + 2 < sizeof body ? HC_MORE : HC_END);
  }
  CHECK_MEM(data, data_len, "abcde", 5);
}

static void passes_a_responses_trailers_only(ut_run *t) {
  static const char trailed[] = "0\r\nX-Sum: 1\r\nY: 2\r\n\r\n";
  outcome o = feed_all(HC_RESPONSE, trailed, sizeof trailed - 1);
  CHECK_EQ(o.res, HC_END);
  CHECK_EQ(o.used, sizeof trailed - 1);
  o = feed_all(HC_REQUEST, trailed, sizeof trailed - 1);
  CHECK_EQ(o.res, HC_BAD);
  CHECK_EQ(o.used, 3);
  CHECK_STR(o.why, "trailer fields in a request are not accepted");
}

static void refuses_ambiguous_framing(ut_run *t) {
  static const struct {
    hc_mode mode;
    const char *in;
    size_t used;
    const char *why;
  } cases[] = {
      {HC_REQUEST, "5\nhello\r\n", 1, "a chunk size is not hex digits ending in CRLF"},
      {HC_REQUEST, " 5\r\n", 0, "a chunk size is not hex digits ending in CRLF"},
      {HC_REQUEST, "0x5\r\n", 1, "a chunk size is not hex digits ending in CRLF"},
      {HC_REQUEST, "-5\r\n", 0, "a chunk size is not hex digits ending in CRLF"},
      {HC_REQUEST, ";x\r\n", 0, "a chunk size is not hex digits ending in CRLF"},
      {HC_REQUEST, "5\rX", 2, "a chunk-size line does not end in CRLF"},
      {HC_REQUEST, "5;a\x01\r\n", 3, "a chunk extension holds a control byte"},
      {HC_REQUEST, "5\r\nhelloX\r\n", 8, "chunk data is longer than its size"},
      {HC_REQUEST, "5\r\nhello\rX", 9, "chunk data is not followed by CRLF"},
      {HC_REQUEST, "0\r\n\rX", 4, "a chunked body does not end in CRLF"},
      {HC_REQUEST, "1000000000000000\r\n", 15, "a chunk size has too many digits"},
      {HC_RESPONSE, "0\r\nX: \x01\r\n\r\n", 6, "a trailer line holds a control byte"},
      {HC_RESPONSE, "0\r\n\n", 3, "a trailer line holds a control byte"},
      {HC_RESPONSE, "0\r\nX: 1\rY", 8, "a trailer line does not end in CRLF"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    outcome o = feed_all(cases[i].mode, cases[i].in, strlen(cases[i].in));
    int ok = CHECK_EQ(o.res, HC_BAD) & CHECK_EQ(o.used, cases[i].used) & CHECK_STR(o.why, cases[i].why);
    if (!ok) NOTE("case %zu", i);
  }
  /* the largest size that cannot overflow is still read */
  outcome o = feed_all(HC_REQUEST, "fffffffffffffff\r\n", 17);
  CHECK_EQ(o.res, HC_MORE);
  /* once refused, it stays refused and takes nothing */
  hc_decoder d;
  hc_init(&d, HC_REQUEST);
  hc_result res;
  hc_feed(&d, "x", 1, &res);
  CHECK_EQ(hc_feed(&d, "0\r\n\r\n", 5, &res), 0);
  CHECK_EQ(res, HC_BAD);
}

/* A size line with its extension is at most HC_MAX_LINE bytes, its CR included. */
static void bounds_a_line(ut_run *t) {
  char *line = malloc(HC_MAX_LINE + 8);
  REQUIRE(CHECK(line != NULL));
  memcpy(line, "1;", 2);
  memset(line + 2, 'a', HC_MAX_LINE - 3);
  memcpy(line + HC_MAX_LINE - 1, "\r\n", 2); /* HC_MAX_LINE bytes before the LF */
  outcome o = feed_all(HC_REQUEST, line, HC_MAX_LINE + 1);
  CHECK_EQ(o.res, HC_MORE);
  memset(line + 2, 'a', HC_MAX_LINE - 2);
  memcpy(line + HC_MAX_LINE, "\r\n", 2); /* one more */
  o = feed_all(HC_REQUEST, line, HC_MAX_LINE + 2);
  CHECK_EQ(o.res, HC_BAD);
  CHECK_EQ(o.used, HC_MAX_LINE);
  CHECK_STR(o.why, "a chunk-size or trailer line is too long");
  free(line);
}

int main(void) {
  ut_run t;
  ut_begin(&t, "proxy_http_chunked");
  UT_RUN(&t, ends_where_the_body_ends);
  UT_RUN(&t, reads_a_body_byte_by_byte);
  UT_RUN(&t, passes_a_responses_trailers_only);
  UT_RUN(&t, refuses_ambiguous_framing);
  UT_RUN(&t, bounds_a_line);
  return ut_end(&t);
}
