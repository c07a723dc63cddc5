#ifndef SANDSTACK_UTIL_HEX_H
#define SANDSTACK_UTIL_HEX_H
/* Bytes as lowercase hex: the random tokens and the SHA-256 digests. */
#include <stddef.h>

/* Writes 2*n hex digits and a NUL into out (size >= 2*n+1). */
void ss_hex(const void *in, size_t n, char *out);

#endif
