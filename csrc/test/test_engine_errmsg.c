/* The daemon's message read from an error body (csrc/engine/errmsg.c): the JSON "message" when
 * there is one, else the body as text; trimmed, control bytes replaced, always terminated within
 * the buffer. The fuzz target's seeds (fuzz_json_error) are cases. */
#include "engine/errmsg.h"
#include "test/unit.h"

static void message_of(ut_run *t, const char *body, size_t outsz, const char *want) {
  char out[258]; /* outsz is at most 256: room to see a byte written past the terminator */
  memset(out, 'Z', sizeof out);
  size_t n = sse_error_message(body, body ? strlen(body) : 0, out, outsz);
  CHECK_EQ(n, strlen(want));
  CHECK(n < outsz);
  CHECK_STR(out, want);
  CHECK_EQ(out[n + 1], 'Z');
}

static void reads_the_message(ut_run *t) {
  message_of(t, "{\"message\":\"No such container: x\"}", 256, "No such container: x");
  message_of(t, "{\"message\":\"  padded \\n \"}", 256, "padded");
  message_of(t, "{\"message\":\"bell\\u0007 and del\\u007f\"}", 256, "bell? and del?");
  message_of(t, "{\"message\":\"tab\\tand\\nnewline\"}", 256, "tab\tand\nnewline");
}

static void falls_back_to_the_text(ut_run *t) {
  message_of(t, "client version 1.11 is too old\r\n", 256, "client version 1.11 is too old");
  message_of(t, "{\"error\":\"x\"}", 256, "{\"error\":\"x\"}");  /* JSON without a message */
  message_of(t, "{\"message\":42}", 256, "{\"message\":42}");    /* a message that is not a string */
  message_of(t, "[\"message\"]", 256, "[\"message\"]");
  message_of(t, "\x01\x02 <html>\x1b[31m</html> ", 256, "<html>?[31m</html>");
  message_of(t, "", 256, "");
  message_of(t, NULL, 256, "");
}

static void stays_inside_the_buffer(ut_run *t) {
  message_of(t, "{\"message\":\"No such container: x\"}", 5, "No s");
  message_of(t, "plain text", 1, "");
  char out[4] = "abc";
  CHECK_EQ(sse_error_message("text", 4, out, 0), 0); /* no room at all: nothing written */
  CHECK_STR(out, "abc");
}

/* The seeds: byte 0 picks the output size (byte + 1), the rest is the body. */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  static const struct {
    const char *seed, *want;
  } expect[] = {
      {"host_tcp", "t"}, /* 2 bytes of room */
      {"host_unix", ""}, /* 1 byte of room */
      {"html", "<html>?" "?</html>"}, /* split: no trigraph */
      {"json", "No such container: x"},
      {"text", "client version 1.11 is too old"},
  };
  REQUIRE(CHECK(len > 1));
  char out[257];
  size_t n = sse_error_message((const char *)data + 1, len - 1, out, (size_t)data[0] + 1);
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
    if (strcmp(name, expect[i].seed) != 0) continue;
    CHECK_STR(out, expect[i].want);
    CHECK_EQ(n, strlen(expect[i].want));
    return;
  }
  FAIL("a seed this test has no expectation for: add one");
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "engine_errmsg");
  UT_RUN(&t, reads_the_message);
  UT_RUN(&t, falls_back_to_the_text);
  UT_RUN(&t, stays_inside_the_buffer);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_json_error", seed, NULL);
  return ut_end(&t);
}
