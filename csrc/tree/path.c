/* The working path of a walk, and the one way the program ends on an error (tree.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tree/tree.h"

size_t tree_path_push(tree_path *p, const char *name) {
  size_t was = p->len, n = strlen(name);
  size_t need = p->len + n + 2;
  if (need > p->cap) {
    size_t cap = p->cap ? p->cap : 256;
    while (cap < need) cap *= 2;
    char *s = realloc(p->s, cap);
    if (!s) tree_fail(TREE_EXIT_IO, "io", "out of memory for the path", p, ENOMEM);
    p->s = s;
    p->cap = cap;
  }
  if (p->len) p->s[p->len++] = '/';
  memcpy(p->s + p->len, name, n + 1);
  p->len += n;
  return was;
}

void tree_path_cut(tree_path *p, size_t len) {
  p->len = len;
  if (p->s) p->s[len] = '\0';
}

void tree_path_free(tree_path *p) {
  free(p->s);
  p->s = NULL;
  p->len = p->cap = 0;
}

_Noreturn void tree_fail(int status, const char *reason, const char *what, const tree_path *p, int err) {
  fprintf(stderr, "%s %s: ", reason, what);
  size_t n = p && p->s ? p->len : 0;
  if (n == 0) fputs(".", stderr);
  for (size_t i = 0; i < n && i < 300; i++) {
    unsigned char c = (unsigned char)p->s[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') fputc(c, stderr);
    else fprintf(stderr, "\\x%02x", c);
  }
  if (n > 300) fputs("...", stderr);
  if (err) fprintf(stderr, ": %s", strerror(err));
  fputc('\n', stderr);
  exit(status);
}

int tree_open_dir(int dir, const char *name) {
  return openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

const char *tree_next_name(DIR *d) {
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) return NULL;
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) return e->d_name;
  }
}
