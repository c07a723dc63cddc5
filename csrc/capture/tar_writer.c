/* Member headers of the archives sandstack sends the Engine (PUT /containers/{id}/archive): a
 * ustar header, preceded by a pax header carrying the path and the link's target when they do
 * not fit ustar's 100 bytes. Regular files, directories and symbolic links; the data and the
 * padding are the caller's. */
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

/* One pax record "%d key=value\n" at d, where %d counts the whole record, its own digits
 * included. Returns its length; with d NULL only measures it. */
static size_t pax_record(unsigned char *d, const char *key, const char *v, size_t vlen) {
  size_t klen = strlen(key), rec = klen + vlen + 3, digits = 1;
  for (size_t x = rec; x >= 10; x /= 10) digits++;
  rec += digits;
  if (snprintf(NULL, 0, "%zu", rec) > (int)digits) rec++; /* the count grew a digit */
  if (d) {
    int k = snprintf((char *)d, rec + 1, "%zu %s=", rec, key);
    memcpy(d + k, v, vlen);
    d[k + vlen] = '\n';
  }
  return rec;
}

size_t cap_tar_member(unsigned char *out, size_t cap, const cap_member *m) {
  int long_name = m->nlen > 100, long_link = m->llen > 100;
  size_t pax = (long_name ? pax_record(NULL, "path", m->name, m->nlen) : 0) +
               (long_link ? pax_record(NULL, "linkpath", m->link, m->llen) : 0);
  size_t data_blocks = (pax + CAP_BLOCK - 1) / CAP_BLOCK;
  size_t total = CAP_BLOCK * (1 + (pax ? 1 + data_blocks : 0));
  if (cap < total) return 0;
  unsigned char *h = out;
  if (pax) {
    ustar(out, "PaxHeader", 9, 'x', pax, 0644, m->mtime);
    unsigned char *d = out + CAP_BLOCK;
    memset(d, 0, data_blocks * CAP_BLOCK);
    if (long_name) d += pax_record(d, "path", m->name, m->nlen);
    if (long_link) pax_record(d, "linkpath", m->link, m->llen);
    h = out + CAP_BLOCK * (1 + data_blocks);
  }
  ustar(h, m->name, m->nlen, m->type, m->type == '0' ? m->size : 0, m->mode, m->mtime);
  if (m->llen) memcpy(h + 157, m->link, m->llen < 100 ? m->llen : 100);
  if (m->llen) checksum(h);
  return total;
}

size_t cap_tar_header(unsigned char *out, size_t cap, const char *name, size_t nlen, unsigned long long size,
                      unsigned mode, long long mtime) {
  cap_member m = {.name = name, .nlen = nlen, .type = '0', .size = size, .mode = mode, .mtime = mtime};
  return cap_tar_member(out, cap, &m);
}
