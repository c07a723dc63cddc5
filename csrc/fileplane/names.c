/* Names the host would change, hide or merge.
 *
 * Linux keeps every byte of a name except '/' and NUL (both already refused by path.c), so
 * fp_name_allowed has no rule of its own here. A Windows port adds its rules in this function
 * (reserved characters <>:"|?*, control bytes, device names CON/PRN/AUX/NUL/COM1-9/LPT1-9 with
 * any extension, a trailing dot or space) and a macOS port the normalization check (NFD vs NFC).
 * Case-insensitive lookups (ext4/f2fs casefold directories on Linux, NTFS, APFS) are caught by
 * fp_name_listed: a name that opens but is not listed verbatim is an alias. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "fileplane/internal.h"

int fp_name_allowed(const char *name, size_t len, const char *path, ss_error *e) {
  (void)name;
  (void)len;
  (void)path;
  (void)e;
  return 0;
}

int fp_name_listed(int dirfd, const char *name, const char *path, ss_error *e) {
  /* dirfd is an O_PATH fd, which getdents refuses: open "." beneath it for reading. */
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    fp_err_io(e, errno, "cannot list the directory of", path);
    return -1;
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    int err = errno;
    close(fd);
    fp_err_io(e, err, "cannot list the directory of", path);
    return -1;
  }
  int found = 0;
  struct dirent *de;
  errno = 0;
  while (!found && (de = readdir(d)) != NULL)
    if (strcmp(de->d_name, name) == 0) found = 1;
  int err = errno;
  closedir(d);
  if (found) return 0;
  if (err) {
    fp_err_io(e, err, "cannot list the directory of", path);
    return -1;
  }
  fp_err_invalid(e, "not_listed", path, "'%s' is not listed verbatim in its directory", name);
  return -1;
}
