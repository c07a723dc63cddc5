/* Reading the configuration (see config.h, docs/proxy.md). Everything the proxy cannot use
 * with certainty is refused at start, with a reason on stderr, rather than defaulted. */
#include "proxy/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/parse/why.h"

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* An unsigned decimal in [lo, hi]; -1 when malformed. */
static int number(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out) {
  if (!s || !*s || strlen(s) > 19) return -1;
  unsigned long long v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (unsigned)(*p - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

typedef struct {
  const char *var;
  unsigned long long lo, hi, def;
} limit_spec;

static int read_limit(const limit_spec *s, unsigned long long *out, char *why, size_t n) {
  const char *v = env(s->var);
  *out = s->def;
  if (v && number(v, s->lo, s->hi, out) != 0)
    return why_fail(why, n, "%s must be a whole number from %llu to %llu", s->var, s->lo, s->hi);
  return 0;
}

/* "http(s)://host[:port]" with an optional trailing '/'. */
static int parse_upstream(proxy_config *c, const char *u, char *why, size_t n) {
  int https = strncmp(u, "https://", 8) == 0;
  if (!https && strncmp(u, "http://", 7) != 0) return why_fail(why, n, "SANDSTACK_UPSTREAM must be http(s)://host[:port]");
  const char *a = u + (https ? 8 : 7);
  size_t al = strlen(a);
  if (al && a[al - 1] == '/') al--;
  const char *colon = memchr(a, ':', al);
  size_t hl = colon ? (size_t)(colon - a) : al;
  const char *w = NULL;
  if (hl == 0 || memchr(a, '/', al) || ss_host_normalize(a, hl, c->upstream_host, &w) != 0)
    return why_fail(why, n, "SANDSTACK_UPSTREAM must be http(s)://host[:port] (%s)", w ? w : "no path allowed");
  c->upstream_port = https ? 443 : 80;
  if (colon) {
    char port[8] = {0};
    unsigned long long p;
    size_t pl = al - hl - 1;
    if (pl == 0 || pl > 5) return why_fail(why, n, "SANDSTACK_UPSTREAM has a bad port");
    memcpy(port, colon + 1, pl);
    if (number(port, 1, 65535, &p) != 0 || port[0] == '0') return why_fail(why, n, "SANDSTACK_UPSTREAM has a bad port");
    c->upstream_port = (int)p;
  }
  snprintf(c->upstream, sizeof c->upstream, "%s://%s:%d", https ? "https" : "http", c->upstream_host, c->upstream_port);
  return 0;
}

/* SANDSTACK_PROXY_CLIENT_CONGESTION: a kernel name (TCP_CA_NAME_MAX is 16 with its NUL), "host"
 * for the host's default, unset for reno. Whether the kernel has it and lets this network
 * namespace use it is known only when the listener asks (listener.c). */
static int parse_congestion(proxy_config *c, char *why, size_t n) {
  const char *v = env("SANDSTACK_PROXY_CLIENT_CONGESTION");
  if (!v) v = "reno";
  if (strcmp(v, "host") == 0) v = "";
  size_t len = strlen(v);
  if (len >= sizeof c->client_congestion || strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789_") != len)
    return why_fail(why, n, "SANDSTACK_PROXY_CLIENT_CONGESTION must be a congestion control's name "
                            "(lowercase, at most 15 characters) or 'host'");
  memcpy(c->client_congestion, v, len + 1);
  return 0;
}

static int parse_args(proxy_config *c, int argc, char **argv, char *why, size_t n) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    unsigned long long v;
    if (strcmp(a, "--check") == 0) {
      c->check_only = 1;
    } else if (strcmp(a, "--port") == 0 && i + 1 < argc) {
      if (number(argv[++i], 0, 65535, &v) != 0) return why_fail(why, n, "--port must be 0..65535");
      c->port = (int)v;
    } else if (strcmp(a, "--listen") == 0 && i + 1 < argc) {
      if (strlen(argv[++i]) >= sizeof c->listen) return why_fail(why, n, "--listen is too long");
      snprintf(c->listen, sizeof c->listen, "%s", argv[i]);
    } else {
      return why_fail(why, n, "usage: sandstack-proxy [--listen ADDRESS] [--port N] [--check] | --ready (see docs/proxy.md)");
    }
  }
  return 0;
}

int proxy_config_load(proxy_config *c, int argc, char **argv, char *why, size_t n) {
  memset(c, 0, sizeof *c);
  const char *token = env("SANDSTACK_SESSION_TOKEN"), *key = env("ANTHROPIC_API_KEY");
  if (!token || strlen(token) < 16) return why_fail(why, n, "SANDSTACK_SESSION_TOKEN is missing or shorter than 16 characters");
  if (strlen(token) > 256) return why_fail(why, n, "SANDSTACK_SESSION_TOKEN is longer than 256 characters");
  for (const char *p = token; *p; p++)
    if (*p <= 0x20 || *p >= 0x7f || *p == ':') return why_fail(why, n, "SANDSTACK_SESSION_TOKEN must be visible ASCII without ':'");
  /* no ANTHROPIC_API_KEY: a plain allowlist, without the credential route (credential.c refuses it) */
  for (const char *p = key ? key : ""; *p; p++)
    if (*p < 0x20 || *p == 0x7f) return why_fail(why, n, "ANTHROPIC_API_KEY holds a control character");
  if (key && strcmp(token, key) == 0) return why_fail(why, n, "the session token must not be the real key");
  const char *up = env("SANDSTACK_UPSTREAM");
  if (parse_upstream(c, up ? up : "https://api.anthropic.com", why, n) != 0) return -1;
  snprintf(c->listen, sizeof c->listen, "%s", env("SANDSTACK_PROXY_LISTEN") ? env("SANDSTACK_PROXY_LISTEN") : "0.0.0.0");
  const char *session = env("SANDSTACK_SESSION");
  if (session && strlen(session) >= sizeof c->session) return why_fail(why, n, "SANDSTACK_SESSION is longer than 127 characters");
  snprintf(c->session, sizeof c->session, "%s", session ? session : "");

  static const limit_spec specs[] = {
      {"SANDSTACK_PROXY_PORT", 0, 65535, 3128},
      {"SANDSTACK_PROXY_MAX_CONNECTIONS", 1, 1000000, 4096},
      {"SANDSTACK_PROXY_MAX_REQUEST_LINE", 64, 1 << 20, 8192},
      {"SANDSTACK_PROXY_MAX_HEADER_BYTES", 256, 1 << 20, 32768},
      {"SANDSTACK_PROXY_MAX_HEADERS", 1, 100, 100},
      {"SANDSTACK_PROXY_BUFFER_BYTES", 4096, 1 << 26, 262144},
      {"SANDSTACK_PROXY_MAX_BODY_BYTES", 0, 1ull << 40, 32ull << 20},
      {"SANDSTACK_PROXY_HANDSHAKE_TIMEOUT_MS", 1, 3600000, 10000},
      {"SANDSTACK_PROXY_CONNECT_TIMEOUT_MS", 1, 3600000, 10000},
      {"SANDSTACK_PROXY_IDLE_TIMEOUT_MS", 1, 86400000, 300000},
      {"SANDSTACK_PROXY_STREAM_TIMEOUT_MS", 1, 86400000, 600000},
      {"SANDSTACK_PROXY_DRAIN_TIMEOUT_MS", 0, 3600000, 30000},
      {"SANDSTACK_CA_HOURS", 1, 2160, 168},
      {"SANDSTACK_PROXY_LEAF_CACHE", 1, 100000, 256},
  };
  unsigned long long v[sizeof specs / sizeof specs[0]];
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
    if (read_limit(&specs[i], &v[i], why, n) != 0) return -1;
  c->port = (int)v[0];
  c->max_conns = (size_t)v[1];
  c->max_line = (size_t)v[2];
  c->max_head = (size_t)v[3];
  c->max_headers = (size_t)v[4];
  c->buffer_bytes = (size_t)v[5];
  c->max_body = v[6];
  c->handshake_ms = (unsigned)v[7];
  c->connect_ms = (unsigned)v[8];
  c->idle_ms = (unsigned)v[9];
  c->stream_ms = (unsigned)v[10];
  c->drain_ms = (unsigned)v[11];
  c->ca_hours = (unsigned)v[12];
  c->leaf_cache = (size_t)v[13];
  if (c->max_line > c->max_head) c->max_line = c->max_head;
  if (parse_congestion(c, why, n) != 0) return -1;
  if (parse_args(c, argc, argv, why, n) != 0) return -1;

  ss_error e;
  ss_error_init(&e);
  const char *pj = env("SANDSTACK_EGRESS_POLICY");
  if (pj) {
    c->policy = ss_policy_parse(pj, strlen(pj), &e);
  } else { /* no policy: the upstream host alone, as the example proxy does */
    cJSON *root = cJSON_CreateObject(), *allow = cJSON_AddArrayToObject(root, "allow");
    cJSON_AddItemToArray(allow, cJSON_CreateString(c->upstream_host));
    c->policy = ss_policy_from_json(root, &e);
    cJSON_Delete(root);
  }
  if (!c->policy) {
    why_fail(why, n, "SANDSTACK_EGRESS_POLICY is refused: %s", e.message);
    ss_error_clear(&e);
    return -1;
  }
  const char *ca = env("SANDSTACK_UPSTREAM_CA");
  c->token = strdup(token);
  c->key = key ? strdup(key) : NULL;
  c->upstream_ca = ca ? strdup(ca) : NULL;
  const char *ca_dir = env("SANDSTACK_CA_DIR"), *ca_roots = env("SANDSTACK_CA_ROOTS");
  c->ca_dir = ca_dir ? strdup(ca_dir) : NULL;
  c->ca_roots = ca_roots ? strdup(ca_roots) : NULL;
  if (!c->token || (key && !c->key) || (ca && !c->upstream_ca) || (ca_dir && !c->ca_dir) || (ca_roots && !c->ca_roots))
    return why_fail(why, n, "out of memory");
  c->token_len = strlen(token);
  const char *cj = env("SANDSTACK_CREDENTIALS");
  if (cj && !(c->credentials_json = strdup(cj))) return why_fail(why, n, "out of memory");
  char cwhy[400];
  if (!(c->creds = proxy_config_credentials(c, cwhy, sizeof cwhy)))
    return why_fail(why, n, "SANDSTACK_CREDENTIALS is refused: %s", cwhy);
  return 0;
}

proxy_creds *proxy_config_credentials(const proxy_config *c, char *why, size_t n) {
  const char *j = c->credentials_json ? c->credentials_json : "";
  proxy_creds *t = creds_parse(j, strlen(j), why, n);
  if (t && c->key && creds_add_legacy(t, c->upstream_host, c->upstream_port, c->key, c->token) != 0) {
    creds_free(t);
    why_fail(why, n, "out of memory");
    return NULL;
  }
  return t;
}

void proxy_config_free(proxy_config *c) {
  if (c->key) memset(c->key, 0, strlen(c->key));
  if (c->token) memset(c->token, 0, c->token_len);
  free(c->key);
  free(c->token);
  free(c->upstream_ca);
  free(c->ca_dir);
  free(c->ca_roots);
  if (c->credentials_json) memset(c->credentials_json, 0, strlen(c->credentials_json));
  free(c->credentials_json);
  creds_free(c->creds);
  ss_policy_free(c->policy);
  memset(c, 0, sizeof *c);
}

char *proxy_config_summary(const proxy_config *c) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", "config");
  cJSON_AddStringToObject(o, "listen", c->listen);
  cJSON_AddNumberToObject(o, "port", c->port);
  cJSON_AddStringToObject(o, "upstream", c->upstream);
  cJSON_AddStringToObject(o, "session", c->session);
  cJSON_AddItemToObject(o, "policy", ss_policy_render(c->policy));
  cJSON_AddNumberToObject(o, "max_connections", (double)c->max_conns);
  cJSON_AddNumberToObject(o, "handshake_timeout_ms", c->handshake_ms);
  cJSON_AddNumberToObject(o, "idle_timeout_ms", c->idle_ms);
  cJSON_AddNumberToObject(o, "drain_timeout_ms", c->drain_ms);
  cJSON_AddStringToObject(o, "client_congestion", c->client_congestion[0] ? c->client_congestion : "host");
  if (c->ca_dir) cJSON_AddStringToObject(o, "ca_dir", c->ca_dir);
  cJSON *creds = cJSON_AddArrayToObject(o, "credentials"); /* names and places only: never a secret */
  static const char *const places[] = {"header", "query", "basic", "path"};
  for (size_t i = 0; c->creds && i < c->creds->n; i++) {
    const cred_entry *e = &c->creds->e[i];
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "name", e->name);
    cJSON_AddStringToObject(x, "host", e->host);
    cJSON_AddNumberToObject(x, "port", e->port);
    cJSON_AddStringToObject(x, "place", e->legacy ? "credential_route" : places[e->place]);
    cJSON_AddItemToArray(creds, x);
  }
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}
