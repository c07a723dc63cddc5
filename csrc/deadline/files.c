/* Reading the init's file (deadline.h, dl_read_file). The volume is read-only to the guest, but
 * the read is made as if it were not: whatever sits at the name may be a link, a FIFO (an open
 * for reading would block until a writer came), a directory or a huge file. So the open follows
 * no link and does not block, only a regular file of at most cap bytes is read, and nothing here
 * ever waits. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deadline/deadline.h"

ssize_t dl_read_file(int dirfd, const char *name, char *buf, size_t cap) {
  int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 && (size_t)st.st_size <= cap) {
    size_t got = 0;
    while (got < cap) {
      ssize_t r = read(fd, buf + got, cap - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    n = (ssize_t)got;
  }
  close(fd);
  return n;
}
