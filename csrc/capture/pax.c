/* pax extended headers: records "LEN KEY=VALUE\n", LEN counting the whole record in decimal.
 *
 * Only what changes where or how much gets written is used: path, linkpath, size and mtime
 * (and GNU.sparse.* keys, which mark a member whose data is a sparse map). Owners, names of
 * owners, times other than mtime, and vendor keys are read past: capture never keeps them. A
 * record that does not parse makes the whole archive malformed, since where the next record
 * starts would be a guess. */
#include <string.h>

#include "capture/internal.h"

/* Plain decimal digits, at least one, no overflow past 2^63. */
static int parse_decimal(const char *s, size_t n, uint64_t *out) {
  if (n == 0) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    if (v > (UINT64_C(1) << 63) / 10) return -1;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  if (v > (UINT64_C(1) << 63)) return -1;
  *out = v;
  return 0;
}

static int key_is(const char *k, size_t kn, const char *want) { return kn == strlen(want) && memcmp(k, want, kn) == 0; }

/* mtime is "[-]SECONDS[.FRACTION]": the whole seconds are kept. */
static int parse_mtime(const char *v, size_t n, long long *out) {
  int neg = n > 0 && v[0] == '-';
  size_t start = neg ? 1 : 0;
  const char *dot = memchr(v + start, '.', n - start);
  size_t whole = dot ? (size_t)(dot - v) - start : n - start;
  uint64_t s;
  if (parse_decimal(v + start, whole, &s) != 0 || s > (uint64_t)INT64_MAX) return -1;
  if (dot) {
    for (const char *c = dot + 1; c < v + n; c++)
      if (*c < '0' || *c > '9') return -1;
  }
  *out = neg ? -(long long)s : (long long)s;
  return 0;
}

static int apply(const char *k, size_t kn, const char *v, size_t vn, cap_pax *x) {
  if (key_is(k, kn, "path")) {
    x->has_path = vn > 0;
    if (vn) cap_name_set(&x->path, v, vn);
  } else if (key_is(k, kn, "linkpath")) {
    x->has_linkpath = vn > 0;
    if (vn) cap_name_set(&x->linkpath, v, vn);
  } else if (key_is(k, kn, "size")) {
    x->has_size = vn > 0;
    if (vn && parse_decimal(v, vn, &x->size) != 0) return -1;
  } else if (key_is(k, kn, "mtime")) {
    x->has_mtime = vn > 0;
    if (vn && parse_mtime(v, vn, &x->mtime) != 0) return -1;
  } else if (kn > 11 && memcmp(k, "GNU.sparse.", 11) == 0) {
    x->sparse = 1;
  }
  return 0;
}

int cap_pax_apply(const char *data, size_t len, cap_pax *x, uint64_t offset, ss_error *e) {
  size_t i = 0;
  while (i < len) {
    /* A header padded with NULs ends at the first NUL where a record would start. */
    if (data[i] == '\0') {
      for (size_t j = i; j < len; j++)
        if (data[j] != '\0') goto bad;
      return 0;
    }
    const char *sp = memchr(data + i, ' ', len - i);
    uint64_t rlen;
    if (!sp || parse_decimal(data + i, (size_t)(sp - (data + i)), &rlen) != 0) goto bad;
    if (rlen > len - i || rlen < (uint64_t)(sp - (data + i)) + 4) goto bad; /* "N k=\n" at least */
    const char *rec = data + i, *end = rec + rlen; /* end is one past the '\n' */
    if (end[-1] != '\n') goto bad;
    const char *k = sp + 1;
    const char *eq = memchr(k, '=', (size_t)(end - 1 - k));
    if (!eq || eq == k) goto bad;
    if (apply(k, (size_t)(eq - k), eq + 1, (size_t)(end - 1 - (eq + 1)), x) != 0) goto bad;
    i += (size_t)rlen;
  }
  return 0;
bad:
  cap_err_archive(e, offset, "a malformed pax record");
  return -1;
}
