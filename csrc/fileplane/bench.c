/* The benchmark's baseline: the plain syscalls on a host path, with no plane in between. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileplane/fileplane.h"

long fp_bench_plain(char op, const char *host_path, char *buf, size_t n) {
  if (op == 's') {
    struct stat st;
    return lstat(host_path, &st) == 0 ? 0 : -1;
  }
  int fd = op == 'r' ? open(host_path, O_RDONLY | O_CLOEXEC) : open(host_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  ssize_t r = op == 'r' ? read(fd, buf, n) : write(fd, buf, n);
  close(fd);
  return (long)r;
}
