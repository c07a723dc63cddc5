/* libFuzzer target: the archive writer (cap_tar_header) against the capture's reader. Any name
 * (1 to FP_PATH_MAX - 1 bytes, no NUL), size, mode and time make a header that the streaming
 * tar reader reads back as exactly that member: the same name (the ustar field or the pax path
 * record, whichever the length chose), size, permission bits and type, its data intact, and then
 * the archive's end. Input: 2 bytes of size (0..65535), 2 of mode, 4 of mtime, the rest the name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "fuzz/tar_fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 9) return 0;
  size_t fsize = (size_t)data[0] << 8 | data[1];
  unsigned mode = ((unsigned)data[2] << 8 | data[3]) & 07777;
  long long mtime = (long long)((uint32_t)data[4] << 24 | (uint32_t)data[5] << 16 | (uint32_t)data[6] << 8 | data[7]);
  const char *name = (const char *)data + 8;
  size_t nlen = size - 8;
  if (nlen >= FP_PATH_MAX || memchr(name, '\0', nlen)) return 0;
  size_t cap = CAP_TAR_HEADER_MAX(nlen);
  size_t total = cap + fsize + 512 + 1024;
  unsigned char *buf = calloc(1, total);
  if (!buf) return 0;
  size_t h = cap_tar_header(buf, cap, name, nlen, fsize, mode, mtime);
  if (h == 0 || h % 512 != 0) abort();
  for (size_t i = 0; i < fsize; i++) buf[h + i] = (unsigned char)(i * 31 + 7);
  size_t len = h + (fsize + 511) / 512 * 512 + 1024;
  mem m;
  cap_reader r;
  cap_entry ent;
  ss_error e;
  read_first(buf, len, &m, &r, &ent, &e);
  if (ent.type != '0' || ent.size != fsize || (ent.mode & 07777) != mode || ent.mtime != mtime) abort();
  if (ent.name.len != nlen || memcmp(ent.name.s, name, nlen) != 0) abort();
  unsigned char chunk[4096];
  size_t got = 0;
  for (;;) {
    ssize_t n = cap_reader_data(&r, chunk, sizeof chunk, &e);
    if (n < 0) abort();
    if (n == 0) break;
    for (ssize_t i = 0; i < n; i++)
      if (chunk[i] != (unsigned char)((got + (size_t)i) * 31 + 7)) abort();
    got += (size_t)n;
  }
  if (got != fsize) abort();
  if (cap_reader_next(&r, &ent, &e) != 0) abort();
  ss_error_clear(&e);
  free(buf);
  return 0;
}
