#ifndef SANDSTACK_PROXY_AUTH_H
#define SANDSTACK_PROXY_AUTH_H
/* The session token, as clients present it: in Proxy-Authorization ("Basic base64(user:TOKEN)",
 * what HTTPS_PROXY=http://user:TOKEN@proxy:3128 makes curl, pip, git and Python send, or
 * "Bearer TOKEN"), and on the credential route in x-api-key or Authorization: Bearer. Every
 * comparison takes time that depends on the token's length only, never on where a guess differs. */
#include <stddef.h>

/* 1 when a equals the secret (secret_len bytes), in time independent of a's content. */
int auth_equal(const char *a, size_t a_len, const char *secret, size_t secret_len);
/* 1 when a Proxy-Authorization value carries the token (Basic: the password; Bearer). */
int auth_proxy_value(const char *v, size_t len, const char *token, size_t token_len);
/* 1 when value is "Bearer TOKEN" (scheme case-insensitive). */
int auth_bearer(const char *v, size_t len, const char *token, size_t token_len);

#endif
