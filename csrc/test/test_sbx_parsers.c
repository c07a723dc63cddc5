/* What the sbx backend parses and encodes (csrc/sbx/wrapper.c, with the util pieces it rests
 * on): the wrapper's nonce line in stderr, the start of sbx's JSON after daemon lines, the
 * wrapper's stdin, strict base64, and the SHA-256 of the ownership digests against known
 * answers (FIPS 180-2's, and Python's hashlib across the block boundaries). */
#include <stdlib.h>

#include "sbx/wrapper.h"
#include "test/unit.h"
#include "util/base64.h"
#include "util/sha256.h"

static void finds_the_nonce_line(ut_run *t) {
  static const char err[] = "daemon starting\nN0NCE-x\nN0NCE\ncommand's own stderr\n";
  CHECK_EQ(ss_sbx_split_stderr(err, sizeof err - 1, "N0NCE", 5), 30); /* the line that is exactly it */
  CHECK_EQ(ss_sbx_split_stderr("N0NCE\n", 6, "N0NCE", 5), 6);
  CHECK_EQ(ss_sbx_split_stderr("N0NCE", 5, "N0NCE", 5), -1);         /* no newline yet: not the line */
  CHECK_EQ(ss_sbx_split_stderr("xN0NCE\n", 7, "N0NCE", 5), -1);      /* not at a line's start */
  CHECK_EQ(ss_sbx_split_stderr("sbx: no such sandbox\n", 21, "N0NCE", 5), -1);
  CHECK_EQ(ss_sbx_split_stderr("\n\n", 2, "", 0), -1);               /* an empty nonce never matches */
}

static void finds_the_json(ut_run *t) {
  static const char out[] = "Starting daemon...\n  {not at the start\n{\"name\":\"x\"}\n";
  CHECK_EQ(ss_sbx_json_start(out, sizeof out - 1), 39);
  CHECK_EQ(ss_sbx_json_start("{}", 2), 0);
  CHECK_EQ(ss_sbx_json_start("no json\n", 8), -1);
  CHECK_EQ(ss_sbx_json_start("a{b\n", 4), -1);
}

static void encodes_the_wrapper_input(ut_run *t) {
  const ss_bytes head[3] = {{"/ws", 3}, {"/mnt", 4}, {"", 0}};
  const ss_bytes env[] = {{"K=v\0w", 5}};
  const ss_bytes argv[] = {{"sh", 2}, {"-c", 2}, {"echo \"$K\"", 9}};
  size_t len = 0;
  char *in = ss_sbx_wrapper_input(head, env, 1, argv, 3, &len);
  REQUIRE(CHECK(in != NULL));
  CHECK_SPAN(in, len, "xL3dz\nxL21udA==\nx\nxSz12AHc=\n--\nxc2g=\nxLWM=\nxZWNobyAiJEsi\n.\n");
  CHECK_EQ(strlen(in), len);
  free(in);
}

static void decodes_base64_strictly(ut_run *t) {
  unsigned char out[16];
  CHECK_EQ(ss_base64_decode("aGk=", 4, out, sizeof out), 2);
  CHECK_MEM(out, 2, "hi", 2);
  CHECK_EQ(ss_base64_decode("", 0, out, sizeof out), 0);
  static const char *const bad[] = {"aGk", "aGk=x", "a=Gk", "aG=k", "a===", "aGk*", "aG k"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (!CHECK_EQ(ss_base64_decode(bad[i], strlen(bad[i]), out, sizeof out), -1)) NOTE("'%s'", bad[i]);
  CHECK_EQ(ss_base64_decode("aGVsbG8=", 8, out, 4), -1); /* 5 bytes into 4 */
  size_t n = 0;
  char *b = ss_base64("\0\xff\x10", 3, &n);
  REQUIRE(CHECK(b != NULL));
  CHECK_STR(b, "AP8Q");
  CHECK_EQ(n, 4);
  free(b);
}

static void digests_known_answers(ut_run *t) {
  static const struct {
    char fill; /* the input: `count` bytes of fill, or text when count is 0 */
    size_t count;
    const char *text, *hex;
  } cases[] = {
      {0, 0, "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {0, 0, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {0, 0, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {'x', 55, NULL, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
      {'x', 56, NULL, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
      {'x', 64, NULL, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
      {'a', 1000000, NULL, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n = cases[i].count ? cases[i].count : strlen(cases[i].text);
    char *data = malloc(n + 1);
    REQUIRE(CHECK(data != NULL));
    if (cases[i].count) memset(data, cases[i].fill, n);
    else memcpy(data, cases[i].text, n);
    char hex[65];
    ss_sha256_hex(data, n, 32, hex);
    if (!CHECK_STR(hex, cases[i].hex)) NOTE("case %zu", i);
    ss_sha256_hex(data, n, 6, hex); /* a prefix, as sandbox names carry */
    CHECK_MEM(hex, strlen(hex), cases[i].hex, 12);
    free(data);
  }
}

int main(void) {
  ut_run t;
  ut_begin(&t, "sbx_parsers");
  UT_RUN(&t, finds_the_nonce_line);
  UT_RUN(&t, finds_the_json);
  UT_RUN(&t, encodes_the_wrapper_input);
  UT_RUN(&t, decodes_base64_strictly);
  UT_RUN(&t, digests_known_answers);
  return ut_end(&t);
}
