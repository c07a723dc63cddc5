/* sandstack-tree copy FROM TO [no-special] (tree.h): what `cp -a FROM/. TO/` made, without
 * borrowing any program of the guest's. Directories, regular files (holes kept), symbolic links
 * (as links, never followed), FIFOs and sockets are recreated with their owner, mode (set-id
 * bits included) and access and modification times; hard links stay links. Refused, ending the
 * copy with exit 3: a device node ("device_node": a volume gives the guest no device, and a
 * copy must not hand one to another sandbox), a tree deeper than TREE_MAX_DEPTH ("too_deep"),
 * more hard-linked files than the table holds ("too_many_links"), another file system inside
 * the tree ("mount_point"), and with no-special a FIFO or a socket ("special_file": under
 * gVisor, which keeps the ones it makes in its own memory, they would be lost without a word).
 * Extended attributes and ACLs are not copied. TO must be empty. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree/tree.h"

typedef struct {
  tree_path path;
  tree_links *links;
  int to_root;    /* the destination root: hard links are made relative to it */
  int no_special; /* FIFOs and sockets are refused */
  dev_t from_dev;
  char buf[TREE_IO_BLOCK];
} copy_ctx;

static void fail_io(copy_ctx *c, const char *what) { tree_fail(TREE_EXIT_IO, "io", what, &c->path, errno); }

/* Owner, mode and times of an entry made in dir (fd >= 0: through it). Owner first: a chown
 * clears set-id bits, which the chmod after it restores. */
static void set_attrs(copy_ctx *c, int dir, const char *name, int fd, const struct stat *st) {
  struct timespec times[2] = {st->st_atim, st->st_mtim};
  int rc = fd >= 0 ? fchown(fd, st->st_uid, st->st_gid) : fchownat(dir, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW);
  if (rc != 0) fail_io(c, "chown");
  if (!S_ISLNK(st->st_mode)) {
    rc = fd >= 0 ? fchmod(fd, st->st_mode & 07777) : fchmodat(dir, name, st->st_mode & 07777, 0);
    if (rc != 0) fail_io(c, "chmod");
  }
  rc = fd >= 0 ? futimens(fd, times) : utimensat(dir, name, times, AT_SYMLINK_NOFOLLOW);
  if (rc != 0) fail_io(c, "set times");
}

static void copy_file(copy_ctx *c, int from, int to, const char *name, const struct stat *st) {
  if (st->st_nlink > 1) {
    int full;
    const char *first = tree_links_find_or_add(c->links, st->st_dev, st->st_ino, &c->path, &full);
    if (full) tree_fail(TREE_EXIT_REFUSED, "too_many_links", "more hard-linked files than a copy keeps", &c->path, 0);
    if (first) {
      if (linkat(c->to_root, first, to, name, 0) != 0) fail_io(c, "link");
      return;
    }
  }
  int in = openat(from, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (in < 0) fail_io(c, "open");
  struct stat now;
  if (fstat(in, &now) != 0) fail_io(c, "stat");
  if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
    tree_fail(TREE_EXIT_IO, "io", "changed while it was copied", &c->path, 0);
  int out = openat(to, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) fail_io(c, "create");
  if (tree_copy_data(in, out, now.st_size, c->buf) != 0) fail_io(c, "copy");
  set_attrs(c, to, name, out, &now);
  close(in);
  if (close(out) != 0) fail_io(c, "close");
}

static void copy_link(copy_ctx *c, int from, int to, const char *name, const struct stat *st) {
  char target[4096];
  ssize_t n = readlinkat(from, name, target, sizeof target);
  if (n < 0) fail_io(c, "read link");
  if ((size_t)n >= sizeof target) tree_fail(TREE_EXIT_IO, "io", "link target too long", &c->path, 0);
  target[n] = '\0';
  if (symlinkat(target, to, name) != 0) fail_io(c, "make link");
  set_attrs(c, to, name, -1, st);
}

static void copy_dir(copy_ctx *c, int from, int to, int depth);

static void copy_entry(copy_ctx *c, int from, int to, const char *name, int depth) {
  struct stat st;
  if (fstatat(from, name, &st, AT_SYMLINK_NOFOLLOW) != 0) fail_io(c, "stat");
  switch (st.st_mode & S_IFMT) {
  case S_IFREG:
    copy_file(c, from, to, name, &st);
    return;
  case S_IFLNK:
    copy_link(c, from, to, name, &st);
    return;
  case S_IFIFO:
  case S_IFSOCK:
    if (c->no_special)
      tree_fail(TREE_EXIT_REFUSED, "special_file",
                "a FIFO or socket is not copied under gVisor, which keeps the ones it makes in its memory", &c->path, 0);
    if (mknodat(to, name, (st.st_mode & S_IFMT) | 0600, 0) != 0) fail_io(c, "make node");
    set_attrs(c, to, name, -1, &st);
    return;
  case S_IFDIR:
    break;
  default:
    tree_fail(TREE_EXIT_REFUSED, "device_node", "a device node is not copied", &c->path, 0);
  }
  if (st.st_dev != c->from_dev)
    tree_fail(TREE_EXIT_REFUSED, "mount_point", "another file system inside the tree", &c->path, 0);
  if (depth >= TREE_MAX_DEPTH)
    tree_fail(TREE_EXIT_REFUSED, "too_deep", "more directory levels than a copy takes", &c->path, 0);
  int sub_from = tree_open_dir(from, name);
  if (sub_from < 0) fail_io(c, "open directory");
  if (mkdirat(to, name, 0700) != 0) fail_io(c, "make directory");
  int sub_to = tree_open_dir(to, name);
  if (sub_to < 0) fail_io(c, "open new directory");
  copy_dir(c, sub_from, sub_to, depth + 1); /* closes sub_from */
  set_attrs(c, to, name, sub_to, &st);      /* after its entries: they change its times */
  close(sub_to);
}

/* Copies the entries of from into to. Takes from's descriptor over (the listing closes it). */
static void copy_dir(copy_ctx *c, int from, int to, int depth) {
  DIR *d = fdopendir(from);
  if (!d) fail_io(c, "list directory");
  int list_fd = dirfd(d);
  const char *name;
  while ((name = tree_next_name(d))) {
    size_t was = tree_path_push(&c->path, name);
    copy_entry(c, list_fd, to, name, depth);
    tree_path_cut(&c->path, was);
  }
  if (errno) fail_io(c, "list directory");
  closedir(d);
}

int tree_copy(const char *from_path, const char *to_path, int no_special) {
  copy_ctx *c = calloc(1, sizeof *c);
  if (!c) tree_fail(TREE_EXIT_IO, "io", "out of memory", NULL, ENOMEM);
  c->no_special = no_special;
  c->links = tree_links_new();
  if (!c->links) tree_fail(TREE_EXIT_IO, "io", "out of memory", NULL, ENOMEM);
  int from = open(from_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int to = open(to_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (from < 0 || to < 0 || fstat(from, &st) != 0) fail_io(c, "open the roots");
  c->from_dev = st.st_dev;
  c->to_root = to;
  int list = dup(from);
  if (list < 0) fail_io(c, "open the roots");
  copy_dir(c, list, to, 0);
  set_attrs(c, AT_FDCWD, to_path, to, &st); /* the root, as cp -a FROM/. TO/ does */
  close(from);
  close(to);
  tree_links_free(c->links);
  tree_path_free(&c->path);
  free(c);
  return TREE_OK;
}
