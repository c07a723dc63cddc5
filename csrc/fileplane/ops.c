/* The small operations: lstat, mkdir, opening a directory for listing, the removal check. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileplane/internal.h"

int fp_lstat(fp_plane *p, const fp_path *cwd, const char *gpath, size_t glen, struct stat *st, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, cwd, gpath, glen, &path, e) != 0) return -1;
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

int fp_mkdir(fp_plane *p, const fp_path *cwd, const char *gpath, size_t glen, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, cwd, gpath, glen, &path, e) != 0) return -1;
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
  } else {
    /* Like write: the new directory belongs to whoever owns its parent (the guest's user). */
    fp_adopt_dir_owner(p, dir.fd, path.last);
  }
  fp_dirfd_close(&dir);
  return rc;
}

int fp_opendir(fp_plane *p, const fp_path *cwd, const char *gpath, size_t glen, ss_error *e) {
  fp_path path;
  if (fp_normalize(p, cwd, gpath, glen, &path, e) != 0) return -1;
  /* O_DIRECTORY fails before any open of a device or FIFO; O_NONBLOCK on top, to be sure. */
  return fp_open_final(p, &path, O_RDONLY | O_DIRECTORY | O_NONBLOCK, e);
}

/* a is b or one of b's ancestors (both relative to root; "" is root). */
static int contains(const fp_path *a, const fp_path *b) {
  if (a->len == 0) return 1;
  return b->len >= a->len && memcmp(a->rel, b->rel, a->len) == 0 && (b->len == a->len || b->rel[a->len] == '/');
}

/* The target is a direct child of dir. */
static int child_of(const fp_path *t, const fp_path *dir) {
  if (t->len <= dir->len || !contains(dir, t)) return 0;
  size_t start = dir->len ? dir->len + 1 : 0;
  return memchr(t->rel + start, '/', t->len - start) == NULL;
}

int fp_check(fp_plane *p, const fp_path *cwd, const char *gpath, size_t glen, unsigned flags, char *buf, size_t cap,
             ss_error *e) {
  fp_path path;
  if (fp_normalize(p, cwd, gpath, glen, &path, e) != 0) return -1;
  if (!path.last) {
    fp_err_invalid(e, "root", p->guest_root, "the workspace root itself cannot be removed");
    return -1;
  }
  /* Every spelling of the working directory (".", "a/..", its absolute path), and anything
   * that holds it, would take the directory the commands run in with it. */
  const fp_path *call = cwd ? cwd : &p->cwd;
  if (contains(&path, &p->cwd) || contains(&path, call)) {
    char shown[FP_PATH_MAX + 512];
    if (fp_guest_path(p, &path, shown, sizeof shown, e) != 0) return -1;
    fp_err_invalid(e, "working_directory", shown, "'%s' is the working directory or holds it, and is never removed",
                   shown);
    return -1;
  }
  if ((flags & FP_CHECK_CHILD) && gpath[0] != '/' && !child_of(&path, call)) {
    fp_err_invalid(e, "placement", path.rel, "a relative target must name a child of the working directory");
    return -1;
  }
  /* Always the walk, whatever the resolver: each name must also be listed verbatim by its
   * parent. A link is refused at every position, the final one included. A name that is not
   * there at all is missing, never an alias. */
  int fd = fp_walk(p, path.rel, O_PATH, FP_WALK_LISTED | FP_WALK_ABSENT_OK, path.rel, e);
  if (fd == FP_WALK_ABSENT) {
    if (fp_guest_path(p, &path, buf, cap, e) != 0) return -1;
    return FP_MISSING;
  }
  if (fd < 0) return -1;
  close(fd);
  return fp_guest_path(p, &path, buf, cap, e);
}
