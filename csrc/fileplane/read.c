/* Whole-file reads, bounded, of regular files only.
 *
 * The final component is first opened with O_PATH, which never calls a driver's open and never
 * blocks on a FIFO. Only once fstat shows a regular file within the size cap is that same inode
 * reopened for reading through /proc/self/fd (a magic link to the open inode, not a path lookup
 * the guest can redirect); without procfs the read is refused, never re-resolved. The read
 * stops one byte past the cap, so a file that grows meanwhile is refused rather than allocated. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileplane/internal.h"

/* A reading fd on the inode behind the O_PATH fd pfd (whose stat is st).
 *
 * /proc/self/fd/N is the only way to reopen an O_PATH descriptor without a new lookup: it is a
 * magic link to the open file itself. Linux has no other form (openat(pfd, "", ...) does not
 * take AT_EMPTY_PATH; open_by_handle_at needs CAP_DAC_READ_SEARCH and filesystem support), and
 * opening the path again, as an older fallback did, lets a FIFO or device node swapped in after
 * the check be opened, its driver's open run, before any comparison can refuse it. So without procfs the plane refuses to read (io/no_procfs) rather than re-resolve.
 * The inode comparison after the open stays as a guard against a /proc that is not procfs. */
static int reopen(const fp_path *path, int pfd, const struct stat *st, ss_error *e) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
  int fd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err != ENOENT && err != ENOTDIR) {
      fp_err_io(e, err, "cannot open", path->rel);
      return -1;
    }
    ss_error_set(e, "io", "no_procfs",
                 "cannot read '%s': reading needs procfs mounted at /proc (/proc/self/fd reopens the checked file "
                 "without a new path lookup), and it is not",
                 path->rel);
    ss_error_field_num(e, "errno", err);
    ss_error_field_str(e, "path", path->rel);
    return -1;
  }
  struct stat now;
  if (fstat(fd, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
    close(fd);
    fp_err_invalid(e, "changed", path->rel, "'%s' reopened as another file: /proc is not procfs", path->rel);
    return -1;
  }
  return fd;
}

/* Reads fd to the end into a malloc'ed buffer, refusing more than max bytes. hint is the size
 * fstat reported: a read that returns short of the request exactly there is the end of the file
 * (a regular file reads short only at its end), which saves the read that would return 0. */
static int read_all(int fd, size_t hint, size_t max, char **out, size_t *n, const char *shown, ss_error *e) {
  size_t cap = (hint < max ? hint : max) + 1, len = 0;
  char *buf = malloc(cap + 1);
  if (!buf) {
    fp_err_io(e, ENOMEM, "cannot allocate for", shown);
    return -1;
  }
  for (;;) {
    if (len == cap) {
      if (len > max) break;
      size_t ncap = cap * 2 < max + 1 ? cap * 2 : max + 1;
      char *nb = realloc(buf, ncap + 1);
      if (!nb) {
        free(buf);
        fp_err_io(e, ENOMEM, "cannot allocate for", shown);
        return -1;
      }
      buf = nb;
      cap = ncap;
    }
    size_t want = cap - len;
    ssize_t r = read(fd, buf + len, want);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      free(buf);
      fp_err_io(e, err, "cannot read", shown);
      return -1;
    }
    if (r == 0) break;
    len += (size_t)r;
    if ((size_t)r < want && len == hint) break;
  }
  if (len > max) {
    free(buf);
    fp_err_invalid(e, "too_large", shown, "'%s' grew over max_read (%zu bytes)", shown, max);
    return -1;
  }
  buf[len] = '\0';
  *out = buf;
  *n = len;
  return 0;
}

/* The refusal of a file over the caller's own limit: output_limit, as an exec past its budget. */
static void over_limit(ss_error *e, const fp_path *path, size_t limit) {
  ss_error_set(e, "output_limit", NULL, "'%s' is over the read's max_bytes (%zu bytes)", path->rel, limit);
  ss_error_field_num(e, "limit", (double)limit);
  ss_error_field_str(e, "path", path->rel);
}

int fp_read(fp_plane *p, const fp_path *cwd, const char *gpath, size_t glen, size_t limit, char **out, size_t *n,
            ss_error *e) {
  fp_path path;
  if (fp_normalize(p, cwd, gpath, glen, &path, e) != 0) return -1;
  int pfd = fp_open_final(p, &path, O_PATH, e);
  if (pfd < 0) return -1;
  size_t max = limit ? limit : p->max_read;
  struct stat st;
  int rc = -1, fd = -1;
  if (fstat(pfd, &st) != 0) {
    fp_err_io(e, errno, "cannot stat", path.rel);
  } else if (!S_ISREG(st.st_mode)) {
    fp_err_invalid(e, S_ISLNK(st.st_mode) ? "symlink" : "not_regular", path.rel, "'%s' is not a regular file", path.rel);
  } else if (st.st_nlink > 1 && !p->allow_hardlinks) {
    fp_err_invalid(e, "hardlink", path.rel, "'%s' has %lu links", path.rel, (unsigned long)st.st_nlink);
  } else if ((unsigned long long)st.st_size > max) {
    if (limit) over_limit(e, &path, limit);
    else
      fp_err_invalid(e, "too_large", path.rel, "'%s' is %lld bytes, over max_read (%zu)", path.rel,
                     (long long)st.st_size, p->max_read);
  } else if ((fd = reopen(&path, pfd, &st, e)) >= 0) {
    rc = read_all(fd, (size_t)st.st_size, max, out, n, path.rel, e);
    close(fd);
    /* a file that grew past the caller's limit while read */
    if (rc != 0 && limit && strcmp(e->reason, "too_large") == 0) {
      ss_error_clear(e);
      over_limit(e, &path, limit);
    }
  }
  close(pfd);
  return rc;
}
