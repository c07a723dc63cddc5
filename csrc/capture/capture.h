#ifndef SANDSTACK_CAPTURE_H
#define SANDSTACK_CAPTURE_H
/* Capture: a tar made by a sandbox (untrusted) unpacked on the host, safely.
 *
 * The archive is read as a stream (tar_reader.c, pax.c), every member's name is checked on the
 * string alone (names.c), and only regular files and directories are created, descriptor-relative
 * beneath a fresh 0700 directory with O_NOFOLLOW everywhere and O_CREAT|O_EXCL for files
 * (extract.c). Links, devices, FIFOs and anything else are skipped and reported; set-id and
 * sticky bits, group/other write bits and the guest's owners are never kept. A failure removes
 * everything written (tree.c). Pure C: the Lua binding is csrc/lua/capture.c. */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/error.h"

/* Where archive bytes come from: read returns bytes read (0 at the end) or -1 with errno. */
typedef struct cap_source {
  ssize_t (*read)(void *ctx, void *buf, size_t n);
  void *ctx;
} cap_source;

typedef struct cap_options {
  uint64_t max_bytes;   /* total bytes of file content written */
  uint64_t max_entries; /* archive members (pax and GNU long-name headers not counted) */
} cap_options;

#define CAP_DEFAULT_MAX_BYTES (1024ull * 1024 * 1024)
#define CAP_DEFAULT_MAX_ENTRIES 100000ull
#define CAP_SKIP_NAME_MAX 1024 /* bytes of a skipped member's name kept for the report */

/* One member that was not written: its name as the archive gave it (cut at CAP_SKIP_NAME_MAX
 * bytes, NUL bytes kept), its type ("symlink", "fifo", ...) and why ("absolute", "dotdot", ...). */
typedef struct cap_skip {
  char *name;
  size_t len;
  const char *type;
  const char *reason;
} cap_skip;

typedef struct cap_result {
  cap_skip *skipped; /* owned; cap_result_free releases it */
  size_t nskipped, cap_skipped;
  uint64_t files, dirs, bytes, entries;
} cap_result;

void cap_result_free(cap_result *r);

/* Unpacks the archive from src beneath dirfd (a directory we made and nobody else writes).
 * 0, or -1 with e set: kind "invalid"/"archive" (malformed), "output_limit" (a cap, with
 * `limit`), "io" (errno name). It does not remove what it wrote: cap_extract_archive does. */
int cap_extract(int dirfd, const cap_source *src, const cap_options *o, cap_result *res, ss_error *e);

/* Makes path a fresh directory with mode 0700. An existing path (a link included) is refused
 * with "invalid"/"exists"; nothing is ever created inside something that was already there. */
int cap_fresh_dir(const char *path, ss_error *e);

/* Removes everything beneath dirfd without following a link, at any depth, holding two fds at
 * most. 0, or -1 with e set. */
int cap_empty_dir(int dirfd, ss_error *e);

/* cap_empty_dir on path, then rmdir(path). */
int cap_remove_dir(const char *path, ss_error *e);

/* The whole capture after a download: archive_name (a plain name inside dir, written there by
 * the engine client) is opened and unlinked at once, then unpacked into dir. On any failure dir
 * and everything in it are removed. */
int cap_extract_archive(const char *dir, const char *archive_name, const cap_options *o, cap_result *res,
                        ss_error *e);

/* A tar of the host directory dir, made as it is read (tree_tar.c): its members are named
 * top/..., top a plain name. Files, directories and symbolic links (sent as links, never
 * followed); permission bits and mtimes kept. NULL with e set when dir cannot be opened. */
typedef struct cap_tree_tar cap_tree_tar;
cap_tree_tar *cap_tree_tar_open(const char *dir, const char *top, ss_error *e);
/* Up to n bytes of the archive: the count (0 at its end), or -1 with errno set. */
ssize_t cap_tree_tar_read(cap_tree_tar *t, void *buf, size_t n);
void cap_tree_tar_close(cap_tree_tar *t);

/* What a download put in place. */
typedef struct cap_placed {
  int is_dir;
} cap_placed;

/* A download (place.c): the archive read from src, unpacked into a fresh hidden directory
 * inside parent as it streams, then its one top member renamed to parent/name (name: a plain
 * name). A file replaces a file or link there (never followed) and is refused over a directory
 * (EISDIR); a directory goes only where nothing stands (EEXIST). The hidden directory is
 * removed whatever happens, so a failure leaves nothing. */
int cap_place(const char *parent, const char *name, const cap_source *src, const cap_options *o, cap_result *res,
              cap_placed *out, ss_error *e);

/* The header of a regular file member named name (nlen bytes, no NUL) of size bytes, written to
 * out: one ustar block, or a pax header and its data before it when the name is longer than 100
 * bytes. Returns the bytes written (a multiple of 512), 0 when cap is too small.
 * CAP_TAR_HEADER_MAX(nlen) is always enough: two header blocks and the pax record ("%d path=NAME\n",
 * the name and at most 12 bytes more) padded to a block, under nlen + 1024. */
#define CAP_TAR_HEADER_MAX(nlen) (512u * 4u + (nlen))

/* A member of any type the writer makes: '0' (a file of size bytes), '5' (a directory: its
 * name ends in '/'), '2' (a symbolic link to link). Names are written as given. */
typedef struct cap_member {
  const char *name, *link;
  size_t nlen, llen;
  char type;
  unsigned long long size;
  unsigned mode;
  long long mtime;
} cap_member;
#define CAP_MEMBER_MAX(nlen, llen) (512u * 3u + 40u + (nlen) + (llen))
/* The header of m (a pax header first for a long name or link): the bytes written (a multiple
 * of 512), 0 when cap is too small. */
size_t cap_tar_member(unsigned char *out, size_t cap, const cap_member *m);
size_t cap_tar_header(unsigned char *out, size_t cap, const char *name, size_t nlen, unsigned long long size,
                      unsigned mode, long long mtime);

#endif
