/* libFuzzer target: the archive writer's members of every type (cap_tar_member: the uploads of
 * a host directory, capture/tree_tar.c) against the capture's reader. A directory, a symbolic
 * link or a file with any name and link target (1 to FP_PATH_MAX - 1 bytes, no NUL) makes a
 * header that the streaming tar reader reads back as exactly that member: the same type, name
 * (the ustar field or the pax record, whichever the length chose) and link target, and then the
 * archive's end. Input: 1 byte of type (0 file, 1 directory, 2 link), 2 bytes of the name's
 * length, the name, the rest the link target. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "fuzz/tar_fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  static const char types[] = {'0', '5', '2'};
  char type = types[data[0] % 3];
  size_t nlen = ((size_t)data[1] << 8 | data[2]) % FP_PATH_MAX;
  const char *name = (const char *)data + 3;
  if (nlen == 0 || nlen > size - 3) return 0;
  const char *link = type == '2' ? name + nlen : NULL;
  size_t llen = type == '2' ? size - 3 - nlen : 0;
  if (nlen >= FP_PATH_MAX - 1 || llen >= FP_PATH_MAX || memchr(name, '\0', nlen) || (link && memchr(link, '\0', llen)))
    return 0;
  char full[FP_PATH_MAX + 1];
  memcpy(full, name, nlen);
  if (type == '5') full[nlen++] = '/'; /* a directory's name ends in a slash */
  cap_member m = {.name = full, .nlen = nlen, .type = type, .size = type == '0' ? 3 : 0, .mode = 0755,
                  .mtime = 1, .link = link, .llen = llen};
  size_t cap = CAP_MEMBER_MAX(nlen, llen);
  unsigned char *buf = calloc(1, cap + 512 + 1024);
  if (!buf) return 0;
  size_t h = cap_tar_member(buf, cap, &m);
  if (h == 0 || h % 512 != 0) abort();
  size_t len = h + (type == '0' ? 512 : 0) + 1024;
  if (type == '0') memcpy(buf + h, "abc", 3);
  mem src_mem;
  cap_reader r;
  cap_entry ent;
  ss_error e;
  read_first(buf, len, &src_mem, &r, &ent, &e);
  if (ent.type != type || ent.name.len != nlen || memcmp(ent.name.s, full, nlen) != 0) abort();
  if (type == '2' && (ent.link.len != llen || memcmp(ent.link.s, link, llen) != 0)) abort();
  if (ent.size != (type == '0' ? 3u : 0u)) abort();
  if (cap_reader_next(&r, &ent, &e) != 0) abort();
  ss_error_clear(&e);
  free(buf);
  return 0;
}
