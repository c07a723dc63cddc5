/* Error objects of the plane: "invalid" (a refused path, with a reason) or "io" (errno). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "fileplane/internal.h"

void fp_err_invalid(ss_error *e, const char *reason, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ss_error_vset(e, "invalid", reason, fmt, ap);
  va_end(ap);
  if (path) ss_error_field_str(e, "path", path);
}

void fp_err_io(ss_error *e, int err, const char *what, const char *path) {
  const char *name = strerrorname_np(err);
  ss_error_set(e, "io", name ? name : "EIO", "%s '%s': %s", what, path ? path : "", strerror(err));
  ss_error_field_num(e, "errno", err);
  if (path) ss_error_field_str(e, "path", path);
}

void fp_err_lookup(ss_error *e, int err, int dirfd, const char *name, const char *path) {
  if (err == ELOOP) {
    fp_err_invalid(e, "symlink", path, "'%s' goes through a symbolic link", path);
    return;
  }
  if (err == EXDEV) {
    fp_err_invalid(e, "mount", path, "'%s' crosses a mount point", path);
    return;
  }
  if (err == ENOTDIR && dirfd >= 0 && name) {
    /* O_PATH|O_NOFOLLOW|O_DIRECTORY on a link fails ENOTDIR: tell a link from a file. */
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      fp_err_invalid(e, "symlink", path, "'%s' goes through a symbolic link", path);
      return;
    }
  }
  fp_err_io(e, err, "cannot resolve", path);
}
