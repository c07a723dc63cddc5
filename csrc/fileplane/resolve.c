/* Reaching a relative path beneath the anchor fd without following a link or crossing a mount.
 *
 * First choice: one openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
 * | RESOLVE_NO_XDEV, which the kernel checks atomically for the whole path. A kernel without it
 * (ENOSYS, before 5.6) gets the walk: every component opened relative to its parent with
 * O_NOFOLLOW (O_PATH|O_DIRECTORY for the directories), its device compared with the anchor's.
 * Either way a link planted between a check and an operation makes the operation fail. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fileplane/internal.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

#define FP_RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

void fp_dirfd_close(fp_dirfd *d) {
  if (d->owned && d->fd >= 0) close(d->fd);
  d->fd = -1;
  d->owned = 0;
}

const char *fp_resolver_name(const fp_plane *p) {
  if (p->resolve == FP_RESOLVE_WALK || p->openat2_state == 0) return "walk";
  return "openat2";
}

/* openat2 of rel beneath the anchor: the fd, -1 with errno, or -2 when the kernel lacks it. */
static int try_openat2(fp_plane *p, const char *rel, int flags) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (unsigned long long)(flags | O_CLOEXEC);
  how.resolve = FP_RESOLVE_FLAGS;
  for (int attempt = 0; attempt < 16; attempt++) {
    long fd = syscall(SYS_openat2, p->rootfd, rel, &how, sizeof how);
    if (fd >= 0) {
      p->openat2_state = 1;
      return (int)fd;
    }
    /* EAGAIN: a concurrent rename raced the lookup; the kernel asks for a retry. */
    if (errno != EAGAIN) break;
  }
  if (errno == ENOSYS) return -2;
  return -1;
}

/* Here, beside the walk that makes directories (FP_WALK_CREATE), so the resolver depends on no
 * operation above it: ops.c's mkdir calls it too. */
void fp_adopt_dir_owner(const fp_plane *p, int dirfd, const char *name) {
  struct stat st;
  if (p->euid != 0 || fstat(dirfd, &st) != 0 || (st.st_uid == p->euid && st.st_gid == p->egid)) return;
  int ignored = fchownat(dirfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
  (void)ignored; /* best effort: the directory stays ours */
}

/* openat of one component; with FP_WALK_CREATE a missing one is made a directory first. */
static int open_component(fp_plane *p, int dirfd, const char *name, int fl, unsigned opts) {
  int fd = openat(dirfd, name, fl);
  if (fd >= 0 || errno != ENOENT || !(opts & FP_WALK_CREATE)) return fd;
  if (mkdirat(dirfd, name, 0755) == 0) fp_adopt_dir_owner(p, dirfd, name);
  else if (errno != EEXIST) return -1; /* EEXIST: made meanwhile; the open below judges it */
  return openat(dirfd, name, fl);
}

int fp_walk(fp_plane *p, const char *rel, int flags, unsigned opts, const char *shown, ss_error *e) {
  int dirfd = p->rootfd;
  const char *s = rel;
  char name[FP_NAME_MAX + 1];
  for (;;) {
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n > FP_NAME_MAX) n = FP_NAME_MAX; /* path.c refuses longer names; keep the copy bounded */
    memcpy(name, s, n);
    name[n] = '\0';
    int last = slash == NULL;
    int fl = last ? (flags | O_NOFOLLOW | O_CLOEXEC) : (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = open_component(p, dirfd, name, fl, opts);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT && (opts & FP_WALK_ABSENT_OK)) {
        if (dirfd != p->rootfd) close(dirfd);
        return FP_WALK_ABSENT;
      }
      fp_err_lookup(e, err, dirfd, name, shown);
      if (dirfd != p->rootfd) close(dirfd);
      return -1;
    }
    /* After the open, so that a missing name reads as missing: a name that opens but is not
     * listed verbatim is an alias (a case variant in a casefold directory). */
    if ((opts & FP_WALK_LISTED) && fp_name_listed(dirfd, name, shown, e) != 0) {
      close(fd);
      if (dirfd != p->rootfd) close(dirfd);
      return -1;
    }
    if (dirfd != p->rootfd) close(dirfd);
    struct stat st;
    if (fstat(fd, &st) != 0) {
      fp_err_io(e, errno, "cannot stat", shown);
      close(fd);
      return -1;
    }
    if (st.st_dev != p->root_dev) {
      close(fd);
      fp_err_invalid(e, "mount", shown, "'%s' crosses a mount point", shown);
      return -1;
    }
    if (last) {
      /* O_PATH|O_NOFOLLOW hands back the link itself: refuse it like openat2 would. */
      if (S_ISLNK(st.st_mode)) {
        close(fd);
        fp_err_invalid(e, "symlink", shown, "'%s' goes through a symbolic link", shown);
        return -1;
      }
      return fd;
    }
    dirfd = fd;
    s = slash + 1;
  }
}

/* rel ("." for the anchor itself) opened with flags; shown names it in errors. */
static int open_rel(fp_plane *p, const char *rel, int flags, const char *shown, ss_error *e) {
  if (p->resolve != FP_RESOLVE_WALK && p->openat2_state != 0) {
    int fd = try_openat2(p, rel, flags);
    if (fd >= 0) return fd;
    if (fd == -1) {
      fp_err_lookup(e, errno, -1, NULL, shown);
      return -1;
    }
    if (p->resolve == FP_RESOLVE_OPENAT2) {
      fp_err_io(e, ENOSYS, "openat2 is not available for", shown);
      return -1;
    }
    p->openat2_state = 0; /* the kernel lacks openat2: walk from now on */
  }
  if (strcmp(rel, ".") == 0) {
    int fd = openat(p->rootfd, ".", flags | O_CLOEXEC);
    if (fd < 0) fp_err_io(e, errno, "cannot open", shown);
    return fd;
  }
  return fp_walk(p, rel, flags, 0, shown, e);
}

int fp_open_parent(fp_plane *p, const fp_path *path, fp_dirfd *out, ss_error *e) {
  out->fd = p->rootfd;
  out->owned = 0;
  if (!path->last || path->last == path->rel) return 0; /* root, or a child of root */
  char parent[FP_PATH_MAX];
  size_t n = (size_t)(path->last - path->rel) - 1;
  memcpy(parent, path->rel, n);
  parent[n] = '\0';
  int fd = open_rel(p, parent, O_PATH | O_DIRECTORY, path->rel, e);
  if (fd < 0) return -1;
  out->fd = fd;
  out->owned = 1;
  return 0;
}

int fp_open_final(fp_plane *p, const fp_path *path, int flags, ss_error *e) {
  return open_rel(p, path->len ? path->rel : ".", flags, path->len ? path->rel : ".", e);
}

int fp_make_parent(fp_plane *p, const fp_path *path, fp_dirfd *out, ss_error *e) {
  if (fp_open_parent(p, path, out, e) == 0) return 0;
  if (strcmp(e->reason, "ENOENT") != 0) return -1;
  /* Some directory on the way is missing: walk again, making each missing one. */
  ss_error_clear(e);
  char parent[FP_PATH_MAX];
  size_t n = (size_t)(path->last - path->rel) - 1;
  memcpy(parent, path->rel, n);
  parent[n] = '\0';
  int fd = fp_walk(p, parent, O_PATH | O_DIRECTORY, FP_WALK_CREATE, path->rel, e);
  if (fd < 0) return -1;
  out->fd = fd;
  out->owned = 1;
  return 0;
}
