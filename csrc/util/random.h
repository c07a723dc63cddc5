#ifndef SANDSTACK_RANDOM_H
#define SANDSTACK_RANDOM_H
#include <stddef.h>
/* Fills buf with n bytes from the kernel CSPRNG (getrandom). Returns 0, or -1 with errno set. */
int ss_random_bytes(void *buf, size_t n);
/* Writes 2*nbytes lowercase hex characters and a NUL into out (size >= 2*nbytes+1). */
int ss_random_hex(char *out, size_t nbytes);
#endif
