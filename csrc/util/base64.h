#ifndef SANDSTACK_UTIL_BASE64_H
#define SANDSTACK_UTIL_BASE64_H
/* Standard base64 (RFC 4648, with padding), for the sbx exec wrapper's x-values, the Lua
 * binding and sandstack-proxy (the proxy token in Basic, credentials placed as Basic). It
 * depends on nothing, so the proxy's parser library links this file too. */
#include <stddef.h>

/* The encoding of in[0..len), NUL-terminated, malloc'd (NULL when out of memory); *out_len
 * (when not NULL) its length. */
char *ss_base64(const void *in, size_t len, size_t *out_len);
/* The decoding of s[0..n) into out (cap bytes): its length, or -1 when s is not strict base64
 * (length a multiple of 4, '=' only as the last one or two characters) or decodes to more than
 * cap bytes. */
long ss_base64_decode(const char *s, size_t n, unsigned char *out, size_t cap);

#endif
