/* libFuzzer target: a control request, any bytes, answered by a running proxy
 * (control_request_answer, csrc/proxy/control/control_request.c): one command or a batch of
 * them, each verb with any payload, on a proxy with an inspection CA, credentials and the ask
 * hook, so set-egress, set-credentials, set-model-key and egress-answer reach their checks and
 * their swaps. The proxy runs over the in-memory libuv and the scripted libcurl of the
 * event-order target (csrc/fuzz/events): nothing listens anywhere. Checked: every answer is a JSON
 * object with a boolean "ok", a batch's answer says why for each command it ran and stops at the
 * first refusal, the policy in force after a refused set-egress is the one before, and the
 * proxy stops cleanly afterwards (ASan: nothing a swap replaced leaks or is used after it went). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz/events/mem_uv.h"
#include "proxy/config.h"
#include "proxy/control/control_request.h"
#include "proxy/control/live_policy.h"
#include "proxy/server.h"
#include "proxy/tls/tls.h"

static struct {
  proxy_config cfg;
  proxy_tls *tls;
  char dir[64];
} G;

static void fail(const char *why) {
  fprintf(stderr, "fuzz_proxy_control: %s\n", why);
  abort();
}

static void cleanup_dir(void) {
  static const char *const files[] = {"ca.pem", "bundle.pem", "ca.key"};
  char path[128];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", G.dir, files[i]);
    unlink(path);
  }
  rmdir(G.dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  snprintf(G.dir, sizeof G.dir, "/tmp/fuzz-proxy-control.XXXXXX");
  if (!mkdtemp(G.dir)) fail("mkdtemp");
  atexit(cleanup_dir);
  setenv("SANDSTACK_SESSION_TOKEN", "fuzz-token-0123456789abcdef", 1);
  setenv("ANTHROPIC_API_KEY", "sk-fuzz-model-key", 1);
  setenv("SANDSTACK_UPSTREAM", "https://model.test", 1);
  setenv("SANDSTACK_CA_DIR", G.dir, 1);
  setenv("SANDSTACK_SESSION", "fuzz", 1);
  setenv("SANDSTACK_PROXY_CLIENT_CONGESTION", "host", 1); /* the in-memory listener has no socket to set */
  setenv("SANDSTACK_CREDENTIALS",
         "[{\"name\":\"API_KEY\",\"host\":\"api.test\",\"secret\":\"s3cretfuzz0123456789\",\"placeholder\":\"PLACEHOLDERfuzz01234\","
         "\"header\":\"X-Key\"}]",
         1);
  setenv("SANDSTACK_EGRESS_POLICY",
         "{\"version\":1,\"allow\":[{\"host\":\"api.test\",\"methods\":[\"GET\"],\"paths\":[\"/v1/*\"]},"
         "\"tunnel.test:443\",{\"host\":\"raw.test\",\"port\":22,\"raw\":true},\"*.open.test\"],\"ask\":true}",
         1);
  char why[512];
  char *args[] = {"fuzz_proxy_control", NULL};
  if (proxy_config_load(&G.cfg, 1, args, why, sizeof why) != 0) fail(why);
  G.tls = tls_new(&G.cfg, why, sizeof why);
  if (!G.tls || !G.tls->ca) fail(G.tls ? "tls_new: no inspection CA" : why);
  if (!getenv("FUZZ_PROXY_CONTROL_TRACE") && !freopen("/dev/null", "w", stdout)) fail("stdout"); /* audit lines */
  return 0;
}

static void no_sent(void *ctx, mu_side side, const char *data, size_t n) {
  (void)ctx, (void)side, (void)data, (void)n;
}

static void no_fin(void *ctx, mu_side side) { (void)ctx, (void)side; }

/* What every answer holds: an object with a boolean ok; a refusal says which error and why. */
static void check_answer(const cJSON *a) {
  const cJSON *ok = cJSON_GetObjectItemCaseSensitive(a, "ok");
  if (!cJSON_IsObject(a) || !cJSON_IsBool(ok)) fail("an answer without a boolean ok");
  if (cJSON_IsFalse(ok) && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "error")) &&
      !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(a, "answers")))
    fail("a refusal that does not say which error");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uv_loop_t loop;
  proxy_server srv;
  mu_hooks hooks = {NULL, no_sent, no_fin, NULL};
  mu_world *w = mu_new(&loop, &hooks, 1, 0, 0);
  if (server_start(&srv, &loop, &G.cfg) != 0) fail("server_start");
  srv.tls = G.tls;
  char before[65], after[65];
  if (policy_digest(srv.policy, before) != 0) fail("policy_digest");
  cJSON *out = control_request_answer(&srv, (const char *)data, size);
  check_answer(out);
  const cJSON *answers = cJSON_GetObjectItemCaseSensitive(out, "answers");
  if (answers) {
    const cJSON *one;
    int n = cJSON_GetArraySize(answers), i = 0, all = 1;
    cJSON_ArrayForEach(one, answers) {
      check_answer(one);
      int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(one, "ok"));
      if (!ok && ++i != n) fail("a batch ran a command after a refusal");
      if (ok) i++;
      all &= ok;
    }
    if (all != cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(out, "ok"))) fail("a batch's ok is not all of its answers'");
  } else if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(out, "ok"))) {
    /* one command refused: it changed nothing */
    if (policy_digest(srv.policy, after) != 0) fail("policy_digest");
    if (strcmp(before, after) != 0) fail("a refused command changed the policy in force");
  }
  char *line = cJSON_PrintUnformatted(out);
  if (!line) fail("the answer does not print");
  free(line);
  cJSON_Delete(out);
  /* the proxy stops as on SIGTERM: no connection is open, so the drain ends at once */
  mu_signal(w, SIGTERM);
  for (int i = 0; i < 8 && (!srv.stopped || mu_open_handles(w)); i++) mu_next_iteration(w);
  if (!srv.stopped || mu_open_handles(w)) fail("the proxy did not stop");
  live_policy_end(&srv);
  mu_free(w);
  return 0;
}
