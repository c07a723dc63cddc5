/* Member headers of the archives sandstack sends the Engine (PUT /containers/{id}/archive): a
 * ustar header, preceded by a pax header carrying the path when the name does not fit ustar's
 * 100 bytes. Only regular files are written; the data and padding are the caller's. */
#include <stdio.h>
#include <string.h>

#include "capture/internal.h"

/* width - 1 octal digits, zero-padded, and a NUL, as ustar wants (callers keep v in range) */
static void octal(char *field, size_t width, unsigned long long v) {
  field[width - 1] = '\0';
  for (size_t i = width - 1; i-- > 0; v >>= 3) field[i] = (char)('0' + (v & 7));
}

static void checksum(unsigned char *h) {
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < CAP_BLOCK; i++) sum += h[i];
  octal((char *)h + 148, 7, sum); /* six digits, a NUL, then the space already there */
}

static void ustar(unsigned char *h, const char *name, size_t nlen, char type, unsigned long long size, unsigned mode,
                  long long mtime) {
  memset(h, 0, CAP_BLOCK);
  memcpy(h, name, nlen < 100 ? nlen : 100);
  octal((char *)h + 100, 8, mode & 07777);
  octal((char *)h + 108, 8, 0);
  octal((char *)h + 116, 8, 0);
  octal((char *)h + 124, 12, size);
  octal((char *)h + 136, 12, (unsigned long long)(mtime > 0 ? mtime : 0));
  h[156] = (unsigned char)type;
  memcpy(h + 257, "ustar\0" "00", 8);
  checksum(h);
}

size_t cap_tar_header(unsigned char *out, size_t cap, const char *name, size_t nlen, unsigned long long size,
                      unsigned mode, long long mtime) {
  if (nlen <= 100) {
    if (cap < CAP_BLOCK) return 0;
    ustar(out, name, nlen, '0', size, mode, mtime);
    return CAP_BLOCK;
  }
  /* "%d path=%s\n" where %d counts the whole record, its own digits included */
  size_t rec = nlen + 7, digits = 1;
  for (size_t v = rec; v >= 10; v /= 10) digits++;
  rec += digits;
  if (snprintf(NULL, 0, "%zu", rec) > (int)digits) rec++; /* the count grew a digit */
  size_t data_blocks = (rec + CAP_BLOCK - 1) / CAP_BLOCK;
  size_t total = CAP_BLOCK * (2 + data_blocks);
  if (cap < total) return 0;
  ustar(out, "PaxHeader", 9, 'x', rec, 0644, mtime);
  unsigned char *d = out + CAP_BLOCK;
  memset(d, 0, data_blocks * CAP_BLOCK);
  int k = snprintf((char *)d, rec + 1, "%zu path=", rec);
  memcpy(d + k, name, nlen);
  d[k + nlen] = '\n';
  ustar(out + CAP_BLOCK * (1 + data_blocks), name, nlen, '0', size, mode, mtime);
  return total;
}
