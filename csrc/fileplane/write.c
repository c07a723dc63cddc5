/* Atomic whole-file writes: a fresh temporary file beside the destination, renamed over it.
 *
 * The temporary is created with O_CREAT|O_EXCL|O_NOFOLLOW under a random name, so nothing the
 * guest planted is ever opened for writing; rename(2) then replaces whatever name stood at the
 * destination (a file, a link, a FIFO) without writing through it, and a reader sees either the
 * old file or the whole new one. A process killed mid-write leaves the old file and a stray
 * ".sandstack-tmp-*" file, never a half-written destination. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileplane/internal.h"
#include "util/random.h"

#define FP_TMP_PREFIX ".sandstack-tmp-"

/* Owner and mode for the new file: the old file's when a regular file stood there, else the
 * parent directory's owner (when we are root) and 0644. */
static void adopt(int fd, int dirfd, const char *name) {
  struct stat st;
  int root = geteuid() == 0, rc = 0;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
    if (root) rc = fchown(fd, st.st_uid, st.st_gid);
    rc = fchmod(fd, st.st_mode & 0777); /* after fchown, which clears set-id bits anyway */
  } else if (root && fstat(dirfd, &st) == 0) {
    rc = fchown(fd, st.st_uid, st.st_gid);
  }
  (void)rc; /* best effort: a failure leaves our own owner and 0644 */
}

static int write_all(int fd, const char *data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    data += w;
    n -= (size_t)w;
  }
  return 0;
}

int fp_write(fp_plane *p, const char *gpath, size_t glen, const void *data, size_t n, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, gpath, glen, &path, e) != 0) return -1;
  if (!path.last) {
    fp_err_io(e, EISDIR, "cannot write", p->guest_root);
    return -1;
  }
  fp_dirfd dir;
  if (fp_open_parent(p, &path, &dir, e) != 0) return -1;
  /* A link at the destination is refused like one anywhere else; one planted after this check
   * is replaced by the rename, never written through. */
  struct stat st;
  if (fstatat(dir.fd, path.last, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    fp_err_invalid(e, "symlink", path.rel, "'%s' is a symbolic link", path.rel);
    fp_dirfd_close(&dir);
    return -1;
  }
  char tmp[64];
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
    char hex[33];
    if (ss_random_hex(hex, 16) != 0) break;
    snprintf(tmp, sizeof tmp, FP_TMP_PREFIX "%s", hex);
    fd = openat(dir.fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    fp_err_io(e, errno, "cannot create a temporary file beside", path.rel);
    fp_dirfd_close(&dir);
    return -1;
  }
  adopt(fd, dir.fd, path.last);
  int rc = write_all(fd, data, n);
  if (rc == 0 && p->sync) rc = fsync(fd);
  int err = errno;
  if (close(fd) != 0 && rc == 0) {
    rc = -1;
    err = errno;
  }
  if (rc == 0 && renameat(dir.fd, tmp, dir.fd, path.last) != 0) {
    rc = -1;
    err = errno;
  }
  if (rc != 0) {
    unlinkat(dir.fd, tmp, 0);
    fp_err_io(e, err, "cannot write", path.rel);
  }
  fp_dirfd_close(&dir);
  return rc;
}
