/* The writer: applies the capture's rules to each member the reader hands out.
 *
 * - Only regular files and directories are created. Hard links, symbolic links, devices,
 *   FIFOs, sparse and unknown members are skipped (their data read past) and reported: a
 *   guest that is root in its container can make all of them, and a host running as root would
 *   otherwise recreate them with their powers.
 * - Everything is reached descriptor-relative from the top directory, one component at a time
 *   with O_NOFOLLOW (as the file plane's walk), files are created with O_CREAT|O_EXCL|O_NOFOLLOW
 *   and directories with mkdirat, so nothing that already stands at a name is ever written
 *   through. The tree is ours and 0700 and no link is ever created in it, so this is a second
 *   wall, not the only one.
 * - Modes keep the permission bits only, without group/other write: files (mode & 0755) | 0600,
 *   directories (mode & 0755) | 0700 (the host user must be able to read and remove what it
 *   captured). Set-id and sticky bits are dropped; owners are never set, so the host user owns
 *   everything. A file keeps its mtime.
 * - The first member at a name wins: a later one at the same name is skipped ("exists"), never
 *   replaces it (replacing would mean removing, and O_EXCL creation is the point).
 * - Caps on the bytes written and the members read end the capture with "output_limit". */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture/internal.h"
#include "util/io.h"

#define CAP_COPY_BUF (64 * 1024)

typedef struct extractor {
  int rootfd;
  cap_reader reader;
  const cap_options *o;
  cap_result *res;
  char *buf;                  /* CAP_COPY_BUF bytes of copying buffer */
  cap_entry ent;              /* the current member */
  char rel[FP_PATH_MAX];      /* its checked name */
  char parent[FP_PATH_MAX];   /* the directory the cached fd is, relative to the top */
  size_t parent_len;
  int parent_fd;              /* -1: nothing cached; may be rootfd (never closed here) */
} extractor;

void cap_result_free(cap_result *r) {
  for (size_t i = 0; i < r->nskipped; i++) free(r->skipped[i].name);
  free(r->skipped);
  r->skipped = NULL;
  r->nskipped = r->cap_skipped = 0;
}

static const char *type_name(const cap_entry *ent) {
  if (ent->sparse) return "sparse";
  switch (ent->type) {
    case '0': case '\0': case '7': return "file";
    case '1': return "hardlink";
    case '2': return "symlink";
    case '3': return "char_device";
    case '4': return "block_device";
    case '5': return "directory";
    case '6': return "fifo";
    default: return "other";
  }
}

/* Why a type is never written, or NULL for a file or a directory. */
static const char *type_refusal(const cap_entry *ent) {
  const char *t = type_name(ent);
  if (strcmp(t, "file") == 0 || strcmp(t, "directory") == 0) return NULL;
  if (strcmp(t, "char_device") == 0 || strcmp(t, "block_device") == 0) return "device";
  if (strcmp(t, "other") == 0) return "unsupported";
  return t; /* hardlink, symlink, fifo, sparse: the reason is the type */
}

static int add_skip(extractor *x, const char *reason, ss_error *e) {
  cap_result *r = x->res;
  if (r->nskipped == r->cap_skipped) {
    size_t cap = r->cap_skipped ? r->cap_skipped * 2 : 16;
    cap_skip *grown = realloc(r->skipped, cap * sizeof *grown);
    if (!grown) goto oom;
    r->skipped = grown;
    r->cap_skipped = cap;
  }
  size_t len = x->ent.name.len < CAP_SKIP_NAME_MAX ? x->ent.name.len : CAP_SKIP_NAME_MAX;
  char *name = malloc(len + 1);
  if (!name) goto oom;
  memcpy(name, x->ent.name.s, len);
  name[len] = '\0';
  r->skipped[r->nskipped++] = (cap_skip){name, len, type_name(&x->ent), reason};
  return 0;
oom:
  cap_err_io(e, ENOMEM, "cannot record a skipped member", NULL);
  return -1;
}

static void drop_parent(extractor *x) {
  if (x->parent_fd >= 0 && x->parent_fd != x->rootfd) close(x->parent_fd);
  x->parent_fd = -1;
}

/* One directory component beneath dirfd, made (0755) when missing. The fd, -1 with errno. */
static int enter(int dirfd, const char *name) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT || attempt) return fd;
    if (mkdirat(dirfd, name, 0755) != 0 && errno != EEXIST) return -1;
  }
  return -1;
}

/* The fd of the directory holding x->rel's last component (len bytes of parent path). 0, 1 when
 * something that is not a directory stands on the way (the member is skipped), -1 on error. */
static int open_parent(extractor *x, size_t len, ss_error *e) {
  if (x->parent_fd >= 0 && x->parent_len == len && memcmp(x->parent, x->rel, len) == 0) return 0;
  drop_parent(x);
  int fd = x->rootfd;
  size_t i = 0;
  char comp[FP_NAME_MAX + 1];
  while (i < len) {
    size_t start = i;
    while (i < len && x->rel[i] != '/') i++;
    memcpy(comp, x->rel + start, i - start);
    comp[i - start] = '\0';
    i++; /* the slash */
    int next = enter(fd, comp);
    int err = errno;
    if (fd != x->rootfd) close(fd);
    if (next < 0) {
      if (err == ENOTDIR || err == ELOOP || err == EEXIST) return 1;
      cap_err_io(e, err, "cannot make the directory of", x->rel);
      return -1;
    }
    fd = next;
  }
  memcpy(x->parent, x->rel, len);
  x->parent_len = len;
  x->parent_fd = fd;
  return 0;
}

static int make_file(extractor *x, const char *last, ss_error *e) {
  uint64_t size = x->ent.size;
  if (size > x->o->max_bytes - x->res->bytes) {
    ss_error_set(e, "output_limit", "max_bytes", "the capture holds more than %llu bytes of files (at '%.200s')",
                 (unsigned long long)x->o->max_bytes, x->rel);
    ss_error_field_num(e, "limit", (double)x->o->max_bytes);
    return -1;
  }
  int fd = openat(x->parent_fd, last, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return add_skip(x, "exists", e);
    cap_err_io(e, errno, "cannot create", x->rel);
    return -1;
  }
  for (;;) {
    ssize_t got = cap_reader_data(&x->reader, x->buf, CAP_COPY_BUF, e);
    if (got < 0) goto fail;
    if (got == 0) break;
    if (ss_write_all(fd, x->buf, (size_t)got) != 0) {
      cap_err_io(e, errno, "cannot write", x->rel);
      goto fail;
    }
    x->res->bytes += (uint64_t)got;
  }
  if (fchmod(fd, (x->ent.mode & 0755) | 0600) != 0) {
    cap_err_io(e, errno, "cannot set the mode of", x->rel);
    goto fail;
  }
  struct timespec t[2] = {{0, UTIME_OMIT}, {(time_t)x->ent.mtime, 0}};
  if (futimens(fd, t) != 0) { /* a time the file system cannot hold is not worth failing */
  }
  if (close(fd) != 0) {
    cap_err_io(e, errno, "cannot write", x->rel);
    return -1;
  }
  x->res->files++;
  return 0;
fail:
  close(fd);
  return -1;
}

static int make_dir(extractor *x, const char *last, ss_error *e) {
  if (mkdirat(x->parent_fd, last, 0700) != 0 && errno != EEXIST) {
    cap_err_io(e, errno, "cannot make directory", x->rel);
    return -1;
  }
  /* Made now or earlier as a parent: either way a directory of ours, never a link (O_NOFOLLOW). */
  int fd = openat(x->parent_fd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR || errno == ELOOP) return add_skip(x, "exists", e);
    cap_err_io(e, errno, "cannot open directory", x->rel);
    return -1;
  }
  int rc = fchmod(fd, (x->ent.mode & 0755) | 0700);
  if (rc != 0) cap_err_io(e, errno, "cannot set the mode of", x->rel);
  close(fd);
  if (rc == 0) x->res->dirs++;
  return rc;
}

static int one_member(extractor *x, ss_error *e) {
  if (++x->res->entries > x->o->max_entries) {
    ss_error_set(e, "output_limit", "max_entries", "the capture holds more than %llu members",
                 (unsigned long long)x->o->max_entries);
    ss_error_field_num(e, "limit", (double)x->o->max_entries);
    return -1;
  }
  const char *why = type_refusal(&x->ent);
  if (why) return add_skip(x, why, e);
  size_t len;
  int is_root;
  why = cap_name_check(&x->ent.name, x->rel, &len, &is_root);
  if (why) return add_skip(x, why, e);
  int is_dir = x->ent.type == '5';
  if (is_root) return is_dir ? 0 : add_skip(x, "empty", e); /* "./": the top, made already */
  const char *slash = memrchr(x->rel, '/', len);
  const char *last = slash ? slash + 1 : x->rel;
  int rc = open_parent(x, slash ? (size_t)(slash - x->rel) : 0, e);
  if (rc < 0) return -1;
  if (rc > 0) return add_skip(x, "not_directory", e);
  return is_dir ? make_dir(x, last, e) : make_file(x, last, e);
}

int cap_extract(int dirfd, const cap_source *src, const cap_options *o, cap_result *res, ss_error *e) {
  extractor *x = calloc(1, sizeof *x);
  char *buf = malloc(CAP_COPY_BUF);
  if (!x || !buf) {
    free(x);
    free(buf);
    cap_err_io(e, ENOMEM, "cannot unpack the capture", NULL);
    return -1;
  }
  x->rootfd = dirfd;
  x->parent_fd = -1;
  x->o = o;
  x->res = res;
  x->buf = buf;
  cap_reader_init(&x->reader, src);
  int rc;
  while ((rc = cap_reader_next(&x->reader, &x->ent, e)) == 1) {
    if (one_member(x, e) != 0) {
      rc = -1;
      break;
    }
  }
  drop_parent(x);
  free(buf);
  free(x);
  return rc;
}
