/* The plan: every Engine request of one stack, built from the validated model. Each create is
 * a finished request (method, path, body_json): the executor in Lua orders and sends them and
 * never edits a body, so the plan a user inspects is byte for byte what the engine receives.
 * Pure data, so the unit specs can check posture (networks, hardening, credentials) without a
 * daemon. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deadline/deadline.h"
#include "stack/init_wrap.h"
#include "stack/model.h"
#include "stack/requests.h"
#include "stack/volume_mount.h"
#include "util/random.h"
#include "util/version.h"

#define NS_PER_S 1e9

typedef struct plan_ctx {
  const ss_stack_model *m;
  const ss_stack_ctx *ctx;
  int api;
  const char *token; /* NULL without a proxy */
  char *creds_json;  /* the proxy's SANDSTACK_CREDENTIALS, or NULL (owned) */
  char net_sbx[128], net_pub[128], net_egress[128];
  int has_egress;
} plan_ctx;

static cJSON *labels(const plan_ctx *p, const char *key, const char *value) {
  cJSON *l = cJSON_CreateObject();
  char created[32];
  snprintf(created, sizeof created, "%.0f", p->ctx->now);
  cJSON_AddStringToObject(l, "io.sandstack.project", p->m->project);
  cJSON_AddStringToObject(l, "io.sandstack.session", p->m->session_key);
  cJSON_AddStringToObject(l, "io.sandstack.version", SANDSTACK_VERSION);
  cJSON_AddStringToObject(l, "io.sandstack.created", created);
  /* Labels are fixed at create, so a warm pool's stacks carry the pool from the first object:
   * that is how every process finds a pool's stacks (and reap{pool=} its leftovers). */
  if (p->ctx->pool) cJSON_AddStringToObject(l, "io.sandstack.pool", p->ctx->pool);
  /* unique to one start: a create whose answer was lost (a timeout) may still have happened,
   * and the rollback finds it by this label */
  if (p->ctx->run_label) cJSON_AddStringToObject(l, "io.sandstack.run", p->ctx->run_label);
  if (key) cJSON_AddStringToObject(l, key, value);
  return l;
}

static cJSON *string_array(const char *const *items, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(items[i]));
  return a;
}

/* A string or a list; the string form of a command runs through /bin/sh -c. */
static cJSON *argv_of(const cJSON *v, int shell) {
  if (!v) return NULL;
  if (cJSON_IsString(v)) {
    const char *one[] = {v->valuestring};
    if (!shell) return string_array(one, 1);
    const char *sh[] = {"/bin/sh", "-c", v->valuestring};
    return string_array(sh, 3);
  }
  return cJSON_IsArray(v) ? cJSON_Duplicate(v, 1) : cJSON_CreateArray();
}

/* The hardening overlay: built once per stack from the validated model and copied into every
 * container, so no container (the forwarder included) can end up weaker than another. Secure by
 * default, as the original provider's HostConfig (validate.c fills the defaults); loosening is
 * typed out (`cap_drop = {}` and `security_opt = {}` send empty lists, `pids_limit = false`
 * leaves PidsLimit unset). A Lua {} arrives as an empty object: it is sent as the empty list. */
static cJSON *list_or_default(const cJSON *given, const char *def) {
  if (!given) {
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateString(def));
    return a;
  }
  return cJSON_IsArray(given) ? cJSON_Duplicate(given, 1) : cJSON_CreateArray();
}

static cJSON *hardening(const ss_hardening *h, const char *runtime) {
  cJSON *hc = cJSON_CreateObject();
  if (h->nano_cpus > 0) cJSON_AddNumberToObject(hc, "NanoCpus", h->nano_cpus);
  if (h->memory > 0) cJSON_AddNumberToObject(hc, "Memory", h->memory);
  if (h->pids_limit > 0) cJSON_AddNumberToObject(hc, "PidsLimit", h->pids_limit);
  cJSON_AddItemToObject(hc, "CapDrop", list_or_default(h->cap_drop, "ALL"));
  cJSON_AddItemToObject(hc, "SecurityOpt", list_or_default(h->security_opt, "no-new-privileges"));
  /* a stack is one session's: a container the engine restarts by itself would outlive a
   * destroy that raced it, and would come back without the readiness checks */
  cJSON *restart = cJSON_CreateObject();
  cJSON_AddStringToObject(restart, "Name", "no");
  cJSON_AddItemToObject(hc, "RestartPolicy", restart);
  if (h->readonly_rootfs >= 0) cJSON_AddBoolToObject(hc, "ReadonlyRootfs", h->readonly_rootfs);
  if (h->tmpfs) {
    cJSON *t = cJSON_CreateObject();
    const cJSON *c;
    cJSON_ArrayForEach(c, h->tmpfs) {
      if (cJSON_IsArray(h->tmpfs)) cJSON_AddStringToObject(t, c->valuestring, "");
      else cJSON_AddStringToObject(t, c->string, c->valuestring);
    }
    cJSON_AddItemToObject(hc, "Tmpfs", t);
  }
  /* in the overlay, so every container (the forwarder and the isolation probe too) runs under it */
  if (runtime) cJSON_AddStringToObject(hc, "Runtime", runtime);
  return hc;
}

static void env_set(cJSON *env, const char *k, const char *v) {
  /* remove, then add: "removed, not overridden" means no second entry can win by order */
  int n = cJSON_GetArraySize(env);
  size_t kl = strlen(k);
  for (int i = n - 1; i >= 0; i--) {
    const char *e = cJSON_GetArrayItem(env, i)->valuestring;
    if (strncmp(e, k, kl) == 0 && e[kl] == '=') cJSON_DeleteItemFromArray(env, i);
  }
  if (!v) return;
  size_t len = kl + strlen(v) + 2;
  char *s = malloc(len);
  if (!s) return;
  snprintf(s, len, "%s=%s", k, v);
  cJSON_AddItemToArray(env, cJSON_CreateString(s));
  free(s);
}

static cJSON *env_of(const ss_svc *s) {
  cJSON *env = cJSON_CreateArray();
  const cJSON *e = s->spec ? cJSON_GetObjectItemCaseSensitive(s->spec, "env") : NULL;
  const cJSON *c;
  char num[64];
  cJSON_ArrayForEach(c, e) {
    if (cJSON_IsNumber(c)) {
      snprintf(num, sizeof num, "%.17g", c->valuedouble);
      env_set(env, c->string, num);
    } else {
      env_set(env, c->string, c->valuestring);
    }
  }
  return env;
}

/* The client side of the proxy sandstack adds: every HTTP client in the sandbox (curl, pip, git,
 * npm, Python) goes through it with the token as the proxy password, and talks to the stack's
 * own services directly (the proxy would refuse their private addresses). */
static void wire_proxy_clients(const plan_ctx *p, const ss_svc *px, cJSON *env) {
  const ss_stack_model *m = p->m;
  char url[400];
  snprintf(url, sizeof url, "http://sandstack:%s@%s:%d", p->token, px->name, px->port);
  static const char *const vars[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) env_set(env, vars[i], url);
  size_t cap = 64 + (size_t)(m->nsvc + 1) * 65, len;
  char *list = malloc(cap);
  if (!list) return;
  len = (size_t)snprintf(list, cap, "localhost,127.0.0.1,::1,%s", m->forwarder_name);
  for (int i = 0; i < m->nsvc && len < cap; i++)
    len += (size_t)snprintf(list + len, cap - len, ",%s", m->svc[i].name);
  env_set(env, "NO_PROXY", list);
  env_set(env, "no_proxy", list);
  free(list);
}

/* The added proxy's own settings (docs/proxy.md); the user's proxy_service configures itself. */
static void wire_added_proxy(const plan_ctx *p, const ss_svc *px, cJSON *env) {
  char port[16];
  snprintf(port, sizeof port, "%d", px->port);
  env_set(env, "SANDSTACK_PROXY_PORT", port);
  env_set(env, "SANDSTACK_SESSION", p->m->session_key);
  if (p->m->proxy_upstream) env_set(env, "SANDSTACK_UPSTREAM", p->m->proxy_upstream);
  if (p->m->proxy_upstream_ca) env_set(env, "SANDSTACK_UPSTREAM_CA", p->m->proxy_upstream_ca);
  if (p->m->inspect_ca) env_set(env, "SANDSTACK_CA_DIR", SS_CA_PROXY_DIR);
  if (p->m->ncreds > 0) env_set(env, "SANDSTACK_CREDENTIALS", p->creds_json);
  if (p->ctx->control_dir) { /* the socket a file in the mounted directory, the host let in */
    char uid[24];
    snprintf(uid, sizeof uid, "%ld", p->ctx->control_uid);
    env_set(env, "SANDSTACK_CONTROL_SOCKET", SS_CONTROL_PROXY_SOCKET);
    env_set(env, "SANDSTACK_CONTROL_PEER_UID", uid);
  }
}

/* The proxy's SANDSTACK_CREDENTIALS (docs/proxy.md): the only place a secret goes. A plan
 * shown to a user carries a marker instead. NULL without credentials. */
static char *credentials_env(const ss_stack_model *m, int redact) {
  if (m->ncreds == 0) return NULL;
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < m->ncreds; i++)
    cJSON_AddItemToArray(a, ss_stack_credential_json(&m->creds[i], redact ? SS_STACK_REDACTED : m->creds[i].secret));
  char *text = cJSON_PrintUnformatted(a);
  cJSON_Delete(a);
  return text;
}

/* What a plan (and so a record) says of the credentials: everything but the secrets. */
static void add_credentials(cJSON *plan, const ss_stack_model *m) {
  if (m->ncreds == 0) return;
  cJSON *a = cJSON_AddArrayToObject(plan, "credentials");
  for (int i = 0; i < m->ncreds; i++) cJSON_AddItemToArray(a, ss_stack_credential_json(&m->creds[i], NULL));
}

/* The sandbox's side: NAME=<placeholder>, set last, so the spec's own NAME is removed. */
static void wire_placeholders(const ss_stack_model *m, cJSON *env) {
  for (int i = 0; i < m->ncreds; i++) env_set(env, m->creds[i].name, m->creds[i].placeholder);
}

/* The sandbox's TLS clients trust the bundle the proxy published: the image's roots, the
 * proxy_upstream_ca roots and the stack's CA. Set last, like the agent contract: a spec's own
 * value would leave its clients refusing every inspected host. */
static void wire_ca_bundle(cJSON *env) {
  for (int i = 0; SS_CA_BUNDLE_VARS[i]; i++) env_set(env, SS_CA_BUNDLE_VARS[i], SS_CA_BUNDLE);
}

/* Spec 000's credential wiring. With a proxy the sandbox holds only the per-session token. */
static void wire_credentials(const plan_ctx *p, const ss_svc *s, cJSON *env) {
  const ss_stack_model *m = p->m;
  const cJSON *key = cJSON_GetObjectItemCaseSensitive(m->opts, "api_key");
  if (s->is_sandbox) {
    char port[16];
    snprintf(port, sizeof port, "%d", m->agent_port);
    /* the provider overlays the agent contract: the spec's own AGENT_PORT loses */
    env_set(env, "AGENT_PORT", port);
    if (m->proxy_idx >= 0) {
      const ss_svc *px = &m->svc[m->proxy_idx];
      char url[160];
      snprintf(url, sizeof url, "http://%s:%d", px->name, px->port);
      /* the credential route exists only when the added proxy holds a key; a user's proxy_service
       * is its own to configure */
      if (key || !px->added) {
        env_set(env, "ANTHROPIC_BASE_URL", url);
        env_set(env, "ANTHROPIC_API_KEY", p->token);
      }
      if (px->added) wire_proxy_clients(p, px, env);
      if (px->added && m->inspect_ca) wire_ca_bundle(env);
      if (px->added) wire_placeholders(m, env);
    } else if (key) {
      env_set(env, "ANTHROPIC_API_KEY", key->valuestring);
    }
  } else if (m->proxy_idx >= 0 && s == &m->svc[m->proxy_idx]) {
    env_set(env, "SANDSTACK_SESSION_TOKEN", p->token);
    env_set(env, "ANTHROPIC_API_KEY", key ? key->valuestring : NULL);
    if (p->ctx->egress_policy_json) env_set(env, "SANDSTACK_EGRESS_POLICY", p->ctx->egress_policy_json);
    if (s->added) wire_added_proxy(p, s, env);
  }
}

static cJSON *healthcheck(const cJSON *r) {
  cJSON *hc = cJSON_CreateObject();
  const cJSON *test = cJSON_GetObjectItemCaseSensitive(r, "test");
  cJSON *t;
  if (cJSON_IsString(test)) {
    const char *sh[] = {"CMD-SHELL", test->valuestring};
    t = string_array(sh, 2);
  } else {
    t = cJSON_Duplicate(test, 1);
    const char *first = cJSON_GetArrayItem(t, 0)->valuestring;
    if (strcmp(first, "CMD") && strcmp(first, "CMD-SHELL") && strcmp(first, "NONE"))
      cJSON_InsertItemInArray(t, 0, cJSON_CreateString("CMD"));
  }
  cJSON_AddItemToObject(hc, "Test", t);
  static const char *const keys[][2] = {{"interval", "Interval"}, {"timeout", "Timeout"},
                                        {"start_period", "StartPeriod"}};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, keys[i][0]);
    if (v) cJSON_AddNumberToObject(hc, keys[i][1], floor(v->valuedouble * NS_PER_S));
  }
  const cJSON *retries = cJSON_GetObjectItemCaseSensitive(r, "retries");
  if (retries) cJSON_AddNumberToObject(hc, "Retries", retries->valuedouble);
  return hc;
}

/* The added proxy's health when it inspects TLS: its bundle is published, so the sandbox (which
 * depends on it) starts with a bundle its clients can read. The image has no shell, so the test
 * is the proxy binary's own `--ready`. A user's `ready.proxy` replaces it. */
#define CA_READY_INTERVAL_S 10
#define CA_READY_TIMEOUT_S 5
#define CA_READY_RETRIES 3

static cJSON *ca_ready_check(void) {
  cJSON *hc = cJSON_CreateObject();
  const char *test[] = {"CMD", SS_CA_READY_TEST, "--ready"};
  cJSON_AddItemToObject(hc, "Test", string_array(test, 3));
  cJSON_AddNumberToObject(hc, "Interval", CA_READY_INTERVAL_S * NS_PER_S);
  cJSON_AddNumberToObject(hc, "Timeout", CA_READY_TIMEOUT_S * NS_PER_S);
  cJSON_AddNumberToObject(hc, "Retries", CA_READY_RETRIES);
  return hc;
}

/* The argv sandstack runs itself (by exec) to learn health without waiting an interval. */
static cJSON *check_argv(const cJSON *test) {
  const char *first = cJSON_GetArrayItem(test, 0)->valuestring;
  if (strcmp(first, "NONE") == 0) return NULL;
  if (strcmp(first, "CMD-SHELL") == 0) {
    const char *sh[] = {"/bin/sh", "-c", cJSON_GetArrayItem(test, 1) ? cJSON_GetArrayItem(test, 1)->valuestring : "true"};
    return string_array(sh, 3);
  }
  cJSON *a = cJSON_Duplicate(test, 1);
  cJSON_DeleteItemFromArray(a, 0);
  return a;
}

/* The inspection CA volume: read-write where the proxy publishes into it, read-only in the
 * sandbox (the kernel refuses its writes, so the agent cannot swap the bundle). NoCopy: nothing
 * an image holds at the mount point is copied into the volume. */
static cJSON *ca_mount(const plan_ctx *p, const ss_svc *s) {
  char name[200];
  snprintf(name, sizeof name, "%s-%s", p->m->project, SS_CA_VOLUME_KEY);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "Type", "volume");
  cJSON_AddStringToObject(o, "Source", name);
  cJSON_AddStringToObject(o, "Target", s->added ? SS_CA_PROXY_DIR : SS_CA_SANDBOX_DIR);
  cJSON_AddBoolToObject(o, "ReadOnly", !s->added);
  cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "VolumeOptions"), "NoCopy", 1);
  return o;
}

/* sandstack-init's volume (init_wrap.h, csrc/deadline/deadline.h): read-only in the sandbox,
 * read-write in the holder that writes it. */
static cJSON *init_mount(const plan_ctx *p, int read_only) {
  char name[200];
  snprintf(name, sizeof name, "%s-%s", p->m->project, SS_INIT_VOLUME_KEY);
  return ss_volume_mount(name, DL_DIR, read_only);
}

static cJSON *mounts_of(const plan_ctx *p, const ss_svc *s) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *mounts = s->spec ? cJSON_GetObjectItemCaseSensitive(s->spec, "volumes") : NULL;
  const cJSON *mnt;
  char name[200];
  cJSON_ArrayForEach(mnt, mounts) {
    cJSON *o = cJSON_CreateObject();
    snprintf(name, sizeof name, "%s-%s", p->m->project,
             cJSON_GetObjectItemCaseSensitive(mnt, "name")->valuestring);
    cJSON_AddStringToObject(o, "Type", "volume");
    cJSON_AddStringToObject(o, "Source", name);
    cJSON_AddStringToObject(o, "Target", cJSON_GetObjectItemCaseSensitive(mnt, "target")->valuestring);
    cJSON_AddBoolToObject(o, "ReadOnly", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mnt, "read_only")));
    cJSON_AddItemToArray(out, o);
  }
  if (p->m->inspect_ca && (s->added || s->is_sandbox)) cJSON_AddItemToArray(out, ca_mount(p, s));
  if (s->is_sandbox && p->ctx->init_image) cJSON_AddItemToArray(out, init_mount(p, 1));
  return out;
}

static cJSON *endpoint(const char *alias) {
  cJSON *ep = cJSON_CreateObject();
  if (alias) cJSON_AddItemToObject(ep, "Aliases", string_array(&alias, 1));
  return ep;
}

/* One container: create body on its first network; the others as connects before start
 * (below API 1.44 a create with several endpoints is a 400), or all at create from 1.44. */
static cJSON *container(const plan_ctx *p, const cJSON *hard, const char *service, const char *role,
                        const char *image, cJSON *config, cJSON *hostcfg, const char *const nets[],
                        const char *const aliases[], int nnets) {
  char name[256];
  snprintf(name, sizeof name, "%s-%s", p->m->project, service);
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "service", service);
  cJSON_AddStringToObject(c, "role", role);
  cJSON_AddStringToObject(c, "name", name);
  cJSON_AddStringToObject(c, "image", image);

  cJSON_AddStringToObject(config, "Image", image);
  cJSON *l = labels(p, "io.sandstack.service", service);
  cJSON_AddStringToObject(l, "io.sandstack.role", role);
  cJSON_AddItemToObject(config, "Labels", l);
  if (p->m->hard.user && !cJSON_GetObjectItemCaseSensitive(config, "User"))
    cJSON_AddStringToObject(config, "User", p->m->hard.user);

  cJSON *hc = cJSON_Duplicate(hard, 1);
  for (cJSON *it = hostcfg ? hostcfg->child : NULL; it; it = it->next)
    cJSON_AddItemToObject(hc, it->string, cJSON_Duplicate(it, 1));
  cJSON_Delete(hostcfg);
  cJSON_AddStringToObject(hc, "NetworkMode", nets[0]);
  cJSON_AddItemToObject(config, "HostConfig", hc);

  cJSON *eps = cJSON_CreateObject();
  cJSON *connects = cJSON_CreateArray();
  for (int i = 0; i < nnets; i++) {
    if (i == 0 || p->api >= 144) {
      cJSON_AddItemToObject(eps, nets[i], endpoint(aliases[i]));
      continue;
    }
    cJSON *cn = cJSON_CreateObject();
    cJSON_AddStringToObject(cn, "network", nets[i]);
    cJSON *body = cJSON_CreateObject();
    cJSON_AddStringToObject(body, "Container", name);
    cJSON_AddItemToObject(body, "EndpointConfig", endpoint(aliases[i]));
    cJSON_AddItemToObject(cn, "body", body);
    cJSON_AddItemToArray(connects, cn);
  }
  cJSON *nc = cJSON_CreateObject();
  cJSON_AddItemToObject(nc, "EndpointsConfig", eps);
  cJSON_AddItemToObject(config, "NetworkingConfig", nc);
  cJSON_AddItemToObject(c, "body", config);
  cJSON_AddItemToObject(c, "connects", connects);
  return c;
}

/* The DNS server named to every container of the internal network (the sandbox and the egress =
 * "none" sidecars). Docker's embedded resolver forwards a name it does not know to the
 * container's DNS servers: one taken from a host resolver on loopback is asked from the host's
 * namespace (CVE-2024-29018, still so on 20.10), any other from the container's own namespace.
 * This one is not loopback, and the internal network has no route to it (no default route from
 * Engine 26; on 20.10 one via a gateway address nobody holds), so the query dies inside the
 * stack, while the stack's own names still resolve (the resolver answers those itself). The
 * address is TEST-NET-3 (RFC 5737), which no real resolver uses. The forwarder keeps the
 * engine's resolvers: it is not the guest's, and it sits on a network that has a route out. */
#define SS_NO_EGRESS_DNS "203.0.113.53"

static void no_egress_dns(cJSON *hostcfg) {
  const char *dns = SS_NO_EGRESS_DNS;
  cJSON_AddItemToObject(hostcfg, "Dns", string_array(&dns, 1));
}

/* What sandstack waits for itself before the service counts as ready (stack/readiness.lua): a
 * text in its log, so many times, and a port that accepts a connection on the stack's network. */
static void add_ready_waits(cJSON *c, const cJSON *ready) {
  const cJSON *log = cJSON_GetObjectItemCaseSensitive(ready, "log");
  const cJSON *times = cJSON_GetObjectItemCaseSensitive(ready, "times");
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(ready, "port");
  if (log) {
    cJSON_AddStringToObject(c, "ready_log", log->valuestring);
    cJSON_AddNumberToObject(c, "ready_times", times ? times->valuedouble : 1);
  }
  if (port) cJSON_AddNumberToObject(c, "ready_port", port->valuedouble);
}

/* The sandbox's command under sandstack-init: the body's Entrypoint and Cmd merged with the
 * image's as the engine would, then wrapped (init_wrap.h). A command that merges to nothing is
 * left alone: the engine refuses the create, as it would have. */
static void wrap_command(cJSON *cfg, const cJSON *image) {
  cJSON *e, *c;
  if (ss_stack_init_wrap(cJSON_GetObjectItemCaseSensitive(cfg, "Entrypoint"), cJSON_GetObjectItemCaseSensitive(cfg, "Cmd"),
                         cJSON_GetObjectItemCaseSensitive(image, "Entrypoint"), cJSON_GetObjectItemCaseSensitive(image, "Cmd"),
                         &e, &c) != 0)
    return;
  cJSON_DeleteItemFromObjectCaseSensitive(cfg, "Entrypoint");
  cJSON_DeleteItemFromObjectCaseSensitive(cfg, "Cmd");
  cJSON_AddItemToObject(cfg, "Entrypoint", e);
  cJSON_AddItemToObject(cfg, "Cmd", c);
}

/* Under a runtime of the user's (gVisor), a guest can stop the sandbox's PID 1, which Linux
 * forbids: the sandbox's health check becomes sandstack-init --check (csrc/init/check.c), which
 * the engine runs at least every DL_CHECK_INTERVAL_S seconds and which then runs the user's own
 * test, when there is one, in its place. */
static void guard_check(cJSON *cfg) {
  cJSON *hc = cJSON_GetObjectItemCaseSensitive(cfg, "Healthcheck");
  cJSON *test = cJSON_CreateArray();
  const char *head[] = {"CMD", DL_PROGRAM, "--check"};
  for (int i = 0; i < 3; i++) cJSON_AddItemToArray(test, cJSON_CreateString(head[i]));
  cJSON *own = hc ? check_argv(cJSON_GetObjectItemCaseSensitive(hc, "Test")) : NULL;
  if (own) {
    cJSON_AddItemToArray(test, cJSON_CreateString("--"));
    while (own->child) cJSON_AddItemToArray(test, cJSON_DetachItemViaPointer(own, own->child));
    cJSON_Delete(own);
  }
  if (!hc) hc = cJSON_AddObjectToObject(cfg, "Healthcheck");
  cJSON_DeleteItemFromObjectCaseSensitive(hc, "Test");
  cJSON_AddItemToObject(hc, "Test", test);
  const cJSON *iv = cJSON_GetObjectItemCaseSensitive(hc, "Interval");
  if (!cJSON_IsNumber(iv) || iv->valuedouble > DL_CHECK_INTERVAL_S * NS_PER_S) {
    cJSON_DeleteItemFromObjectCaseSensitive(hc, "Interval");
    cJSON_AddNumberToObject(hc, "Interval", DL_CHECK_INTERVAL_S * NS_PER_S);
  }
}

static cJSON *service_container(const plan_ctx *p, const cJSON *hard, const ss_svc *s) {
  cJSON *cfg = cJSON_CreateObject();
  const cJSON *spec = s->spec;
  cJSON *v;
  if (spec && (v = argv_of(cJSON_GetObjectItemCaseSensitive(spec, "entrypoint"), 0)))
    cJSON_AddItemToObject(cfg, "Entrypoint", v);
  if (spec && (v = argv_of(cJSON_GetObjectItemCaseSensitive(spec, "command"), 1)))
    cJSON_AddItemToObject(cfg, "Cmd", v);
  if (s->is_sandbox && p->ctx->init_image) wrap_command(cfg, p->ctx->init_image);
  cJSON *env = env_of(s);
  wire_credentials(p, s, env);
  cJSON_AddItemToObject(cfg, "Env", env);
  const cJSON *user = spec ? cJSON_GetObjectItemCaseSensitive(spec, "user") : NULL;
  if (user) cJSON_AddStringToObject(cfg, "User", user->valuestring);
  cJSON *check = NULL;
  double check_timeout = 5;
  if (s->ready && cJSON_GetObjectItemCaseSensitive(s->ready, "test")) {
    cJSON *h = healthcheck(s->ready);
    check = check_argv(cJSON_GetObjectItemCaseSensitive(h, "Test"));
    cJSON_AddItemToObject(cfg, "Healthcheck", h);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s->ready, "timeout");
    if (t) check_timeout = t->valuedouble;
  } else if (s->added && p->m->inspect_ca) {
    cJSON *h = ca_ready_check();
    check = check_argv(cJSON_GetObjectItemCaseSensitive(h, "Test"));
    cJSON_AddItemToObject(cfg, "Healthcheck", h);
  }
  /* whether start waits for the engine's health verdict: a check of the user's or the proxy's */
  int health_gate = cJSON_GetObjectItemCaseSensitive(cfg, "Healthcheck") != NULL;
  if (s->is_sandbox && p->ctx->init_image && p->m->runtime) guard_check(cfg);
  if (s->is_sandbox) {
    char port[24];
    snprintf(port, sizeof port, "%d/tcp", p->m->agent_port);
    cJSON *ex = cJSON_CreateObject();
    cJSON_AddItemToObject(ex, port, cJSON_CreateObject());
    cJSON_AddItemToObject(cfg, "ExposedPorts", ex);
  }
  cJSON *hostcfg = cJSON_CreateObject();
  cJSON_AddItemToObject(hostcfg, "Mounts", mounts_of(p, s));
  if (s->added && p->ctx->control_dir) {
    /* the proxy's alone: no other container mounts it. A bind in Binds, not Mounts: an engine
     * whose files are not this process's makes the directory itself (root's, so the proxy
     * falls back to its abstract socket) where a Mounts bind would fail the create. */
    char bind[4200];
    snprintf(bind, sizeof bind, "%s:%s", p->ctx->control_dir, SS_CONTROL_PROXY_DIR);
    const char *b = bind;
    cJSON_AddItemToObject(hostcfg, "Binds", string_array(&b, 1));
  }
  cJSON *extra = ss_stack_extra_hosts(s->hosts);
  if (extra) cJSON_AddItemToObject(hostcfg, "ExtraHosts", extra);
  if (!s->egress_allow && p->m->internal) no_egress_dns(hostcfg);
  const char *nets[2] = {p->net_sbx, p->net_egress};
  const char *aliases[2] = {s->name, NULL};
  cJSON *c = container(p, hard, s->name, s->is_sandbox ? "sandbox" : "sidecar", s->image, cfg,
                       hostcfg, nets, aliases, s->egress_allow ? 2 : 1);
  cJSON *deps = cJSON_CreateArray();
  for (int k = 0; k < s->ndeps; k++)
    cJSON_AddItemToArray(deps, cJSON_CreateString(p->m->svc[s->deps[k]].name));
  cJSON_AddItemToObject(c, "depends_on", deps);
  cJSON_AddBoolToObject(c, "egress", s->egress_allow);
  if (check) {
    cJSON_AddItemToObject(c, "check", check);
    cJSON_AddNumberToObject(c, "check_timeout", check_timeout);
  }
  cJSON_AddBoolToObject(c, "healthcheck", health_gate);
  add_ready_waits(c, s->ready);
  return c;
}

/* A forwarder: socat relaying host:port on the sandbox network to 127.0.0.1:<host_port> of the
 * host (0: ephemeral, re-read after every start). The agent's is `m->forwarder_name`, with an alias
 * on the sandbox network; each port of `ports` has one more (ports.c), without one. */
static cJSON *forwarder_container(const plan_ctx *p, const cJSON *hard, const char *service, const char *host,
                                  int port, int host_port, int agent) {
  const ss_stack_model *m = p->m;
  char listen[64], target[128], key[24], hp[16];
  snprintf(listen, sizeof listen, "TCP-LISTEN:%d,fork,reuseaddr", port);
  snprintf(target, sizeof target, "TCP:%s:%d", host, port);
  snprintf(key, sizeof key, "%d/tcp", port);
  snprintf(hp, sizeof hp, "%d", host_port);
  cJSON *cfg = cJSON_CreateObject();
  const char *ep[] = {"socat"};
  const char *cmd[] = {listen, target};
  cJSON_AddItemToObject(cfg, "Entrypoint", string_array(ep, 1));
  cJSON_AddItemToObject(cfg, "Cmd", string_array(cmd, 2));
  cJSON_AddItemToObject(cfg, "Env", cJSON_CreateArray());
  cJSON *ex = cJSON_CreateObject();
  cJSON_AddItemToObject(ex, key, cJSON_CreateObject());
  cJSON_AddItemToObject(cfg, "ExposedPorts", ex);
  /* 127.0.0.1 only: nothing off this host reaches it */
  cJSON *hostcfg = cJSON_CreateObject();
  cJSON *pb = cJSON_CreateObject(), *binds = cJSON_CreateArray(), *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "HostIp", "127.0.0.1");
  cJSON_AddStringToObject(b, "HostPort", host_port ? hp : "");
  cJSON_AddItemToArray(binds, b);
  cJSON_AddItemToObject(pb, key, binds);
  cJSON_AddItemToObject(hostcfg, "PortBindings", pb);
  cJSON_AddItemToObject(hostcfg, "Mounts", cJSON_CreateArray());
  /* created on -pub (which carries the published port), -sbx connected before start */
  const char *nets[2] = {p->net_pub, p->net_sbx};
  const char *aliases[2] = {NULL, agent ? m->forwarder_name : NULL};
  cJSON *c = container(p, hard, service, "forwarder", m->forwarder_image, cfg, hostcfg, nets, aliases, 2);
  cJSON_AddNumberToObject(c, "port", port);
  if (host_port) cJSON_AddNumberToObject(c, "host_port", host_port);
  cJSON_AddStringToObject(c, "target", host);
  cJSON_AddItemToObject(c, "depends_on", cJSON_CreateArray());
  cJSON_AddBoolToObject(c, "egress", 0);
  cJSON_AddBoolToObject(c, "healthcheck", 0);
  snprintf(hp, sizeof hp, "%d", port);
  cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "body"), "Labels"),
                          "io.sandstack.port", hp);
  return c;
}

static void add_ipam(cJSON *body, const char *subnet) {
  if (!subnet) return;
  cJSON *ipam = cJSON_AddObjectToObject(body, "IPAM");
  cJSON_AddStringToObject(ipam, "Driver", "default");
  cJSON *cfg = cJSON_CreateObject();
  cJSON_AddStringToObject(cfg, "Subnet", subnet);
  cJSON_AddItemToArray(cJSON_AddArrayToObject(ipam, "Config"), cfg);
}

static cJSON *network(const plan_ctx *p, const char *key, const char *name, int internal,
                      const cJSON *user_opts, const char *driver, const char *subnet) {
  cJSON *n = cJSON_CreateObject();
  cJSON_AddStringToObject(n, "key", key);
  cJSON_AddStringToObject(n, "name", name);
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "Name", name);
  cJSON_AddStringToObject(b, "Driver", driver);
  cJSON_AddBoolToObject(b, "Internal", internal);
  /* inhibit_ipv4 and the isolation checks cover IPv4 only: a daemon that turns IPv6 on for new
   * networks ("ipv6": true, Engine 27+) must not give the stack a v6 path to the host. */
  cJSON_AddBoolToObject(b, "EnableIPv6", 0);
  if (p->api >= 148) cJSON_AddBoolToObject(b, "EnableIPv4", 1);
  cJSON *o = user_opts ? cJSON_Duplicate(user_opts, 1) : cJSON_CreateObject();
  if (strcmp(driver, "bridge") == 0) {
    if (strcmp(key, "sbx") == 0 && internal) {
      /* Removes the host's address from the network: measured to cut the host off on 20.10,
       * where internal containers still have a route to the gateway. Set by sandstack last,
       * so user options cannot weaken it. */
      cJSON_DeleteItemFromObjectCaseSensitive(o, "com.docker.network.bridge.inhibit_ipv4");
      cJSON_AddStringToObject(o, "com.docker.network.bridge.inhibit_ipv4", "true");
      cJSON_DeleteItemFromObjectCaseSensitive(o, "com.docker.network.bridge.gateway_mode_ipv4");
      /* Engine 28's form; 27.x rejects the value and 20.10 silently ignores it */
      if (p->api >= 148) cJSON_AddStringToObject(o, "com.docker.network.bridge.gateway_mode_ipv4", "isolated");
    } else if (strcmp(key, "pub") == 0) {
      cJSON_AddStringToObject(o, "com.docker.network.bridge.enable_ip_masquerade", "false");
    }
  }
  cJSON_AddItemToObject(b, "Options", o);
  cJSON_AddItemToObject(b, "Labels", labels(p, "io.sandstack.network", key));
  /* below 1.44 a duplicate name silently makes a second network unless asked to refuse */
  if (p->api < 144) cJSON_AddBoolToObject(b, "CheckDuplicate", 1);
  add_ipam(b, subnet);
  if (subnet) cJSON_AddStringToObject(n, "subnet", subnet);
  cJSON_AddItemToObject(n, "body", b);
  return n;
}

static void add_networks(cJSON *plan, plan_ctx *p) {
  const ss_stack_model *m = p->m;
  const cJSON *net = cJSON_GetObjectItemCaseSensitive(m->opts, "network");
  const cJSON *drv = net ? cJSON_GetObjectItemCaseSensitive(net, "driver") : NULL;
  const cJSON *uo = net ? cJSON_GetObjectItemCaseSensitive(net, "options") : NULL;
  cJSON *nets = cJSON_AddArrayToObject(plan, "networks");
  const ss_stack_subnets *sn = &p->ctx->subnets;
  cJSON_AddItemToArray(nets, network(p, "sbx", p->net_sbx, m->internal, uo, drv ? drv->valuestring : "bridge", sn->sbx));
  cJSON_AddItemToArray(nets, network(p, "pub", p->net_pub, 0, NULL, "bridge", sn->pub));
  if (p->has_egress) cJSON_AddItemToArray(nets, network(p, "egress", p->net_egress, 0, NULL, "bridge", sn->egress));
}

/* A copy of a flat object with its members in name order: the same options give the same text
 * whichever order the caller's table listed them in. */
static cJSON *sorted_copy(const cJSON *obj) {
  cJSON *out = cJSON_CreateObject();
  const cJSON *last = NULL;
  for (;;) {
    const cJSON *next = NULL, *c;
    cJSON_ArrayForEach(c, obj) {
      if (!c->string || (last && strcmp(c->string, last->string) <= 0)) continue;
      if (!next || strcmp(c->string, next->string) < 0) next = c;
    }
    if (!next) return out;
    cJSON_AddItemToObject(out, next->string, cJSON_Duplicate(next, 1));
    last = next;
  }
}

/* What a verdict of the self-check is about, as one text (the key of its memo on the engine,
 * lua/sandstack/docker/isolation.lua): the sandbox network's body without what differs from
 * stack to stack (name, subnet, labels), the API version it is sent at and the probe's runtime.
 * Two stacks with the same shape get the same answer from the same engine. */
static void add_check_shape(cJSON *chk, const plan_ctx *p, const cJSON *sbody) {
  cJSON *shape = cJSON_CreateObject();
  char api[16];
  snprintf(api, sizeof api, "%d.%d", p->api / 100, p->api % 100);
  cJSON_AddStringToObject(shape, "api_version", api);
  cJSON *net = cJSON_AddObjectToObject(shape, "network");
  static const char *const kept[] = {"Driver", "Internal", "EnableIPv6", "EnableIPv4"};
  for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sbody, kept[i]);
    if (v) cJSON_AddItemToObject(net, kept[i], cJSON_Duplicate(v, 1));
  }
  cJSON_AddItemToObject(net, "Options", sorted_copy(cJSON_GetObjectItemCaseSensitive(sbody, "Options")));
  if (p->m->runtime) cJSON_AddStringToObject(shape, "runtime", p->m->runtime);
  else cJSON_AddNullToObject(shape, "runtime");
  char *text = cJSON_PrintUnformatted(shape);
  cJSON_AddStringToObject(chk, "shape", text ? text : "");
  cJSON_free(text);
  cJSON_Delete(shape);
}

/* The isolation self-check's objects (lua/sandstack/docker/isolation.lua): a network made with
 * the sandbox network's own body under another name, and a probe container on it. Planned only
 * when there is something to check: an internal bridge. */
static void add_isolation_check(cJSON *plan, const plan_ctx *p, const cJSON *sbx_net, const cJSON *hard) {
  const cJSON *sbody = cJSON_GetObjectItemCaseSensitive(sbx_net, "body");
  const cJSON *driver = cJSON_GetObjectItemCaseSensitive(sbody, "Driver");
  if (!p->m->internal || !cJSON_IsString(driver) || strcmp(driver->valuestring, "bridge") != 0) return;
  char name[160];
  snprintf(name, sizeof name, "%s-isocheck", p->m->project);
  cJSON *chk = cJSON_AddObjectToObject(plan, "isolation_check");
  cJSON_AddStringToObject(chk, "name", name);
  add_check_shape(chk, p, sbody);
  cJSON *nbody = cJSON_Duplicate(sbody, 1);
  cJSON_ReplaceItemInObjectCaseSensitive(nbody, "Name", cJSON_CreateString(name));
  cJSON_DeleteItemFromObjectCaseSensitive(nbody, "IPAM");
  add_ipam(nbody, p->ctx->subnets.isocheck);
  cJSON *l = labels(p, "io.sandstack.role", "isolation-check");
  cJSON_ReplaceItemInObjectCaseSensitive(nbody, "Labels", l);
  const cJSON *gm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sbody, "Options"),
                                                     "com.docker.network.bridge.gateway_mode_ipv4");
  if (cJSON_IsString(gm)) cJSON_AddStringToObject(chk, "gateway_mode", gm->valuestring);
  cJSON *net = cJSON_AddObjectToObject(chk, "network");
  cJSON_AddItemToObject(net, "body", nbody);
  /* the probe: socat is what the forwarder image must have anyway; it runs under the stack's
   * hardening overlay (runtime included), as every container of the stack does */
  cJSON *cbody = cJSON_CreateObject();
  cJSON_AddStringToObject(cbody, "Image", p->m->forwarder_image);
  const char *ep[] = {"socat", "-u", "STDIN", "STDOUT"};
  cJSON_AddItemToObject(cbody, "Entrypoint", string_array(ep, 4));
  cJSON_AddBoolToObject(cbody, "OpenStdin", 1);
  cJSON_AddItemToObject(cbody, "Labels", labels(p, "io.sandstack.role", "isolation-check"));
  cJSON *hc = cJSON_Duplicate(hard, 1);
  cJSON_AddStringToObject(hc, "NetworkMode", name);
  cJSON_AddItemToObject(cbody, "HostConfig", hc);
  cJSON *ctr = cJSON_AddObjectToObject(chk, "container");
  cJSON_AddItemToObject(ctr, "body", cbody);
}

/* One named volume of the stack: <project>-<key>, labelled like every object (so destroy, down
 * and reap remove it). Returns the body for the caller to add driver options to. */
static cJSON *add_volume(cJSON *out, const plan_ctx *p, const char *key) {
  char name[200];
  snprintf(name, sizeof name, "%s-%s", p->m->project, key);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "key", key);
  cJSON_AddStringToObject(o, "name", name);
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "Name", name);
  cJSON_AddItemToObject(b, "Labels", labels(p, "io.sandstack.volume", key));
  cJSON_AddItemToObject(o, "body", b);
  cJSON_AddItemToArray(out, o);
  return b;
}

static void add_volumes(cJSON *plan, const plan_ctx *p) {
  cJSON *out = cJSON_AddArrayToObject(plan, "volumes");
  const cJSON *vols = cJSON_GetObjectItemCaseSensitive(p->m->opts, "volumes"), *v;
  cJSON_ArrayForEach(v, vols) add_volume(out, p, cJSON_GetObjectItemCaseSensitive(v, "name")->valuestring);
  if (!p->m->inspect_ca) return;
  /* the inspection CA's volume: certificates only (the key stays in the proxy's memory), on a
   * tmpfs */
  cJSON *b = add_volume(out, p, SS_CA_VOLUME_KEY);
  cJSON_AddStringToObject(b, "Driver", "local");
  cJSON_AddItemToObject(b, "DriverOpts", ss_stack_ca_volume_opts(p->m));
}

/* sandstack-init's volume and its holder (docker/deadline.lua): a container that mounts the
 * volume read-write and is never started, so the host can write the volume through the engine's
 * archive API at any time, the sandbox running or not. It runs nothing, has no network and the
 * stack's hardening; its image is the forwarder's, which the start has on the engine anyway. */
static void add_init(cJSON *plan, const plan_ctx *p, const cJSON *hard) {
  if (!p->ctx->init_image) return;
  add_volume(cJSON_GetObjectItemCaseSensitive(plan, "volumes"), p, SS_INIT_VOLUME_KEY);
  cJSON *in = cJSON_AddObjectToObject(plan, "init");
  char name[200];
  snprintf(name, sizeof name, "%s-%s", p->m->project, SS_INIT_VOLUME_KEY);
  cJSON_AddStringToObject(in, "volume", name);
  cJSON_AddStringToObject(in, "dir", DL_DIR);
  cJSON *holder = cJSON_AddObjectToObject(in, "holder");
  cJSON_AddStringToObject(holder, "name", name);
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "Image", p->m->forwarder_image);
  const char *never[] = {DL_PROGRAM};
  cJSON_AddItemToObject(b, "Entrypoint", string_array(never, 1));
  cJSON_AddBoolToObject(b, "NetworkDisabled", 1);
  cJSON_AddItemToObject(b, "Labels", labels(p, "io.sandstack.role", "init"));
  cJSON *hc = cJSON_Duplicate(hard, 1);
  cJSON_AddStringToObject(hc, "NetworkMode", "none");
  cJSON *mounts = cJSON_AddArrayToObject(hc, "Mounts");
  cJSON_AddItemToArray(mounts, init_mount(p, 0));
  cJSON_AddItemToObject(b, "HostConfig", hc);
  cJSON_AddItemToObject(holder, "body", b);
  /* the write itself: the archive (program and deadline file) is the caller's body */
  cJSON *w = cJSON_AddObjectToObject(in, "write");
  cJSON_AddStringToObject(w, "method", "PUT");
  snprintf(name, sizeof name, "/containers/%s-%s/archive", p->m->project, SS_INIT_VOLUME_KEY);
  cJSON_AddStringToObject(w, "path", name);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(w, "query"), "path", DL_DIR);
  snprintf(name, sizeof name, "%s-%s", p->m->project, p->m->sandbox_name);
  cJSON_AddStringToObject(in, "container", name);
}

static void copy_opt(cJSON *plan, const cJSON *opts, const char *key, const char *as, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(opts, key);
  if (v) cJSON_AddItemToObject(plan, as, cJSON_Duplicate(v, 1));
  else if (!isnan(def)) cJSON_AddNumberToObject(plan, as, def);
}

/* Turns an entry's "body" into a finished request: method, path and body_json (the JSON text the
 * engine receives). name_query: the create takes the object's name in the query. */
static void finish_request(cJSON *entry, const char *path, int name_query) {
  cJSON *body = cJSON_DetachItemFromObjectCaseSensitive(entry, "body");
  char full[320];
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(entry, "name");
  if (name_query && cJSON_IsString(name)) snprintf(full, sizeof full, "%s?name=%s", path, name->valuestring);
  else snprintf(full, sizeof full, "%s", path);
  cJSON_AddStringToObject(entry, "method", "POST");
  cJSON_AddStringToObject(entry, "path", full);
  char *text = cJSON_PrintUnformatted(body);
  cJSON_AddStringToObject(entry, "body_json", text ? text : "{}");
  cJSON_free(text);
  cJSON_Delete(body);
}

static void finish_requests(cJSON *list, const char *path, int name_query) {
  cJSON *c;
  cJSON_ArrayForEach(c, list) finish_request(c, path, name_query);
}

/* A connect's path names its network; the names are validated object names, safe in a path. */
static void finish_connects(cJSON *containers) {
  cJSON *c, *cn;
  char path[256];
  cJSON_ArrayForEach(c, containers) {
    cJSON_ArrayForEach(cn, cJSON_GetObjectItemCaseSensitive(c, "connects")) {
      snprintf(path, sizeof path, "/networks/%s/connect",
               cJSON_GetObjectItemCaseSensitive(cn, "network")->valuestring);
      finish_request(cn, path, 0);
    }
  }
}

cJSON *ss_stack_plan(const cJSON *opts, const ss_stack_ctx *ctx, ss_error *err) {
  ss_stack_model *m = calloc(1, sizeof *m);
  if (!m) {
    ss_error_set(err, "usage", "oom", "out of memory");
    return NULL;
  }
  cJSON *plan = NULL;
  if (ss_stack_model_build(opts, ctx->session_key, m, err) == 0) plan = ss_stack_plan_model(m, ctx, err);
  free(m);
  return plan;
}

cJSON *ss_stack_plan_draft(const ss_stack_model *m, const ss_stack_ctx *ctx, ss_error *err) {
  const cJSON *opts = m->opts;
  plan_ctx p = {.m = m, .ctx = ctx};
  p.api = ctx->api_version ? ss_stack_api_number(ctx->api_version) : 141;
  if (p.api < 0) p.api = 141;
  char minted[65];
  if (m->proxy_idx >= 0) {
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(opts, "session_token");
    if (ctx->token) {
      p.token = ctx->token;
    } else if (cJSON_IsString(given)) { /* validated: length and characters */
      p.token = given->valuestring;
    } else if (ss_random_hex(minted, 32) == 0) {
      p.token = minted;
    } else {
      ss_error_set(err, "io", "random", "could not read the kernel CSPRNG for the session token");
      return NULL;
    }
  }
  snprintf(p.net_sbx, sizeof p.net_sbx, "%s-sbx", m->project);
  snprintf(p.net_pub, sizeof p.net_pub, "%s-pub", m->project);
  snprintf(p.net_egress, sizeof p.net_egress, "%s-egress", m->project);
  for (int i = 0; i < m->nsvc; i++) p.has_egress |= m->svc[i].egress_allow;
  p.creds_json = credentials_env(m, ctx->redact_secrets);
  if (m->ncreds > 0 && !p.creds_json) {
    ss_error_set(err, "usage", "oom", "out of memory");
    return NULL;
  }

  cJSON *plan = cJSON_CreateObject();
  cJSON_AddStringToObject(plan, "project", m->project);
  cJSON_AddStringToObject(plan, "session_key", m->session_key);
  char api[16];
  snprintf(api, sizeof api, "%d.%d", p.api / 100, p.api % 100);
  cJSON_AddStringToObject(plan, "api_version", api);
  cJSON_AddBoolToObject(plan, "dual_attach_at_create", p.api >= 144);
  cJSON_AddStringToObject(plan, "version", SANDSTACK_VERSION);
  cJSON_AddNumberToObject(plan, "created", ctx->now);
  if (ctx->run_label) cJSON_AddStringToObject(plan, "run", ctx->run_label);
  cJSON_AddNumberToObject(plan, "agent_port", m->agent_port);
  cJSON_AddStringToObject(plan, "sandbox", m->sandbox_name);
  cJSON_AddStringToObject(plan, "forwarder", m->forwarder_name);
  cJSON_AddBoolToObject(plan, "internal", m->internal);
  if (m->proxy_idx >= 0) {
    cJSON *px = cJSON_AddObjectToObject(plan, "proxy");
    cJSON_AddStringToObject(px, "service", m->svc[m->proxy_idx].name);
    cJSON_AddNumberToObject(px, "port", m->svc[m->proxy_idx].port);
    cJSON_AddStringToObject(px, "image", m->svc[m->proxy_idx].image);
    cJSON_AddBoolToObject(px, "added", m->svc[m->proxy_idx].added); /* by egress_policy, not a proxy_service */
    cJSON_AddStringToObject(plan, "session_token", p.token);
  }
  add_credentials(plan, m);
  if (m->inspect_ca) { /* where the inspection CA's certificates live (never its key) */
    cJSON *in = cJSON_AddObjectToObject(plan, "inspection");
    char vol[200];
    snprintf(vol, sizeof vol, "%s-%s", m->project, SS_CA_VOLUME_KEY);
    cJSON_AddStringToObject(in, "volume", vol);
    cJSON_AddStringToObject(in, "proxy_dir", SS_CA_PROXY_DIR);
    cJSON_AddStringToObject(in, "bundle", SS_CA_BUNDLE);
  }
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(opts, "ready_path");
  if (cJSON_IsFalse(rp)) cJSON_AddFalseToObject(plan, "ready_path");
  else cJSON_AddStringToObject(plan, "ready_path", rp ? rp->valuestring : "/health");
  copy_opt(plan, opts, "ready_timeout", "ready_timeout", 60);
  copy_opt(plan, opts, "health_timeout", "health_timeout", 60);
  copy_opt(plan, opts, "timeout", "timeout", NAN);
  copy_opt(plan, opts, "capture_path", "capture_path", NAN);
  copy_opt(plan, opts, "subnet_pool", "subnet_pool", NAN);
  copy_opt(plan, opts, "docker_host", "docker_host", NAN);
  copy_opt(plan, opts, "runtime", "runtime", NAN);
  const cJSON *pull = cJSON_GetObjectItemCaseSensitive(opts, "pull");
  cJSON_AddStringToObject(plan, "pull", pull ? pull->valuestring : "missing");
  cJSON_AddItemToObject(plan, "labels", labels(&p, NULL, NULL));

  add_networks(plan, &p);
  add_volumes(plan, &p);
  cJSON *hard = hardening(&m->hard, m->runtime);
  add_init(plan, &p, hard);
  cJSON *cs = cJSON_AddArrayToObject(plan, "containers");
  cJSON *order = cJSON_AddArrayToObject(plan, "order");
  for (int k = 0; k < m->nsvc; k++) {
    const ss_svc *s = &m->svc[m->order[k]];
    cJSON_AddItemToArray(cs, service_container(&p, hard, s));
    cJSON_AddItemToArray(order, cJSON_CreateString(s->name));
  }
  cJSON_AddItemToArray(cs, forwarder_container(&p, hard, m->forwarder_name, m->sandbox_name, m->agent_port,
                                               m->agent_host_port, 1));
  cJSON_AddItemToArray(order, cJSON_CreateString(m->forwarder_name));
  for (int i = 0; i < m->nports; i++) {
    const ss_port *pt = &m->ports[i];
    cJSON_AddItemToArray(cs, forwarder_container(&p, hard, pt->forwarder, m->svc[pt->svc].name, pt->port,
                                                 pt->host_port, 0));
    cJSON_AddItemToArray(order, cJSON_CreateString(pt->forwarder));
  }
  ss_stack_plan_ports(plan, m);
  cJSON *images = cJSON_AddArrayToObject(plan, "images");
  const cJSON *c;
  cJSON_ArrayForEach(c, cs) {
    const char *img = cJSON_GetObjectItemCaseSensitive(c, "image")->valuestring;
    int seen = 0;
    const cJSON *i;
    cJSON_ArrayForEach(i, images) seen |= strcmp(i->valuestring, img) == 0;
    if (!seen) cJSON_AddItemToArray(images, cJSON_CreateString(img));
  }
  cJSON *networks = cJSON_GetObjectItemCaseSensitive(plan, "networks");
  add_isolation_check(plan, &p, cJSON_GetArrayItem(networks, 0), hard);
  cJSON_AddItemToObject(plan, "hardening", hard);
  cJSON_free(p.creds_json);
  return plan;
}

void ss_stack_plan_finish(cJSON *plan) {
  cJSON *cs = cJSON_GetObjectItemCaseSensitive(plan, "containers");
  cJSON *networks = cJSON_GetObjectItemCaseSensitive(plan, "networks");
  finish_connects(cs);
  finish_requests(cs, "/containers/create", 1);
  finish_requests(networks, "/networks/create", 0);
  finish_requests(cJSON_GetObjectItemCaseSensitive(plan, "volumes"), "/volumes/create", 0);
  cJSON *holder = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(plan, "init"), "holder");
  if (holder) finish_request(holder, "/containers/create", 1);
  cJSON *chk = cJSON_GetObjectItemCaseSensitive(plan, "isolation_check");
  if (chk) {
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(chk, "network"), "name",
                            cJSON_GetObjectItemCaseSensitive(chk, "name")->valuestring);
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(chk, "container"), "name",
                            cJSON_GetObjectItemCaseSensitive(chk, "name")->valuestring);
    finish_request(cJSON_GetObjectItemCaseSensitive(chk, "network"), "/networks/create", 0);
    finish_request(cJSON_GetObjectItemCaseSensitive(chk, "container"), "/containers/create", 1);
  }
  ss_stack_add_requests(plan);
}

cJSON *ss_stack_plan_model(const ss_stack_model *m, const ss_stack_ctx *ctx, ss_error *err) {
  cJSON *plan = ss_stack_plan_draft(m, ctx, err);
  if (plan) ss_stack_plan_finish(plan);
  return plan;
}
