/* TLS inspection in a Docker stack: which stacks need the inspection CA, the options
 * that shape it, and the refusals that keep a policy from being silently weakened.
 *
 * The proxy sandstack adds terminates TLS for hosts whose rule names methods or paths, with a
 * CA it makes in its own memory at start (csrc/proxy/tls/ca.c). The stack's part is the plumbing:
 * a volume the proxy publishes ca.pem and bundle.pem into and the sandbox reads, the variables
 * that point the sandbox's TLS clients at the bundle, and the start order (plan.c). The key is
 * never in an option, a plan or a record: nothing here ever sees it. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stack/model.h"

const char *const SS_CA_BUNDLE_VARS[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                                         "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", NULL};

/* Environment strings are capped by the kernel at 128 KiB each (MAX_ARG_STRLEN); a few
 * private roots are a few KiB. */
#define UPSTREAM_CA_MAX (64 * 1024)
#define UPSTREAM_CA_CERTS_MAX 64
#define CA_TMPFS_SIZE "8m" /* the system roots (~220 KiB) plus the CA, twice while renamed over */
#define PROXY_IMAGE_UID 65534 /* the USER of the image `sandstack images` builds */
#define HTTPS_PORT 443

static const char BEGIN_CERT[] = "-----BEGIN CERTIFICATE-----";
static const char END_CERT[] = "-----END CERTIFICATE-----";

static int refuse(ss_error *err, const char *option, const char *fmt, const char *detail) {
  ss_error_set(err, "compose", "invalid_option", fmt, option, detail ? detail : "");
  ss_error_field_str(err, "option", option);
  return -1;
}

static int base64_line_char(unsigned char c) {
  return isalnum(c) || c == '+' || c == '/' || c == '=' || c == ' ' || c == '\t' || c == '\r';
}

static int contains(const char *s, size_t len, const char *what) {
  size_t wl = strlen(what);
  for (size_t i = 0; i + wl <= len; i++)
    if (memcmp(s + i, what, wl) == 0) return 1;
  return 0;
}

/* proxy_upstream_ca must look like what it is: one or more PEM certificates and nothing that is
 * not a certificate (a pasted private key would travel into the proxy's environment and the
 * plan). Text outside the blocks (an "Issuer:" comment) is allowed, as OpenSSL allows it. The
 * reason never quotes the value. NULL when it is fine. */
static const char *upstream_ca_problem(const char *pem) {
  size_t n = strlen(pem);
  if (n == 0 || n > UPSTREAM_CA_MAX) return "must be PEM text of at most 64 KiB";
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)pem[i];
    if (!(c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7f)))
      return "holds a byte that is not printable ASCII: it is not PEM text";
  }
  int certs = 0, inside = 0;
  for (const char *line = pem; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
    if (len >= 5 && strncmp(line, "-----", 5) == 0) {
      if (len == sizeof BEGIN_CERT - 1 && strncmp(line, BEGIN_CERT, len) == 0 && !inside) {
        inside = 1;
      } else if (len == sizeof END_CERT - 1 && strncmp(line, END_CERT, len) == 0 && inside) {
        inside = 0;
        if (++certs > UPSTREAM_CA_CERTS_MAX) return "holds more than 64 certificates";
      } else {
        /* a key, a CSR, a second BEGIN, a stray END */
        return contains(line, len, "PRIVATE KEY") ? "holds a private key: give the CA's certificate only"
                                                  : "holds a PEM block that is not a certificate, or an unbalanced one";
      }
    } else if (inside) {
      for (size_t i = 0; i < len; i++)
        if (!base64_line_char((unsigned char)line[i])) return "has a certificate whose body is not base64";
    }
    line = end ? end + 1 : line + len;
    if (!end) break;
  }
  if (inside) return "has a certificate without its END line";
  if (certs == 0) return "holds no \"-----BEGIN CERTIFICATE-----\" block";
  return NULL;
}

/* Over HTTPS, a rule's methods and paths can only be enforced by inspection. The policy language
 * has no scheme, so the port decides: a rule without a port admits 443, and 443 is HTTPS; on
 * any other named port the rule is taken to mean plain HTTP, which the proxy checks on method
 * and path without TLS (and a CONNECT there is still refused with needs_inspection). */
static int reached_over_https(const ss_policy_rule *r) { return r->port == 0 || r->port == HTTPS_PORT; }
static int needs_inspection(const ss_policy_rule *r) { return r->methods != 0 || r->npaths != 0; }

static int refuse_weakened(const ss_policy *p, ss_error *err) {
  for (int i = 0; i < p->n; i++) {
    const ss_policy_rule *r = &p->rules[i];
    if (!needs_inspection(r) || !reached_over_https(r)) continue;
    char pattern[SS_HOST_MAX + 3];
    snprintf(pattern, sizeof pattern, "%s%s", r->wildcard ? "*." : "", r->host);
    ss_error_set(err, "compose", "invalid_option",
                 "egress_policy: rule %d (%s%s) names methods or paths, and inspect = false means no proxy "
                 "reads HTTPS requests: the rule could not be enforced on HTTPS. Remove inspect = false, drop the "
                 "methods and paths, or give the rule a plain-HTTP port",
                 i + 1, pattern, r->port ? ":443" : ", every port");
    ss_error_field_str(err, "option", "egress_policy");
    ss_error_field_num(err, "rule", i + 1);
    ss_error_field_str(err, "host", pattern);
    return -1;
  }
  return 0;
}

/* What the CA wiring would collide with: a user volume of the same name, a sandbox mount on the
 * bundle's directory. Refused by name rather than left to the engine's "duplicate mount point". */
static int refuse_collisions(const cJSON *opts, const ss_stack_model *m, ss_error *err) {
  const cJSON *v;
  cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(opts, "volumes")) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, SS_CA_VOLUME_KEY) == 0)
      return refuse(err, "volumes", "%s: '" SS_CA_VOLUME_KEY "' names the stack's inspection CA volume "
                    "(<project>-" SS_CA_VOLUME_KEY ") when the egress_policy needs TLS inspection; rename yours%s", NULL);
  }
  const ss_svc *sb = &m->svc[m->sandbox_idx];
  const cJSON *mounts = sb->spec ? cJSON_GetObjectItemCaseSensitive(sb->spec, "volumes") : NULL;
  cJSON_ArrayForEach(v, mounts) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "target");
    size_t len = cJSON_IsString(t) ? strlen(t->valuestring) : 0;
    while (len > 1 && t->valuestring[len - 1] == '/') len--;
    if (len == strlen(SS_CA_SANDBOX_DIR) && strncmp(t->valuestring, SS_CA_SANDBOX_DIR, len) == 0) {
      char option[160];
      snprintf(option, sizeof option, "services.%s.volumes", sb->name);
      return refuse(err, option, "%s mounts on " SS_CA_SANDBOX_DIR ", where the stack mounts its inspection CA "
                    "bundle%s", NULL);
    }
  }
  return 0;
}

int ss_stack_check_inspection(const cJSON *opts, ss_stack_model *m, ss_error *err) {
  const cJSON *ca = cJSON_GetObjectItemCaseSensitive(opts, "proxy_upstream_ca");
  if (ca) { /* typed and tied to the added proxy by validate.c */
    const char *why = upstream_ca_problem(ca->valuestring);
    if (why) return refuse(err, "proxy_upstream_ca", "%s %s", why);
    m->proxy_upstream_ca = ca->valuestring;
  }
  if (!cJSON_GetObjectItemCaseSensitive(opts, "egress_policy")) return 0;
  ss_policy *p = ss_stack_compile_policy(opts, err);
  if (!p) return -1;
  int rc = 0, needed = 0;
  for (int i = 0; i < p->n; i++) needed |= needs_inspection(&p->rules[i]);
  needed |= m->ncreds > 0; /* a credential goes only into a request the proxy has read */
  if (p->no_inspect) { /* whichever proxy serves the stack: the policy itself says no */
    rc = refuse_weakened(p, err);
  } else if (needed && m->proxy_idx >= 0 && m->svc[m->proxy_idx].added) {
    rc = refuse_collisions(opts, m, err);
    m->inspect_ca = rc == 0;
  }
  ss_policy_free(p);
  return rc;
}

/* The proxy's uid: the stack-wide `user` when it is numeric ("1000", "1000:1000"), else the
 * image's; -1 for a user name, which only the image's /etc/passwd could resolve. */
static long proxy_uid(const ss_stack_model *m) {
  const char *u = m->hard.user;
  if (!u) return PROXY_IMAGE_UID;
  char *end = NULL;
  if (!isdigit((unsigned char)u[0])) return -1;
  long uid = strtol(u, &end, 10);
  return (*end == '\0' || *end == ':') && uid >= 0 ? uid : -1;
}

cJSON *ss_stack_ca_volume_opts(const ss_stack_model *m) {
  cJSON *o = cJSON_CreateObject();
  char mount_opts[96];
  long uid = proxy_uid(m);
  /* Writable by the proxy's user alone; for a user name the uid is unknown here, so the
   * directory is world-writable and sticky instead. Either way only the proxy mounts it
   * read-write: the sandbox's mount is read-only. */
  if (uid >= 0) snprintf(mount_opts, sizeof mount_opts, "size=" CA_TMPFS_SIZE ",mode=0755,uid=%ld", uid);
  else snprintf(mount_opts, sizeof mount_opts, "size=" CA_TMPFS_SIZE ",mode=1777");
  cJSON_AddStringToObject(o, "type", "tmpfs");
  cJSON_AddStringToObject(o, "device", "tmpfs");
  cJSON_AddStringToObject(o, "o", mount_opts);
  return o;
}
