#ifndef SANDSTACK_FILEPLANE_H
#define SANDSTACK_FILEPLANE_H
/* The file plane: guest paths of a sandbox answered on the host, beneath one anchor directory.
 *
 * A guest sees the host directory `root` mounted at `guest_root`. Every operation turns a guest
 * path into a path relative to root (lexically, see path.c), then reaches it through the anchor
 * fd with no symlink followed at any component and no mount crossed (resolve.c). Pure C: the
 * Lua binding is csrc/lua/fileplane.c. */
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "util/error.h"

#define FP_PATH_MAX 4096 /* bytes of a relative host path, NUL included */
#define FP_NAME_MAX 255  /* bytes of one component */

/* How components are resolved: openat2 where the kernel has it (auto falls back on ENOSYS),
 * or the openat/O_NOFOLLOW walk forced (tests use it to exercise the fallback). */
typedef enum { FP_RESOLVE_AUTO = 0, FP_RESOLVE_OPENAT2, FP_RESOLVE_WALK } fp_resolve_mode;

typedef struct fp_options {
  const char *root;       /* host directory, opened once as the anchor */
  const char *guest_root; /* where the guest sees root; absolute, not "/" */
  const char *cwd;        /* guest directory relative paths start from; under guest_root */
  size_t max_read;        /* read refuses a file larger than this */
  fp_resolve_mode resolve;
  int allow_hardlinks; /* read a regular file with st_nlink > 1 (default: refused) */
  int sync;            /* fsync a written file before it is renamed into place, its directory after */
} fp_options;

typedef struct fp_plane fp_plane;

/* A guest path made relative to root: rel is "" for root itself, else "a/b/c" with no empty,
 * "." or ".." component; last points at the final component inside rel (NULL for root). */
typedef struct fp_path {
  char rel[FP_PATH_MAX];
  size_t len;
  const char *last;
} fp_path;

/* Opens the anchor. NULL and e set (kind "invalid" for bad options, "io" for the OS). */
fp_plane *fp_open(const fp_options *o, ss_error *e);
void fp_close(fp_plane *p); /* NULL is fine */

/* Which resolver operations use now: "openat2" or "walk". */
const char *fp_resolver_name(const fp_plane *p);

/* Guest path (len bytes, may hold NUL: refused) -> relative path. An absolute path must lie
 * under guest_root; a relative one starts at cwd (NULL: the plane's own) and may never climb
 * above it, not even to come back. A per-call working directory is itself normalized with
 * cwd NULL. 0, or -1 and e set. */
int fp_normalize(const fp_plane *p, const fp_path *cwd, const char *path, size_t len, fp_path *out, ss_error *e);
/* The normalized guest absolute path of rel into buf (cap bytes). 0, or -1 and e set. */
int fp_guest_path(const fp_plane *p, const fp_path *rel, char *buf, size_t cap, ss_error *e);

/* Operations. Each takes the call's working directory (NULL: the plane's) and returns 0 (or an
 * fd) on success, -1 with e set on failure. */
int fp_lstat(fp_plane *p, const fp_path *cwd, const char *path, size_t len, struct stat *st, ss_error *e);
/* *out is malloc'ed (NUL-terminated, *n bytes); the caller frees it. limit 0: the plane's
 * max_read (a larger file is invalid/too_large); otherwise a larger file is output_limit. */
int fp_read(fp_plane *p, const fp_path *cwd, const char *path, size_t len, size_t limit, char **out, size_t *n,
            ss_error *e);
/* Missing parent directories are made on the way, by the same no-link walk. */
int fp_write(fp_plane *p, const fp_path *cwd, const char *path, size_t len, const void *data, size_t n, ss_error *e);
int fp_mkdir(fp_plane *p, const fp_path *cwd, const char *path, size_t len, ss_error *e);
/* A directory fd open for reading (to hand to fdopendir). */
int fp_opendir(fp_plane *p, const fp_path *cwd, const char *path, size_t len, ss_error *e);

/* Host-side check before a removal in the guest; writes the guest path into buf. Returns 0
 * when the target is there, FP_MISSING when it is not (a removal has nothing to do), -1 with
 * e set when it is refused: the workspace root, the working directory (the plane's or the
 * call's) or one of their ancestors, a link or mount on the way, a name not listed verbatim.
 * FP_CHECK_CHILD also requires a relative path to name a direct child of the working
 * directory (reclaim's placement rule). */
#define FP_MISSING 1
#define FP_CHECK_CHILD 1u
int fp_check(fp_plane *p, const fp_path *cwd, const char *path, size_t len, unsigned flags, char *buf, size_t cap,
             ss_error *e);

#endif
