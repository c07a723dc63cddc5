/* Token checks (see auth.h). */
#include "proxy/auth.h"

#include <string.h>
#include <strings.h>

int auth_equal(const char *a, size_t a_len, const char *secret, size_t secret_len) {
  /* walk the whole secret whatever a holds; a shorter a is read cyclically, never past its end */
  unsigned diff = (unsigned)(a_len ^ secret_len);
  for (size_t i = 0; i < secret_len; i++) {
    unsigned char c = a_len ? (unsigned char)a[i % a_len] : 0;
    diff |= c ^ (unsigned char)secret[i];
  }
  return secret_len > 0 && diff == 0;
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

long auth_b64_decode(const char *s, size_t n, unsigned char *out, size_t cap) {
  if (n % 4) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4], pad = 0;
    for (int k = 0; k < 4; k++) {
      if (s[i + k] == '=' && i + 4 == n && k >= 2) {
        v[k] = 0;
        pad++;
        continue;
      }
      if (pad) return -1; /* data after '=' */
      if ((v[k] = b64_value((unsigned char)s[i + k])) < 0) return -1;
    }
    unsigned long w = (unsigned long)v[0] << 18 | (unsigned long)v[1] << 12 | (unsigned long)v[2] << 6 | (unsigned long)v[3];
    unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
    for (int k = 0; k < 3 - pad; k++) {
      if (o >= cap) return -1;
      out[o++] = b[k];
    }
  }
  return (long)o;
}

static int scheme(const char *v, size_t len, const char *name, const char **rest, size_t *rest_len) {
  size_t n = strlen(name);
  if (len <= n || strncasecmp(v, name, n) != 0 || v[n] != ' ') return 0;
  *rest = v + n + 1;
  *rest_len = len - n - 1;
  while (*rest_len && **rest == ' ') (*rest)++, (*rest_len)--;
  return *rest_len > 0;
}

int auth_bearer(const char *v, size_t len, const char *token, size_t token_len) {
  const char *t;
  size_t tl;
  if (!scheme(v, len, "Bearer", &t, &tl)) return 0;
  return auth_equal(t, tl, token, token_len);
}

int auth_proxy_value(const char *v, size_t len, const char *token, size_t token_len) {
  const char *b;
  size_t bl;
  if (scheme(v, len, "Basic", &b, &bl)) {
    unsigned char plain[1024];
    long n = auth_b64_decode(b, bl, plain, sizeof plain);
    if (n < 0) return 0;
    const unsigned char *colon = memchr(plain, ':', (size_t)n); /* user:password; the user is free */
    if (!colon) return 0;
    size_t off = (size_t)(colon - plain) + 1;
    return auth_equal((const char *)plain + off, (size_t)n - off, token, token_len);
  }
  return auth_bearer(v, len, token, token_len);
}
