/* A streaming tar reader: ustar, GNU (long names 'L'/'K', base-256 numbers) and pax ('x'; 'g'
 * is read past). Only one 512-byte block and one metadata header (at most CAP_META_MAX bytes)
 * are ever held in memory; member data is handed out as it is read.
 *
 * It is strict where leniency would hide damage: a bad checksum, a malformed number, a
 * truncated member and an archive that ends without its zero block are errors, never a quiet
 * end. Names are not judged here (names.c does that on the final name); the reader only
 * records which of the three spellings (pax path, GNU long name, ustar prefix/name) won. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "capture/internal.h"

/* Field offsets and sizes of a ustar header block. */
#define H_NAME 0
#define H_MODE 100
#define H_SIZE 124
#define H_MTIME 136
#define H_CHKSUM 148
#define H_TYPE 156
#define H_LINK 157
#define H_MAGIC 257
#define H_PREFIX 345

void cap_reader_init(cap_reader *r, const cap_source *src) {
  memset(r, 0, sizeof *r);
  r->src = *src;
}

/* Exactly n bytes, or -1 with e set (a short archive is malformed). */
static int read_full(cap_reader *r, void *buf, size_t n, ss_error *e) {
  char *p = buf;
  while (n > 0) {
    ssize_t got = r->src.read(r->src.ctx, p, n);
    if (got < 0) {
      if (errno == EINTR) continue;
      cap_err_io(e, errno, "cannot read the capture archive", NULL);
      return -1;
    }
    if (got == 0) {
      cap_err_archive(e, r->consumed, "the archive ends in the middle of a member");
      return -1;
    }
    p += got;
    n -= (size_t)got;
    r->consumed += (uint64_t)got;
  }
  return 0;
}

/* Reads past n bytes. */
static int skip_bytes(cap_reader *r, uint64_t n, ss_error *e) {
  char buf[4096];
  while (n > 0) {
    size_t k = n < sizeof buf ? (size_t)n : sizeof buf;
    if (read_full(r, buf, k, e) != 0) return -1;
    n -= k;
  }
  return 0;
}

static uint64_t padding(uint64_t size) { return (CAP_BLOCK - size % CAP_BLOCK) % CAP_BLOCK; }

/* A numeric field: octal digits (leading spaces allowed, ended by a space or NUL), or GNU
 * base-256 when the first byte has its high bit set (negative values refused). */
static int parse_number(const unsigned char *f, size_t n, uint64_t *out) {
  uint64_t v = 0;
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return -1; /* 0xff: negative; anything else is not a format we know */
    for (size_t i = 1; i < n; i++) {
      if (v >> 55) return -1; /* the next shift would pass 2^63 */
      v = (v << 8) | f[i];
    }
    *out = v;
    return 0;
  }
  size_t i = 0;
  while (i < n && f[i] == ' ') i++;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
    if (v >> 60) return -1;
    v = (v << 3) | (uint64_t)(f[i] - '0');
  }
  /* The rest must be terminators only; an all-NUL field is zero. */
  for (; i < n; i++)
    if (f[i] != ' ' && f[i] != '\0') return -1;
  *out = v;
  return 0;
}

static int is_zero_block(const unsigned char *b) {
  for (size_t i = 0; i < CAP_BLOCK; i++)
    if (b[i]) return 0;
  return 1;
}

/* The stored checksum against both sums tar writers have used (unsigned and signed bytes). */
static int checksum_ok(const unsigned char *b) {
  uint64_t stored;
  if (parse_number(b + H_CHKSUM, 8, &stored) != 0) return 0;
  unsigned long usum = 0;
  long ssum = 0;
  for (size_t i = 0; i < CAP_BLOCK; i++) {
    unsigned char c = (i >= H_CHKSUM && i < H_CHKSUM + 8) ? ' ' : b[i];
    usum += c;
    ssum += (signed char)c;
  }
  return stored == usum || (long long)stored == ssum;
}

/* A NUL-terminated header field (up to n bytes). */
static size_t field_len(const unsigned char *f, size_t n) {
  const void *z = memchr(f, '\0', n);
  return z ? (size_t)((const unsigned char *)z - f) : n;
}

/* The ustar spelling: prefix "/" name for POSIX ustar ("ustar\0"); the old GNU magic
 * ("ustar  \0") uses the prefix area for other fields, and v7 has no prefix. */
static void header_name(const unsigned char *b, cap_name *out) {
  char buf[155 + 1 + 100];
  size_t n = 0;
  if (memcmp(b + H_MAGIC, "ustar\0", 6) == 0) {
    size_t pl = field_len(b + H_PREFIX, 155);
    if (pl) {
      memcpy(buf, b + H_PREFIX, pl);
      n = pl;
      buf[n++] = '/';
    }
  }
  size_t nl = field_len(b + H_NAME, 100);
  memcpy(buf + n, b + H_NAME, nl);
  cap_name_set(out, buf, n + nl);
}

/* Types whose size field does not announce data (as Go's archive/tar, the engine's writer). */
static int header_only(char t) { return t == '1' || t == '2' || t == '3' || t == '4' || t == '5' || t == '6'; }

/* What pax and GNU headers set for the member that follows them. */
typedef struct pending {
  cap_pax pax;
  cap_name gnu_name, gnu_link;
  int has_gnu_name, has_gnu_link;
} pending;

/* Reads the data of a metadata header (pax or GNU long name): malloc'ed, NUL-terminated. */
static char *read_meta(cap_reader *r, uint64_t size, ss_error *e) {
  if (size > CAP_META_MAX) {
    cap_err_archive(e, r->consumed, "a pax or long-name header of %llu bytes (at most %u)",
                    (unsigned long long)size, CAP_META_MAX);
    return NULL;
  }
  char *buf = malloc((size_t)size + 1);
  if (!buf) {
    cap_err_io(e, ENOMEM, "cannot hold a header of the capture archive", NULL);
    return NULL;
  }
  if (read_full(r, buf, (size_t)size, e) != 0 || skip_bytes(r, padding(size), e) != 0) {
    free(buf);
    return NULL;
  }
  buf[size] = '\0';
  return buf;
}

/* GNU 'L'/'K' data is the name and a terminating NUL (or several); anything after an inner
 * NUL would be hidden from other readers, so it is kept and marks the name as nul. */
static void gnu_long_name(const char *data, size_t size, cap_name *out) {
  while (size > 0 && data[size - 1] == '\0') size--;
  cap_name_set(out, data, size);
}

static int meta_header(cap_reader *r, char type, uint64_t size, pending *p, ss_error *e) {
  char *data = read_meta(r, size, e);
  if (!data) return -1;
  int rc = 0;
  if (type == 'x') {
    rc = cap_pax_apply(data, (size_t)size, &p->pax, r->consumed, e);
  } else if (type == 'L') {
    gnu_long_name(data, (size_t)size, &p->gnu_name);
    p->has_gnu_name = 1;
  } else if (type == 'K') {
    gnu_long_name(data, (size_t)size, &p->gnu_link);
    p->has_gnu_link = 1;
  }
  /* 'g' (global pax) is read past: it names no member, and every name is checked anyway. */
  free(data);
  return rc;
}

int cap_reader_next(cap_reader *r, cap_entry *ent, ss_error *e) {
  if (r->ended) return 0;
  if (skip_bytes(r, r->left + r->pad, e) != 0) return -1;
  r->left = r->pad = 0;
  pending *p = calloc(1, sizeof *p);
  if (!p) {
    cap_err_io(e, ENOMEM, "cannot read the capture archive", NULL);
    return -1;
  }
  int rc = -1;
  for (int metas = 0;; metas++) {
    unsigned char b[CAP_BLOCK];
    uint64_t at = r->consumed;
    /* A clean end of input right at a header is still a missing end-of-archive block. */
    if (read_full(r, b, CAP_BLOCK, e) != 0) goto out;
    if (is_zero_block(b)) {
      if (metas > 0) {
        cap_err_archive(e, at, "the archive ends after a pax or long-name header");
        goto out;
      }
      /* The end: one zero block is enough (the second, and any padding, is not read). */
      r->ended = 1;
      rc = 0;
      goto out;
    }
    if (!checksum_ok(b)) {
      cap_err_archive(e, at, "header checksum mismatch");
      goto out;
    }
    uint64_t size, mode, mtime;
    if (parse_number(b + H_SIZE, 12, &size) != 0 || parse_number(b + H_MODE, 8, &mode) != 0) {
      cap_err_archive(e, at, "a malformed size or mode field");
      goto out;
    }
    if (parse_number(b + H_MTIME, 12, &mtime) != 0 || mtime > (uint64_t)INT64_MAX) mtime = 0;
    char type = (char)b[H_TYPE];
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
      if (metas + 1 >= CAP_META_CHAIN) {
        cap_err_archive(e, at, "more than %d pax or long-name headers in a row", CAP_META_CHAIN - 1);
        goto out;
      }
      if (meta_header(r, type, size, p, e) != 0) goto out;
      continue;
    }
    memset(ent, 0, sizeof *ent);
    ent->type = type;
    if (p->pax.has_path) ent->name = p->pax.path;
    else if (p->has_gnu_name) ent->name = p->gnu_name;
    else header_name(b, &ent->name);
    if (p->pax.has_linkpath) ent->link = p->pax.linkpath;
    else if (p->has_gnu_link) ent->link = p->gnu_link;
    else cap_name_set(&ent->link, (const char *)b + H_LINK, field_len(b + H_LINK, 100));
    /* v7 archives mark directories with a trailing slash on a plain-file type. */
    if (type == '\0' && ent->name.len && ent->name.s[ent->name.len - 1] == '/') ent->type = '5';
    if (p->pax.has_size) size = p->pax.size;
    if (size > (uint64_t)INT64_MAX) {
      cap_err_archive(e, at, "a member of %llu bytes", (unsigned long long)size);
      goto out;
    }
    ent->mode = (unsigned)(mode & 07777);
    ent->mtime = p->pax.has_mtime ? p->pax.mtime : (long long)mtime;
    ent->sparse = p->pax.sparse || type == 'S';
    ent->size = header_only(ent->type) ? 0 : size;
    r->left = ent->size;
    r->pad = padding(ent->size);
    rc = 1;
    goto out;
  }
out:
  free(p);
  return rc;
}

ssize_t cap_reader_data(cap_reader *r, void *buf, size_t n, ss_error *e) {
  if (r->left == 0) return 0;
  if (n > r->left) n = (size_t)r->left;
  for (;;) {
    ssize_t got = r->src.read(r->src.ctx, buf, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      cap_err_io(e, errno, "cannot read the capture archive", NULL);
      return -1;
    }
    if (got == 0) {
      cap_err_archive(e, r->consumed, "the archive ends in the middle of a member");
      return -1;
    }
    r->left -= (uint64_t)got;
    r->consumed += (uint64_t)got;
    return got;
  }
}
