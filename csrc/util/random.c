#include "util/random.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "util/hex.h"

int ss_random_bytes(void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += got;
    n -= (size_t)got;
  }
  return 0;
}

int ss_random_hex(char *out, size_t nbytes) {
  unsigned char raw[64];
  if (nbytes > sizeof raw) {
    errno = EINVAL;
    return -1;
  }
  if (ss_random_bytes(raw, nbytes) != 0) return -1;
  ss_hex(raw, nbytes, out);
  return 0;
}

void ss_random_error(ss_error *e, int err, const char *what) {
  ss_error_set(e, "io", "random", "%s: cannot read the kernel CSPRNG: %s", what, strerror(err));
  ss_error_field_num(e, "errno", err);
}
