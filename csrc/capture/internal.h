#ifndef SANDSTACK_CAPTURE_INTERNAL_H
#define SANDSTACK_CAPTURE_INTERNAL_H
/* Shared between the files of csrc/capture; not part of the capture's interface. */
#include "capture/capture.h"
#include "fileplane/fileplane.h" /* FP_PATH_MAX, FP_NAME_MAX: the same name limits as the plane */

#define CAP_BLOCK 512
#define CAP_META_MAX (1u << 20) /* data bytes of one pax or GNU long-name header */
#define CAP_META_CHAIN 16       /* pax/long-name headers allowed before one member */

/* A name as the archive spelled it. s is NUL-terminated and holds at most FP_PATH_MAX - 1
 * bytes; a longer name is cut and marked too_long, a name holding a NUL byte is marked nul
 * (both are refused by names.c, so they never reach the file system). */
typedef struct cap_name {
  char s[FP_PATH_MAX];
  size_t len;
  int too_long;
  int nul;
} cap_name;

/* A member header with everything pax and GNU headers said about it already applied. */
typedef struct cap_entry {
  char type;     /* the typeflag byte ('0', '5', '2', ...) */
  cap_name name; /* pax path > GNU 'L' > ustar prefix/name */
  cap_name link; /* pax linkpath > GNU 'K' > linkname (only reported) */
  uint64_t size; /* data bytes that follow (0 for header-only types) */
  unsigned mode;
  long long mtime;
  int sparse; /* GNU sparse ('S' or GNU.sparse.* pax keys): the data is a map, not the file */
} cap_entry;

typedef struct cap_reader {
  cap_source src;
  uint64_t left;     /* data bytes of the current member not read yet */
  uint64_t pad;      /* zero bytes after them, up to the next block */
  uint64_t consumed; /* archive bytes read so far (for messages) */
  int ended;
} cap_reader;

void cap_reader_init(cap_reader *r, const cap_source *src);
/* The next member: 1 with ent filled, 0 at the archive's end, -1 with e set. Whatever was left
 * of the previous member's data is read past first. */
int cap_reader_next(cap_reader *r, cap_entry *ent, ss_error *e);
/* Up to n bytes of the current member's data: the count, 0 when it is all read, -1 with e set. */
ssize_t cap_reader_data(cap_reader *r, void *buf, size_t n, ss_error *e);

/* Sets a name from bytes (a pax value or GNU long-name data), marking nul and too_long. names.c
 * owns the name (this and cap_name_check below), so the tar reader and pax.c both call it. */
void cap_name_set(cap_name *n, const char *s, size_t len);

/* What pax extended headers ('x') said about the member that follows them. Several headers
 * accumulate; a keyword with an empty value deletes that keyword's override (POSIX). */
typedef struct cap_pax {
  cap_name path, linkpath;
  int has_path, has_linkpath, has_size, has_mtime;
  int sparse; /* a GNU.sparse.* keyword */
  uint64_t size;
  long long mtime;
} cap_pax;

/* Applies one pax extended header (data, len bytes) to x. 0, or -1 with e set (offset is the
 * header's place in the archive, for the message). */
int cap_pax_apply(const char *data, size_t len, cap_pax *x, uint64_t offset, ss_error *e);

/* A member name made relative and plain: "a/b/c" into out (no empty, "." or ".." component).
 * Returns NULL when it may be written, else the reason ("absolute", "dotdot", "nul", "empty",
 * "name_too_long", "too_long"). *is_root is set when the name is the top itself ("." or "./"). */
const char *cap_name_check(const cap_name *n, char *out, size_t *out_len, int *is_root);

/* Error helpers: "invalid"/"archive" for a malformed archive, "io" named after errno. */
void cap_err_archive(ss_error *e, uint64_t offset, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void cap_err_io(ss_error *e, int err, const char *what, const char *name);

#endif
