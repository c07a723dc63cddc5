/* Token checks (see auth.h). */
#include "proxy/parse/auth.h"

#include <string.h>
#include <strings.h>

#include "util/base64.h"

int auth_equal(const char *a, size_t a_len, const char *secret, size_t secret_len) {
  /* walk the whole secret whatever a holds; a shorter a is read cyclically, never past its end */
  unsigned diff = (unsigned)(a_len ^ secret_len);
  for (size_t i = 0; i < secret_len; i++) {
    unsigned char c = a_len ? (unsigned char)a[i % a_len] : 0;
    diff |= c ^ (unsigned char)secret[i];
  }
  return secret_len > 0 && diff == 0;
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
    long n = ss_base64_decode(b, bl, plain, sizeof plain);
    if (n < 0) return 0;
    const unsigned char *colon = memchr(plain, ':', (size_t)n); /* user:password; the user is free */
    if (!colon) return 0;
    size_t off = (size_t)(colon - plain) + 1;
    return auth_equal((const char *)plain + off, (size_t)n - off, token, token_len);
  }
  return auth_bearer(v, len, token, token_len);
}
