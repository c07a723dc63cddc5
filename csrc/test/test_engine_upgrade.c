/* The head of the daemon's answer to a hijacking request (csrc/engine/upgrade.c): status, length
 * and where the raw stream starts, and every head that is not HTTP/1.x refused. The fuzz
 * target's seeds (fuzz_upgrade) are cases. */
#include "engine/upgrade.h"
#include "test/unit.h"

static void reads_the_head(ut_run *t) {
  static const char up[] = "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                           "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n\x01\0\0\0\0\0\0\x02hi";
  sse_upgrade_head h;
  REQUIRE(CHECK_EQ(sse_upgrade_parse(up, sizeof up - 1, &h), 1));
  CHECK_EQ(h.status, 101);
  CHECK_EQ(h.content_length, -1);
  CHECK_EQ(h.head_len, sizeof up - 1 - 10);
  static const char lf[] = "HTTP/1.0 404\ncontent-length:  43 \n\n{";
  REQUIRE(CHECK_EQ(sse_upgrade_parse(lf, sizeof lf - 1, &h), 1)); /* bare LFs, as Go's client reads them */
  CHECK_EQ(h.status, 404);
  CHECK_EQ(h.content_length, 43);
  CHECK_EQ(h.head_len, sizeof lf - 2);
  /* every strict prefix of a head is incomplete, never a head */
  int early = 0;
  for (size_t k = 0; k + 10 < sizeof up - 1; k++) early += sse_upgrade_parse(up, k, &h) != 0;
  CHECK_EQ(early, 0);
}

static void refuses_what_is_not_a_head(ut_run *t) {
  static const char *const bad[] = {
      "HTTP/2 200 OK\r\n\r\n",        "HTTP/1.1 20 OK\r\n\r\n",     "HTTP/1.1 099 Low\r\n\r\n",
      "HTTP/1.1 2000 OK\r\n\r\n",     "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456\r\n\r\n",
      "SSH-2.0-OpenSSH\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sse_upgrade_head h;
    if (!CHECK_EQ(sse_upgrade_parse(bad[i], strlen(bad[i]), &h), -1)) NOTE("case %zu", i);
  }
  sse_upgrade_head h;
  CHECK_EQ(sse_upgrade_parse("SSH-2.0", 7, &h), -1); /* refused before a head ends */
  CHECK_EQ(sse_upgrade_parse("HTTP/1.", 7, &h), 0);
}

static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  sse_upgrade_head h;
  REQUIRE(CHECK_EQ(sse_upgrade_parse((const char *)data, len, &h), 1));
  if (strcmp(name, "refused") == 0) {
    CHECK_EQ(h.status, 404);
    CHECK_EQ(h.content_length, 43);
    CHECK_EQ(h.head_len, 78);
    CHECK_EQ(data[h.head_len], '{'); /* the JSON body follows the head */
  } else if (strcmp(name, "upgraded") == 0) {
    CHECK_EQ(h.status, 101);
    CHECK_EQ(h.content_length, -1);
    CHECK_MEM(data + h.head_len, len - h.head_len, "\x01\0\0\0\0\0\0\x03hi\n", 11); /* the raw stream */
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "engine_upgrade");
  UT_RUN(&t, reads_the_head);
  UT_RUN(&t, refuses_what_is_not_a_head);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_upgrade", seed, NULL);
  return ut_end(&t);
}
