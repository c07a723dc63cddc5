/* Atomic whole-file writes: a fresh temporary file beside the destination, renamed over it.
 *
 * The temporary is created with O_CREAT|O_EXCL|O_NOFOLLOW under a random name, so nothing the
 * guest planted is ever opened for writing; rename(2) then replaces whatever name stood at the
 * destination (a file, a link, a FIFO) without writing through it, and a reader sees either the
 * old file or the whole new one. A process killed mid-write leaves the old file and a stray
 * ".sandstack-tmp-*" file, never a half-written destination. With the plane's `sync` the file
 * is fsynced before the rename and its directory after it, so a success is on disk (the sbx
 * backend's records rely on that). Missing parent directories are made first, by the same
 * descriptor-relative walk that refuses a link at every component (fp_make_parent). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileplane/internal.h"
#include "util/random.h"
#include "util/io.h"

#define FP_TMP_PREFIX ".sandstack-tmp-"

/* Owner for the new file: the old file's when a regular file stood there (old != NULL), else
 * the directory's. Only root can give a file away; nothing to do when it is ours already. */
static void adopt_owner(const fp_plane *p, int fd, int dirfd, const struct stat *old) {
  struct stat dir;
  if (p->euid != 0) return;
  if (!old) {
    if (fstat(dirfd, &dir) != 0) return;
    old = &dir;
  }
  if (old->st_uid == p->euid && old->st_gid == p->egid) return;
  int rc = fchown(fd, old->st_uid, old->st_gid);
  (void)rc; /* best effort: a failure leaves the file ours */
}

/* fsync of the directory itself, so that the rename survives a crash too. dirfd is O_PATH,
 * which fsync refuses: "." beneath it is opened for reading (no lookup that could move). */
static int sync_dir(int dirfd) {
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int rc = fd < 0 ? -1 : fsync(fd), err = errno;
  if (fd >= 0) close(fd);
  errno = err; /* fsync's, not close's */
  return rc;
}

/* A fresh temporary beside the destination: O_EXCL never opens anything that stood there. The
 * name is the plane's random prefix and counter; a name taken (the guest can list and guess
 * them) gets a new random prefix. */
static int create_tmp(fp_plane *p, int dirfd, mode_t mode, char *tmp, size_t cap) {
  for (int attempt = 0; attempt < 8; attempt++) {
    snprintf(tmp, cap, FP_TMP_PREFIX "%s-%llu", p->tmp_prefix, ++p->tmp_seq);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
    if (ss_random_hex(p->tmp_prefix, 8) != 0) return -1;
  }
  errno = EEXIST;
  return -1;
}

int fp_write(fp_plane *p, const fp_path *cwd, const char *gpath, size_t glen, const void *data, size_t n,
             ss_error *e) {
  fp_path path;
  if (fp_normalize(p, cwd, gpath, glen, &path, e) != 0) return -1;
  if (!path.last) {
    fp_err_io(e, EISDIR, "cannot write", p->guest_root);
    return -1;
  }
  fp_dirfd dir;
  if (fp_make_parent(p, &path, &dir, e) != 0) return -1;
  /* A link at the destination is refused like one anywhere else; one planted after this check
   * is replaced by the rename, never written through. A regular file there lends the new one
   * its permission bits (set-id bits dropped) and owner. */
  struct stat st;
  int had = fstatat(dir.fd, path.last, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (had && S_ISLNK(st.st_mode)) {
    fp_err_invalid(e, "symlink", path.rel, "'%s' is a symbolic link", path.rel);
    fp_dirfd_close(&dir);
    return -1;
  }
  int regular = had && S_ISREG(st.st_mode);
  mode_t mode = regular ? (st.st_mode & 0777) : 0644;
  char tmp[96];
  int fd = create_tmp(p, dir.fd, mode, tmp, sizeof tmp);
  if (fd < 0) {
    fp_err_io(e, errno, "cannot create a temporary file beside", path.rel);
    fp_dirfd_close(&dir);
    return -1;
  }
  adopt_owner(p, fd, dir.fd, regular ? &st : NULL);
  /* The umask may have cut the mode at creation; restore the old file's bits exactly. */
  int rc = 0;
  if (regular && mode != 0644) rc = fchmod(fd, mode);
  if (rc == 0) rc = ss_write_all(fd, data, n);
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
  } else if (p->sync && sync_dir(dir.fd) != 0) {
    rc = -1;
    fp_err_io(e, errno, "wrote, but cannot sync the directory of", path.rel);
  }
  fp_dirfd_close(&dir);
  return rc;
}
