/* Durable replacement of a record file: temp + fsync + rename + directory fsync.
 *
 * The sbx backend's sandbox record carries the retirement mark that other processes trust, so
 * a write that did not reach the disk must be reported, not assumed. */
#include "util/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/random.h"
#include "util/io.h"

/* fsync of the directory holding path, so the rename itself survives a crash. */
static int sync_parent(const char *path) {
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  else return errno = ENAMETOOLONG, -1;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  int saved = errno;
  close(fd);
  errno = saved;
  return rc;
}

int ss_write_durable(const char *path, const void *data, size_t len, const char *kind, ss_error *e) {
  char suffix[17], tmp[PATH_MAX];
  if (ss_random_hex(suffix, 8) != 0 || snprintf(tmp, sizeof tmp, "%s.tmp%s", path, suffix) >= (int)sizeof tmp) {
    ss_error_set(e, kind, "io", "cannot write %s: %s", path, strerror(errno ? errno : ENAMETOOLONG));
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    ss_error_set(e, kind, "io", "cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  const char *step = "write";
  int failed = ss_write_all(fd, data, len) != 0;
  if (!failed && fsync(fd) != 0) failed = 1, step = "fsync";
  int saved = errno;
  if (close(fd) != 0 && !failed) failed = 1, step = "close", saved = errno;
  if (!failed && rename(tmp, path) != 0) failed = 1, step = "rename", saved = errno;
  if (failed) {
    unlink(tmp);
    ss_error_set(e, kind, "io", "cannot write %s (%s): %s", path, step, strerror(saved));
    return -1;
  }
  if (sync_parent(path) != 0) {
    ss_error_set(e, kind, "io", "wrote %s but cannot sync its directory: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}
