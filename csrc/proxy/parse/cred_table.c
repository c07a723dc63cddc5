/* Credentials for any host: the table, placing secrets and finding misplaced placeholders in a
 * head (see credentials.h; the streams are credentials_stream.c). */
#include "proxy/parse/cred_table.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "policy/policy.h"
#include "proxy/parse/auth.h"
#include "proxy/parse/why.h"
#include "util/base64.h"
#include "util/buf.h"
#include "util/url.h"

/* ---- the table ---- */

void creds_entry_free(cred_entry *e) {
  if (e->secret) memset(e->secret, 0, e->secret_len);
  free(e->name);
  free(e->host);
  free(e->field);
  free(e->format);
  free(e->secret);
  free(e->placeholder);
  free(e->mask);
  for (int f = 0; f < CREDS_FORMS; f++) {
    if (e->form[f]) memset(e->form[f], 0, e->form_len[f]);
    free(e->form[f]);
    free(e->form_mask[f]);
  }
}

void creds_free(proxy_creds *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) creds_entry_free(&t->e[i]);
  free(t->e);
  free(t);
}

static int all_in(const char *s, int (*ok)(unsigned char)) {
  for (; *s; s++)
    if (!ok((unsigned char)*s)) return 0;
  return 1;
}
static int visible(unsigned char c) { return c >= 0x21 && c <= 0x7e; }
static int alnum(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }
static int name_char(unsigned char c) { return alnum(c) || c == '_'; }
static int token_char(unsigned char c) { return alnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c)); }
static int value_char(unsigned char c) { return visible(c) || c == ' '; }
static int user_char(unsigned char c) { return visible(c) && c != ':'; }
static int path_char(unsigned char c) { return visible(c) && c != '?' && c != '#'; }

/* A template with exactly one "%s" and no other '%'. */
static int one_slot(const char *f) {
  const char *p = strchr(f, '%');
  return p && p[1] == 's' && !strchr(p + 2, '%');
}

/* The JSON string member key of o, or NULL; *present says whether the key exists at all. */
static const char *member(const cJSON *o, const char *key, int *present) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (present) *present = v != NULL;
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_place(cred_entry *e, const cJSON *o, size_t i, char *why, size_t n) {
  static const char *const keys[] = {"header", "query", "basic", "path"};
  int found = -1, present;
  for (int k = 0; k < 4; k++) {
    member(o, keys[k], &present);
    if (!present) continue;
    if (found >= 0) return why_fail(why, n, "credential %zu (%s) names two placements; give one of header, query, basic, path", i, e->name);
    found = k;
  }
  if (found < 0) return why_fail(why, n, "credential %zu (%s) needs one of header, query, basic, path", i, e->name);
  const char *v = member(o, keys[found], NULL), *fmt = member(o, "format", &present);
  if (!v || !*v || strlen(v) > 256) return why_fail(why, n, "credential %zu (%s): %s must be a string of 1 to 256 characters", i, e->name, keys[found]);
  if (present && found != 0) return why_fail(why, n, "credential %zu (%s): format goes with header only", i, e->name);
  e->place = (cred_place)found;
  switch (e->place) {
  case CRED_HEADER:
    if (!all_in(v, token_char)) return why_fail(why, n, "credential %zu (%s): header is not a field name", i, e->name);
    if (present && (!fmt || strlen(fmt) > 1024 || !all_in(fmt, value_char) || !one_slot(fmt)))
      return why_fail(why, n, "credential %zu (%s): format must be printable text with exactly one %%s and no other %%", i, e->name);
    e->format = strdup(present ? fmt : "%s");
    e->field = strdup(v);
    break;
  case CRED_QUERY:
    if (!all_in(v, ss_url_unreserved)) return why_fail(why, n, "credential %zu (%s): query must be a parameter name (A-Z a-z 0-9 - . _ ~)", i, e->name);
    e->field = strdup(v);
    break;
  case CRED_BASIC:
    if (!all_in(v, user_char)) return why_fail(why, n, "credential %zu (%s): basic must be a user name (visible ASCII, no ':')", i, e->name);
    e->field = strdup(v);
    break;
  case CRED_PATH:
    if (v[0] != '/' || !all_in(v, path_char) || !one_slot(v))
      return why_fail(why, n, "credential %zu (%s): path must start with '/' and hold exactly one %%s (no other %%, '?' or '#')", i, e->name);
    e->format = strdup(v);
    break;
  }
  if ((e->place != CRED_PATH && !e->field) || ((e->place == CRED_HEADER || e->place == CRED_PATH) && !e->format))
    return why_fail(why, n, "out of memory");
  return 0;
}

static int make_forms(cred_entry *e);

static int parse_entry(cred_entry *e, const cJSON *o, size_t i, char *why, size_t n) {
  static const char *const known[] = {"name", "host", "port", "secret", "placeholder", "header", "format", "query", "basic", "path"};
  if (!cJSON_IsObject(o)) return why_fail(why, n, "credential %zu is not an object", i);
  for (const cJSON *k = o->child; k; k = k->next) {
    size_t j = 0;
    while (j < sizeof known / sizeof known[0] && strcmp(k->string, known[j]) != 0) j++;
    if (j == sizeof known / sizeof known[0]) return why_fail(why, n, "credential %zu has an unknown key (%.40s)", i, k->string);
  }
  const char *name = member(o, "name", NULL), *host = member(o, "host", NULL);
  if (!name || !*name || strlen(name) > 64 || !all_in(name, name_char) || (name[0] >= '0' && name[0] <= '9'))
    return why_fail(why, n, "credential %zu: name must be an environment variable name (A-Z a-z 0-9 _, at most 64)", i);
  if (!(e->name = strdup(name))) return why_fail(why, n, "out of memory");
  char canon[SS_HOST_MAX + 1];
  const char *w = NULL;
  if (!host || ss_host_normalize(host, strlen(host), canon, &w) != 0)
    return why_fail(why, n, "credential %zu (%s): host is not a host name (%s)", i, name, w ? w : "missing");
  if (!(e->host = strdup(canon))) return why_fail(why, n, "out of memory");
  const cJSON *port = cJSON_GetObjectItemCaseSensitive(o, "port");
  e->port = 443;
  if (port) {
    if (!cJSON_IsNumber(port) || port->valuedouble != (double)(int)port->valuedouble || port->valueint < 1 || port->valueint > 65535)
      return why_fail(why, n, "credential %zu (%s): port must be a whole number from 1 to 65535", i, name);
    e->port = port->valueint;
  }
  const char *secret = member(o, "secret", NULL), *ph = member(o, "placeholder", NULL);
  size_t sl = secret ? strlen(secret) : 0;
  if (!secret || sl < CREDS_SECRET_MIN || sl > CREDS_SECRET_MAX || !all_in(secret, visible))
    return why_fail(why, n, "credential %zu (%s): secret must be %d to %d characters of visible ASCII", i, name, CREDS_SECRET_MIN,
                CREDS_SECRET_MAX);
  if (!ph || strlen(ph) != sl || !all_in(ph, alnum))
    return why_fail(why, n, "credential %zu (%s): placeholder must be letters and digits, as long as its secret", i, name);
  if (strcmp(ph, secret) == 0) return why_fail(why, n, "credential %zu (%s): the placeholder must not be the secret", i, name);
  e->secret = strdup(secret);
  e->placeholder = strdup(ph);
  e->mask = strdup(ph);
  e->secret_len = e->placeholder_len = sl;
  if (!e->secret || !e->placeholder || !e->mask) return why_fail(why, n, "out of memory");
  if (parse_place(e, o, i, why, n) != 0) return -1;
  return make_forms(e) == 0 ? 0 : why_fail(why, n, "out of memory");
}

/* No two credentials share a name or a placeholder, and no secret holds a placeholder (its
 * substitution would read as a misplaced one) or another secret's placeholder. */
static int check_distinct(const proxy_creds *t, char *why, size_t n) {
  for (size_t i = 0; i < t->n; i++)
    for (size_t j = 0; j < t->n; j++) {
      const cred_entry *a = &t->e[i], *b = &t->e[j];
      if (i < j && strcmp(a->name, b->name) == 0) return why_fail(why, n, "two credentials are named %s", a->name);
      if (i < j && strcmp(a->placeholder, b->placeholder) == 0)
        return why_fail(why, n, "credentials %s and %s share a placeholder", a->name, b->name);
      if (strstr(a->secret, b->placeholder)) return why_fail(why, n, "the secret of %s holds the placeholder of %s", a->name, b->name);
    }
  return 0;
}

proxy_creds *creds_parse(const char *json, size_t len, char *why, size_t why_len) {
  proxy_creds *t = calloc(1, sizeof *t);
  if (!t) return why_fail(why, why_len, "out of memory"), NULL;
  if (len == 0) return t;
  cJSON *root = cJSON_ParseWithLength(json, len);
  int rc = -1;
  if (!cJSON_IsArray(root)) {
    why_fail(why, why_len, "SANDSTACK_CREDENTIALS must be a JSON array of credentials");
  } else if (cJSON_GetArraySize(root) > CREDS_MAX) {
    why_fail(why, why_len, "at most %d credentials", CREDS_MAX);
  } else if (!(t->e = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof *t->e))) {
    why_fail(why, why_len, "out of memory");
  } else {
    rc = 0;
    for (const cJSON *o = root->child; o && rc == 0; o = o->next) rc = parse_entry(&t->e[t->n], o, t->n, why, why_len), t->n++;
    if (rc == 0) rc = check_distinct(t, why, why_len);
  }
  cJSON_Delete(root);
  if (rc != 0) {
    creds_free(t);
    return NULL;
  }
  return t;
}

int creds_add_legacy(proxy_creds *t, const char *host, int port, const char *secret, const char *placeholder) {
  cred_entry *ne = realloc(t->e, (t->n + 1) * sizeof *t->e);
  if (!ne) return -1;
  t->e = ne;
  cred_entry *e = &t->e[t->n];
  memset(e, 0, sizeof *e);
  e->legacy = 1;
  e->port = port;
  e->secret_len = strlen(secret);
  e->placeholder_len = strlen(placeholder);
  e->name = strdup("ANTHROPIC_API_KEY");
  e->host = strdup(host);
  e->secret = strdup(secret);
  e->placeholder = strdup(placeholder);
  e->mask = malloc(e->secret_len + 1);
  t->n++; /* counted now, so creds_free frees what was made */
  if (!e->name || !e->host || !e->secret || !e->placeholder || !e->mask) return -1;
  if (e->secret_len == e->placeholder_len) memcpy(e->mask, placeholder, e->secret_len);
  else memset(e->mask, '*', e->secret_len);
  e->mask[e->secret_len] = '\0';
  return 0;
}

const char *creds_model_key(const proxy_creds *t) {
  for (size_t i = 0; t && i < t->n; i++)
    if (t->e[i].legacy) return t->e[i].secret;
  return NULL;
}

static void scrub_free(char *s) {
  if (s) memset(s, 0, strlen(s));
  free(s);
}

static int model_key_ok(const char *key, char *why, size_t n) {
  size_t kl = strlen(key);
  if (kl < CREDS_SECRET_MIN || kl > CREDS_SECRET_MAX || !all_in(key, visible))
    return why_fail(why, n, "ANTHROPIC_API_KEY: the model key must be %d to %d characters of visible ASCII", CREDS_SECRET_MIN,
                CREDS_SECRET_MAX);
  return 0;
}

int creds_set_model_key(proxy_creds *t, const char *key, char *why, size_t why_len) {
  if (model_key_ok(key, why, why_len) != 0) return -1;
  cred_entry *e = NULL;
  for (size_t i = 0; t && i < t->n && !e; i++)
    if (t->e[i].legacy) e = &t->e[i];
  if (!e) return why_fail(why, why_len, "this proxy has no credential route");
  size_t kl = strlen(key);
  char *secret = strdup(key), *mask = malloc(kl + 1);
  if (!secret || !mask) {
    scrub_free(secret);
    free(mask);
    return why_fail(why, why_len, "out of memory");
  }
  if (kl == e->placeholder_len) memcpy(mask, e->placeholder, kl);
  else memset(mask, '*', kl);
  mask[kl] = '\0';
  memset(e->secret, 0, e->secret_len);
  free(e->secret);
  free(e->mask);
  e->secret = secret;
  e->mask = mask;
  e->secret_len = kl;
  return 0;
}

/* Takes the model key's entry out of the array: 0 (with *key set, or NULL when there is none),
 * or -1 with why. */
static int take_model_key(cJSON *root, char **key, char *why, size_t n) {
  cJSON *found = NULL;
  for (cJSON *o = root->child; o; o = o->next) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, "ANTHROPIC_API_KEY") != 0) continue;
    if (found) return why_fail(why, n, "ANTHROPIC_API_KEY (the model key) is given twice");
    found = o;
  }
  if (!found) return 0;
  const cJSON *secret = cJSON_GetObjectItemCaseSensitive(found, "secret");
  if (cJSON_GetArraySize(found) != 2 || !cJSON_IsString(secret))
    return why_fail(why, n, "ANTHROPIC_API_KEY is the credential route's model key: its entry holds name and secret only "
                        "(its host is the upstream's, its placeholder the session token)");
  if (model_key_ok(secret->valuestring, why, n) != 0) return -1;
  if (!(*key = strdup(secret->valuestring))) return why_fail(why, n, "out of memory");
  memset(secret->valuestring, 0, strlen(*key));
  cJSON_Delete(cJSON_DetachItemViaPointer(root, found));
  return 0;
}

proxy_creds *creds_parse_live(const char *json, size_t len, char **model_key, char *why, size_t why_len) {
  *model_key = NULL;
  cJSON *root = len ? cJSON_ParseWithLength(json, len) : NULL;
  if (!cJSON_IsArray(root)) { /* not a table: creds_parse says why (or takes an empty one) */
    cJSON_Delete(root);
    return creds_parse(json, len, why, why_len);
  }
  proxy_creds *t = NULL;
  char *rest = NULL;
  if (take_model_key(root, model_key, why, why_len) != 0) {
    /* refused: why says so */
  } else if (!(rest = cJSON_PrintUnformatted(root))) {
    why_fail(why, why_len, "out of memory");
  } else {
    t = creds_parse(rest, strlen(rest), why, why_len);
  }
  scrub_free(rest);
  cJSON_Delete(root);
  if (!t) {
    scrub_free(*model_key);
    *model_key = NULL;
  }
  return t;
}

int creds_for_host(const cred_entry *e, const char *host, int port) {
  return e->port == port && strcmp(e->host, host) == 0;
}

int creds_has_host(const proxy_creds *t, const char *host, int port) {
  for (size_t i = 0; t && i < t->n; i++)
    if (!t->e[i].legacy && creds_for_host(&t->e[i], host, port)) return 1;
  return 0;
}

int creds_any_host(const proxy_creds *t) {
  for (size_t i = 0; t && i < t->n; i++)
    if (!t->e[i].legacy) return 1;
  return 0;
}

/* ---- a growable output ---- */

/* A bounded buffer whose first failure sticks, so a run of puts is checked once at its end. The
 * bound is no budget (what is placed is bounded by the head and the table it comes from). */
typedef struct {
  ss_buf b;
  int oom;
} outbuf;

static outbuf outbuf_new(void) {
  outbuf o = {.oom = 0};
  ss_buf_init(&o.b, SIZE_MAX / 4);
  return o;
}

static void put(outbuf *o, const char *s, size_t n) {
  if (o->oom || n == 0) return;
  if (ss_buf_append(&o->b, s, n) != SS_BUF_OK) o->oom = 1;
}

/* value percent-encoded: in a query value all but unreserved characters ('&', '=', '+' would be
 * read as syntax), in a path segment all but pchar ('/', '?', '#', '%') */
static void put_pct(outbuf *o, const char *s, size_t n, int in_path) {
  char esc[3]; /* one byte at a time: no copy of the secret to wipe */
  for (size_t i = 0; i < n; i++) put(o, esc, in_path ? ss_urlencode_segment(esc, &s[i], 1) : ss_urlencode(esc, &s[i], 1));
  memset(esc, 0, sizeof esc);
}

/* fmt with its one "%s" filled by v (as it is, or percent-encoded) */
static void put_filled(outbuf *o, const char *fmt, const char *v, size_t vl, int pct) {
  const char *slot = strstr(fmt, "%s");
  put(o, fmt, (size_t)(slot - fmt));
  if (pct) put_pct(o, v, vl, 1);
  else put(o, v, vl);
  put(o, slot + 2, strlen(slot + 2));
}

static void put_b64(outbuf *o, const unsigned char *s, size_t n) {
  size_t len;
  char *b = ss_base64(s, n, &len);
  if (!b) {
    o->oom = 1;
    return;
  }
  put(o, b, len);
  memset(b, 0, len); /* a placed secret's encoding */
  free(b);
}

/* The secret JSON-escaped (json) or HTML-escaped: the escapes an origin reflecting it as text
 * commonly writes. */
static void put_escaped(outbuf *o, const char *s, size_t n, int json) {
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    const char *esc = NULL;
    if (json) esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '/' ? "\\/" : NULL;
    else esc = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&quot;" : c == '\'' ? "&#39;" : NULL;
    if (esc) put(o, esc, strlen(esc));
    else put(o, &c, 1);
  }
}

/* Keeps o as form f of e, masked by '*', unless it is the secret or an earlier form. */
static int keep_form(cred_entry *e, int f, outbuf *o) {
  if (o->oom) return ss_buf_wipe(&o->b), -1;
  int same = !o->b.data || (o->b.len == e->secret_len && memcmp(o->b.data, e->secret, o->b.len) == 0);
  for (int g = 0; g < f && !same; g++)
    same = e->form[g] && e->form_len[g] == o->b.len && memcmp(e->form[g], o->b.data, o->b.len) == 0;
  if (same) return ss_buf_wipe(&o->b), 0;
  e->form[f] = o->b.data;
  e->form_len[f] = o->b.len;
  e->form[f][o->b.len] = '\0';
  if (!(e->form_mask[f] = malloc(o->b.len + 1))) return -1;
  memset(e->form_mask[f], '*', o->b.len);
  e->form_mask[f][o->b.len] = '\0';
  return 0;
}

/* The forms of the secret a response is scrubbed of besides the secret itself (see cred_entry). */
static int make_forms(cred_entry *e) {
  outbuf o[CREDS_FORMS];
  for (int f = 0; f < CREDS_FORMS; f++) o[f] = outbuf_new();
  if (e->place == CRED_QUERY || e->place == CRED_PATH) put_pct(&o[0], e->secret, e->secret_len, e->place == CRED_PATH);
  if (e->place == CRED_BASIC) {
    outbuf plain = outbuf_new();
    put(&plain, e->field, strlen(e->field));
    put(&plain, ":", 1);
    put(&plain, e->secret, e->secret_len);
    if (!plain.oom) put_b64(&o[0], (const unsigned char *)plain.b.data, plain.b.len);
    o[0].oom |= plain.oom;
    ss_buf_wipe(&plain.b);
  }
  put_pct(&o[1], e->secret, e->secret_len, 0);
  put_escaped(&o[2], e->secret, e->secret_len, 1);
  put_escaped(&o[3], e->secret, e->secret_len, 0);
  int rc = 0;
  for (int f = 0; f < CREDS_FORMS; f++)
    if (rc == 0) rc = keep_form(e, f, &o[f]);
    else ss_buf_wipe(&o[f].b);
  return rc;
}

/* ---- finding placeholders in a head ---- */

static size_t count_in(const char *s, size_t n, const char *needle, size_t nl) {
  size_t k = 0;
  for (size_t i = 0; nl && i + nl <= n;) {
    const char *p = memchr(s + i, needle[0], n - i - nl + 1);
    if (!p) break;
    i = (size_t)(p - s);
    if (memcmp(p, needle, nl) == 0) k++, i += nl;
    else i++;
  }
  return k;
}

/* A header line's value when it is "Basic <base64>", decoded into buf: its length; -1 when it
 * is no Basic value; -2 when it is one the proxy cannot read for certain: not strict base64,
 * not canonical (its encoding again differs: stray bits, which lenient decoders ignore), or
 * longer than cap decoded. */
static long basic_value(const char *line, size_t n, unsigned char *buf, size_t cap) {
  const char *colon = memchr(line, ':', n);
  if (!colon) return -1;
  const char *v = colon + 1, *end = line + n;
  while (v < end && (*v == ' ' || *v == '\t')) v++;
  while (end > v && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) end--;
  if (end - v < 6 || strncasecmp(v, "Basic ", 6) != 0) return -1;
  v += 6;
  while (v < end && *v == ' ') v++;
  long dn = ss_base64_decode(v, (size_t)(end - v), buf, cap);
  if (dn < 0) return -2;
  size_t el;
  char *again = ss_base64(buf, (size_t)dn, &el);
  int canonical = again && el == (size_t)(end - v) && memcmp(again, v, el) == 0;
  if (again) memset(again, 0, el);
  free(again);
  return canonical ? dn : -2;
}

#define BASIC_MAX (CREDS_SECRET_MAX + 512)

/* Occurrences of each credential's placeholder in a head: raw anywhere, and inside the
 * decoded value of any "Basic" header (the placeholder as a password is base64 there).
 * CREDS_UNREADABLE when a Basic value cannot be decoded for certain. */
static creds_status count_head(const proxy_creds *t, const char *head, size_t len, size_t *counts) {
  creds_status st = CREDS_OK;
  unsigned char plain[BASIC_MAX];
  for (size_t i = 0; i < t->n; i++)
    counts[i] = t->e[i].legacy ? 0 : count_in(head, len, t->e[i].placeholder, t->e[i].placeholder_len);
  const char *line = memchr(head, '\n', len); /* the header lines, after the request line */
  while (line && (size_t)(line + 1 - head) < len) {
    line++;
    const char *nl = memchr(line, '\n', len - (size_t)(line - head));
    size_t ll = nl ? (size_t)(nl - line) : len - (size_t)(line - head);
    long dn = basic_value(line, ll, plain, sizeof plain);
    if (dn == -2) st = CREDS_UNREADABLE;
    for (size_t i = 0; dn > 0 && i < t->n; i++)
      if (!t->e[i].legacy) counts[i] += count_in((const char *)plain, (size_t)dn, t->e[i].placeholder, t->e[i].placeholder_len);
    line = nl;
  }
  memset(plain, 0, sizeof plain);
  return st;
}

creds_status creds_misplaced(const cred_entry *e, char *what, size_t what_len) {
  snprintf(what, what_len, "%s", e->name);
  return CREDS_MISPLACED;
}

creds_status creds_check_head(const proxy_creds *t, const char *head, size_t len, char *what, size_t what_len) {
  if (!t || t->n == 0) return CREDS_OK;
  size_t counts[CREDS_MAX + 1];
  if (count_head(t, head, len, counts) != CREDS_OK) return CREDS_UNREADABLE;
  for (size_t i = 0; i < t->n; i++)
    if (counts[i]) return creds_misplaced(&t->e[i], what, what_len);
  return CREDS_OK;
}

/* ---- placing secrets in the outbound head ---- */

/* The request target with this host's path and query credentials placed; subs counts them. */
static void place_target(const proxy_creds *t, const char *host, int port, const char *tg, size_t tl, outbuf *o,
                         size_t *subs) {
  size_t qpos = 0;
  while (qpos < tl && tg[qpos] != '?') qpos++;
  size_t from = 0;
  for (size_t i = 0; i < t->n; i++) { /* a path prefix: at most one credential can own it */
    const cred_entry *e = &t->e[i];
    if (e->legacy || e->place != CRED_PATH || !creds_for_host(e, host, port) || from) continue;
    outbuf want = outbuf_new();
    put_filled(&want, e->format, e->placeholder, e->placeholder_len, 0);
    if (!want.oom && want.b.len <= qpos && memcmp(tg, want.b.data, want.b.len) == 0) {
      put_filled(o, e->format, e->secret, e->secret_len, 1);
      from = want.b.len;
      subs[i]++;
    }
    o->oom |= want.oom;
    free(want.b.data);
  }
  put(o, tg + from, qpos - from);
  for (size_t p = qpos; p < tl;) { /* "?a=1&b=2": each parameter on its own */
    put(o, tg + p, 1); /* '?' or '&' */
    size_t s = p + 1, end = s;
    while (end < tl && tg[end] != '&') end++;
    const char *eq = memchr(tg + s, '=', end - s);
    int done = 0;
    for (size_t i = 0; eq && !done && i < t->n; i++) {
      const cred_entry *e = &t->e[i];
      size_t nl = (size_t)(eq - (tg + s)), vl = end - s - nl - 1;
      if (e->legacy || e->place != CRED_QUERY || !creds_for_host(e, host, port) || nl != strlen(e->field) ||
          memcmp(tg + s, e->field, nl) != 0 || vl != e->placeholder_len || memcmp(eq + 1, e->placeholder, vl) != 0)
        continue;
      put(o, tg + s, nl + 1);
      put_pct(o, e->secret, e->secret_len, 0);
      subs[i]++;
      done = 1;
    }
    if (!done) put(o, tg + s, end - s);
    p = end;
  }
}

/* One header line "Name: value" (no CRLF): this host's header or Basic credential placed. */
static void place_header(const proxy_creds *t, const char *host, int port, const char *line, size_t ll, outbuf *o,
                         size_t *subs) {
  const char *colon = memchr(line, ':', ll);
  size_t nl = colon ? (size_t)(colon - line) : 0;
  const char *v = colon ? colon + 1 : NULL;
  while (v && v < line + ll && *v == ' ') v++;
  size_t vl = v ? (size_t)(line + ll - v) : 0;
  for (size_t i = 0; colon && i < t->n; i++) {
    const cred_entry *e = &t->e[i];
    if (e->legacy || !creds_for_host(e, host, port)) continue;
    if (e->place == CRED_HEADER && nl == strlen(e->field) && strncasecmp(line, e->field, nl) == 0) {
      outbuf want = outbuf_new();
      put_filled(&want, e->format, e->placeholder, e->placeholder_len, 0);
      int same = !want.oom && want.b.len == vl && memcmp(want.b.data, v, vl) == 0;
      o->oom |= want.oom;
      free(want.b.data);
      if (!same) continue;
      put(o, line, (size_t)(v - line));
      put_filled(o, e->format, e->secret, e->secret_len, 0);
      subs[i]++;
      return;
    }
    if (e->place == CRED_BASIC && nl == 13 && strncasecmp(line, "authorization", 13) == 0) {
      unsigned char plain[BASIC_MAX];
      long dn = basic_value(line, ll, plain, sizeof plain);
      size_t ul = strlen(e->field);
      if (dn != (long)(ul + 1 + e->placeholder_len) || memcmp(plain, e->field, ul) != 0 || plain[ul] != ':' ||
          memcmp(plain + ul + 1, e->placeholder, e->placeholder_len) != 0)
        continue;
      outbuf cred = outbuf_new();
      put(&cred, e->field, ul);
      put(&cred, ":", 1);
      put(&cred, e->secret, e->secret_len);
      put(o, line, nl);
      put(o, ": Basic ", 8);
      if (!cred.oom) put_b64(o, (const unsigned char *)cred.b.data, cred.b.len);
      o->oom |= cred.oom;
      ss_buf_wipe(&cred.b);
      subs[i]++;
      return;
    }
  }
  put(o, line, ll);
}

creds_status creds_rewrite_head(const proxy_creds *t, const char *host, int port, const char *orig, size_t orig_len,
                                char **head, size_t *head_len, char *what, size_t what_len) {
  if (!t || t->n == 0) return CREDS_OK;
  size_t counts[CREDS_MAX + 1], subs[CREDS_MAX + 1] = {0};
  if (count_head(t, orig, orig_len, counts) != CREDS_OK) return CREDS_UNREADABLE;
  size_t any = 0;
  for (size_t i = 0; i < t->n; i++) any += counts[i];
  if (!any) return CREDS_OK; /* nothing to place, nothing misplaced: the head goes as it is */
  outbuf o = outbuf_new();
  const char *h = *head, *end = h + *head_len;
  for (const char *line = h; line < end;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    size_t ll = nl ? (size_t)(nl - line) : (size_t)(end - line);
    size_t body = ll && line[ll - 1] == '\r' ? ll - 1 : ll; /* the line without its CRLF */
    if (line == h) { /* "METHOD target HTTP/1.1" */
      const char *sp1 = memchr(line, ' ', body);
      const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', body - (size_t)(sp1 + 1 - line)) : NULL;
      if (!sp2) put(&o, line, body);
      else {
        put(&o, line, (size_t)(sp1 + 1 - line));
        place_target(t, host, port, sp1 + 1, (size_t)(sp2 - sp1 - 1), &o, subs);
        put(&o, sp2, (size_t)(line + body - sp2));
      }
    } else if (body) {
      place_header(t, host, port, line, body, &o, subs);
    }
    put(&o, line + body, (nl ? (size_t)(nl + 1 - line) : ll) - body);
    line = nl ? nl + 1 : end;
  }
  creds_status st = CREDS_OK;
  for (size_t i = 0; i < t->n && st == CREDS_OK; i++) /* once only: two copies of its header or parameter are misplaced */
    if (counts[i] != subs[i] || subs[i] > 1) st = creds_misplaced(&t->e[i], what, what_len);
  if (st == CREDS_OK && o.oom) st = CREDS_NOMEM;
  if (st != CREDS_OK) {
    ss_buf_wipe(&o.b); /* it may hold a secret already */
    return st;
  }
  free(*head);
  *head = o.b.data;
  *head_len = o.b.len;
  return CREDS_OK;
}
