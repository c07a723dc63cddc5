/* rm -rf that a guest cannot redirect.
 *
 * The workspace being removed is writable by the guest, which may still run, or have left a
 * process behind, and rename directories or swap symlinks in while we delete. nftw (the old
 * code) opens and removes by path, so a directory swapped for a link to elsewhere between its
 * stat and its open sent the removal outside. Here everything below the parent of `path` is
 * reached descriptor-relative, one component at a time: fstatat(AT_SYMLINK_NOFOLLOW) classifies
 * an entry, openat(O_NOFOLLOW|O_DIRECTORY) enters a directory and fstat must then show the inode
 * that was stat'ed, on the root's device and mount; unlinkat removes. No call is given more than
 * one component, so a swapped-in link is an entry to unlink, never a way out, and the depth of
 * the tree is not limited by PATH_MAX.
 *
 * Descriptors. One fd per level would run out at depth ~1000 (RLIMIT_NOFILE), and a guest can
 * build much deeper trees. A bounded cache of fds would still need a way back up for the levels
 * it dropped, so the walk goes straight to that way: it holds ONE directory fd, the current one,
 * goes down with openat(cur, name) and comes back with openat(cur, ".."), and accepts the
 * directory reached only if its dev/ino are those recorded on the way down (the cost is one
 * small record per level, on the heap). A directory moved elsewhere meanwhile makes ".." another
 * directory: the walk then restarts from the root, which it keeps open. Back up, the parent is
 * read again from its start; the entries visited before are gone by then (files were unlinked as
 * they were seen, and the first directory is the one just removed), so the re-read is cheap. At
 * most five descriptors are open at once, whatever the depth.
 *
 * Bounded work. A guest can keep creating entries or swapping names while we delete. Every event
 * that makes us redo work (a directory not empty after we emptied it, an entry that changed
 * between its stat and its open or unlink, a restart) costs a round; after RMTREE_ROUNDS the
 * removal gives up with ENOTEMPTY, and the depth is capped at RMTREE_MAX_DEPTH (ELOOP). */
#include "util/rmtree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { RMTREE_ROUNDS = 64, RMTREE_MAX_DEPTH = 1 << 20 };

/* enter()'s and scan()'s answers besides an fd or a failure */
enum { RETRY = -2, EMPTY = 0, FOUND = 1 };

typedef struct {
  dev_t dev;
  ino_t ino;
  char *child; /* the name entered below this directory, while the walk is below it */
} level;

typedef struct {
  int top;          /* the parent of the root: the host's own path, trusted */
  const char *base; /* the root's name in top */
  int root;         /* held open for restarts */
  dev_t dev;        /* the root's device and mount: the walk never leaves them */
  uint64_t mnt;     /* 0 when the kernel does not report mount ids */
  level *lv;        /* lv[0] is the root, lv[depth] the current directory */
  size_t depth, cap;
  int rounds;
  int err; /* the first failure's errno: cleanup may clobber errno */
  ss_rmtree_fail *why;
} walk;

static int fail(walk *w, int err, const char *step, const char *name) {
  if (!w->err) w->err = err;
  if (w->why && w->why->step == NULL) {
    w->why->err = err;
    w->why->step = step;
    snprintf(w->why->name, sizeof w->why->name, "%s", name ? name : "");
    w->why->depth = w->depth;
  }
  errno = err;
  return -1;
}

/* One more round of redone work, or the failure that ends a tree that keeps changing. */
static int round_spent(walk *w, const char *name) {
  if (++w->rounds <= RMTREE_ROUNDS) return 0;
  return fail(w, ENOTEMPTY, "finish (the tree kept changing) at", name);
}

/* The mount id of fd (statx, Linux 5.8+), or 0 when unknown. A bind mount of the same
 * filesystem has the same st_dev; only the mount id tells it apart. */
static uint64_t mount_id(int fd) {
#ifdef STATX_MNT_ID
  struct statx sx;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &sx) == 0 && (sx.stx_mask & STATX_MNT_ID)) return sx.stx_mnt_id;
#else
  (void)fd;
#endif
  return 0;
}

static int dup_cloexec(walk *w, int fd) {
  int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  return d >= 0 ? d : fail(w, errno, "duplicate a descriptor for", "");
}

/* Reads cur from its start: unlinks every non-directory seen, stops at the first directory
 * (its name and stat in name, st). FOUND, EMPTY (nothing left that the read saw), or -1. */
static int scan(walk *w, int cur, char name[static 256], struct stat *st) {
  int fd = dup_cloexec(w, cur);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd); /* fd is now d's; the dup shares cur's offset, hence the rewind */
  if (!d) {
    int e = errno;
    close(fd);
    return fail(w, e, "read", "");
  }
  rewinddir(d);
  int rc = EMPTY;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno) rc = fail(w, errno, "read", "");
      break;
    }
    const char *n = de->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0'))) continue;
    if (fstatat(cur, n, st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      rc = fail(w, errno, "stat", n);
      break;
    }
    if (!S_ISDIR(st->st_mode)) {
      if (unlinkat(cur, n, 0) == 0 || errno == ENOENT) continue;
      if (errno != EISDIR) {
        rc = fail(w, errno, "remove", n);
        break;
      }
      /* a directory was swapped in after the stat: enter it if it still is one */
      if (fstatat(cur, n, st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st->st_mode)) {
        if ((rc = round_spent(w, n)) != 0) break;
        continue;
      }
    }
    snprintf(name, 256, "%s", n);
    rc = FOUND;
    break;
  }
  closedir(d);
  return rc;
}

/* Opens the directory name of cur that was stat'ed as st: an fd, RETRY when the name changed
 * meanwhile (gone, a link, another inode), or -1 when it is another mount. */
static int enter(walk *w, int cur, const char *name, const struct stat *st) {
  if (st->st_dev != w->dev) return fail(w, EXDEV, "cross the mount point", name);
  int fd = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) return RETRY;
    return fail(w, errno, "open", name);
  }
  struct stat now;
  if (fstat(fd, &now) != 0) {
    int e = errno;
    close(fd);
    return fail(w, e, "stat", name);
  }
  if (now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
    close(fd);
    return RETRY;
  }
  if (w->mnt && mount_id(fd) != w->mnt) {
    close(fd);
    return fail(w, EXDEV, "cross the mount point", name);
  }
  return fd;
}

/* Records that the walk goes from lv[depth] down into name (whose stat is st). */
static int push(walk *w, const char *name, const struct stat *st) {
  if (w->depth + 1 >= RMTREE_MAX_DEPTH) return fail(w, ELOOP, "descend (too deep) into", name);
  if (w->depth + 1 == w->cap) {
    level *nl = realloc(w->lv, 2 * w->cap * sizeof *nl);
    if (!nl) return fail(w, ENOMEM, "descend into", name);
    w->lv = nl;
    w->cap *= 2;
  }
  char *copy = strdup(name);
  if (!copy) return fail(w, ENOMEM, "descend into", name);
  w->lv[w->depth].child = copy;
  w->depth++;
  w->lv[w->depth] = (level){.dev = st->st_dev, .ino = st->st_ino, .child = NULL};
  return 0;
}

/* Forgets the way down: back to the root alone. */
static void unwind(walk *w) {
  for (size_t i = 0; i <= w->depth; i++) {
    free(w->lv[i].child);
    w->lv[i].child = NULL;
  }
  w->depth = 0;
}

/* From the empty directory *cur, back to its parent, which must be the one recorded; then the
 * emptied directory is removed by name. 0, RETRY (the walk restarted at the root), or -1. */
static int climb(walk *w, int *cur) {
  int up = openat(*cur, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (up < 0) return fail(w, errno, "climb out of", w->lv[w->depth - 1].child);
  struct stat st;
  if (fstat(up, &st) != 0) {
    int e = errno;
    close(up);
    return fail(w, e, "climb out of", w->lv[w->depth - 1].child);
  }
  const level *parent = &w->lv[w->depth - 1];
  if (st.st_dev != parent->dev || st.st_ino != parent->ino) {
    /* the directory was moved: its ".." is not where we came from; start again at the root */
    close(up);
    if (round_spent(w, parent->child) != 0) return -1;
    int root = dup_cloexec(w, w->root);
    if (root < 0) return -1;
    close(*cur);
    *cur = root;
    unwind(w);
    return RETRY;
  }
  close(*cur);
  *cur = up;
  w->depth--;
  char *child = w->lv[w->depth].child;
  w->lv[w->depth].child = NULL;
  int rc = 0;
  if (unlinkat(up, child, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    /* refilled, or the name now holds something else: the next scan of up deals with it */
    if (errno == ENOTEMPTY || errno == EEXIST || errno == ENOTDIR)
      rc = round_spent(w, child);
    else
      rc = fail(w, errno, "remove", child);
  }
  free(child);
  return rc;
}

/* Empties and removes the root (w->root, already verified). */
static int run(walk *w) {
  int cur = dup_cloexec(w, w->root);
  if (cur < 0) return -1;
  int rc;
  for (;;) {
    char name[256];
    struct stat st;
    rc = scan(w, cur, name, &st);
    if (rc < 0) break;
    if (rc == FOUND) {
      int fd = enter(w, cur, name, &st);
      if (fd == RETRY) {
        if ((rc = round_spent(w, name)) != 0) break;
        continue;
      }
      if (fd < 0 || push(w, name, &st) != 0) {
        if (fd >= 0) close(fd);
        rc = -1;
        break;
      }
      close(cur);
      cur = fd;
      continue;
    }
    if (w->depth > 0) {
      if ((rc = climb(w, &cur)) == -1) break;
      continue;
    }
    /* the root looks empty: remove it, if its name still holds it */
    struct stat now;
    if (fstatat(w->top, w->base, &now, AT_SYMLINK_NOFOLLOW) != 0) {
      rc = errno == ENOENT ? 0 : fail(w, errno, "stat", w->base);
      break;
    }
    if (now.st_dev != w->lv[0].dev || now.st_ino != w->lv[0].ino) {
      rc = fail(w, ESTALE, "remove (the root was replaced)", w->base);
      break;
    }
    if (unlinkat(w->top, w->base, AT_REMOVEDIR) == 0 || errno == ENOENT) {
      rc = 0;
      break;
    }
    if (errno != ENOTEMPTY && errno != EEXIST) {
      rc = fail(w, errno, "remove", w->base);
      break;
    }
    if ((rc = round_spent(w, w->base)) != 0) break;
  }
  close(cur);
  return rc;
}

/* Opens the root name of w->top as a directory and checks it is the one stat'ed (st). 1 when
 * it is a directory (w->root set), 0 when the name was something else and is now removed (or
 * gone), -1 on failure. Retries, within the round budget, when the name changes under us. */
static int open_root(walk *w) {
  for (;;) {
    struct stat st, now;
    if (fstatat(w->top, w->base, &st, AT_SYMLINK_NOFOLLOW) != 0)
      return errno == ENOENT ? 0 : fail(w, errno, "stat", w->base);
    if (!S_ISDIR(st.st_mode)) {
      /* a file or a link: the link itself is removed, its target never looked at */
      if (unlinkat(w->top, w->base, 0) == 0 || errno == ENOENT) return 0;
      if (errno != EISDIR) return fail(w, errno, "remove", w->base);
    } else {
      int fd = openat(w->top, w->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 && errno != ENOENT && errno != ELOOP && errno != ENOTDIR) return fail(w, errno, "open", w->base);
      if (fd >= 0 && fstat(fd, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
        w->root = fd;
        w->dev = st.st_dev;
        w->mnt = mount_id(fd);
        w->lv[0] = (level){.dev = st.st_dev, .ino = st.st_ino, .child = NULL};
        return 1;
      }
      if (fd >= 0) close(fd);
    }
    if (round_spent(w, w->base) != 0) return -1;
  }
}

int ss_rmtree(const char *path, ss_rmtree_fail *why) {
  walk w = {.top = -1, .root = -1, .cap = 64, .why = why};
  if (why) memset(why, 0, sizeof *why);
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  char *buf = strndup(path, len);
  if (!buf) return fail(&w, ENOMEM, "copy the path", "");
  /* split into the parent (the host's own configuration, opened once, links followed) and the
   * root's name; "/", "", "." and ".." are refused: they cannot be what a caller means */
  char *slash = strrchr(buf, '/');
  w.base = slash ? slash + 1 : buf;
  const char *parent = slash ? (slash == buf ? "/" : buf) : ".";
  if (slash && slash != buf) *slash = '\0';
  int rc;
  if (!*w.base || strcmp(w.base, ".") == 0 || strcmp(w.base, "..") == 0) {
    rc = fail(&w, EINVAL, "remove", w.base);
  } else if ((w.top = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    rc = errno == ENOENT ? 0 : fail(&w, errno, "open the parent of", w.base);
  } else if (!(w.lv = calloc(w.cap, sizeof *w.lv))) {
    rc = fail(&w, ENOMEM, "start", w.base);
  } else if ((rc = open_root(&w)) == 1) {
    rc = run(&w);
  }
  int err = w.err ? w.err : EIO;
  if (w.lv) {
    unwind(&w);
    free(w.lv);
  }
  if (w.root >= 0) close(w.root);
  if (w.top >= 0) close(w.top);
  free(buf);
  if (rc < 0) {
    errno = err;
    return -1;
  }
  return 0;
}
