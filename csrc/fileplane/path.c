/* Guest path -> path relative to the anchor, decided on the string alone.
 *
 * `..` is resolved lexically and may never climb above where the path starts, not even to come
 * back: guest_root for an absolute path, the working directory for a relative one (as the
 * original backend refuses `../outside`). The plane refuses symlinks at every component, so a
 * lexical `..` names the same directory the kernel would reach, and nothing the guest plants
 * can change that. The result holds no empty, "." or ".." component, so the resolver only ever
 * sees plain names. */
#include <stdio.h>
#include <string.h>

#include "fileplane/internal.h"

/* Next component of s[i..len): skips slashes; sets c and clen, returns 0 at the end. */
static int next_component(const char *s, size_t len, size_t *i, const char **c, size_t *clen) {
  while (*i < len && s[*i] == '/') (*i)++;
  if (*i >= len) return 0;
  size_t start = *i;
  while (*i < len && s[*i] != '/') (*i)++;
  *c = s + start;
  *clen = *i - start;
  return 1;
}

static int is_dot(const char *c, size_t n) { return n == 1 && c[0] == '.'; }
static int is_dotdot(const char *c, size_t n) { return n == 2 && c[0] == '.' && c[1] == '.'; }

static void set_last(fp_path *out) {
  out->rel[out->len] = '\0';
  if (out->len == 0) {
    out->last = NULL;
    return;
  }
  const char *slash = memrchr(out->rel, '/', out->len);
  out->last = slash ? slash + 1 : out->rel;
}

/* Printable copy of a path for messages (stops at a NUL, cut when long). */
static void show(char *buf, size_t cap, const char *path, size_t len) {
  size_t n = strnlen(path, len);
  if (n > 200) n = 200;
  snprintf(buf, cap, "%.*s%s", (int)n, path, n < len ? "..." : "");
}

int fp_normalize(const fp_plane *p, const fp_path *cwd, const char *path, size_t len, fp_path *out, ss_error *e) {
  char shown[256];
  show(shown, sizeof shown, path, len);
  if (len == 0) {
    fp_err_invalid(e, "empty", shown, "empty path");
    return -1;
  }
  if (memchr(path, '\0', len)) {
    fp_err_invalid(e, "nul", shown, "path holds a NUL byte");
    return -1;
  }
  size_t i = 0, clen = 0, floor = 0;
  const char *c = NULL;
  if (path[0] == '/') {
    /* The leading components must be guest_root's, literally. */
    size_t gi = 0, glen = 0;
    const char *g = NULL;
    while (next_component(p->guest_root, p->guest_root_len, &gi, &g, &glen)) {
      int have;
      do {
        have = next_component(path, len, &i, &c, &clen);
      } while (have && is_dot(c, clen));
      if (!have || clen != glen || memcmp(c, g, glen) != 0) {
        fp_err_invalid(e, "outside", shown, "'%s' is not under %s", shown, p->guest_root);
        return -1;
      }
    }
    out->len = 0;
  } else {
    const fp_path *base = cwd ? cwd : &p->cwd;
    if (out != base) memcpy(out->rel, base->rel, base->len);
    out->len = floor = base->len;
  }
  while (next_component(path, len, &i, &c, &clen)) {
    if (is_dot(c, clen)) continue;
    if (is_dotdot(c, clen)) {
      if (out->len <= floor) {
        if (floor == 0)
          fp_err_invalid(e, "outside", shown, "'%s' climbs out of %s", shown, p->guest_root);
        else
          fp_err_invalid(e, "outside", shown, "'%s' climbs above the working directory %s/%.*s", shown, p->guest_root,
                         (int)floor, out->rel);
        return -1;
      }
      const char *slash = memrchr(out->rel, '/', out->len);
      out->len = slash ? (size_t)(slash - out->rel) : 0;
      continue;
    }
    if (clen > FP_NAME_MAX) {
      fp_err_invalid(e, "name_too_long", shown, "a component of '%s' is over %d bytes", shown, FP_NAME_MAX);
      return -1;
    }
    if (fp_name_allowed(c, clen, shown, e) != 0) return -1;
    size_t need = out->len + (out->len ? 1 : 0) + clen;
    if (need >= FP_PATH_MAX) {
      fp_err_invalid(e, "too_long", shown, "'%s' is over %d bytes", shown, FP_PATH_MAX - 1);
      return -1;
    }
    if (out->len) out->rel[out->len++] = '/';
    memcpy(out->rel + out->len, c, clen);
    out->len += clen;
  }
  set_last(out);
  return 0;
}

int fp_guest_path(const fp_plane *p, const fp_path *rel, char *buf, size_t cap, ss_error *e) {
  int n = rel->len ? snprintf(buf, cap, "%s/%s", p->guest_root, rel->rel) : snprintf(buf, cap, "%s", p->guest_root);
  if (n < 0 || (size_t)n >= cap) {
    fp_err_invalid(e, "too_long", rel->rel, "guest path is over %zu bytes", cap - 1);
    return -1;
  }
  return 0;
}
