#ifndef SANDSTACK_RANDOM_H
#define SANDSTACK_RANDOM_H
#include <stddef.h>

#include "util/error.h"
/* Fills buf with n bytes from the kernel CSPRNG (getrandom). Returns 0, or -1 with errno set. */
int ss_random_bytes(void *buf, size_t n);
/* Writes 2*nbytes lowercase hex characters and a NUL into out (size >= 2*nbytes+1).
 * Returns 0, or -1 with errno set. */
int ss_random_hex(char *out, size_t nbytes);
/* The error of a failed CSPRNG read (errno err) for `what`: kind "io", reason "random", with
 * field errno. It is the host's failure, never the caller's ("invalid"/"usage"). */
void ss_random_error(ss_error *e, int err, const char *what);
#endif
