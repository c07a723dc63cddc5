/* The request read inside an inspected TLS connection and the head sent on for it
 * (csrc/proxy/parse/inspect_request.c): targets, body framing, keep-alive, the host check and
 * the exact outbound head. The fuzz target's seeds (fuzz_proxy_inspect) are cases, read as that
 * target reads them: for api.example.test:8443 with its token. */
#include <stdlib.h>

#include "proxy/parse/inspect_request.h"
#include "test/unit.h"

#define HOST "api.example.test"
#define PORT 8443
#define TOKEN "tok-fuzz-0123456789"

static const ph_limits roomy = {8192, 65536, 100};

static ir_status read_req(const char *s, size_t n, const ph_limits *lim, ir_request *r) {
  size_t scanned = 0;
  return ir_read(s, n, lim, &scanned, r);
}

static ir_status read_str(const char *s, ir_request *r) { return read_req(s, strlen(s), &roomy, r); }

static void reads_targets_and_framing(ut_run *t) {
  ir_request r;
  REQUIRE(CHECK_EQ(read_str("GET /v1/models?x=1 HTTP/1.1\r\nHost: " HOST "\r\n\r\n", &r), IR_READY));
  CHECK(r.authority == NULL);
  CHECK_SPAN(r.path, r.path_len, "/v1/models?x=1");
  CHECK_EQ(r.path_noquery_len, 10);
  CHECK_EQ(r.keep_alive, 1);
  CHECK_EQ(r.chunked, 0);
  REQUIRE(CHECK_EQ(read_str("GET https://" HOST ":8443 HTTP/1.1\r\n\r\n", &r), IR_READY));
  CHECK_SPAN(r.authority, r.authority_len, HOST ":8443");
  CHECK_SPAN(r.path, r.path_len, "/");
  REQUIRE(CHECK_EQ(read_str("POST /a HTTP/1.1\r\nContent-Length: 12\r\n\r\n", &r), IR_READY));
  CHECK_EQ(r.body_len, 12);
  CHECK_EQ(r.keep_alive, 0); /* after a body the connection is not reused */
  REQUIRE(CHECK_EQ(read_str("POST /a HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", &r), IR_READY));
  CHECK_EQ(r.chunked, 1);
  CHECK_EQ(r.keep_alive, 0);
  REQUIRE(CHECK_EQ(read_str("POST /a HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &r), IR_READY));
  CHECK_EQ(r.keep_alive, 1);
  REQUIRE(CHECK_EQ(read_str("GET /a HTTP/1.0\r\n\r\n", &r), IR_READY));
  CHECK_EQ(r.keep_alive, 0);
  REQUIRE(CHECK_EQ(read_str("GET /a HTTP/1.1\r\nConnection: keep-alive, CLOSE\r\n\r\n", &r), IR_READY));
  CHECK_EQ(r.keep_alive, 0);
  CHECK_EQ(ir_connection_close(&r.head), 1);
}

static void refuses_each_with_its_status(ut_run *t) {
  static const struct {
    const char *in;
    ir_status want;
  } cases[] = {
      {"GET /a HTTP/1.1\r\nHost: x", IR_INCOMPLETE},
      {"CONNECT a.test:443 HTTP/1.1\r\n\r\n", IR_NOT_ORIGIN},
      {"OPTIONS * HTTP/1.1\r\n\r\n", IR_NOT_ORIGIN},
      {"GET http://a.test/ HTTP/1.1\r\n\r\n", IR_NOT_ORIGIN},
      {"GET https://a.test?q HTTP/1.1\r\n\r\n", IR_NOT_ORIGIN},
      {"GET /a#frag HTTP/1.1\r\n\r\n", IR_BAD},
      {"GET /a HTTP/1.1\r\nA : b\r\n\r\n", IR_BAD},
      {"GET /a HTTP/3.0\r\n\r\n", IR_BAD_VERSION},
      {"POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", IR_CHUNKED},
      {"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", IR_CHUNKED},
      {"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", IR_BAD_LENGTH},
      {"POST /a HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", IR_BAD_LENGTH},
      {"POST /a HTTP/1.1\r\nContent-Length: +3\r\n\r\n", IR_BAD_LENGTH},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ir_request r;
    if (!CHECK_EQ(read_str(cases[i].in, &r), cases[i].want)) NOTE("case %zu", i);
  }
  const ph_limits tight = {14, 40, 2};
  static const char long_line[] = "GET /0123456789 HTTP/1.1\r\n\r\n", many[] = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
  ir_request r;
  CHECK_EQ(read_str(long_line, &r), IR_READY);
  CHECK_EQ(read_req(long_line, sizeof long_line - 1, &tight, &r), IR_LINE_TOO_LONG);
  CHECK_EQ(read_str(many, &r), IR_READY);
  CHECK_EQ(read_req(many, sizeof many - 1, &tight, &r), IR_HEAD_TOO_LARGE);
  for (int s = IR_INCOMPLETE; s <= IR_BAD_LENGTH; s++) CHECK(ir_status_text((ir_status)s) != NULL);
  CHECK_STR(ir_status_text(IR_CHUNKED), "the only Transfer-Encoding accepted is one \"chunked\"");
}

static void writes_the_head_sent_on(ut_run *t) {
  ir_request r;
  REQUIRE(CHECK_EQ(read_str("PUT /x?y HTTP/1.1\r\nHost: " HOST ":8443\r\nAccept-Encoding: gzip\r\nX-Keep:  v \r\n"
                            "Proxy-Connection: keep-alive\r\nX-Rewrite-URL: /admin\r\nAuthorization: Bearer " TOKEN
                            "\r\n\r\n",
                            &r),
                   IR_READY));
  size_t n = 0;
  char *out = ir_outbound_head(&r, HOST, PORT, TOKEN, strlen(TOKEN), 0, &n);
  REQUIRE(CHECK(out != NULL));
  CHECK_SPAN(out, n, "PUT /x?y HTTP/1.1\r\nHost: " HOST ":8443\r\nAccept-Encoding: gzip\r\nX-Keep: v\r\n\r\n");
  free(out);
  /* toward a credential's host the answer must be plain: Accept-Encoding is replaced */
  out = ir_outbound_head(&r, HOST, 443, TOKEN, strlen(TOKEN), 1, &n);
  REQUIRE(CHECK(out != NULL));
  CHECK_SPAN(out, n, "PUT /x?y HTTP/1.1\r\nHost: " HOST "\r\nX-Keep: v\r\nAccept-Encoding: identity\r\n\r\n");
  free(out);
}

typedef struct {
  ir_status status;
  int host_refusal;   /* ir_host_refusal for HOST:PORT */
  const char *why;    /* its reason, when refused and named here */
  const char *sent;   /* the outbound head (identity off), when named here */
} inspect_case;

static void check_seed(ut_run *t, const char *s, size_t n, const inspect_case *want) {
  ir_request r;
  REQUIRE(CHECK_EQ(read_req(s, n, &roomy, &r), want->status));
  const char *why = NULL;
  CHECK_EQ(ir_host_refusal(&r, HOST, PORT, &why), want->host_refusal);
  if (want->why) CHECK_STR(why, want->why);
  if (!want->sent) return;
  size_t len = 0;
  char *out = ir_outbound_head(&r, HOST, PORT, TOKEN, strlen(TOKEN), 0, &len);
  REQUIRE(CHECK(out != NULL));
  CHECK_SPAN(out, len, want->sent);
  free(out);
}

/* The seeds: byte 0 is the fuzz target's piece size, the rest the decrypted bytes. */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  static const struct {
    const char *seed;
    inspect_case want;
  } expect[] = {
      {"absolute", {IR_READY, 421, NULL, NULL}},
      {"absolute-same", {IR_READY, 0, NULL, "GET /v1/x HTTP/1.1\r\nHost: " HOST ":8443\r\n\r\n"}},
      {"chunked",
       {IR_READY, 0, NULL, "GET /v1/%2e%2e/admin HTTP/1.1\r\nHost: " HOST ":8443\r\nTransfer-Encoding: chunked\r\n"
                           "Connection: close\r\n\r\n"}},
      {"get",
       {IR_READY, 421, "the Host header names another host or port than the one this request was admitted for",
        "GET /v1/models?x=1 HTTP/1.1\r\nHost: " HOST ":8443\r\nAccept: */*\r\n\r\n"}},
      {"host-other", {IR_READY, 421, NULL, NULL}},
      {"host-twice", {IR_READY, 400, "the request has more than one Host header", NULL}},
      {"post",
       {IR_READY, 421, NULL, "POST /v1/x HTTP/1.1\r\nHost: " HOST ":8443\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"}},
  };
  REQUIRE(CHECK(len > 1));
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    if (strcmp(name, expect[i].seed) != 0) continue;
    check_seed(t, (const char *)data + 1, len - 1, &expect[i].want);
    return;
  }
  FAIL("a seed this test has no expectation for: add one");
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "proxy_inspect_request");
  UT_RUN(&t, reads_targets_and_framing);
  UT_RUN(&t, refuses_each_with_its_status);
  UT_RUN(&t, writes_the_head_sent_on);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_proxy_inspect", seed, NULL);
  return ut_end(&t);
}
