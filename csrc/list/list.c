/* sandstack-list PATH OUT MAX_ENTRIES: the entries of one directory of a sandbox, names and
 * stats only, for h:list when the directory's tree is too large for the engine's archive (which
 * would send every file's bytes, a sparse 16 GiB file as 16 GiB).
 *
 * The host starts it in a short-lived helper container that shares the sandbox's PID namespace
 * (lua/sandstack/docker/list_helper.lua), like sandstack-reap: no network, every capability
 * dropped but SYS_PTRACE (to open /proc/1/root of a process of another user or with more
 * capabilities) and DAC_READ_SEARCH (to read a directory whatever its mode), no-new-privileges.
 * It is linked statically and uploaded into the helper, so nothing of the sandbox's image runs.
 *
 * The sandbox's files are reached through /proc/1/root, the root of the sandbox's first
 * process, and PATH is resolved beneath it by openat2 with RESOLVE_IN_ROOT: a link in the
 * sandbox, absolute or not, resolves inside the sandbox's root, never the helper's; the last
 * component is not followed (a link there is not a directory, as the archive says). Nothing is
 * read but directory entries and their stats, and at most MAX_ENTRIES of them and
 * SS_LIST_OUTPUT_MAX bytes are written to OUT, a new file in the helper's own root (the host
 * reads it back through the engine's archive). Format: csrc/list/format.h.
 *
 * Exit 0: OUT holds a listing (an "error" line included: the directory is missing, not one, or
 * unreadable); 2: bad usage, OUT not made, or the sandbox's root not reachable. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "list/format.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

static int fail(const char *what) {
  fprintf(stderr, "sandstack-list: %s: %s\n", what, strerror(errno));
  return 2;
}

static char type_of(mode_t m) { return S_ISREG(m) ? 'f' : S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'l' : 'o'; }

/* The directory PATH beneath root: its fd, or -1 with errno set. */
static int open_dir(int root, const char *path) {
  while (*path == '/') path++;
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, root, *path ? path : ".", &how, sizeof how);
  if (fd < 0 && errno == ELOOP) errno = ENOTDIR; /* the last component is a link */
  return fd;
}

int main(int argc, char **argv) {
  if (argc != 4 || argv[1][0] != '/') {
    fputs("usage: sandstack-list PATH OUT MAX_ENTRIES\n", stderr);
    return 2;
  }
  char *end;
  unsigned long long max = strtoull(argv[3], &end, 10);
  if (*end || max == 0) {
    fputs("sandstack-list: MAX_ENTRIES must be a positive number\n", stderr);
    return 2;
  }
  int ofd = open(argv[2], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (ofd < 0) return fail("cannot make the output");
  FILE *out = fdopen(ofd, "w");
  if (!out) return fail("cannot write the output");
  /* Shares the sandbox's PID namespace, or this lists its own root: refuse that. */
  struct stat mine, theirs;
  int root = open("/proc/1/root", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0 || fstat(root, &theirs) != 0 || stat("/", &mine) != 0) return fail("cannot open /proc/1/root");
  if (mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino) {
    fputs("sandstack-list: /proc/1 is this helper's own: the PID namespace is not the sandbox's\n", stderr);
    return 2;
  }
  fputs(SS_LIST_MAGIC, out);
  int dfd = open_dir(root, argv[1]);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    const char *ename = strerrorname_np(errno);
    fprintf(out, "error %s\n", ename ? ename : "EIO");
    return fclose(out) == 0 ? 0 : fail("cannot write the output");
  }
  unsigned long long n = 0, bytes = 0;
  const char *last = "end";
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno) last = "error";
      break;
    }
    const char *name = de->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
    struct stat st;
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue; /* gone since it was listed */
    char link[4096];
    ssize_t ll = 0;
    if (S_ISLNK(st.st_mode)) {
      ll = readlinkat(dirfd(d), name, link, sizeof link);
      if (ll < 0 || (size_t)ll >= sizeof link) ll = 0;
    }
    size_t nl = strlen(name);
    bytes += nl + (size_t)ll + 64;
    if (n == max || bytes > SS_LIST_OUTPUT_MAX) {
      last = "over";
      break;
    }
    fprintf(out, "%c %o %llu %lld %zu %zd\n", type_of(st.st_mode), (unsigned)(st.st_mode & 07777),
            (unsigned long long)st.st_size, (long long)st.st_mtime, nl, ll);
    fwrite(name, 1, nl, out);
    fwrite(link, 1, (size_t)ll, out);
    fputc('\n', out);
    n++;
  }
  if (strcmp(last, "error") == 0) {
    const char *ename = strerrorname_np(errno);
    fprintf(out, "error %s\n", ename ? ename : "EIO");
  } else {
    fprintf(out, "%s %llu\n", last, n);
  }
  closedir(d);
  return fclose(out) == 0 ? 0 : fail("cannot write the output");
}
