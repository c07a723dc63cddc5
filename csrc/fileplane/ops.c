/* The small operations: lstat, mkdir, opening a directory for listing, the removal check. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileplane/internal.h"

int fp_lstat(fp_plane *p, const char *gpath, size_t glen, struct stat *st, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, gpath, glen, &path, e) != 0) return -1;
  if (!path.last) {
    if (fstat(p->rootfd, st) == 0) return 0;
    fp_err_io(e, errno, "cannot stat", ".");
    return -1;
  }
  fp_dirfd dir;
  if (fp_open_parent(p, &path, &dir, e) != 0) return -1;
  /* The final component is never followed: a link reports itself (mode "link"). */
  int rc = fstatat(dir.fd, path.last, st, AT_SYMLINK_NOFOLLOW);
  if (rc != 0) fp_err_io(e, errno, "cannot stat", path.rel);
  fp_dirfd_close(&dir);
  return rc;
}

int fp_mkdir(fp_plane *p, const char *gpath, size_t glen, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, gpath, glen, &path, e) != 0) return -1;
  if (!path.last) {
    fp_err_io(e, EEXIST, "cannot make directory", p->guest_root);
    return -1;
  }
  fp_dirfd dir;
  if (fp_open_parent(p, &path, &dir, e) != 0) return -1;
  /* mkdirat never follows a final link (EEXIST), so a planted link creates nothing beyond. */
  int rc = mkdirat(dir.fd, path.last, 0755);
  if (rc != 0) {
    int err = errno;
    struct stat st;
    if (err == EEXIST && fstatat(dir.fd, path.last, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      fp_err_invalid(e, "symlink", path.rel, "'%s' is a symbolic link", path.rel);
    else
      fp_err_io(e, err, "cannot make directory", path.rel);
  } else if (p->euid == 0) {
    /* Like write: the new directory belongs to whoever owns its parent (the guest's user). */
    struct stat st;
    if (fstat(dir.fd, &st) == 0 && (st.st_uid != p->euid || st.st_gid != p->egid)) {
      int ignored = fchownat(dir.fd, path.last, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
      (void)ignored; /* best effort: the directory stays ours */
    }
  }
  fp_dirfd_close(&dir);
  return rc;
}

int fp_opendir(fp_plane *p, const char *gpath, size_t glen, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, gpath, glen, &path, e) != 0) return -1;
  /* O_DIRECTORY fails before any open of a device or FIFO; O_NONBLOCK on top, to be sure. */
  return fp_open_final(p, &path, O_RDONLY | O_DIRECTORY | O_NONBLOCK, e);
}

int fp_check(fp_plane *p, const char *gpath, size_t glen, char *buf, size_t cap, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, gpath, glen, &path, e) != 0) return -1;
  if (!path.last) {
    fp_err_invalid(e, "root", p->guest_root, "the workspace root itself cannot be removed");
    return -1;
  }
  /* Always the walk, whatever the resolver: each name must also be listed verbatim by its
   * parent. A link is refused at every position, the final one included. */
  int fd = fp_walk(p, path.rel, O_PATH, FP_WALK_LISTED, path.rel, e);
  if (fd < 0) return -1;
  close(fd);
  return fp_guest_path(p, &path, buf, cap, e);
}
