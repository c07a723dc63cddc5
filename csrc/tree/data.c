/* A regular file's bytes (tree.h): copied with its holes kept, and compared. The guest chooses
 * the sizes; a sparse file of any apparent size costs only its data here, since the data
 * segments are found with SEEK_DATA and SEEK_HOLE (where the file system has them) and a block
 * of zeros is skipped, not written, so the copy stays sparse. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "tree/tree.h"

static int all_zero(const char *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* Copies [from, to) of in to out at the same offsets; stops early at the end of in. */
static int copy_range(int in, int out, off_t from, off_t to, char *buf) {
  for (off_t at = from; at < to;) {
    size_t want = (size_t)(to - at < TREE_IO_BLOCK ? to - at : TREE_IO_BLOCK);
    ssize_t n = pread(in, buf, want, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) return 0;
    if (!all_zero(buf, (size_t)n))
      for (ssize_t done = 0; done < n;) {
        ssize_t w = pwrite(out, buf + done, (size_t)(n - done), at + done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        done += w;
      }
    at += n;
  }
  return 0;
}

int tree_copy_data(int in, int out, off_t size, char *buf) {
  for (off_t at = 0; at < size;) {
    off_t data = lseek(in, at, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break; /* a hole to the end */
    if (data < 0) data = at;               /* no SEEK_DATA here: read it all */
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0 || hole <= data) hole = size;
    if (hole > size) hole = size;
    if (copy_range(in, out, data, hole, buf) != 0) return -1;
    at = hole;
  }
  return ftruncate(out, size); /* the trailing hole, and the size */
}

/* Reads n bytes at off, or fewer at the end of the file: the count, or -1. */
static ssize_t read_at(int fd, char *buf, size_t n, off_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, buf + got, n - got, off + (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

int tree_same_data(int a, int b, off_t size, char *buf_a, char *buf_b) {
  for (off_t at = 0; at < size; at += TREE_IO_BLOCK) {
    ssize_t na = read_at(a, buf_a, TREE_IO_BLOCK, at), nb = read_at(b, buf_b, TREE_IO_BLOCK, at);
    if (na < 0 || nb < 0) return -1;
    if (na != nb || memcmp(buf_a, buf_b, (size_t)na) != 0) return 0;
    if (na < TREE_IO_BLOCK) break;
  }
  return 1;
}
