/* The proxy's request-head parser and target splitters (csrc/proxy/parse/http_head.c): the
 * fields of an accepted head, the status of each refusal, the limits, and the fuzz target's
 * seeds (fuzz_proxy_request) as cases. */
#include <stdio.h>

#include "proxy/parse/http_head.h"
#include "test/unit.h"

/* A byte string with its length (it may hold NUL). */
typedef struct {
  const char *s;
  size_t n;
} bytes;
#define B(lit) ((bytes){(lit), sizeof(lit) - 1})

static const ph_limits roomy = {8192, 65536, 100};

static ph_status parse_with(bytes in, const ph_limits *lim, ph_request *r) {
  size_t scanned = 0;
  return ph_parse(in.s, in.n, lim, &scanned, r);
}

static void accepts_a_request(ut_run *t) {
#define HEAD "POST /v1/messages?x=1 HTTP/1.1\r\nHost: api.test\r\nContent-Length:  12 \r\nX-Empty:\r\n\r\n"
  ph_request r;
  REQUIRE(CHECK_EQ(parse_with(B(HEAD "BODY"), &roomy, &r), PH_DONE));
  CHECK_SPAN(r.method, r.method_len, "POST");
  CHECK_SPAN(r.target, r.target_len, "/v1/messages?x=1");
  CHECK_EQ(r.minor, 1);
  CHECK_EQ(r.head_len, sizeof HEAD - 1);
#undef HEAD
  REQUIRE(CHECK_EQ(r.nheaders, 3));
  CHECK_SPAN(r.headers[0].name, r.headers[0].name_len, "Host");
  CHECK_SPAN(r.headers[0].value, r.headers[0].value_len, "api.test");
  CHECK_SPAN(r.headers[1].value, r.headers[1].value_len, "12"); /* blanks around the value dropped */
  CHECK_EQ(r.headers[2].value_len, 0);
  int n = 0;
  const ph_header *h = ph_find(&r, "HOST", &n);
  CHECK_EQ(n, 1);
  CHECK(h == &r.headers[0]);
  unsigned long long cl = 0;
  CHECK_EQ(ph_content_length(&r, &cl), 1);
  CHECK_EQ(cl, 12);
  ph_request bare;
  REQUIRE(CHECK_EQ(parse_with(B("GET / HTTP/1.0\r\n\r\n"), &roomy, &bare), PH_DONE));
  CHECK_EQ(bare.nheaders, 0);
  CHECK_EQ(bare.minor, 0);
  CHECK_EQ(bare.head_len, 18);
}

/* Bytes arriving one at a time: incomplete until the last, then the same head. */
static void reads_a_head_byte_by_byte(ut_run *t) {
  bytes in = B("GET /a HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n");
  ph_request r;
  size_t scanned = 0;
  for (size_t k = 1; k < in.n; k++) CHECK_EQ(ph_parse(in.s, k, &roomy, &scanned, &r), PH_INCOMPLETE);
  CHECK_EQ(ph_parse(in.s, in.n, &roomy, &scanned, &r), PH_DONE);
  CHECK_EQ(r.head_len, in.n);
  CHECK_EQ(r.nheaders, 2);
}

static void refuses_what_two_readers_could_read_apart(ut_run *t) {
  static const struct {
    bytes in;
    ph_status want;
  } cases[] = {
      {B("GET / HTTP/1.1\n\r\n"), PH_BAD},                     /* a bare LF ends the request line */
      {B("GET / HTTP/1.1\r\nHost : a\r\n\r\n"), PH_BAD},       /* a blank before the colon */
      {B("GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"), PH_BAD},     /* a folded line */
      {B("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n"), PH_BAD},        /* a bare CR inside a line */
      {B("GET / HTTP/1.1\r\nA: b\0c\r\n\r\n"), PH_BAD},        /* a NUL in a value */
      {B("GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n"), PH_BAD},       /* DEL in a value */
      {B("GET  / HTTP/1.1\r\n\r\n"), PH_BAD},                  /* two spaces: an empty target */
      {B("G@T / HTTP/1.1\r\n\r\n"), PH_BAD},                   /* a method that is not a token */
      {B("GET / http/1.1\r\n\r\n"), PH_BAD},
      {B("\r\n\r\n"), PH_BAD},                                 /* no request line */
      {B("GET / HTTP/2.0\r\n\r\n"), PH_BAD_VERSION},
      {B("GET / HTTP/1.2\r\n\r\n"), PH_BAD_VERSION},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ph_request r;
    if (!CHECK_EQ(parse_with(cases[i].in, &roomy, &r), cases[i].want)) NOTE("case %zu", i);
  }
}

static void holds_its_limits(ut_run *t) {
  const ph_limits lim = {16, 64, 4};
  ph_request r;
  CHECK_EQ(parse_with(B("GET /ab HTTP/1.1\r\n\r\n"), &lim, &r), PH_DONE); /* a line of exactly 16 */
  CHECK_EQ(parse_with(B("GET /abc HTTP/1.1\r\n\r\n"), &lim, &r), PH_LINE_TOO_LONG);
  CHECK_EQ(parse_with(B("GET /0123456789abcdef"), &lim, &r), PH_LINE_TOO_LONG); /* before its end arrives */
  /* 23 bytes of framing around a value of k bytes: 64 fits, 65 does not */
  char head[128];
  int n = snprintf(head, sizeof head, "GET / HTTP/1.1\r\nA: %041d\r\n\r\n", 0);
  CHECK_EQ(n, 64);
  CHECK_EQ(parse_with((bytes){head, (size_t)n}, &lim, &r), PH_DONE);
  n = snprintf(head, sizeof head, "GET / HTTP/1.1\r\nA: %042d\r\n\r\n", 0);
  CHECK_EQ(parse_with((bytes){head, (size_t)n}, &lim, &r), PH_HEAD_TOO_LARGE);
  n = snprintf(head, sizeof head, "GET / HTTP/1.1\r\nA: %050d", 0); /* no end yet */
  CHECK_EQ(parse_with((bytes){head, 64}, &lim, &r), PH_INCOMPLETE);
  CHECK_EQ(parse_with((bytes){head, (size_t)n}, &lim, &r), PH_HEAD_TOO_LARGE); /* over the limit before its end */
  CHECK_EQ(parse_with(B("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n"), &lim, &r), PH_DONE);
  CHECK_EQ(parse_with(B("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n"), &lim, &r), PH_HEAD_TOO_LARGE);
  /* a caller's count over the array's size is held to PH_MAX_HEADERS */
  char many[4096] = "GET / HTTP/1.1\r\n";
  for (int i = 0; i <= PH_MAX_HEADERS; i++) strcat(many, "A: 1\r\n");
  strcat(many, "\r\n");
  const ph_limits wide = {8192, 65536, 1000};
  CHECK_EQ(parse_with((bytes){many, strlen(many)}, &wide, &r), PH_HEAD_TOO_LARGE);
}

static void splits_targets(ut_run *t) {
  char host[256];
  int port = 0;
  CHECK_EQ(ph_authority("a.test:443", 10, host, &port), 0);
  CHECK_STR(host, "a.test");
  CHECK_EQ(port, 443);
  static const char *const bad_authorities[] = {"a.test", "a.test:0443", "a.test:65536", "a.test:", "u@a.test:1",
                                                "[::1]:443", ":443", "a.test:44x"};
  for (size_t i = 0; i < sizeof bad_authorities / sizeof bad_authorities[0]; i++)
    CHECK_EQ(ph_authority(bad_authorities[i], strlen(bad_authorities[i]), host, &port), -1);
  char longest[300];
  memset(longest, 'a', 253);
  strcpy(longest + 253, ":1");
  CHECK_EQ(ph_authority(longest, strlen(longest), host, &port), 0);
  memset(longest, 'a', 254);
  strcpy(longest + 254, ":1");
  CHECK_EQ(ph_authority(longest, strlen(longest), host, &port), -1);

  const char *path = NULL;
  size_t pl = 0;
  CHECK_EQ(ph_absolute("http://a.test/x?y", 17, host, &port, &path, &pl), 0);
  CHECK_STR(host, "a.test");
  CHECK_EQ(port, 80);
  CHECK_SPAN(path, pl, "/x?y");
  CHECK_EQ(ph_absolute("HTTP://A.test:8080", 18, host, &port, &path, &pl), 0);
  CHECK_STR(host, "A.test");
  CHECK_EQ(port, 8080);
  CHECK_SPAN(path, pl, "/");
  static const char *const bad_absolute[] = {"http://a.test?q", "http://a.test/#f", "https://a.test/", "/x",
                                             "http://u@a.test/"};
  for (size_t i = 0; i < sizeof bad_absolute / sizeof bad_absolute[0]; i++)
    CHECK_EQ(ph_absolute(bad_absolute[i], strlen(bad_absolute[i]), host, &port, &path, &pl), -1);
}

static void reads_content_length(ut_run *t) {
  static const struct {
    bytes in;
    int want;
    unsigned long long len;
  } cases[] = {
      {B("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"), 1, 5},
      {B("POST / HTTP/1.1\r\nContent-Length: 999999999999999\r\n\r\n"), 1, 999999999999999ull},
      {B("POST / HTTP/1.1\r\n\r\n"), 0, 0},
      {B("POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n"), -1, 0}, /* repeated */
      {B("POST / HTTP/1.1\r\nContent-Length: 5x\r\n\r\n"), -1, 0},
      {B("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), -1, 0},
      {B("POST / HTTP/1.1\r\nContent-Length: 1000000000000000\r\n\r\n"), -1, 0}, /* 16 digits */
      {B("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n"), -1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ph_request r;
    unsigned long long len = 7;
    if (!CHECK_EQ(parse_with(cases[i].in, &roomy, &r), PH_DONE)) continue;
    CHECK_EQ(ph_content_length(&r, &len), cases[i].want);
    CHECK_EQ(len, cases[i].len);
  }
}

static int host_refusal(ut_run *t, bytes in, const char *auth, const char **why) {
  ph_request r;
  if (!CHECK_EQ(parse_with(in, &roomy, &r), PH_DONE)) return -1;
  *why = NULL;
  return ph_host_refusal(&r, auth, auth ? strlen(auth) : 0, "a.test", 80, 80, why);
}

static void checks_the_host_named(ut_run *t) {
  const char *why;
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\nHost: A.TEST.:80\r\n\r\n"), NULL, &why), 0);
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\n\r\n"), "a.test", &why), 0);
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n"), NULL, &why), 400);
  CHECK_STR(why, "the request has more than one Host header");
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\nHost: u@a.test\r\n\r\n"), NULL, &why), 400);
  CHECK_STR(why, "the Host header is not host[:port]");
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\nHost: b.test\r\n\r\n"), NULL, &why), 421);
  CHECK_STR(why, "the Host header names another host or port than the one this request was admitted for");
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\nHost: a.test:8080\r\n\r\n"), NULL, &why), 421);
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\n\r\n"), "b.test", &why), 421);
  CHECK_STR(why, "the request target names another host or port than the one this connection was admitted for");
  CHECK_EQ(host_refusal(t, B("GET / HTTP/1.1\r\n\r\n"), "a.test:080", &why), 400);
}

static void drops_what_is_not_sent_on(ut_run *t) {
  ph_request r;
  bytes in = B("GET / HTTP/1.1\r\nProxy-Authorization: Basic x\r\nX-HTTP-Method-Override: DELETE\r\n"
               "X-tok: 1\r\nA: has-tok-inside\r\nAccept: */*\r\nTE: trailers\r\n\r\n");
  REQUIRE(CHECK_EQ(parse_with(in, &roomy, &r), PH_DONE));
  REQUIRE(CHECK_EQ(r.nheaders, 6));
  static const int dropped[] = {1, 1, 1, 1, 0, 1};
  for (size_t i = 0; i < 6; i++) CHECK_EQ(ph_dropped(&r.headers[i], "tok", 3), dropped[i]);
  CHECK_EQ(ph_override(&r.headers[1]), 1);
  CHECK_EQ(ph_any_override(&r), 1);
  CHECK_EQ(ph_hop_by_hop(&r.headers[5]), 1);
}

/* The seeds: byte 0 is the fuzz target's piece size, the rest a request. */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  REQUIRE(CHECK(len > 1));
  bytes in = {(const char *)data + 1, len - 1};
  ph_request r, pieces;
  REQUIRE(CHECK_EQ(parse_with(in, &roomy, &r), PH_DONE));
  /* fed in the target's pieces, the head ends at the same byte */
  size_t piece = data[0] % 64 + 1, have = 0, scanned = 0;
  ph_status st = PH_INCOMPLETE;
  while (st == PH_INCOMPLETE && have < in.n) {
    have = have + piece < in.n ? have + piece : in.n;
    st = ph_parse(in.s, have, &roomy, &scanned, &pieces);
  }
  CHECK_EQ(st, PH_DONE);
  CHECK_EQ(pieces.head_len, r.head_len);
  char host[256];
  int port = 0;
  const char *path = NULL, *why = NULL;
  size_t pl = 0;
  unsigned long long cl = 0;
  if (strcmp(name, "seed-connect") == 0) {
    CHECK_SPAN(r.method, r.method_len, "CONNECT");
    CHECK_EQ(ph_authority(r.target, r.target_len, host, &port), 0);
    CHECK_STR(host, "allowed.test");
    CHECK_EQ(port, 443);
    CHECK_EQ(r.nheaders, 2);
  } else if (strcmp(name, "seed-forward") == 0) {
    CHECK_EQ(ph_absolute(r.target, r.target_len, host, &port, &path, &pl), 0);
    CHECK_STR(host, "allowed.test");
    CHECK_EQ(port, 8080);
    CHECK_SPAN(path, pl, "/ok/a?q=1");
    CHECK_EQ(ph_content_length(&r, &cl), 1);
    CHECK_EQ(cl, 5);
    CHECK_EQ(ph_host_refusal(&r, NULL, 0, "allowed.test", 8080, 80, &why), 421); /* Host: x */
  } else if (strcmp(name, "seed-host") == 0) {
    CHECK_EQ(ph_host_refusal(&r, NULL, 0, "a.test", 80, 80, &why), 0); /* Host: A.TEST.:80 */
    CHECK_EQ(ph_any_override(&r), 1);
  } else if (strcmp(name, "seed-origin") == 0) {
    CHECK_SPAN(r.target, r.target_len, "/v1/messages");
    CHECK_EQ(ph_content_length(&r, &cl), 1);
    CHECK_EQ(cl, 2);
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "proxy_http_head");
  UT_RUN(&t, accepts_a_request);
  UT_RUN(&t, reads_a_head_byte_by_byte);
  UT_RUN(&t, refuses_what_two_readers_could_read_apart);
  UT_RUN(&t, holds_its_limits);
  UT_RUN(&t, splits_targets);
  UT_RUN(&t, reads_content_length);
  UT_RUN(&t, checks_the_host_named);
  UT_RUN(&t, drops_what_is_not_sent_on);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_proxy_request", seed, NULL);
  return ut_end(&t);
}
