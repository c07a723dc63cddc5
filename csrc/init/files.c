/* sandstack-init's deadline file (csrc/deadline/deadline.h), read through the directory's
 * descriptor the init keeps. */
#include "init/init.h"

int init_read_deadline(int dirfd, int64_t *deadline) {
  char buf[DL_FILE_MAX];
  ssize_t n = dl_read_file(dirfd, DL_FILE, buf, sizeof buf);
  return n >= 0 && dl_parse(buf, (size_t)n, deadline) == 0 ? 0 : -1;
}
