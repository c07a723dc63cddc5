/* The capture's directory: made fresh, filled from the archive, removed whole on failure.
 *
 * Removal never follows a link and never opens by path below the top: it lists a directory,
 * unlinks what it can, and steps into a non-empty subdirectory with openat(O_NOFOLLOW). It
 * climbs back with "..", checked against the device and inode it remembered, so it holds two
 * fds whatever the depth (a guest can make a tree deeper than PATH_MAX or than the fd limit). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture/internal.h"

int cap_fresh_dir(const char *path, ss_error *e) {
  if (mkdir(path, 0700) != 0) {
    if (errno == EEXIST) {
      ss_error_set(e, "invalid", "exists", "capture: '%.300s' already exists (capture makes a fresh directory)", path);
      ss_error_field_str(e, "path", path);
    } else {
      cap_err_io(e, errno, "cannot make the capture directory", path);
    }
    return -1;
  }
  /* The umask may have taken bits off: the owner needs all three, nobody else any. */
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fchmod(fd, 0700) != 0) {
    cap_err_io(e, errno, "cannot set up the capture directory", path);
    if (fd >= 0) close(fd);
    rmdir(path);
    return -1;
  }
  close(fd);
  return 0;
}

typedef struct level {
  dev_t dev;
  ino_t ino;
} level;

/* One pass over the directory cur: removes every entry it can. Sets *sub to the name of a
 * non-empty subdirectory to step into (or "" when the directory is now empty). */
static int clear_pass(int cur, char *sub, ss_error *e) {
  sub[0] = '\0';
  int lfd = openat(cur, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
  if (!d) {
    int err = errno;
    if (lfd >= 0) close(lfd);
    cap_err_io(e, err, "cannot list a directory to remove in", NULL);
    return -1;
  }
  int rc = 0;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno != 0) {
        cap_err_io(e, errno, "cannot list a directory to remove in", NULL);
        rc = -1;
      }
      break;
    }
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
    if (unlinkat(cur, n, 0) == 0) continue;
    if (errno == EISDIR && unlinkat(cur, n, AT_REMOVEDIR) == 0) continue;
    if (errno == ENOTEMPTY || errno == EEXIST) {
      snprintf(sub, FP_NAME_MAX + 1, "%s", n);
      break;
    }
    cap_err_io(e, errno, "cannot remove", n);
    rc = -1;
    break;
  }
  closedir(d);
  return rc;
}

int cap_empty_dir(int dirfd, ss_error *e) {
  int cur = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0) {
    cap_err_io(e, errno, "cannot open the directory to remove", NULL);
    return -1;
  }
  level *stack = NULL;
  size_t depth = 0, cap = 0;
  char sub[FP_NAME_MAX + 1];
  int rc = -1;
  for (;;) {
    if (clear_pass(cur, sub, e) != 0) goto out;
    if (sub[0]) {
      struct stat st;
      int next = openat(cur, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0 || fstat(cur, &st) != 0) {
        cap_err_io(e, errno, "cannot enter a directory to remove", sub);
        if (next >= 0) close(next);
        goto out;
      }
      if (depth == cap) {
        size_t ncap = cap ? cap * 2 : 64;
        level *grown = realloc(stack, ncap * sizeof *grown);
        if (!grown) {
          close(next);
          cap_err_io(e, ENOMEM, "cannot remove", sub);
          goto out;
        }
        stack = grown;
        cap = ncap;
      }
      stack[depth++] = (level){st.st_dev, st.st_ino};
      close(cur);
      cur = next;
      continue;
    }
    if (depth == 0) break; /* the top is empty */
    /* Back up: ".." must be the directory we came from, or someone moved things under us. */
    struct stat st;
    int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    depth--;
    if (up < 0 || fstat(up, &st) != 0 || st.st_dev != stack[depth].dev || st.st_ino != stack[depth].ino) {
      if (up >= 0) close(up);
      ss_error_set(e, "io", "EBUSY", "capture: a directory being removed was moved");
      goto out;
    }
    close(cur);
    cur = up;
  }
  rc = 0;
out:
  close(cur);
  free(stack);
  return rc;
}

int cap_remove_dir(const char *path, ss_error *e) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    cap_err_io(e, errno, "cannot open the capture directory", path);
    return -1;
  }
  int rc = cap_empty_dir(fd, e);
  close(fd);
  if (rc == 0 && rmdir(path) != 0) {
    cap_err_io(e, errno, "cannot remove the capture directory", path);
    rc = -1;
  }
  return rc;
}

static ssize_t fd_read(void *ctx, void *buf, size_t n) { return read(*(int *)ctx, buf, n); }

/* Removes dir after a failure, keeping the first error; a failed cleanup is added to it. */
static void roll_back(const char *dir, ss_error *e) {
  ss_error again;
  ss_error_init(&again);
  if (cap_remove_dir(dir, &again) != 0) ss_error_field_str(e, "rollback", again.message);
  ss_error_clear(&again);
}

int cap_extract_archive(const char *dir, const char *archive_name, const cap_options *o, cap_result *res,
                        ss_error *e) {
  if (!archive_name[0] || strchr(archive_name, '/') || strcmp(archive_name, ".") == 0 ||
      strcmp(archive_name, "..") == 0) {
    ss_error_set(e, "invalid", "archive_name", "capture: the archive must be a plain name inside the directory");
    return -1;
  }
  int afd = -1, dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dirfd < 0) {
    cap_err_io(e, errno, "cannot open the capture directory", dir);
    return -1;
  }
  afd = openat(dirfd, archive_name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (afd < 0 || fstat(afd, &st) != 0) {
    cap_err_io(e, errno, "cannot open the capture archive", archive_name);
    goto fail;
  }
  /* Unlinked before a single member is written: no member can be named like it. */
  if (!S_ISREG(st.st_mode) || unlinkat(dirfd, archive_name, 0) != 0) {
    cap_err_io(e, S_ISREG(st.st_mode) ? errno : EINVAL, "cannot take the capture archive", archive_name);
    goto fail;
  }
  cap_source src = {fd_read, &afd};
  if (cap_extract(dirfd, &src, o, res, e) != 0) goto fail;
  close(afd);
  close(dirfd);
  return 0;
fail:
  if (afd >= 0) close(afd);
  close(dirfd);
  roll_back(dir, e);
  return -1;
}
