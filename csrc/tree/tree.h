#ifndef SANDSTACK_TREE_H
#define SANDSTACK_TREE_H
/* sandstack-tree: copies and compares the volumes of a snapshot (main.c). The trees are the
 * guest's data: every name is opened relative to its directory's descriptor with O_NOFOLLOW,
 * never as a path, so no link is ever followed and nothing outside the mounted trees is read or
 * written; memory is bounded (TREE_MAX_DEPTH levels, TREE_MAX_LINKS hard-linked files). */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

enum {
  TREE_MAX_DEPTH = 256,      /* directory levels below the root: one open directory each */
  TREE_MAX_LINKS = 65536,    /* regular files with more than one link whose links are kept */
  TREE_IO_BLOCK = 64 * 1024, /* one read or write */
};

/* Exit statuses (main.c): what the host turns into an error's kind and reason. */
enum {
  TREE_OK = 0,
  TREE_EXIT_IO = 1,      /* a system call failed: stderr "io <what>: <path>: <errno text>" */
  TREE_EXIT_USAGE = 2,   /* bad arguments */
  TREE_EXIT_REFUSED = 3, /* the tree holds what is not copied: stderr "<reason> <message>" */
  TREE_EXIT_OUTPUT = 4,  /* the comparison's answer would pass its byte budget */
};

/* The relative path of the entry being worked on: for messages, the comparison's answer and
 * the hard-link table. Grows as needed: at most TREE_MAX_DEPTH names of up to 255 bytes. */
typedef struct {
  char *s;
  size_t len, cap;
} tree_path;

/* Appends "/name" (or "name" at the root); returns the length to restore with tree_path_cut. */
size_t tree_path_push(tree_path *p, const char *name);
void tree_path_cut(tree_path *p, size_t len);
void tree_path_free(tree_path *p);

/* Ends the program: prints "<reason> <what>: <path, escaped>[: <errno text>]" on stderr (the
 * path's bytes outside printable ASCII as \xNN, at most 300 of them) and exits with status.
 * err 0: no errno text. */
_Noreturn void tree_fail(int status, const char *reason, const char *what, const tree_path *p, int err);

/* The hard-link table of a copy: the first copy's path, by the source's device and inode. */
typedef struct tree_links tree_links;
tree_links *tree_links_new(void);
void tree_links_free(tree_links *t);
/* The destination path of the first copy of (dev, ino), or NULL (then `path` is remembered as
 * it); -1 in *full when the table is full. */
const char *tree_links_find_or_add(tree_links *t, dev_t dev, ino_t ino, const tree_path *path, int *full);

/* Copies the data of in (size bytes) to out, leaving holes where the source has holes or a
 * whole block of zeros. buf: TREE_IO_BLOCK bytes. 0, or -1 with errno. */
int tree_copy_data(int in, int out, off_t size, char *buf);

/* 1 when the two open regular files hold the same bytes, 0 when they differ, -1 with errno.
 * bufs: two TREE_IO_BLOCK buffers. */
int tree_same_data(int a, int b, off_t size, char *buf_a, char *buf_b);

/* The two modes: 0 or an exit status (errors end the program through tree_fail). */
int tree_copy(const char *from, const char *to, int no_special);
int tree_diff(const char *old_root, const char *new_root, uint64_t max_bytes);

/* Opens name in dir as a directory without following a link: the descriptor, or -1. */
int tree_open_dir(int dir, const char *name);

/* The next name listed in d but . and .., or NULL: at the end with errno 0, on an error with
 * errno set. */
const char *tree_next_name(DIR *d);

#endif
