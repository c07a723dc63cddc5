#ifndef SANDSTACK_TAR_FUZZ_COMMON_H
#define SANDSTACK_TAR_FUZZ_COMMON_H
/* What the tar writer's fuzz targets share: an archive in memory as the capture reader's source. */
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "capture/internal.h"

typedef struct {
  const unsigned char *p;
  size_t len, at;
} mem;

static inline ssize_t mem_read(void *ctx, void *buf, size_t n) {
  mem *m = ctx;
  size_t k = m->len - m->at < n ? m->len - m->at : n;
  memcpy(buf, m->p + m->at, k);
  m->at += k;
  return (ssize_t)k;
}

/* A reader of the archive of len bytes at buf (kept in *m, which must outlive r), standing at
 * its first member (read into *ent): aborts unless there is one. */
static inline void read_first(const unsigned char *buf, size_t len, mem *m, cap_reader *r, cap_entry *ent,
                              ss_error *e) {
  *m = (mem){buf, len, 0};
  cap_source src = {mem_read, m};
  cap_reader_init(r, &src);
  ss_error_init(e);
  if (cap_reader_next(r, ent, e) != 1) abort();
}

#endif
