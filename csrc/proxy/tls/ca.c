/* The stack's inspection CA and its leaf certificates (see ca.h for the design). */
#include "proxy/tls/ca.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/buf.h"
#include "util/io.h"

#define ROOTS_MAX (16u << 20) /* a system bundle is ~200 KiB; refuse anything absurd */

typedef struct leaf_entry {
  char host[SS_HOST_MAX + 1];
  X509 *cert;
  uint64_t used; /* the cache tick of the last use: the least recently used entry is replaced */
} leaf_entry;

struct proxy_ca {
  EVP_PKEY *key, *leaf_key;
  X509 *cert;
  char *pem;
  leaf_entry *cache;
  size_t cache_max, cache_n;
  uint64_t tick;
};

static int fail(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
  unsigned long e = ERR_get_error();
  if (e) {
    size_t len = strlen(why);
    if (len + 3 < n) {
      snprintf(why + len, n - len, " (");
      ERR_error_string_n(e, why + len + 2, n - len - 3);
      len = strlen(why);
      if (len + 1 < n) snprintf(why + len, n - len, ")");
    }
  }
  ERR_clear_error();
  return -1;
}

int ca_rule_needs_inspection(const ss_policy_rule *r) { return r->methods != 0 || r->npaths != 0; }

int ca_policy_needs_inspection(const ss_policy *p) {
  for (int i = 0; p && i < p->n; i++)
    if (ca_rule_needs_inspection(&p->rules[i])) return 1;
  return 0;
}

/* A normalized policy host made only of digits and dots is an IPv4 address (ss_host_normalize
 * refuses all-numeric DNS names). */
static int is_ipv4(const char *h) { return h[0] && strspn(h, "0123456789.") == strlen(h); }

/* Appends host as a permitted name (a DNS name, or an IPv4 address) unless it is one already. */
static void permit(char *out, size_t cap, size_t *n, const char *host, int *dns, int *ip) {
  char entry[SS_HOST_MAX + 48];
  int v4 = is_ipv4(host);
  size_t el = (size_t)snprintf(entry, sizeof entry, v4 ? ",permitted;IP:%s/255.255.255.255" : ",permitted;DNS:%s", host);
  for (const char *p = out; (p = strstr(p, entry)) != NULL; p++)
    if (p[el] == ',' || p[el] == '\0') return;
  *n += (size_t)snprintf(out + *n, cap - *n, "%s", entry);
  ++*(v4 ? ip : dns);
}

char *ca_name_constraints(const ss_policy *p, const proxy_creds *creds) {
  size_t hosts = (size_t)(p ? p->n : 0) + (creds ? creds->n : 0);
  size_t cap = 128 + hosts * (SS_HOST_MAX + 40), n = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  n += (size_t)snprintf(out, cap, "critical");
  int dns = 0, ip = 0;
  for (int i = 0; p && i < p->n; i++)
    if (ca_rule_needs_inspection(&p->rules[i])) permit(out, cap, &n, p->rules[i].host, &dns, &ip);
  /* a credential's host is always inspected (the proxy places its secret inside the TLS session) */
  for (size_t i = 0; creds && i < creds->n; i++)
    if (!creds->e[i].legacy) permit(out, cap, &n, creds->e[i].host, &dns, &ip);
  /* A name type without a permitted subtree would be unconstrained: pin both. "invalid" is a
   * reserved TLD (RFC 6761) that no real host has. */
  if (!dns) n += (size_t)snprintf(out + n, cap - n, ",permitted;DNS:invalid");
  if (!ip) snprintf(out + n, cap - n, ",excluded;IP:0.0.0.0/0.0.0.0,excluded;IP:::/::");
  return out;
}

static int random_serial(X509 *x) {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) return -1;
  raw[0] &= 0x7f; /* positive */
  raw[0] |= 0x01; /* and never zero-led to a shorter length */
  BIGNUM *bn = BN_bin2bn(raw, sizeof raw, NULL);
  ASN1_INTEGER *ai = bn ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
  int ok = ai && X509_set_serialNumber(x, ai) == 1;
  ASN1_INTEGER_free(ai);
  BN_free(bn);
  return ok ? 0 : -1;
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
  X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
  if (!ex) return -1;
  int ok = X509_add_ext(cert, ex, -1);
  X509_EXTENSION_free(ex);
  return ok == 1 ? 0 : -1;
}

static char *cert_pem(X509 *x) {
  BIO *b = BIO_new(BIO_s_mem());
  char *out = NULL, *data;
  if (b && PEM_write_bio_X509(b, x) == 1) {
    long len = BIO_get_mem_data(b, &data);
    if (len > 0 && (out = malloc((size_t)len + 1))) {
      memcpy(out, data, (size_t)len);
      out[len] = '\0';
    }
  }
  BIO_free(b);
  return out;
}

proxy_ca *ca_create(const ss_policy *p, const proxy_creds *creds, unsigned hours, size_t cache_max, char *why, size_t why_len) {
  proxy_ca *ca = calloc(1, sizeof *ca);
  char *constraints = ca_name_constraints(p, creds);
  if (!ca || !constraints || !(ca->cache = calloc(cache_max ? cache_max : 1, sizeof *ca->cache))) {
    free(constraints);
    ca_free(ca);
    fail(why, why_len, "out of memory");
    return NULL;
  }
  ca->cache_max = cache_max ? cache_max : 1;
  unsigned char tag[4];
  char cn[64];
  RAND_bytes(tag, sizeof tag);
  snprintf(cn, sizeof cn, "sandstack stack inspection CA %02x%02x%02x%02x", tag[0], tag[1], tag[2], tag[3]);
  ca->key = EVP_EC_gen("P-256");
  ca->leaf_key = EVP_EC_gen("P-256");
  X509 *x = ca->cert = X509_new();
  X509_NAME *name = X509_get_subject_name(x);
  int ok = ca->key && ca->leaf_key && x && X509_set_version(x, 2) == 1 && random_serial(x) == 0 &&
           X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"sandstack", -1, -1, 0) == 1 &&
           X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) == 1 &&
           X509_set_issuer_name(x, name) == 1 && X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
           X509_gmtime_adj(X509_getm_notAfter(x), (long)hours * 3600) && X509_set_pubkey(x, ca->key) == 1 &&
           add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") == 0 &&
           add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") == 0 &&
           add_ext(x, x, NID_subject_key_identifier, "hash") == 0 &&
           add_ext(x, x, NID_authority_key_identifier, "keyid:always") == 0;
  if (ok && add_ext(x, x, NID_name_constraints, constraints) != 0) {
    fail(why, why_len, "the name constraints for the inspected hosts were refused");
    ok = -1;
  }
  free(constraints);
  if (ok == 1 && (X509_sign(x, ca->key, EVP_sha256()) <= 0 || !(ca->pem = cert_pem(x)))) ok = 0;
  if (ok != 1) {
    if (ok == 0) fail(why, why_len, "cannot make the inspection CA");
    ca_free(ca);
    return NULL;
  }
  return ca;
}

void ca_free(proxy_ca *ca) {
  if (!ca) return;
  for (size_t i = 0; i < ca->cache_n; i++) X509_free(ca->cache[i].cert);
  free(ca->cache);
  EVP_PKEY_free(ca->key);
  EVP_PKEY_free(ca->leaf_key);
  X509_free(ca->cert);
  free(ca->pem);
  free(ca);
}

EVP_PKEY *ca_leaf_key(const proxy_ca *ca) { return ca->leaf_key; }

static X509 *issue(proxy_ca *ca, const char *host) {
  X509 *x = X509_new();
  char san[SS_HOST_MAX + 8];
  snprintf(san, sizeof san, "%s:%s", is_ipv4(host) ? "IP" : "DNS", host);
  X509_NAME *name = x ? X509_get_subject_name(x) : NULL;
  int ok = x && X509_set_version(x, 2) == 1 && random_serial(x) == 0 &&
           /* a CN is at most 64 characters (RFC 5280 ub-common-name); the SAN is what clients check */
           (strlen(host) > 64 ||
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)host, -1, -1, 0) == 1) &&
           X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) == 1 &&
           X509_gmtime_adj(X509_getm_notBefore(x), -3600) && X509_set1_notAfter(x, X509_get0_notAfter(ca->cert)) == 1 &&
           X509_set_pubkey(x, ca->leaf_key) == 1 && add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") == 0 &&
           add_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature") == 0 &&
           add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth") == 0 &&
           add_ext(x, ca->cert, NID_subject_alt_name, san) == 0 &&
           add_ext(x, ca->cert, NID_authority_key_identifier, "keyid:always") == 0 &&
           X509_sign(x, ca->key, EVP_sha256()) > 0;
  if (!ok) {
    X509_free(x);
    ERR_clear_error();
    return NULL;
  }
  return x;
}

X509 *ca_leaf(proxy_ca *ca, const char *host, int *fresh) {
  ca->tick++;
  *fresh = 0;
  size_t victim = 0;
  for (size_t i = 0; i < ca->cache_n; i++) {
    if (strcmp(ca->cache[i].host, host) == 0) {
      ca->cache[i].used = ca->tick;
      return ca->cache[i].cert;
    }
    if (ca->cache[i].used < ca->cache[victim].used) victim = i;
  }
  X509 *x = issue(ca, host);
  if (!x) return NULL;
  *fresh = 1;
  if (ca->cache_n < ca->cache_max) victim = ca->cache_n++;
  else X509_free(ca->cache[victim].cert);
  snprintf(ca->cache[victim].host, sizeof ca->cache[victim].host, "%s", host);
  ca->cache[victim].cert = x;
  ca->cache[victim].used = ca->tick;
  return x;
}

/* dir/name = a then b, by a temporary file renamed over it; world-readable (the sandbox's user
 * is not the proxy's), as a certificate is public. */
static int publish(const char *dir, const char *name, const char *a, size_t al, const char *b, size_t bl, char *why,
                   size_t why_len) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s/.%s.%ld.tmp", dir, name, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(why, why_len, "cannot write %s: %s", tmp, strerror(errno));
  int rc = fchmod(fd, 0644) == 0 && ss_write_all(fd, a, al) == 0 && ss_write_all(fd, b, bl) == 0 ? 0 : -1;
  int err = errno;
  if (close(fd) != 0 && rc == 0) rc = -1, err = errno;
  if (rc == 0 && rename(tmp, path) != 0) rc = -1, err = errno;
  if (rc != 0) {
    unlink(tmp);
    return fail(why, why_len, "cannot write %s: %s", path, strerror(err));
  }
  return 0;
}

static char *read_roots(const char *file, size_t *len, char *why, size_t why_len) {
  FILE *f = fopen(file, "rb");
  if (!f) {
    fail(why, why_len, "cannot read the root certificates %s: %s (set SANDSTACK_CA_ROOTS)", file, strerror(errno));
    return NULL;
  }
  ss_buf b; /* one byte past ROOTS_MAX tells an absurd file; the rest is room for a last '\n' */
  ss_buf_init(&b, ROOTS_MAX + 1);
  int oom = 0;
  for (size_t room; (room = ss_buf_room(&b)) > 0;) {
    size_t want = room < 65536 ? room : 65536;
    if (ss_buf_reserve(&b, want) != SS_BUF_OK) {
      oom = 1;
      break;
    }
    size_t got = fread(b.data + b.len, 1, want, f);
    b.len += got;
    b.data[b.len] = '\0';
    if (got == 0) break;
  }
  fclose(f);
  if (oom || b.len > ROOTS_MAX) {
    ss_buf_free(&b);
    fail(why, why_len, "cannot hold the root certificates %s (out of memory, or over 16 MiB)", file);
    return NULL;
  }
  if (!strstr(b.data, "-----BEGIN CERTIFICATE-----")) {
    ss_buf_free(&b);
    fail(why, why_len, "%s holds no PEM certificate", file);
    return NULL;
  }
  if (b.len && b.data[b.len - 1] != '\n' && ss_buf_append(&b, "\n", 1) != SS_BUF_OK) {
    ss_buf_free(&b);
    fail(why, why_len, "cannot hold the root certificates %s (out of memory)", file);
    return NULL;
  }
  return ss_buf_take(&b, len);
}

/* The extra roots as PEM, then the CA's certificate (either may be absent): the bundle's tail.
 * The extras are re-encoded from the parsed certificates, so nothing but certificates (no key a
 * user pasted by mistake) can reach the bundle. NULL when out of memory. */
static char *bundle_tail(const proxy_ca *ca, const STACK_OF(X509) *extra, size_t *len) {
  BIO *b = BIO_new(BIO_s_mem());
  int ok = b != NULL;
  for (int i = 0; ok && extra && i < sk_X509_num(extra); i++) ok = PEM_write_bio_X509(b, sk_X509_value(extra, i)) == 1;
  if (ok && ca) ok = BIO_write(b, ca->pem, (int)strlen(ca->pem)) == (int)strlen(ca->pem);
  char *data = NULL, *out = NULL;
  long n = ok ? BIO_get_mem_data(b, &data) : -1;
  if (n >= 0 && (out = malloc((size_t)n + 1)) != NULL) {
    if (n > 0) memcpy(out, data, (size_t)n);
    out[n] = '\0';
    *len = (size_t)n;
  }
  BIO_free(b);
  ERR_clear_error();
  return out;
}

int ca_write_files(const proxy_ca *ca, const STACK_OF(X509) *extra, const char *dir, const char *roots_file, char *why,
                   size_t why_len) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return fail(why, why_len, "SANDSTACK_CA_DIR %s is not a directory", dir);
  size_t rl = 0, tl = 0;
  char *roots = read_roots(roots_file, &rl, why, why_len);
  if (!roots) return -1;
  char *tail = bundle_tail(ca, extra, &tl);
  int rc = tail ? publish(dir, "bundle.pem", roots, rl, tail, tl, why, why_len) : fail(why, why_len, "out of memory");
  free(roots);
  free(tail);
  if (rc != 0) return -1;
  if (ca) return publish(dir, "ca.pem", ca->pem, strlen(ca->pem), "", 0, why, why_len);
  char stale[4096];
  snprintf(stale, sizeof stale, "%s/ca.pem", dir); /* no inspection now: no CA for anyone to trust */
  if (unlink(stale) != 0 && errno != ENOENT) return fail(why, why_len, "cannot remove %s: %s", stale, strerror(errno));
  return 0;
}
