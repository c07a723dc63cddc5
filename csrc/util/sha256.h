#ifndef SANDSTACK_UTIL_SHA256_H
#define SANDSTACK_UTIL_SHA256_H
/* SHA-256 (no crypto library is linked into the core): the sbx ownership digests in sandbox
 * names, and sandstack-proxy's policy digests. */
#include <stddef.h>
#include <stdint.h>

void ss_sha256(const void *data, size_t len, uint8_t out[32]);
/* Lowercase hex of the first nbytes (<= 32) of the digest into out (size >= 2*nbytes+1). */
void ss_sha256_hex(const void *data, size_t len, size_t nbytes, char *out);

#endif
