#ifndef SANDSTACK_UTIL_BASE64_H
#define SANDSTACK_UTIL_BASE64_H
/* Standard base64 (RFC 4648, with padding), for the sbx exec wrapper's x-values and the Lua
 * binding. (sandstack-proxy keeps its own pair in csrc/proxy/auth.c: its parser library links
 * no core.) */
#include <stddef.h>

/* The encoding of in[0..len), NUL-terminated, malloc'd (NULL when out of memory); *out_len
 * (when not NULL) its length. */
char *ss_base64(const void *in, size_t len, size_t *out_len);

#endif
