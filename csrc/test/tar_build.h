/* Tar archives built in memory for the capture's tests, header field by field, independently of
 * the writer under test (csrc/capture/tar_writer.c), and a cap_source that hands them out in
 * short reads. Header-only: the two test programs that use it each compile it once. */
#ifndef SANDSTACK_TEST_TAR_BUILD_H
#define SANDSTACK_TEST_TAR_BUILD_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/capture.h"

typedef struct tb_archive {
  unsigned char *b;
  size_t n, cap;
  int oom; /* an append failed: the archive is incomplete */
} tb_archive;

/* One ustar header. A NULL magic is POSIX's "ustar\0" "00"; size_field, when set, is 12 bytes
 * written into the size field as they are (a malformed or base-256 value); chksum_delta skews
 * the sum. type 0 stands for '0' unless keep_type (a v7 archive's NUL type). */
typedef struct tb_header {
  const char *name, *link, *prefix, *magic, *size_field;
  char type;
  int keep_type;
  unsigned long long size;
  unsigned mode;
  long long mtime;
  int chksum_delta;
} tb_header;

static inline void tb_append(tb_archive *a, const void *p, size_t n) {
  if (a->n + n > a->cap) {
    size_t cap = (a->n + n) * 2 + 4096;
    unsigned char *b = realloc(a->b, cap);
    if (!b) {
      a->oom = 1;
      return;
    }
    a->b = b, a->cap = cap;
  }
  memcpy(a->b + a->n, p, n);
  a->n += n;
}

/* Zero bytes up to the next 512-byte boundary. */
static inline void tb_pad(tb_archive *a) {
  static const unsigned char zeros[512];
  if (a->n % 512) tb_append(a, zeros, 512 - a->n % 512);
}

static inline void tb_header_block(tb_archive *a, const tb_header *h) {
  unsigned char b[512];
  memset(b, 0, sizeof b);
  memcpy(b, h->name, strnlen(h->name, 100));
  snprintf((char *)b + 100, 8, "%07o", h->mode);
  snprintf((char *)b + 108, 8, "%07o", 0);
  snprintf((char *)b + 116, 8, "%07o", 0);
  if (h->size_field) memcpy(b + 124, h->size_field, 12);
  else snprintf((char *)b + 124, 12, "%011llo", h->size);
  snprintf((char *)b + 136, 12, "%011llo", (unsigned long long)h->mtime);
  b[156] = (unsigned char)h->type;
  if (h->link) memcpy(b + 157, h->link, strnlen(h->link, 100));
  memcpy(b + 257, h->magic ? h->magic : "ustar\0" "00", 8);
  if (h->prefix) memcpy(b + 345, h->prefix, strnlen(h->prefix, 155));
  memset(b + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += b[i];
  snprintf((char *)b + 148, 8, "%06o", sum + (unsigned)h->chksum_delta); /* six digits, NUL, the space kept */
  b[155] = ' ';
  tb_append(a, b, sizeof b);
}

/* A member: its header (size from n unless the header says otherwise), then data and padding. */
static inline void tb_member(tb_archive *a, tb_header h, const void *data, size_t n) {
  if (!h.size_field && !h.size) h.size = n;
  if (!h.mode) h.mode = 0644;
  if (!h.type && !h.keep_type) h.type = '0';
  tb_header_block(a, &h);
  if (n) tb_append(a, data, n);
  tb_pad(a);
}

/* A pax ('x') or GNU long-name ('L', 'K') header carrying data. */
static inline void tb_meta(tb_archive *a, char type, const void *data, size_t n) {
  tb_member(a, (tb_header){.name = "././@Meta", .type = type}, data, n);
}

/* The end of the archive: two zero blocks. */
static inline void tb_end(tb_archive *a) {
  static const unsigned char zeros[1024];
  tb_append(a, zeros, sizeof zeros);
}

/* The archive as a cap_source, handed out in reads of at most 7 bytes every third call, so the
 * reader meets short reads. */
typedef struct tb_reading {
  const unsigned char *p;
  size_t n, at, calls;
} tb_reading;

static inline ssize_t tb_read(void *ctx, void *buf, size_t n) {
  tb_reading *r = ctx;
  size_t k = r->n - r->at < n ? r->n - r->at : n;
  if (++r->calls % 3 == 0 && k > 7) k = 7;
  memcpy(buf, r->p + r->at, k);
  r->at += k;
  return (ssize_t)k;
}

#endif
