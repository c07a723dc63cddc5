#ifndef SANDSTACK_UTIL_RMTREE_H
#define SANDSTACK_UTIL_RMTREE_H
/* rm -rf over a tree a guest may still be changing (the sbx workspaces, core.rmtree). */
#include <stddef.h>

/* Why ss_rmtree stopped: the step that failed, the one name it acted on (never a path: the
 * tree may be deeper than PATH_MAX) and how deep below the root that name was. */
typedef struct {
  int err;           /* errno of the failure */
  const char *step;  /* static text: "open", "stat", "remove", "climb", "rounds", ... */
  char name[256];    /* the entry acted on, "" when none */
  size_t depth;      /* 0 = an entry of the root itself */
} ss_rmtree_fail;

/* Removes path and everything under it, descriptor-relative, without following a symbolic link
 * anywhere below the parent of path, without crossing a mount point and without building a path
 * (trees deeper than PATH_MAX are fine; a few descriptors are used whatever the depth). A guest
 * renaming directories or swapping in links meanwhile can make it fail, never reach outside.
 * 0, or -1 with errno (and *why filled when why is not NULL). A missing path is success. */
int ss_rmtree(const char *path, ss_rmtree_fail *why);

#endif
