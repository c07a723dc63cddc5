/* DOCKER_HOST-style addresses (csrc/engine/host.c): what libcurl is given for each accepted form,
 * and the reason for each refused one. The DOCKER_HOST seeds of fuzz_json_error are cases. */
#include "engine/host.h"
#include "test/unit.h"

static void accepted(ut_run *t, const char *host, int tls, const char *base, const char *unix_path) {
  sse_host h;
  ss_error e;
  ss_error_init(&e);
  if (CHECK_EQ(sse_host_parse(host, tls, &h, &e), 0)) {
    CHECK_STR(h.base, base);
    CHECK_STR(h.unix_path, unix_path);
  } else {
    NOTE("%s: %s", host, e.message);
  }
  ss_error_clear(&e);
}

static void refused(ut_run *t, const char *host, const char *message) {
  sse_host h;
  ss_error e;
  ss_error_init(&e);
  if (CHECK_EQ(sse_host_parse(host, 0, &h, &e), -1)) {
    CHECK_STR(e.kind, "invalid");
    CHECK_STR(e.reason, "bad_host");
    CHECK_STR(e.message, message);
  }
  ss_error_clear(&e);
}

static void reads_each_form(ut_run *t) {
  accepted(t, "unix:///var/run/docker.sock", 0, "http://localhost", "/var/run/docker.sock");
  accepted(t, "tcp://10.0.0.2", 0, "http://10.0.0.2:2375", "");
  accepted(t, "tcp://10.0.0.2", 1, "https://10.0.0.2:2376", "");
  accepted(t, "tcp://engine.test:1234/", 1, "https://engine.test:1234", "");
  accepted(t, "tcp://[::1]", 0, "http://[::1]:2375", "");
  accepted(t, "tcp://[::1]:9", 0, "http://[::1]:9", "");
  accepted(t, "http://e.test", 1, "http://e.test:2375", ""); /* the scheme given wins over tls */
  accepted(t, "https://e.test:443", 0, "https://e.test:443", "");
}

static void refuses_what_libcurl_cannot_speak(ut_run *t) {
  refused(t, "", "engine host '': empty");
  refused(t, "unix://run/docker.sock", "engine host 'unix://run/docker.sock': the socket path must be absolute");
  refused(t, "ssh://me@host", "engine host 'ssh://me@host': only unix://, tcp://, http:// and https:// are supported");
  refused(t, "tcp://", "engine host 'tcp://': no host name");
  refused(t, "tcp://h/v1.41", "engine host 'tcp://h/v1.41': a path is not supported");
  refused(t, "tcp://h?x=1", "engine host 'tcp://h?x=1': a query is not supported");
  refused(t, "tcp://u@h", "engine host 'tcp://u@h': bad character in the address");
  refused(t, "tcp://[::1", "engine host 'tcp://[::1': unterminated IPv6 literal");
  char path[160] = "unix:///";
  memset(path + 8, 'a', 107); /* "/" and 107 bytes: one past sun_path */
  path[115] = '\0';
  sse_host h;
  ss_error e;
  ss_error_init(&e);
  CHECK_EQ(sse_host_parse(path, 0, &h, &e), -1);
  CHECK(strstr(e.message, "socket path longer than 107 bytes") != NULL);
  ss_error_clear(&e);
  path[114] = '\0'; /* 107 bytes with its "/": fits */
  CHECK_EQ(sse_host_parse(path, 0, &h, &e), 0);
  CHECK_EQ(strlen(h.unix_path), 107);
  ss_error_clear(&e);
}

/* The seeds: byte 0's low bit is tls, the rest the address (the fuzz target's reading). */
static void seed(ut_run *t, const char *name, const unsigned char *data, size_t len, void *ctx) {
  (void)ctx;
  REQUIRE(CHECK(len > 1 && len < 512));
  char host[512];
  memcpy(host, data + 1, len - 1);
  host[len - 1] = '\0';
  if (strcmp(name, "host_tcp") == 0) accepted(t, host, data[0] & 1, "https://[::1]:2376", "");
  else if (strcmp(name, "host_unix") == 0) accepted(t, host, data[0] & 1, "http://localhost", "/var/run/docker.sock");
  else if (strcmp(name, "json") == 0 || strcmp(name, "html") == 0 || strcmp(name, "text") == 0) {
    sse_host h;
    ss_error e;
    ss_error_init(&e);
    CHECK_EQ(sse_host_parse(host, data[0] & 1, &h, &e), -1);
    CHECK_STR(e.reason, "bad_host");
    ss_error_clear(&e);
  } else {
    FAIL("a seed this test has no expectation for: add one");
  }
}

int main(int argc, char **argv) {
  ut_run t;
  ut_begin(&t, "engine_host");
  UT_RUN(&t, reads_each_form);
  UT_RUN(&t, refuses_what_libcurl_cannot_speak);
  ut_each_seed(&t, argc > 1 ? argv[1] : NULL, "fuzz_json_error", seed, NULL);
  return ut_end(&t);
}
