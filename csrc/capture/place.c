/* A download put in place: the archive unpacked as it is read into a fresh hidden directory
 * beside the destination, then its one top member renamed to the destination. The data is
 * written once (the rename moves it, it does not copy it), and nothing half-written is ever at
 * the destination: a failure removes the hidden directory and all it holds.
 *
 * The rename follows docker cp's rules for what stood there: a file replaces a file or a link
 * (the link itself, never what it points to) and is refused over a directory (EISDIR); a
 * directory goes only where nothing stands (EEXIST), so nothing the caller did not name is
 * overwritten and no two trees are merged. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture/internal.h"
#include "util/random.h"

#define CAP_PLACE_PREFIX ".sandstack-download-"

/* The one entry of the directory dirfd into name (FP_NAME_MAX + 1 bytes): 1, 0 when it is
 * empty, -1 with e set (more than one: the archive had several tops). */
static int only_entry(int dirfd, char *name, ss_error *e) {
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d) {
    if (fd >= 0) close(fd);
    cap_err_io(e, errno, "cannot list the download directory", NULL);
    return -1;
  }
  int found = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (found++) {
      ss_error_set(e, "engine", "bad_archive", "the archive holds more than one top member");
      break;
    }
    snprintf(name, FP_NAME_MAX + 1, "%s", de->d_name);
  }
  closedir(d);
  return found > 1 ? -1 : found;
}

static int move_into_place(int tmpfd, const char *top, int parentfd, const char *name, cap_placed *out,
                           ss_error *e) {
  struct stat st;
  if (fstatat(tmpfd, top, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    cap_err_io(e, errno, "cannot find the downloaded member", top);
    return -1;
  }
  out->is_dir = S_ISDIR(st.st_mode);
  int rc = out->is_dir ? renameat2(tmpfd, top, parentfd, name, RENAME_NOREPLACE) : renameat(tmpfd, top, parentfd, name);
  if (rc != 0) {
    cap_err_io(e, errno, out->is_dir ? "cannot put the directory at" : "cannot put the file at", name);
    return -1;
  }
  return 0;
}

int cap_place(const char *parent, const char *name, const cap_source *src, const cap_options *o, cap_result *res,
              cap_placed *out, ss_error *e) {
  memset(out, 0, sizeof *out);
  if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
    ss_error_set(e, "invalid", "name", "download: the destination must be a plain name inside its directory");
    return -1;
  }
  int parentfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parentfd < 0) {
    cap_err_io(e, errno, "cannot open the destination's directory", parent);
    return -1;
  }
  char hex[17], tmp[sizeof CAP_PLACE_PREFIX + 16];
  if (ss_random_hex(hex, 8) != 0) {
    ss_random_error(e, errno, "a download's directory name");
    close(parentfd);
    return -1;
  }
  snprintf(tmp, sizeof tmp, CAP_PLACE_PREFIX "%s", hex);
  if (mkdirat(parentfd, tmp, 0700) != 0) {
    cap_err_io(e, errno, "cannot make the download directory in", parent);
    close(parentfd);
    return -1;
  }
  int tmpfd = openat(parentfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int rc = -1;
  char top[FP_NAME_MAX + 1];
  if (tmpfd < 0) {
    cap_err_io(e, errno, "cannot open the download directory in", parent);
  } else if (cap_extract(tmpfd, src, o, res, e) == 0) {
    int n = only_entry(tmpfd, top, e);
    if (n == 0)
      ss_error_set(e, "invalid", "not_regular", "nothing in the archive can be downloaded (%s)",
                   res->nskipped ? res->skipped[0].type : "it is empty");
    else if (n == 1)
      rc = move_into_place(tmpfd, top, parentfd, name, out, e);
  }
  /* Whatever is left (everything, after a failure) goes with the hidden directory. */
  ss_error again;
  ss_error_init(&again);
  if (tmpfd >= 0 && cap_empty_dir(tmpfd, &again) != 0 && rc == 0) {
    rc = -1;
    ss_error_clear(e);
    *e = again; /* the fields move with it */
    ss_error_init(&again);
  }
  ss_error_clear(&again);
  if (tmpfd >= 0) close(tmpfd);
  unlinkat(parentfd, tmp, AT_REMOVEDIR);
  close(parentfd);
  return rc;
}
