#ifndef SANDSTACK_FILEPLANE_INTERNAL_H
#define SANDSTACK_FILEPLANE_INTERNAL_H
/* Shared between the files of csrc/fileplane; not part of the plane's interface. */
#include "fileplane/fileplane.h"

struct fp_plane {
  int rootfd;                 /* O_PATH|O_DIRECTORY anchor, opened once */
  dev_t root_dev;             /* the walk refuses a component on another device */
  char guest_root[FP_PATH_MAX];
  size_t guest_root_len;
  fp_path cwd; /* relative to root */
  size_t max_read;
  fp_resolve_mode resolve;
  int openat2_state; /* -1 not tried yet, 0 kernel lacks it (ENOSYS), 1 works */
  int allow_hardlinks;
  int sync;
  uid_t euid; /* ours, read once: new files take their directory's owner only when we are root */
  gid_t egid;
  char tmp_prefix[24];         /* random per plane, so temporary names need no getrandom per write */
  unsigned long long tmp_seq;  /* the plane's own counter (a plane is used by one thread) */
};

/* A directory fd that may be the anchor itself (not owned: never closed). */
typedef struct fp_dirfd {
  int fd;
  int owned;
} fp_dirfd;

void fp_dirfd_close(fp_dirfd *d);

/* The directory holding p->last (root itself when the path has one component), reached with
 * no link followed and no mount crossed. For root itself (last == NULL) that is the anchor. */
int fp_open_parent(fp_plane *p, const fp_path *path, fp_dirfd *out, ss_error *e);
/* fp_open_parent, making the missing directories on the way (write's parents). */
int fp_make_parent(fp_plane *p, const fp_path *path, fp_dirfd *out, ss_error *e);
/* The final object opened with flags (O_NOFOLLOW and O_CLOEXEC added), every component
 * before it resolved like fp_open_parent. Returns the fd or -1. */
int fp_open_final(fp_plane *p, const fp_path *path, int flags, ss_error *e);

/* The component walk itself: every component of rel (not "." or "") opened relative to its
 * parent with O_NOFOLLOW, on the anchor's device, a link refused at any position.
 * FP_WALK_LISTED also requires each name to be listed verbatim by its parent.
 * FP_WALK_ABSENT_OK returns FP_WALK_ABSENT (no error set) when a component does not exist.
 * FP_WALK_CREATE makes each missing component a directory (mkdirat, then the same O_NOFOLLOW
 * open: a link planted in between is refused, never followed); flags must then ask for a
 * directory. */
#define FP_WALK_LISTED 1u
#define FP_WALK_ABSENT_OK 2u
#define FP_WALK_CREATE 4u
#define FP_WALK_ABSENT (-2)
int fp_walk(fp_plane *p, const char *rel, int flags, unsigned opts, const char *shown, ss_error *e);

/* After mkdirat(dirfd, name) by a host running as root: the new directory takes the owner of
 * its parent (the guest's user), so the guest can change what the host made. Best effort. */
void fp_adopt_dir_owner(const fp_plane *p, int dirfd, const char *name);

/* Error helpers: kind "invalid" with a reason, or kind "io" named after errno. */
void fp_err_invalid(ss_error *e, const char *reason, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void fp_err_io(ss_error *e, int err, const char *what, const char *path);
/* Names a failed lookup: a symlink (or a non-directory) where a directory was expected turns
 * into "invalid"/"symlink", a mount crossing into "invalid"/"mount", the rest into io. */
void fp_err_lookup(ss_error *e, int err, int dirfd, const char *name, const char *path);

/* Platform name rules (names.c): 0 when the host keeps name as it is, else -1 and e set. */
int fp_name_allowed(const char *name, size_t len, const char *path, ss_error *e);
/* 0 when dirfd lists name verbatim, else -1 and e set (reason "not_listed"). */
int fp_name_listed(int dirfd, const char *name, const char *path, ss_error *e);

#endif
