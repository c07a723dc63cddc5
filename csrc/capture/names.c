/* Member names: set from the archive's bytes (cap_name_set), then judged on the string alone
 * before anything touches the file system.
 *
 * Stricter than the file plane's path.c on purpose: a guest-made archive has no business
 * climbing, so any ".." component is refused outright (the plane allows "a/../b" because it
 * resolves it lexically under a root it knows; here there is no reason to). Absolute names are
 * refused rather than made relative, as GNU tar would, so the report says what the guest tried.
 * Empty and "." components are dropped ("./a//b" is "a/b"), and a trailing slash is allowed. The
 * limits are the plane's: FP_NAME_MAX bytes a component, FP_PATH_MAX - 1 the whole name. */
#include <string.h>

#include "capture/internal.h"

/* Kept whole up to FP_PATH_MAX - 1 bytes; the marks are what cap_name_check refuses below.
 * Both the tar reader (GNU long names, linknames) and pax.c (path, linkpath) set names here. */
void cap_name_set(cap_name *n, const char *s, size_t len) {
  n->nul = memchr(s, '\0', len) != NULL;
  n->too_long = len > sizeof n->s - 1;
  n->len = n->too_long ? sizeof n->s - 1 : len;
  memcpy(n->s, s, n->len);
  n->s[n->len] = '\0';
}

const char *cap_name_check(const cap_name *n, char *out, size_t *out_len, int *is_root) {
  *out_len = 0;
  *is_root = 0;
  if (n->nul) return "nul";
  if (n->too_long) return "too_long";
  if (n->len == 0) return "empty";
  if (n->s[0] == '/') return "absolute";
  size_t i = 0, o = 0;
  while (i < n->len) {
    while (i < n->len && n->s[i] == '/') i++;
    size_t start = i;
    while (i < n->len && n->s[i] != '/') i++;
    size_t c = i - start;
    if (c == 0 || (c == 1 && n->s[start] == '.')) continue;
    if (c == 2 && n->s[start] == '.' && n->s[start + 1] == '.') return "dotdot";
    if (c > FP_NAME_MAX) return "name_too_long";
    if (o) out[o++] = '/';
    memcpy(out + o, n->s + start, c);
    o += c;
  }
  /* o never exceeds n->len, which is under FP_PATH_MAX: the copy above always fits. */
  out[o] = '\0';
  *out_len = o;
  if (o == 0) *is_root = 1;
  return NULL;
}
