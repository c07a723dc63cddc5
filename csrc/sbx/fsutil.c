/* rm -rf without following links: nftw with FTW_PHYS, children before parents. */
#include "sbx/fsutil.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static int rm_one(const char *p, const struct stat *sb, int type, struct FTW *f) {
  (void)sb;
  (void)f;
  if (type == FTW_DP || type == FTW_D) return remove(p) == 0 || errno == ENOENT ? 0 : -1;
  return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

int ss_rmtree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode)) return remove(path);
  return nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}
