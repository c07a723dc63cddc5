/* sandstack-proxy: the egress proxy a Docker stack's sandbox reaches the outside through.
 * One port serves CONNECT tunnels, plain-HTTP forwarding and the credential route, all checked
 * against the stack's egress policy with the same C matcher as sandstack.policy. Configuration
 * comes from the environment (docs/proxy.md); every decision is a JSON line on stdout. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proxy/control/control.h"
#include "proxy/control/live_policy.h"
#include "proxy/server.h"
#include "proxy/tls/tls.h"

/* `sandstack-proxy --ready`: the ready test a Docker stack runs by exec beside the proxy
 * (docs/docker.md, "TLS inspection"). The proxy publishes SANDSTACK_CA_DIR/bundle.pem before it
 * listens, and the sandbox must not start before its clients can read that bundle; the image
 * has no shell for a `test -s`. It loads no configuration, so it never makes a CA of its own. */
static int ready_test(void) {
  const char *dir = getenv("SANDSTACK_CA_DIR");
  char path[4096];
  struct stat st;
  if (!dir || !*dir) {
    fprintf(stderr, "sandstack-proxy --ready: SANDSTACK_CA_DIR is not set\n");
    return 1;
  }
  snprintf(path, sizeof path, "%s/bundle.pem", dir);
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
    fprintf(stderr, "sandstack-proxy --ready: %s is not published yet\n", path);
    return 1;
  }
  return 0;
}

/* The control socket (control.c) when SANDSTACK_CONTROL_SOCKET names one (the image sets it). A
 * proxy that cannot bind it still serves, under its start policy, and says why on stdout. */
static void start_control(proxy_server *srv) {
  const char *path = getenv("SANDSTACK_CONTROL_SOCKET");
  char why[512];
  if (!path || !*path) return;
  cJSON *o = cJSON_CreateObject();
  int rc = control_start(srv, path, why, sizeof why);
  if (rc != 0 && path[0] != '@') { /* a mounted directory it cannot use: the exec's way in stays */
    cJSON_AddStringToObject(o, "path_unavailable", why);
    rc = control_start(srv, path = CONTROL_FALLBACK, why, sizeof why);
  }
  if (rc == 0) {
    cJSON_AddStringToObject(o, "event", "control_listening");
    cJSON_AddStringToObject(o, "path", path);
  } else {
    cJSON_AddStringToObject(o, "event", "control_unavailable");
    cJSON_AddStringToObject(o, "reason", why);
  }
  char *line = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (line) printf("%s\n", line);
  fflush(stdout);
  free(line);
}

int main(int argc, char **argv) {
  char why[512];
  if (argc == 2 && strcmp(argv[1], "--ready") == 0) return ready_test();
  if (argc == 3 && strcmp(argv[1], "--control") == 0) return control_client(argv[2]);
  proxy_config cfg;
  if (proxy_config_load(&cfg, argc, argv, why, sizeof why) != 0) {
    fprintf(stderr, "sandstack-proxy: %s\n", why);
    proxy_config_free(&cfg);
    return 2;
  }
  if (cfg.check_only) {
    char *summary = proxy_config_summary(&cfg);
    printf("%s\n", summary ? summary : "{}");
    free(summary);
    proxy_config_free(&cfg);
    return 0;
  }
  signal(SIGPIPE, SIG_IGN); /* a peer that went away is an error return, not a death */
  /* the inspection CA and its published files exist before the proxy says it listens */
  proxy_tls *tls = tls_new(&cfg, why, sizeof why);
  if (!tls) {
    fprintf(stderr, "sandstack-proxy: %s\n", why);
    proxy_config_free(&cfg);
    return 2;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
    fprintf(stderr, "sandstack-proxy: libcurl did not initialise\n");
    return 1;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  proxy_server srv;
  int rc = 1;
  if (server_start(&srv, &loop, &cfg) == 0) {
    srv.tls = tls;
    char *summary = proxy_config_summary(&cfg);
    if (summary) { /* the start line, with the port actually bound (for --port 0) */
      printf("{\"event\":\"listening\",\"port\":%d,\"inspect\":%s,\"config\":%s}\n", server_port(&srv),
             tls->ca ? "true" : "false", summary);
      fflush(stdout);
    }
    free(summary);
    start_control(&srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    rc = 0;
  }
  control_stop(&srv); /* its handle is unreferenced: the loop ended without it */
  uv_run(&loop, UV_RUN_DEFAULT); /* let every close callback run */
  live_policy_end(&srv);
  uv_loop_close(&loop);
  curl_global_cleanup();
  tls_free(tls);
  proxy_config_free(&cfg);
  return rc;
}
