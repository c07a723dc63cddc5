/* Spec 000's rules, checked before any Engine call. Each refusal names what to fix:
 * kind "compose" with the reasons of API.md for a value of the right type that is refused, or
 * "usage" for a programming error, which the binding raises at the caller: "unknown_option" for
 * a key that does not exist (a typo must never be silently ignored), "bad_type" for a value of
 * the wrong type (docs/api/README.md, "Conventions"). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "deadline/deadline.h"
#include "stack/model.h"
#include "stack/options.h"
#include "util/keys.h"

/* Each level's names, from the one list that also holds its documentation (options.h). */
static const char *const TOP_KEYS[] = {SS_OPTIONS_START(SS_OPTION_NAME) NULL};
static const char *const SERVICE_KEYS[] = {SS_OPTIONS_SERVICE(SS_OPTION_NAME) NULL};
static const char *const MOUNT_KEYS[] = {SS_OPTIONS_MOUNT(SS_OPTION_NAME) NULL};
static const char *const VOLUME_KEYS[] = {SS_OPTIONS_VOLUME(SS_OPTION_NAME) NULL};
static const char *const READY_KEYS[] = {SS_OPTIONS_READY(SS_OPTION_NAME) NULL};
static const char *const NETWORK_KEYS[] = {SS_OPTIONS_NETWORK(SS_OPTION_NAME) NULL};

const char *const *ss_stack_option_keys(const char *level) {
  static const struct {
    const char *level;
    const char *const *keys;
  } LEVELS[] = {{"start", TOP_KEYS},  {"service", SERVICE_KEYS}, {"mount", MOUNT_KEYS},
                {"volume", VOLUME_KEYS}, {"ready", READY_KEYS},   {"network", NETWORK_KEYS}};
  for (size_t i = 0; i < sizeof LEVELS / sizeof LEVELS[0]; i++)
    if (strcmp(LEVELS[i].level, level) == 0) return LEVELS[i].keys;
  if (strcmp(level, "credential") == 0) return ss_stack_credential_keys();
  if (strcmp(level, "port") == 0) return ss_stack_port_keys();
  return NULL;
}

double ss_parse_size(const cJSON *v) {
  if (cJSON_IsNumber(v)) return v->valuedouble >= 0 ? floor(v->valuedouble) : -1;
  if (!cJSON_IsString(v)) return -1;
  const char *s = v->valuestring;
  char *end = NULL;
  if (!isdigit((unsigned char)s[0])) return -1;
  double n = strtod(s, &end);
  double mult = 1;
  switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'b': mult = 1; end++; break;
    case 'k': mult = 1024; end++; break;
    case 'm': mult = 1024.0 * 1024; end++; break;
    case 'g': mult = 1024.0 * 1024 * 1024; end++; break;
    default: return -1;
  }
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0' || !isfinite(n)) return -1;
  return floor(n * mult);
}

static int fail_option(ss_error *err, const char *option, const char *fmt, const char *detail) {
  ss_error_set(err, "compose", "invalid_option", fmt, option, detail ? detail : "");
  ss_error_field_str(err, "option", option);
  return -1;
}


/* The options-key rule of util/keys.h over a JSON object (the binding raises "usage" errors). */
static int check_keys(const cJSON *obj, const char *const allowed[], const char *what,
                      ss_error *err) {
  for (const cJSON *c = obj->child; c; c = c->next) {
    if (!c->string || !ss_key_allowed(allowed, c->string)) {
      char hint[SS_KEY_MAX + 32] = "";
      if (c->string) ss_key_hint(allowed, c->string, hint, sizeof hint);
      ss_error_set(err, "usage", "unknown_option", SS_UNKNOWN_OPTION_FMT, what, c->string ? c->string : "?", hint);
      ss_error_field_str(err, "option", c->string ? c->string : "?");
      return -1;
    }
  }
  return 0;
}

/* DNS label: lowercase letters, digits and inner hyphens, 1..63 characters. */
static int dns_safe(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return 0;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-')) return 0;
  return 1;
}

/* The engine's object-name rule [a-zA-Z0-9][a-zA-Z0-9_.-]*, bounded so suffixes still fit. */
static int object_name_ok(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n == 0 || n > max || !isalnum((unsigned char)s[0])) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '.' || s[i] == '-')) return 0;
  return 1;
}

static int bad_name(ss_error *err, const char *option, const char *value) {
  ss_error_set(err, "compose", "invalid_name",
               "%s: '%s' is not a valid name (lowercase letters, digits and inner '-', at most "
               "63 characters)", option, value);
  ss_error_field_str(err, "option", option);
  ss_error_field_str(err, "name", value);
  return -1;
}

/* A session key or a project name: the engine's object-name rule, which (unlike a DNS label)
 * takes upper case; the message says so. */
static int bad_object_name(ss_error *err, const char *option, const char *value, size_t max) {
  ss_error_set(err, "compose", "invalid_name",
               "%s: '%.64s' is not a valid name (letters, digits, '_', '.' and '-', starting with a letter or a "
               "digit, at most %zu characters)", option, value, max);
  ss_error_field_str(err, "option", option);
  ss_error_field_str(err, "name", value);
  return -1;
}

/* fail_option whose message ends with what was given instead (ss_stack_got). */
static int fail_got(ss_error *err, const char *option, const char *fmt, const cJSON *v) {
  char buf[96];
  return fail_option(err, option, fmt, ss_stack_got(v, option, buf, sizeof buf));
}

/* Optional typed members: 0 when absent or well-typed, -1 (invalid_option) otherwise. */
static int opt_string(const cJSON *o, const char *key, const char *option, const char **out,
                      ss_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) return 0;
  if (!cJSON_IsString(v)) return ss_stack_fail_type(err, option, "a string", v);
  *out = v->valuestring;
  return 0;
}

static int opt_number(const cJSON *o, const char *key, double min, ss_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v) return 0;
  if (!cJSON_IsNumber(v)) return ss_stack_fail_type(err, key, "a number of seconds", v);
  if (!isfinite(v->valuedouble) || v->valuedouble < min)
    return fail_got(err, key, min > 0 ? "%s must be a number above zero%s" : "%s must be a number >= 0%s", v);
  return 0;
}

static int opt_bool(const cJSON *o, const char *key, const char *option, ss_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (v && !cJSON_IsBool(v)) return ss_stack_fail_type(err, option, "true or false", v);
  return 0;
}

static int string_list(const cJSON *v) {
  if (!ss_is_list(v)) return 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, v) if (!cJSON_IsString(c)) return 0;
  return 1;
}

static int opt_argv(const cJSON *o, const char *key, const char *option, ss_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (v && !cJSON_IsString(v) && !string_list(v))
    return ss_stack_fail_type(err, option, "a string or a list of strings", v);
  return 0;
}

static int port_ok(const cJSON *v) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= 1 &&
         v->valuedouble <= 65535;
}

static int find_service(const ss_stack_model *m, const char *name) {
  for (int i = 0; i < m->nsvc; i++)
    if (strcmp(m->svc[i].name, name) == 0) return i;
  return -1;
}

static int check_env(const cJSON *env, const char *option, ss_error *err) {
  if (!env) return 0;
  if (!cJSON_IsObject(env)) return ss_stack_fail_type(err, option, "a table of strings", env);
  const cJSON *c;
  cJSON_ArrayForEach(c, env) {
    if (!(cJSON_IsString(c) || cJSON_IsNumber(c))) return ss_stack_fail_type(err, option, "a table of strings", c);
    if (!c->string || !c->string[0] || strchr(c->string, '='))
      return fail_option(err, option, "%s: names must be non-empty without '=', values strings%s",
                         NULL);
  }
  return 0;
}

static int check_mounts(const cJSON *opts, const cJSON *svc, const char *sname, ss_error *err) {
  const cJSON *mounts = cJSON_GetObjectItemCaseSensitive(svc, "volumes");
  if (!mounts) return 0;
  char option[160];
  snprintf(option, sizeof option, "services.%s.volumes", sname);
  if (!ss_is_list(mounts)) return ss_stack_fail_type(err, option, "a list of mount tables", mounts);
  const cJSON *decl = cJSON_GetObjectItemCaseSensitive(opts, "volumes");
  const cJSON *mnt;
  cJSON_ArrayForEach(mnt, mounts) {
    if (!cJSON_IsObject(mnt)) return ss_stack_fail_type(err, option, "a list of mount tables", mnt);
    if (check_keys(mnt, MOUNT_KEYS, option, err)) return -1;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(mnt, "name");
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(mnt, "target");
    char field[200];
    snprintf(field, sizeof field, "%s.name", option);
    if (name && !cJSON_IsString(name)) return ss_stack_fail_type(err, field, "a string", name);
    snprintf(field, sizeof field, "%s.target", option);
    if (target && !cJSON_IsString(target)) return ss_stack_fail_type(err, field, "a string", target);
    if (!name || !target || target->valuestring[0] != '/')
      return fail_option(err, option, "%s: each mount needs a name and an absolute target%s", NULL);
    size_t dl = strlen(DL_DIR);
    if (strncmp(target->valuestring, DL_DIR, dl) == 0 && (target->valuestring[dl] == '\0' || target->valuestring[dl] == '/'))
      return fail_option(err, option, "%s: " DL_DIR " is sandstack-init's (the sandbox's PID 1): mount '%s' elsewhere",
                         name->valuestring);
    snprintf(field, sizeof field, "%s.read_only", option);
    if (opt_bool(mnt, "read_only", field, err)) return -1;
    int declared = 0;
    const cJSON *d;
    if (ss_is_list(decl)) {
      cJSON_ArrayForEach(d, decl) {
        const cJSON *dn = cJSON_GetObjectItemCaseSensitive(d, "name");
        if (cJSON_IsString(dn) && strcmp(dn->valuestring, name->valuestring) == 0) declared = 1;
      }
    }
    if (!declared)
      return fail_option(err, option, "%s mounts '%s', which `volumes` does not declare",
                         name->valuestring);
  }
  return 0;
}

static int check_service(const cJSON *opts, const cJSON *spec, ss_stack_model *m, ss_error *err) {
  if (!cJSON_IsObject(spec)) return ss_stack_fail_type(err, "services", "a list of service tables", spec);
  if (check_keys(spec, SERVICE_KEYS, "service", err)) return -1;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(spec, "name");
  if (name && !cJSON_IsString(name)) return ss_stack_fail_type(err, "services.name", "a string", name);
  if (!name) {
    ss_error_set(err, "compose", "invalid_name", "every service needs a `name` string");
    ss_error_field_str(err, "option", "services");
    return -1;
  }
  const char *sname = name->valuestring;
  if (!dns_safe(sname)) return bad_name(err, "services", sname);
  if (find_service(m, sname) >= 0 || strcmp(sname, m->forwarder_name) == 0) {
    ss_error_set(err, "compose", "duplicate_service", "service '%s' is defined twice%s", sname,
                 strcmp(sname, m->forwarder_name) == 0 ? " (it is the forwarder's name)" : "");
    ss_error_field_str(err, "service", sname);
    return -1;
  }
  if (m->nsvc >= SS_STACK_MAX_SERVICES - 1)
    return fail_option(err, "services", "%s: too many services%s", NULL);
  ss_svc *s = &m->svc[m->nsvc];
  memset(s, 0, sizeof *s);
  s->name = sname;
  s->spec = spec;
  s->is_sandbox = strcmp(sname, m->sandbox_name) == 0;
  char option[160];
  snprintf(option, sizeof option, "services.%s.image", sname);
  if (opt_string(spec, "image", option, &s->image, err)) return -1;
  const cJSON *egress = cJSON_GetObjectItemCaseSensitive(spec, "egress");
  snprintf(option, sizeof option, "services.%s.egress", sname);
  if (egress && !cJSON_IsString(egress)) return ss_stack_fail_type(err, option, "\"none\" or \"allow\"", egress);
  if (egress && !(strcmp(egress->valuestring, "none") == 0 || strcmp(egress->valuestring, "allow") == 0))
    return fail_option(err, option, "%s must be \"none\" or \"allow\"%s", NULL);
  s->egress_allow = egress && strcmp(egress->valuestring, "allow") == 0;
  if (s->is_sandbox && s->egress_allow) {
    ss_error_set(err, "compose", "sandbox_egress_forbidden",
                 "the sandbox service '%s' can never have egress = \"allow\"", sname);
    ss_error_field_str(err, "service", sname);
    return -1;
  }
  if (!s->is_sandbox && !egress) {
    ss_error_set(err, "compose", "egress_required",
                 "service '%s' must say egress = \"none\" or \"allow\": it is never inferred", sname);
    ss_error_field_str(err, "service", sname);
    return -1;
  }
  snprintf(option, sizeof option, "services.%s.entrypoint", sname);
  if (opt_argv(spec, "entrypoint", option, err)) return -1;
  snprintf(option, sizeof option, "services.%s.command", sname);
  if (opt_argv(spec, "command", option, err)) return -1;
  snprintf(option, sizeof option, "services.%s.env", sname);
  if (check_env(cJSON_GetObjectItemCaseSensitive(spec, "env"), option, err)) return -1;
  snprintf(option, sizeof option, "services.%s.user", sname);
  const char *user = NULL, *top_user = NULL;
  if (opt_string(spec, "user", option, &user, err)) return -1;
  opt_string(opts, "user", "user", &top_user, err);
  /* The stack-wide user is hardening: a service may not quietly run as someone else. */
  if (user && top_user && strcmp(user, top_user) != 0)
    return fail_option(err, option, "%s differs from the stack-wide `user` (%s)", top_user);
  const cJSON *deps = cJSON_GetObjectItemCaseSensitive(spec, "depends_on");
  snprintf(option, sizeof option, "services.%s.depends_on", sname);
  if (deps && !string_list(deps)) return ss_stack_fail_type(err, option, "a list of service names", deps);
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(spec, "port");
  snprintf(option, sizeof option, "services.%s.port", sname);
  if (port && !cJSON_IsNumber(port)) return ss_stack_fail_type(err, option, "a port number", port);
  if (port && !port_ok(port)) return fail_got(err, option, "%s must be a port number 1-65535%s", port);
  if (check_mounts(opts, spec, sname, err)) return -1;
  snprintf(option, sizeof option, "services.%s.hosts", sname);
  s->hosts = cJSON_GetObjectItemCaseSensitive(spec, "hosts");
  if (ss_stack_check_hosts(s->hosts, option, err)) return -1;
  m->nsvc++;
  return 0;
}

/* egress_policy without a proxy_service: sandstack adds the proxy (csrc/proxy, the image
 * `sandstack images` builds) as one more sidecar, with egress, and the sandbox starts after it.
 * The options that shape that proxy are refused anywhere else: they would be silently unused. */
static int add_proxy(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  static const char *const own[] = {"proxy_image", "proxy_hosts", "proxy_upstream", "proxy_upstream_ca",
                                    "credentials", NULL};
  int adds = cJSON_GetObjectItemCaseSensitive(opts, "egress_policy") &&
             !cJSON_GetObjectItemCaseSensitive(opts, "proxy_service");
  if (!adds) {
    for (int i = 0; own[i]; i++)
      if (cJSON_GetObjectItemCaseSensitive(opts, own[i]))
        return fail_option(err, own[i], "%s shapes the proxy sandstack adds for an egress_policy without a "
                           "proxy_service; %s", cJSON_GetObjectItemCaseSensitive(opts, "proxy_service")
                           ? "configure the proxy_service's own service instead" : "give an egress_policy");
    return 0;
  }
  /* without api_key the added proxy has no credential route: a plain allowlist */
  const cJSON *up = cJSON_GetObjectItemCaseSensitive(opts, "proxy_upstream");
  if (up && strncmp(up->valuestring, "http://", 7) != 0 && strncmp(up->valuestring, "https://", 8) != 0)
    return fail_option(err, "proxy_upstream", "%s must be an origin http(s)://host[:port]%s", NULL);
  const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(opts, "proxy_hosts");
  if (ss_stack_check_hosts(hosts, "proxy_hosts", err)) return -1;
  if (find_service(m, SS_PROXY_NAME) >= 0 || strcmp(m->forwarder_name, SS_PROXY_NAME) == 0) {
    ss_error_set(err, "compose", "duplicate_service",
                 "egress_policy adds a proxy service named '%s', and the stack already has one: "
                 "name your proxy with proxy_service, or rename the service", SS_PROXY_NAME);
    ss_error_field_str(err, "service", SS_PROXY_NAME);
    return -1;
  }
  if (m->nsvc >= SS_STACK_MAX_SERVICES)
    return fail_option(err, "services", "%s: too many services%s", NULL);
  ss_svc *s = &m->svc[m->nsvc];
  memset(s, 0, sizeof *s);
  s->name = SS_PROXY_NAME;
  const cJSON *img = cJSON_GetObjectItemCaseSensitive(opts, "proxy_image");
  s->image = img ? img->valuestring : SS_DEFAULT_PROXY_IMAGE;
  if (!s->image[0]) return fail_option(err, "proxy_image", "%s must name an image%s", NULL);
  s->egress_allow = 1;
  s->port = SS_PROXY_PORT;
  s->hosts = hosts;
  s->added = 1;
  m->proxy_idx = m->nsvc++;
  m->proxy_upstream = up ? up->valuestring : NULL;
  ss_svc *sb = &m->svc[m->sandbox_idx];
  sb->deps[sb->ndeps++] = m->proxy_idx; /* resolve_deps appends the spec's own after it */
  return 0;
}

/* Kahn's algorithm; leaves dependencies first in m->order, or reports the services on a cycle. */
static int order_services(ss_stack_model *m, ss_error *err) {
  int indeg[SS_STACK_MAX_SERVICES] = {0}, done[SS_STACK_MAX_SERVICES] = {0}, n = 0;
  for (int i = 0; i < m->nsvc; i++) indeg[i] = m->svc[i].ndeps;
  for (int progress = 1; progress;) {
    progress = 0;
    for (int i = 0; i < m->nsvc; i++) {
      if (done[i] || indeg[i] > 0) continue;
      done[i] = 1;
      m->order[n++] = i;
      progress = 1;
      for (int j = 0; j < m->nsvc; j++)
        for (int k = 0; k < m->svc[j].ndeps; k++)
          if (m->svc[j].deps[k] == i) indeg[j]--;
    }
  }
  if (n == m->nsvc) return 0;
  cJSON *names = cJSON_CreateArray();
  char list[512] = "";
  for (int i = 0; i < m->nsvc; i++) {
    if (done[i]) continue;
    cJSON_AddItemToArray(names, cJSON_CreateString(m->svc[i].name));
    if (strlen(list) + strlen(m->svc[i].name) + 3 < sizeof list) {
      if (list[0]) strcat(list, ", ");
      strcat(list, m->svc[i].name);
    }
  }
  ss_error_set(err, "compose", "dependency_cycle", "depends_on forms a cycle among: %s", list);
  ss_error_field_item(err, "services", names);
  return -1;
}

static int resolve_deps(ss_stack_model *m, ss_error *err) {
  for (int i = 0; i < m->nsvc; i++) {
    ss_svc *s = &m->svc[i];
    const cJSON *deps = s->spec ? cJSON_GetObjectItemCaseSensitive(s->spec, "depends_on") : NULL;
    const cJSON *d;
    if (!cJSON_IsArray(deps)) continue;
    cJSON_ArrayForEach(d, deps) {
      int j = find_service(m, d->valuestring);
      if (j < 0) {
        ss_error_set(err, "compose", "unknown_dependency",
                     "service '%s' depends on '%s', which is not a service of this stack", s->name,
                     d->valuestring);
        ss_error_field_str(err, "service", s->name);
        ss_error_field_str(err, "dependency", d->valuestring);
        return -1;
      }
      int dup = 0;
      for (int k = 0; k < s->ndeps; k++) dup |= s->deps[k] == j;
      if (!dup) s->deps[s->ndeps++] = j;
    }
  }
  return order_services(m, err);
}

/* A test the engine can never report healthy would only turn into a health timeout at start;
 * refused here with the reason instead. NULL when the test can run. */
static const char *never_healthy(const cJSON *test) {
  if (cJSON_IsString(test)) return test->valuestring[0] ? NULL : "the command is empty";
  const char *first = cJSON_GetArrayItem(test, 0)->valuestring;
  const cJSON *second = cJSON_GetArrayItem(test, 1);
  if (strcmp(first, "NONE") == 0) return "{\"NONE\"} disables the check";
  if (strcmp(first, "CMD") == 0 && (!second || !second->valuestring[0]))
    return "{\"CMD\"} names no program";
  if (strcmp(first, "CMD-SHELL") == 0 && (!second || !second->valuestring[0]))
    return "{\"CMD-SHELL\"} has no command";
  if (!first[0]) return "the program name is empty";
  return NULL;
}

/* Readiness sandstack waits for itself, beside a test (stack/readiness.lua): a text in the
 * service's log (`times` occurrences) and a TCP port that accepts a connection on the stack's
 * network. The log text is matched as plain bytes, never as a pattern. */
#define SS_READY_LOG_MAX 1024
#define SS_READY_TIMES_MAX 1000

static int check_ready_by_log_or_port(const cJSON *r, const char *option, ss_error *err) {
  const cJSON *log = cJSON_GetObjectItemCaseSensitive(r, "log");
  const cJSON *times = cJSON_GetObjectItemCaseSensitive(r, "times");
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(r, "port");
  char field[200];
  snprintf(field, sizeof field, "%s.log", option);
  if (log && !cJSON_IsString(log)) return ss_stack_fail_type(err, field, "a text", log);
  if (log && !(log->valuestring[0] && strlen(log->valuestring) <= SS_READY_LOG_MAX))
    return fail_option(err, field, "%s must be a text of 1 to 1024 bytes%s", NULL);
  snprintf(field, sizeof field, "%s.times", option);
  if (times && !cJSON_IsNumber(times)) return ss_stack_fail_type(err, field, "a whole number", times);
  if (times && !log) return fail_option(err, field, "%s counts the log text: give log too%s", NULL);
  if (times && !(times->valuedouble >= 1 && times->valuedouble <= SS_READY_TIMES_MAX &&
                 times->valuedouble == floor(times->valuedouble)))
    return fail_got(err, field, "%s must be a whole number 1-1000%s", times);
  snprintf(field, sizeof field, "%s.port", option);
  if (port && !cJSON_IsNumber(port)) return ss_stack_fail_type(err, field, "a port number", port);
  if (port && !port_ok(port)) return fail_got(err, field, "%s must be a number 1-65535%s", port);
  return 0;
}

static int check_ready(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  const cJSON *ready = cJSON_GetObjectItemCaseSensitive(opts, "ready");
  if (!ready) return 0;
  if (!cJSON_IsObject(ready))
    return ss_stack_fail_type(err, "ready", "a table keyed by service", ready);
  const cJSON *r;
  cJSON_ArrayForEach(r, ready) {
    char option[160];
    snprintf(option, sizeof option, "ready.%s", r->string);
    int i = find_service(m, r->string);
    if (i < 0) return fail_option(err, option, "%s: no such service%s", NULL);
    if (!cJSON_IsObject(r)) return ss_stack_fail_type(err, option, "a healthcheck table", r);
    if (check_keys(r, READY_KEYS, option, err)) return -1;
    if (check_ready_by_log_or_port(r, option, err)) return -1;
    const cJSON *test = cJSON_GetObjectItemCaseSensitive(r, "test");
    char field[200];
    if (!test && (cJSON_GetObjectItemCaseSensitive(r, "log") || cJSON_GetObjectItemCaseSensitive(r, "port"))) {
      static const char *const of_test[] = {"interval", "timeout", "retries", "start_period", NULL};
      for (int k = 0; of_test[k]; k++)
        if (cJSON_GetObjectItemCaseSensitive(r, of_test[k])) {
          snprintf(field, sizeof field, "%s.%s", option, of_test[k]);
          return fail_option(err, field, "%s: interval, timeout, retries and start_period belong to a test%s", NULL);
        }
      m->svc[i].ready = r;
      continue;
    }
    snprintf(field, sizeof field, "%s.test", option);
    if (test && !cJSON_IsString(test) && !string_list(test))
      return ss_stack_fail_type(err, field, "a command string or a list of strings", test);
    if (!test || !(cJSON_IsString(test) || ss_list_size(test) > 0))
      return fail_option(err, field, "%s must be a command string or a non-empty list (or give log or port)%s", NULL);
    const char *why = never_healthy(test);
    if (why) return fail_option(err, field, "%s can never report healthy: %s", why);
    static const char *const durations[] = {"interval", "timeout", "start_period", NULL};
    for (int k = 0; durations[k]; k++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, durations[k]);
      snprintf(field, sizeof field, "%s.%s", option, durations[k]);
      if (v && !cJSON_IsNumber(v)) return ss_stack_fail_type(err, field, "a number of seconds", v);
      /* the engine takes 0 (inherit) or at least 1 ms */
      if (v && !(v->valuedouble >= 0.001 && v->valuedouble < 1e6))
        return fail_option(err, field, "%s must be seconds between 0.001 and 1e6%s", NULL);
    }
    const cJSON *retries = cJSON_GetObjectItemCaseSensitive(r, "retries");
    snprintf(field, sizeof field, "%s.retries", option);
    if (retries && !cJSON_IsNumber(retries)) return ss_stack_fail_type(err, field, "a count", retries);
    if (retries && !(retries->valuedouble >= 0 &&
                     retries->valuedouble == floor(retries->valuedouble)))
      return fail_option(err, field, "%s must be a count%s", NULL);
    m->svc[i].ready = r;
  }
  return 0;
}

/* Validates the hardening options and records them in the model (plan.c reads only the model). */
#define SS_DEFAULT_PIDS_LIMIT 512
#define NS_PER_CPU 1e9

static int check_hardening(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  const cJSON *v;
  ss_hardening *h = &m->hard;
  if ((v = cJSON_GetObjectItemCaseSensitive(opts, "cpus")) && !cJSON_IsNumber(v))
    return ss_stack_fail_type(err, "cpus", "a number of CPUs", v);
  if (v && !(v->valuedouble > 0 && v->valuedouble < 1e6))
    return fail_option(err, "cpus", "%s must be a number of CPUs above zero%s", NULL);
  if ((v = cJSON_GetObjectItemCaseSensitive(opts, "memory")) && !cJSON_IsNumber(v) && !cJSON_IsString(v))
    return ss_stack_fail_type(err, "memory", "bytes or a size string like \"512m\"", v);
  if (v && ss_parse_size(v) < 4 * 1024 * 1024)
    return fail_option(err, "memory", "%s must be bytes or a size like \"512m\" (at least 4m)%s", NULL);
  /* false is the typed-out loosening of the default 512 (no limit) */
  if ((v = cJSON_GetObjectItemCaseSensitive(opts, "pids_limit")) && !cJSON_IsFalse(v) && !cJSON_IsNumber(v))
    return ss_stack_fail_type(err, "pids_limit", "a whole number or false", v);
  if (v && !cJSON_IsFalse(v) && !(v->valuedouble >= 1 && v->valuedouble <= 4194304 &&
        v->valuedouble == floor(v->valuedouble)))
    return fail_option(err, "pids_limit", "%s must be a positive integer, or false for no limit%s", NULL);
  static const char *const lists[] = {"cap_drop", "security_opt", NULL};
  for (int i = 0; lists[i]; i++)
    if ((v = cJSON_GetObjectItemCaseSensitive(opts, lists[i])) && !string_list(v))
      return ss_stack_fail_type(err, lists[i], "a list of strings", v);
  if (opt_bool(opts, "readonly_rootfs", "readonly_rootfs", err)) return -1;
  const char *user = NULL;
  if (opt_string(opts, "user", "user", &user, err)) return -1;
  if ((v = cJSON_GetObjectItemCaseSensitive(opts, "tmpfs"))) {
    if (!cJSON_IsArray(v) && !cJSON_IsObject(v))
      return ss_stack_fail_type(err, "tmpfs", "a list of paths or a table of paths to mount options", v);
    int ok = string_list(v);
    if (!ok && cJSON_IsObject(v)) {
      ok = 1;
      const cJSON *c;
      cJSON_ArrayForEach(c, v) ok &= cJSON_IsString(c) && c->string[0] == '/';
    }
    if (!ok) return fail_option(err, "tmpfs", "%s must list paths or map paths to mount options%s", NULL);
  }
  /* secure by default: an absent option is sandstack's default, never "the engine's" */
  h->nano_cpus = (v = cJSON_GetObjectItemCaseSensitive(opts, "cpus")) ? floor(v->valuedouble * NS_PER_CPU) : 0;
  h->memory = (v = cJSON_GetObjectItemCaseSensitive(opts, "memory")) ? ss_parse_size(v) : 0;
  v = cJSON_GetObjectItemCaseSensitive(opts, "pids_limit");
  h->pids_limit = !v ? SS_DEFAULT_PIDS_LIMIT : cJSON_IsNumber(v) ? v->valuedouble : 0;
  h->cap_drop = cJSON_GetObjectItemCaseSensitive(opts, "cap_drop");
  h->security_opt = cJSON_GetObjectItemCaseSensitive(opts, "security_opt");
  v = cJSON_GetObjectItemCaseSensitive(opts, "readonly_rootfs");
  h->readonly_rootfs = v ? cJSON_IsTrue(v) : -1;
  h->tmpfs = cJSON_GetObjectItemCaseSensitive(opts, "tmpfs");
  h->user = user;
  return 0;
}

/* The engine runtime every container of the stack runs under (hardening: no per-service
 * override). Only the name's shape is checked here; whether the engine has registered it is a
 * question for the engine's /info, asked before any create (sandstack.docker.runtime). The
 * charset is the engine's object-name rule, which covers "runc", "runsc" and
 * "io.containerd.runc.v2" and keeps paths, spaces and flags out. */
static int check_runtime(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(opts, "runtime");
  if (!v) return 0;
  if (!cJSON_IsString(v)) return ss_stack_fail_type(err, "runtime", "a string", v);
  if (!object_name_ok(v->valuestring, 64))
    return fail_option(err, "runtime",
                       "%s must be the name of a runtime registered with the engine, like "
                       "\"runsc\" (letters, digits, '_', '.', '-'; at most 64 characters)%s",
                       NULL);
  m->runtime = v->valuestring;
  return 0;
}

static int check_network(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  const cJSON *net = cJSON_GetObjectItemCaseSensitive(opts, "network");
  m->internal = 1;
  if (!net) return 0;
  if (!cJSON_IsObject(net)) return ss_stack_fail_type(err, "network", "a table", net);
  if (check_keys(net, NETWORK_KEYS, "network", err)) return -1;
  const cJSON *internal = cJSON_GetObjectItemCaseSensitive(net, "internal");
  /* internal = false throws away the module's point: only a literal boolean false counts */
  if (internal && !cJSON_IsBool(internal))
    return ss_stack_fail_type(err, "network.internal", "the boolean true or false", internal);
  if (internal) m->internal = cJSON_IsTrue(internal);
  const char *driver = NULL;
  if (opt_string(net, "driver", "network.driver", &driver, err)) return -1;
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(net, "options");
  if (o) {
    int ok = cJSON_IsObject(o);
    const cJSON *c;
    if (ok) cJSON_ArrayForEach(c, o) ok &= cJSON_IsString(c) && c->string != NULL;
    if (!ok) return ss_stack_fail_type(err, "network.options", "a table of names to strings", o);
  }
  return 0;
}

static int check_volumes(const cJSON *opts, ss_error *err) {
  const cJSON *vols = cJSON_GetObjectItemCaseSensitive(opts, "volumes");
  if (!vols) return 0;
  if (!ss_is_list(vols)) return ss_stack_fail_type(err, "volumes", "a list of {name = ...}", vols);
  const cJSON *v, *w;
  cJSON_ArrayForEach(v, vols) {
    if (!cJSON_IsObject(v)) return ss_stack_fail_type(err, "volumes", "a list of {name = ...}", v);
    if (check_keys(v, VOLUME_KEYS, "volumes", err)) return -1;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "name");
    if (n && !cJSON_IsString(n)) return ss_stack_fail_type(err, "volumes.name", "a string", n);
    if (!n) return fail_option(err, "volumes", "%s: each entry needs a name%s", NULL);
    if (!dns_safe(n->valuestring)) return bad_name(err, "volumes", n->valuestring);
    for (w = v->next; w; w = w->next) {
      const cJSON *wn = cJSON_GetObjectItemCaseSensitive(w, "name");
      if (cJSON_IsString(wn) && strcmp(wn->valuestring, n->valuestring) == 0)
        return fail_option(err, "volumes", "%s declares '%s' twice", n->valuestring);
    }
  }
  return 0;
}

/* A caller's own session token (spec 000 lists it among the secrets). It reaches the proxy's
 * environment and may be carried as URL userinfo, so it is held to RFC 3986's unreserved
 * characters; 32 characters at least (the minted one is 64 hex digits), 256 at most. It is the
 * proxy's token, so it needs a proxy: given without one it would be silently unused. */
#define SS_TOKEN_MIN 32
#define SS_TOKEN_MAX 256

static int check_session_token(const cJSON *opts, ss_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(opts, "session_token");
  if (!v) return 0;
  /* the message never quotes the value: it is a secret */
  if (!cJSON_IsString(v)) return ss_stack_fail_type(err, "session_token", "a string", v);
  size_t n = strlen(v->valuestring);
  int ok = n >= SS_TOKEN_MIN && n <= SS_TOKEN_MAX;
  for (size_t i = 0; ok && i < n; i++) {
    unsigned char c = (unsigned char)v->valuestring[i];
    ok = isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
  }
  if (!ok)
    return fail_option(err, "session_token",
                       "%s must be 32 to 256 characters of A-Z a-z 0-9 - . _ ~%s", NULL);
  if (!cJSON_GetObjectItemCaseSensitive(opts, "proxy_service") &&
      !cJSON_GetObjectItemCaseSensitive(opts, "egress_policy"))
    return fail_option(err, "session_token", "%s is the egress proxy's token: name one with proxy_service, "
                       "or give an egress_policy (sandstack then adds the proxy)%s", NULL);
  return 0;
}

static int check_scalars(const cJSON *opts, ss_error *err) {
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(opts, "agent_port");
  if (!port)
    return fail_option(err, "agent_port", "%s is required: the port the agent listens on (1-65535)%s", NULL);
  if (!cJSON_IsNumber(port)) return ss_stack_fail_type(err, "agent_port", "a port number", port);
  if (!port_ok(port)) return fail_got(err, "agent_port", "%s must be a number 1-65535%s", port);
  static const char *const strings[] = {"image", "capture_path", "docker_host",
                                        "sandbox_service", "forwarder_service", "forwarder_image",
                                        "project_name", "proxy_service", "api_key", "pull",
                                        "subnet_pool", "proxy_image", "proxy_upstream",
                                        "proxy_upstream_ca", NULL};
  const char *s = NULL;
  for (int i = 0; strings[i]; i++)
    if (opt_string(opts, strings[i], strings[i], &s, err)) return -1;
  if (opt_number(opts, "ready_timeout", 0.001, err) || opt_number(opts, "health_timeout", 0.001, err) ||
      opt_number(opts, "timeout", 0.001, err))
    return -1;
  /* false: no HTTP wait (an agent that is not HTTP; a ready.<sandbox>.port or .log instead) */
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(opts, "ready_path");
  if (v && !cJSON_IsFalse(v) && !cJSON_IsString(v))
    return ss_stack_fail_type(err, "ready_path", "a path starting with '/', or false", v);
  if (v && !cJSON_IsFalse(v) && v->valuestring[0] != '/')
    return fail_got(err, "ready_path", "%s must be a path starting with '/', or false%s", v);
  v = cJSON_GetObjectItemCaseSensitive(opts, "capture_path");
  if (v && v->valuestring[0] != '/') return fail_option(err, "capture_path", "%s must be absolute%s", NULL);
  v = cJSON_GetObjectItemCaseSensitive(opts, "pull");
  if (v && strcmp(v->valuestring, "missing") && strcmp(v->valuestring, "never") &&
      strcmp(v->valuestring, "always"))
    return fail_option(err, "pull", "%s must be \"missing\", \"never\" or \"always\"%s", NULL);
  v = cJSON_GetObjectItemCaseSensitive(opts, "subnet_pool");
  if (v) {
    char out[64];
    ss_error tmp;
    ss_error_init(&tmp);
    /* a pool must hold at least one /28 */
    if (ss_stack_pick_subnet(v->valuestring, 28, NULL, 0, 0, out, sizeof out, &tmp) != 0) {
      ss_error_clear(&tmp);
      return fail_option(err, "subnet_pool", "%s must be an IPv4 CIDR of /28 or larger, like \"10.213.0.0/16\"%s", NULL);
    }
  }
  if (check_session_token(opts, err)) return -1;
  /* the added proxy's tables: their types before whether they apply (add_proxy) */
  v = cJSON_GetObjectItemCaseSensitive(opts, "proxy_hosts");
  if (v && !cJSON_IsObject(v)) return ss_stack_fail_type(err, "proxy_hosts", "a table of host names to addresses", v);
  v = cJSON_GetObjectItemCaseSensitive(opts, "credentials");
  if (v && !ss_is_list(v)) return ss_stack_fail_type(err, "credentials", "a list of credential tables", v);
  v = cJSON_GetObjectItemCaseSensitive(opts, "egress_policy");
  if (v && !cJSON_IsObject(v)) return ss_stack_fail_type(err, "egress_policy", "a table", v);
  return 0;
}

int ss_stack_model_build(const cJSON *opts, const char *session_key, ss_stack_model *m,
                         ss_error *err) {
  memset(m, 0, sizeof *m);
  m->opts = opts;
  m->proxy_idx = -1;
  m->session_key = session_key;
  if (!cJSON_IsObject(opts)) {
    ss_error_set(err, "usage", "not_a_table", "options must be a table");
    return -1;
  }
  if (check_keys(opts, TOP_KEYS, "sandstack.docker.start", err)) return -1;
  if (!session_key || !object_name_ok(session_key, 200))
    return bad_object_name(err, "session_key", session_key ? session_key : "", 200);
  if (check_scalars(opts, err) || check_hardening(opts, m, err) || check_runtime(opts, m, err) ||
      check_network(opts, m, err) || check_volumes(opts, err))
    return -1;
  m->agent_port = (int)cJSON_GetObjectItemCaseSensitive(opts, "agent_port")->valuedouble;

  const cJSON *v = cJSON_GetObjectItemCaseSensitive(opts, "project_name");
  if (v) snprintf(m->project, sizeof m->project, "%s", v->valuestring);
  else snprintf(m->project, sizeof m->project, "sandstack-%s", session_key);
  /* 64 leaves room for "-<service>" within the engine's limits and keeps names readable */
  if (!object_name_ok(m->project, 64) || (v && strlen(v->valuestring) >= sizeof m->project))
    return bad_object_name(err, "project_name", v ? v->valuestring : m->project, 64);

  v = cJSON_GetObjectItemCaseSensitive(opts, "sandbox_service");
  m->sandbox_name = v ? v->valuestring : "sandbox";
  if (!dns_safe(m->sandbox_name)) return bad_name(err, "sandbox_service", m->sandbox_name);
  v = cJSON_GetObjectItemCaseSensitive(opts, "forwarder_service");
  m->forwarder_name = v ? v->valuestring : "forwarder";
  if (!dns_safe(m->forwarder_name)) return bad_name(err, "forwarder_service", m->forwarder_name);
  if (strcmp(m->forwarder_name, m->sandbox_name) == 0) {
    ss_error_set(err, "compose", "duplicate_service", "the sandbox and the forwarder are both named '%s'",
                 m->sandbox_name);
    ss_error_field_str(err, "service", m->sandbox_name);
    return -1;
  }
  v = cJSON_GetObjectItemCaseSensitive(opts, "forwarder_image");
  m->forwarder_image = v ? v->valuestring : SS_DEFAULT_FORWARDER_IMAGE;

  const cJSON *services = cJSON_GetObjectItemCaseSensitive(opts, "services");
  if (services && !ss_is_list(services)) return ss_stack_fail_type(err, "services", "a list of service tables", services);
  const cJSON *spec;
  if (cJSON_IsArray(services))
    cJSON_ArrayForEach(spec, services) if (check_service(opts, spec, m, err)) return -1;

  m->sandbox_idx = find_service(m, m->sandbox_name);
  if (m->sandbox_idx < 0) { /* synthesised from `image` */
    ss_svc *s = &m->svc[m->nsvc];
    memset(s, 0, sizeof *s);
    s->name = m->sandbox_name;
    s->is_sandbox = 1;
    m->sandbox_idx = m->nsvc++;
  }
  ss_svc *sb = &m->svc[m->sandbox_idx];
  if (!sb->image) {
    v = cJSON_GetObjectItemCaseSensitive(opts, "image");
    sb->image = v ? v->valuestring : NULL;
  }
  for (int i = 0; i < m->nsvc; i++) {
    if (m->svc[i].image && m->svc[i].image[0]) continue;
    ss_error_set(err, "compose", "missing_image",
                 "service '%s' has no image%s", m->svc[i].name,
                 m->svc[i].is_sandbox ? ": give `image` or an image in its service spec" : "");
    ss_error_field_str(err, "service", m->svc[i].name);
    return -1;
  }
  if (add_proxy(opts, m, err) || resolve_deps(m, err) || check_ready(opts, m, err)) return -1;

  v = cJSON_GetObjectItemCaseSensitive(opts, "proxy_service");
  if (v) {
    int p = find_service(m, v->valuestring);
    if (p < 0 || m->svc[p].is_sandbox) {
      ss_error_set(err, "compose", "unknown_proxy_service",
                   "proxy_service '%s' is not a sidecar of this stack", v->valuestring);
      ss_error_field_str(err, "service", v->valuestring);
      return -1;
    }
    if (!m->svc[p].egress_allow) {
      ss_error_set(err, "compose", "proxy_needs_egress",
                   "the proxy '%s' must declare egress = \"allow\" to reach its upstream", v->valuestring);
      ss_error_field_str(err, "service", v->valuestring);
      return -1;
    }
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(m->svc[p].spec, "port");
    if (!port) {
      char option[160];
      snprintf(option, sizeof option, "services.%s.port", v->valuestring);
      return fail_option(err, option, "%s is required for the proxy_service: the sandbox's ANTHROPIC_BASE_URL points at it%s", NULL);
    }
    m->svc[p].port = (int)port->valuedouble;
    m->proxy_idx = p;
  }
  if (ss_stack_check_credentials(opts, m, err) || ss_stack_check_ports(opts, m, err) ||
      ss_stack_mint_placeholders(m, err))
    return -1;
  return ss_stack_check_inspection(opts, m, err);
}

int ss_stack_validate(const cJSON *opts, const char *session_key, ss_error *err) {
  ss_stack_model *m = calloc(1, sizeof *m);
  if (!m) {
    ss_error_set(err, "usage", "oom", "out of memory");
    return -1;
  }
  int rc = ss_stack_model_build(opts, session_key, m, err);
  free(m);
  return rc;
}
