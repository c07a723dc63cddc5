/* The hard-link table of a copy (tree.h): an open-addressed hash of (device, inode) to the
 * destination path of the file's first copy, so its other names become links to it, as `cp -a`
 * keeps them. Fixed capacity: a tree with more multiply-linked files than TREE_MAX_LINKS (or
 * whose paths pass 16 MiB together) is refused rather than copied once per name (a guest's 65536 links to one large file must not
 * become 65536 copies on the host's disk). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tree/tree.h"

enum {
  SLOTS = 2 * TREE_MAX_LINKS,     /* at most half full */
  MAX_PATH_BYTES = 16 * 1024 * 1024 /* the remembered paths together */
};

typedef struct {
  dev_t dev;
  ino_t ino;
  char *path; /* NULL: a free slot */
} slot;

struct tree_links {
  slot *slots;
  size_t used, bytes;
};

tree_links *tree_links_new(void) {
  tree_links *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->slots = calloc(SLOTS, sizeof *t->slots);
  if (!t->slots) {
    free(t);
    return NULL;
  }
  return t;
}

void tree_links_free(tree_links *t) {
  if (!t) return;
  for (size_t i = 0; i < SLOTS; i++) free(t->slots[i].path);
  free(t->slots);
  free(t);
}

static size_t hash(dev_t dev, ino_t ino) {
  uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev * 0xc2b2ae3d27d4eb4full;
  return (size_t)(h >> 17) % SLOTS;
}

const char *tree_links_find_or_add(tree_links *t, dev_t dev, ino_t ino, const tree_path *path, int *full) {
  *full = 0;
  for (size_t i = hash(dev, ino);; i = (i + 1) % SLOTS) {
    slot *s = &t->slots[i];
    if (s->path && s->dev == dev && s->ino == ino) return s->path;
    if (s->path) continue;
    size_t n = path->s ? path->len : 0;
    if (t->used >= TREE_MAX_LINKS || t->bytes + n + 1 > MAX_PATH_BYTES) {
      *full = -1;
      return NULL;
    }
    s->path = strdup(path->s ? path->s : "");
    if (!s->path) tree_fail(TREE_EXIT_IO, "io", "out of memory for the link table", path, ENOMEM);
    t->bytes += n + 1;
    s->dev = dev;
    s->ino = ino;
    t->used++;
    return NULL;
  }
}
