#ifndef SANDSTACK_PROXY_CONFIG_H
#define SANDSTACK_PROXY_CONFIG_H
/* The proxy's configuration: the environment (what sandstack sets on the sidecar), then the
 * command line. Read once at start; immutable afterwards. docs/proxy.md lists every variable. */
#include <stddef.h>

#include "policy/policy.h"
#include "proxy/parse/cred_table.h"

typedef struct proxy_config {
  char listen[64];
  int port;
  char *token, *key;            /* the session token; the real provider key */
  size_t token_len;
  char upstream[300];           /* origin, "https://host[:port]" without a trailing '/' */
  char upstream_host[SS_HOST_MAX + 1];
  int upstream_port;
  char *upstream_ca;            /* extra roots for upstreams (PEM text, or a PEM file), NULL: none */
  char *ca_dir;                 /* where the inspection CA's certificate and bundle go; NULL: no inspection */
  char *ca_roots;               /* the roots put in the bundle; NULL: OpenSSL's default file */
  unsigned ca_hours;            /* the inspection CA's validity */
  size_t leaf_cache;            /* leaf certificates kept */
  char session[128];            /* label in the audit lines */
  ss_policy *policy;
  char *credentials_json;       /* SANDSTACK_CREDENTIALS as given; NULL: none */
  proxy_creds *creds;           /* the start table (with the credential route's own entry): the CA names its hosts */
  size_t max_conns, max_line, max_head, max_headers, buffer_bytes;
  unsigned long long max_body;
  unsigned handshake_ms, connect_ms, idle_ms, stream_ms, drain_ms;
  char client_congestion[16];   /* congestion control toward the sandbox (listener.c); "": the host's */
  int check_only;               /* --check: validate, print the summary, exit */
} proxy_config;

/* 0, or -1 with the reason (never containing a secret) in why. */
int proxy_config_load(proxy_config *cfg, int argc, char **argv, char *why, size_t why_len);
void proxy_config_free(proxy_config *cfg);
/* A fresh table from SANDSTACK_CREDENTIALS plus the credential route's own entry (ANTHROPIC_API_KEY
 * toward the upstream, the session token its placeholder). NULL with the reason in why. */
proxy_creds *proxy_config_credentials(const proxy_config *cfg, char *why, size_t why_len);
/* A JSON summary without the secrets (for --check and the start-up line). Caller frees. */
char *proxy_config_summary(const proxy_config *cfg);

#endif
