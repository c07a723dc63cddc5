/* sandstack-tree diff OLD NEW MAX_BYTES (tree.h): the regular files of NEW against those of OLD,
 * by content, as changes{since} reports them. One line per difference on stdout:
 *   A <path>   a regular file in NEW only        D <path>   in OLD only
 *   C <path>   in both, with other bytes
 * the path relative to the root in lowercase hex (a name is any bytes but '/' and NUL), then
 * "end". Only regular files count, as `find -type f` lists them: a file that became a link or a
 * directory is deleted, what is under a directory that became a link is deleted. Both trees are
 * walked together, directory by directory, with nothing held but the open levels. An answer
 * that would pass MAX_BYTES ends with "truncated" instead, exit 4. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree/tree.h"

typedef struct {
  tree_path path;
  uint64_t written, max_bytes;
  char buf_a[TREE_IO_BLOCK], buf_b[TREE_IO_BLOCK];
} diff_ctx;

static void fail_io(diff_ctx *c, const char *what) { tree_fail(TREE_EXIT_IO, "io", what, &c->path, errno); }

static void emit(diff_ctx *c, char kind) {
  uint64_t line = 2 + 2 * (uint64_t)c->path.len + 1;
  if (c->written + line + sizeof "truncated\n" > c->max_bytes) {
    fputs("truncated\n", stdout);
    fflush(stdout);
    exit(TREE_EXIT_OUTPUT);
  }
  static const char hex[] = "0123456789abcdef";
  putchar(kind);
  putchar(' ');
  for (size_t i = 0; i < c->path.len; i++) {
    unsigned char b = (unsigned char)c->path.s[i];
    putchar(hex[b >> 4]);
    putchar(hex[b & 15]);
  }
  putchar('\n');
  c->written += line;
}

/* The entry's status in dir (a link not followed); 0 when there is none. */
static mode_t type_in(int dir, const char *name, struct stat *st) {
  if (dir < 0 || fstatat(dir, name, st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
  return st->st_mode & S_IFMT;
}

static int open_file(int dir, const char *name) {
  return openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
}

/* 'C' when the two regular files differ, 0 when they are the same. */
static char compare(diff_ctx *c, int old_dir, int new_dir, const char *name) {
  int a = open_file(old_dir, name), b = open_file(new_dir, name);
  struct stat sa, sb;
  if (a < 0 || b < 0 || fstat(a, &sa) != 0 || fstat(b, &sb) != 0) fail_io(c, "open");
  char kind = 0;
  if (!S_ISREG(sa.st_mode) || !S_ISREG(sb.st_mode) || sa.st_size != sb.st_size) kind = 'C';
  else {
    int same = tree_same_data(a, b, sa.st_size, c->buf_a, c->buf_b);
    if (same < 0) fail_io(c, "read");
    if (!same) kind = 'C';
  }
  close(a);
  close(b);
  return kind;
}

static void walk(diff_ctx *c, int old_dir, int new_dir, int depth);

/* Walks name's subdirectory in one tree, or both (-1: absent from that tree). */
static void descend(diff_ctx *c, int old_dir, int new_dir, const char *name, int depth) {
  if (depth >= TREE_MAX_DEPTH)
    tree_fail(TREE_EXIT_REFUSED, "too_deep", "more directory levels than a comparison takes", &c->path, 0);
  int o = old_dir >= 0 ? tree_open_dir(old_dir, name) : -1;
  int n = new_dir >= 0 ? tree_open_dir(new_dir, name) : -1;
  if ((old_dir >= 0 && o < 0) || (new_dir >= 0 && n < 0)) fail_io(c, "open directory");
  walk(c, o, n, depth + 1);
  if (o >= 0) close(o);
  if (n >= 0) close(n);
}

/* One pass over dir's entries, the path set to each: pass 0 lists NEW (dir = new_dir), pass 1
 * lists OLD (dir = old_dir); either tree's descriptor may be -1 (absent there). */
static void each_entry(diff_ctx *c, int dir, int old_dir, int new_dir, int depth, int pass) {
  int list = dup(dir);
  DIR *d = list >= 0 ? fdopendir(list) : NULL;
  if (!d) fail_io(c, "list directory");
  const char *name;
  while ((name = tree_next_name(d))) {
    size_t was = tree_path_push(&c->path, name);
    struct stat so, sn;
    mode_t to = type_in(old_dir, name, &so), tn = type_in(new_dir, name, &sn);
    if (pass == 0) { /* NEW's entries: added, changed, and the directories of both */
      if (tn == S_IFREG) {
        char kind = to == S_IFREG ? compare(c, old_dir, new_dir, name) : 'A';
        if (kind) emit(c, kind);
      } else if (tn == S_IFDIR) {
        descend(c, to == S_IFDIR ? old_dir : -1, new_dir, name, depth);
      }
    } else { /* OLD's entries NEW has not of the same kind: deleted */
      if (to == S_IFREG && tn != S_IFREG) emit(c, 'D');
      else if (to == S_IFDIR && tn != S_IFDIR) descend(c, old_dir, -1, name, depth);
    }
    tree_path_cut(&c->path, was);
  }
  if (errno) fail_io(c, "list directory");
  closedir(d);
}

static void walk(diff_ctx *c, int old_dir, int new_dir, int depth) {
  if (new_dir >= 0) each_entry(c, new_dir, old_dir, new_dir, depth, 0);
  if (old_dir >= 0) each_entry(c, old_dir, old_dir, new_dir, depth, 1);
}

int tree_diff(const char *old_root, const char *new_root, uint64_t max_bytes) {
  diff_ctx *c = calloc(1, sizeof *c);
  if (!c) tree_fail(TREE_EXIT_IO, "io", "out of memory", NULL, ENOMEM);
  c->max_bytes = max_bytes;
  int o = open(old_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = open(new_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (o < 0 || n < 0) fail_io(c, "open the roots");
  walk(c, o, n, 0);
  fputs("end\n", stdout);
  if (fflush(stdout) != 0 || ferror(stdout)) fail_io(c, "write the answer");
  close(o);
  close(n);
  tree_path_free(&c->path);
  free(c);
  return TREE_OK;
}
