/* Credentials for any host, the stack's part: the `credentials` option checked, each
 * credential's placeholder minted, and the two places it goes in the plan. The sandbox gets
 * NAME=<placeholder>; only the added proxy gets the secret, in SANDSTACK_CREDENTIALS (the JSON
 * of docs/proxy.md), and puts it in the named place on a request it inspected and admitted for
 * the credential's host. No message here ever quotes a secret. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "stack/model.h"
#include "stack/options.h"
#include "util/keys.h"
#include "util/random.h"

static const char *const CRED_KEYS[] = {SS_OPTIONS_CREDENTIAL(SS_OPTION_NAME) NULL};
static const char *const PLACEMENTS[] = {"header", "query", "basic", "path", NULL};

const char *const *ss_stack_credential_keys(void) { return CRED_KEYS; }
/* The variables sandstack itself sets in the sandbox: a credential of the same name would be
 * replaced by sandstack's value, or replace it. */
static const char *const RESERVED_NAMES[] = {"AGENT_PORT", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
                                             "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", NULL};
#define RESERVED_PREFIX "SANDSTACK_"
#define NAME_MAX_LEN 128
#define PLACEMENT_MAX_LEN 256
#define DEFAULT_PORT 443
/* SANDSTACK_CREDENTIALS is one environment string, and the kernel caps each at 128 KiB
 * (MAX_ARG_STRLEN): past it the proxy could not even be exec'd. Counted at its worst: a secret
 * of quotes and backslashes doubles when escaped, its placeholder adds its length again, and
 * each entry's keys and quoting stay under 128 bytes. */
#define CREDENTIALS_ENV_MAX (120 * 1024)
#define ENTRY_OVERHEAD 128

static const char ALNUM[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/* invalid_option naming credentials[i].field; detail is never a secret. */
static int refuse(ss_error *err, int i, const char *field, const char *fmt, const char *detail) {
  char option[64];
  if (field) snprintf(option, sizeof option, "credentials[%d].%s", i, field);
  else snprintf(option, sizeof option, "credentials[%d]", i);
  ss_error_set(err, "compose", "invalid_option", fmt, option, detail ? detail : "");
  ss_error_field_str(err, "option", option);
  return -1;
}

static int env_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > NAME_MAX_LEN || isdigit((unsigned char)s[0])) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(isupper((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '_')) return 0;
  return 1;
}

static int reserved_name(const char *s) {
  if (strncmp(s, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0) return 1;
  for (int i = 0; RESERVED_NAMES[i]; i++)
    if (strcmp(s, RESERVED_NAMES[i]) == 0) return 1;
  for (int i = 0; SS_CA_BUNDLE_VARS[i]; i++)
    if (strcmp(s, SS_CA_BUNDLE_VARS[i]) == 0) return 1;
  return 0;
}

/* RFC 9110 token characters: a header name. */
static int tchar(unsigned char c) { return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c)); }
static int unreserved(unsigned char c) { return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~'; }
static int visible(unsigned char c) { return c >= 0x21 && c <= 0x7e; }

/* Exactly one "%s" and no other '%' (the proxy formats nothing else). */
static int one_slot(const char *s) {
  const char *at = strchr(s, '%');
  return at && at[1] == 's' && strchr(at + 2, '%') == NULL;
}

/* Why a placement's value cannot be used, or NULL. */
static const char *placement_problem(const char *placement, const char *v) {
  size_t n = strlen(v);
  if (n == 0 || n > PLACEMENT_MAX_LEN) return "must be 1 to 256 characters";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)v[i];
    if (strcmp(placement, "header") == 0 && !tchar(c)) return "must be a header name (RFC 9110 token characters)";
    if (strcmp(placement, "query") == 0 && !unreserved(c)) return "must be a parameter name of A-Z a-z 0-9 - . _ ~";
    if (strcmp(placement, "basic") == 0 && (!visible(c) || c == ':'))
      return "must be a user name of visible ASCII without ':'";
    if (strcmp(placement, "path") == 0 && (!visible(c) || c == '?' || c == '#'))
      return "must be a path of visible ASCII without '?' or '#'";
  }
  if (strcmp(placement, "path") == 0 && (v[0] != '/' || !one_slot(v)))
    return "must start with '/' and hold exactly one %s where the secret goes (like \"/bot%s/\")";
  if (strcmp(placement, "header") == 0 && (strcasecmp(v, "host") == 0 || strcasecmp(v, "content-length") == 0 ||
                                            strcasecmp(v, "transfer-encoding") == 0 || strcasecmp(v, "proxy-authorization") == 0))
    return "names a header that frames or routes the request, never a credential's place";
  return NULL;
}

/* A value of the wrong type for credentials[i].field: raised by the binding (ss_stack_fail_type). */
static int wrong_type(ss_error *err, int i, const char *field, const char *wanted, const cJSON *v) {
  char option[64];
  snprintf(option, sizeof option, "credentials[%d].%s", i, field);
  return ss_stack_fail_type(err, option, wanted, v);
}

/* The string member key, or NULL when absent; *bad is set when it is there but not a string. */
static const cJSON *string_member(const cJSON *o, const char *key, const cJSON **bad) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (v && !cJSON_IsString(v)) *bad = v;
  return cJSON_IsString(v) ? v : NULL;
}

static int check_placement(const cJSON *c, int i, ss_cred *cr, ss_error *err) {
  int found = 0;
  for (int k = 0; PLACEMENTS[k]; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, PLACEMENTS[k]);
    if (!v) continue;
    if (!cJSON_IsString(v)) return wrong_type(err, i, PLACEMENTS[k], "a string", v);
    if (found++) return refuse(err, i, NULL, "%s: give exactly one of header, query, basic and path%s", NULL);
    const char *why = placement_problem(PLACEMENTS[k], v->valuestring);
    if (why) return refuse(err, i, PLACEMENTS[k], "%s %s", why);
    cr->placement = PLACEMENTS[k];
    cr->where = v->valuestring;
  }
  if (!found) return refuse(err, i, NULL, "%s needs one of header, query, basic or path: where the secret goes%s", NULL);
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "format");
  if (!f) return 0;
  if (!cJSON_IsString(f)) return wrong_type(err, i, "format", "a string", f);
  if (strcmp(cr->placement, "header") != 0)
    return refuse(err, i, "format", "%s goes with header only%s", NULL);
  size_t n = strlen(f->valuestring);
  int ok = n > 0 && n <= PLACEMENT_MAX_LEN && one_slot(f->valuestring);
  for (size_t k = 0; ok && k < n; k++) ok = f->valuestring[k] == ' ' || visible((unsigned char)f->valuestring[k]);
  if (!ok) return refuse(err, i, "format", "%s must be printable text with exactly one %%s (like \"Bearer %%s\")%s", NULL);
  cr->format = f->valuestring;
  return 0;
}

static int check_host(const cJSON *c, int i, ss_cred *cr, ss_error *err) {
  const cJSON *bad = NULL, *h = string_member(c, "host", &bad);
  if (bad) return wrong_type(err, i, "host", "a string", bad);
  if (!h) return refuse(err, i, "host", "%s is required: the one host this credential is for%s", NULL);
  size_t n = strlen(h->valuestring);
  if (n > 0 && h->valuestring[n - 1] == '.') n--; /* "api.github.com." is the same host */
  const char *why = NULL;
  if (n == 0 || n > SS_HOST_MAX || ss_host_normalize(h->valuestring, n, cr->host, &why) != 0)
    return refuse(err, i, "host", "%s must be one host name or IPv4 address, no wildcard: %s",
                  why ? why : "it is empty or too long");
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(c, "port");
  cr->port = DEFAULT_PORT;
  if (p) {
    if (!cJSON_IsNumber(p)) return wrong_type(err, i, "port", "a port number", p);
    /* the range first: a double outside int's range may not be cast */
    if ( !(p->valuedouble >= 1 && p->valuedouble <= 65535) || p->valuedouble != floor(p->valuedouble))
      return refuse(err, i, "port", "%s must be a port number (1-65535)%s", NULL);
    cr->port = (int)p->valuedouble;
  }
  return 0;
}

static int check_secret(const cJSON *c, int i, ss_cred *cr, ss_error *err) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "secret");
  if (s && !cJSON_IsString(s)) return wrong_type(err, i, "secret", "a string", s);
  if (!s) return refuse(err, i, "secret", "%s is required and must be a string%s", NULL);
  size_t n = strlen(s->valuestring);
  int ok = n >= SS_CRED_SECRET_MIN && n <= SS_CRED_SECRET_MAX;
  for (size_t k = 0; ok && k < n; k++) ok = visible((unsigned char)s->valuestring[k]);
  if (!ok) return refuse(err, i, "secret", "%s must be 16 to 4096 characters of visible ASCII (no spaces)%s", NULL);
  cr->secret = s->valuestring;
  return 0;
}

static int check_name(const cJSON *c, int i, const ss_stack_model *m, ss_cred *cr, ss_error *err) {
  const cJSON *bad = NULL, *v = string_member(c, "name", &bad);
  if (bad) return wrong_type(err, i, "name", "a string", bad);
  if (!v || !env_name_ok(v->valuestring))
    return refuse(err, i, "name", "%s must be an environment variable name ([A-Z_][A-Z0-9_]*, at most 128)%s", NULL);
  if (reserved_name(v->valuestring))
    return refuse(err, i, "name", "%s: '%s' is a variable sandstack sets in the sandbox itself", v->valuestring);
  for (int k = 0; k < m->ncreds; k++)
    if (strcmp(m->creds[k].name, v->valuestring) == 0)
      return refuse(err, i, "name", "%s: '%s' names two credentials", v->valuestring);
  cr->name = v->valuestring;
  return 0;
}

/* Whether some rule of the policy admits a request to host:port (any method and path). */
static int admitted(const ss_policy *p, const ss_cred *cr) {
  for (int r = 0; r < p->n; r++)
    if ((p->rules[r].port == 0 || p->rules[r].port == cr->port) && ss_host_covered(&p->rules[r], cr->host)) return 1;
  return 0;
}

static int check_against_policy(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  ss_policy *p = ss_stack_compile_policy(opts, err);
  if (!p) return -1;
  int rc = 0;
  if (p->no_inspect) {
    ss_error_set(err, "compose", "invalid_option",
                 "credentials: the proxy puts a secret into a request it has inspected, and the egress_policy "
                 "says inspect = false; remove one or the other");
    ss_error_field_str(err, "option", "credentials");
    rc = -1;
  }
  /* under ask = true a host no rule names may still be admitted, by the host's answer to an ask */
  for (int i = 0; rc == 0 && !p->ask && i < m->ncreds; i++) {
    if (admitted(p, &m->creds[i])) continue;
    char detail[SS_HOST_MAX + 16];
    snprintf(detail, sizeof detail, "%s:%d", m->creds[i].host, m->creds[i].port);
    rc = refuse(err, i + 1, "host", "%s: the egress_policy admits no request to %s, so the credential could "
                "never be used; allow the host or drop the credential", detail);
  }
  ss_policy_free(p);
  return rc;
}

int ss_stack_check_credentials(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(opts, "credentials");
  if (!list) return 0;
  if (!ss_is_list(list)) return ss_stack_fail_type(err, "credentials", "a list of credential tables", list);
  if (ss_list_size(list) > SS_STACK_MAX_CREDENTIALS) {
    ss_error_set(err, "compose", "invalid_option", "credentials must be a list of at most %d credential tables",
                 SS_STACK_MAX_CREDENTIALS);
    ss_error_field_str(err, "option", "credentials");
    return -1;
  }
  int i = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, list) {
    i++;
    if (!cJSON_IsObject(c)) return ss_stack_fail_type(err, "credentials", "a list of credential tables", c);
    char what[32];
    snprintf(what, sizeof what, "credentials[%d]", i);
    for (const cJSON *k = c->child; k; k = k->next) {
      if (!ss_key_allowed(CRED_KEYS, k->string)) {
        char hint[SS_KEY_MAX + 32];
        ss_key_hint(CRED_KEYS, k->string, hint, sizeof hint);
        ss_error_set(err, "usage", "unknown_option", SS_UNKNOWN_OPTION_FMT, what, k->string, hint);
        ss_error_field_str(err, "option", k->string);
        return -1;
      }
    }
    ss_cred *cr = &m->creds[m->ncreds];
    memset(cr, 0, sizeof *cr);
    if (check_name(c, i, m, cr, err) || check_host(c, i, cr, err) || check_placement(c, i, cr, err) ||
        check_secret(c, i, cr, err))
      return -1;
    m->ncreds++;
  }
  size_t total = 0;
  for (int k = 0; k < m->ncreds; k++) {
    const ss_cred *cr = &m->creds[k];
    total += 3 * strlen(cr->secret) + strlen(cr->name) + strlen(cr->host) + strlen(cr->where) +
             (cr->format ? strlen(cr->format) : 0) + ENTRY_OVERHEAD;
  }
  if (total > CREDENTIALS_ENV_MAX) {
    ss_error_set(err, "compose", "invalid_option",
                 "credentials: together they are too large for the proxy's environment (one variable holds at "
                 "most 128 KiB, and each secret counts about three times its length); use fewer or shorter secrets");
    ss_error_field_str(err, "option", "credentials");
    return -1;
  }
  return check_against_policy(opts, m, err);
}

/* A placeholder of the secret's length over [A-Za-z0-9]: a byte under 248 (4 x 62) picks a
 * character without bias. It must differ from every secret and every other placeholder, or one
 * could stand for the other. */
static int mint_one(char *out, size_t len) {
  unsigned char raw[256];
  size_t have = 0;
  while (have < len) {
    if (ss_random_bytes(raw, sizeof raw) != 0) return -1;
    for (size_t k = 0; k < sizeof raw && have < len; k++)
      if (raw[k] < 248) out[have++] = ALNUM[raw[k] % 62];
  }
  out[len] = '\0';
  return 0;
}

static int clashes(const ss_stack_model *m, int upto, const char *ph) {
  for (int k = 0; k < m->ncreds; k++)
    if (strcmp(m->creds[k].secret, ph) == 0 || (k < upto && strcmp(m->creds[k].placeholder, ph) == 0)) return 1;
  return 0;
}

int ss_stack_mint_placeholders(ss_stack_model *m, ss_error *err) {
  for (int i = 0; i < m->ncreds; i++) {
    ss_cred *cr = &m->creds[i];
    do {
      if (mint_one(cr->placeholder, strlen(cr->secret)) != 0) {
        ss_random_error(err, errno, "a credential's placeholder");
        return -1;
      }
    } while (clashes(m, i, cr->placeholder));
  }
  return 0;
}

/* One credential as the proxy reads it (secret given) or as a plan and a record show it
 * (secret NULL: the member is left out). */
cJSON *ss_stack_credential_json(const ss_cred *cr, const char *secret) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", cr->name);
  cJSON_AddStringToObject(o, "host", cr->host);
  cJSON_AddNumberToObject(o, "port", cr->port);
  cJSON_AddStringToObject(o, cr->placement, cr->where);
  if (cr->format) cJSON_AddStringToObject(o, "format", cr->format);
  cJSON_AddStringToObject(o, "placeholder", cr->placeholder);
  if (secret) cJSON_AddStringToObject(o, "secret", secret);
  return o;
}
