/* A tar of a host directory, made as it is read (an upload's body: the engine client pulls it
 * piece by piece, so no copy of the tree is ever written or held).
 *
 * The walk is descriptor-relative and never follows a link below the top: directories are
 * entered with O_NOFOLLOW, a symbolic link is sent as a link (its target as text), regular files
 * are opened with O_NOFOLLOW and sent with the size they had when their header was made. A file
 * that shrinks meanwhile fails the read (ENODATA) rather than send a short member; one that grows
 * is sent as it was. Devices, FIFOs and sockets are left out. Permission bits and mtimes are
 * kept; owners are not sent (the engine gives the files to the container's root). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture/internal.h"

#define TREE_HEADER_MAX CAP_MEMBER_MAX(FP_PATH_MAX, FP_PATH_MAX)

typedef struct level {
  DIR *d;
  size_t prefix; /* bytes of rel that name this directory */
} level;

struct cap_tree_tar {
  level *stack;
  size_t depth, cap;
  char rel[FP_PATH_MAX + 1]; /* the member name being made, "top/a/b" */
  unsigned char hdr[TREE_HEADER_MAX];
  size_t hdr_len, hdr_off;
  int fd;                  /* the file whose data is being sent, or -1 */
  unsigned long long left; /* its bytes still to send */
  size_t pad;              /* zero bytes after them, or the archive's end blocks */
  int walked, ended;
};

static int push(cap_tree_tar *t, int dirfd, size_t prefix) {
  if (t->depth == t->cap) {
    size_t ncap = t->cap ? t->cap * 2 : 16;
    level *grown = realloc(t->stack, ncap * sizeof *grown);
    if (!grown) {
      close(dirfd);
      errno = ENOMEM;
      return -1;
    }
    t->stack = grown;
    t->cap = ncap;
  }
  DIR *d = fdopendir(dirfd);
  if (!d) {
    int err = errno;
    close(dirfd);
    errno = err;
    return -1;
  }
  t->stack[t->depth++] = (level){d, prefix};
  return 0;
}

/* The header of the member rel (len bytes) with st's mode and time. */
static int header(cap_tree_tar *t, size_t len, char type, const struct stat *st, const char *link, size_t llen) {
  cap_member m = {.name = t->rel, .nlen = len, .type = type, .size = (unsigned long long)st->st_size,
                  .mode = (unsigned)(st->st_mode & 07777), .mtime = (long long)st->st_mtime,
                  .link = link, .llen = llen};
  t->hdr_len = cap_tar_member(t->hdr, sizeof t->hdr, &m);
  t->hdr_off = 0;
  if (t->hdr_len == 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

/* The next member's header (and, for a file, its descriptor); at the walk's end the archive's
 * two zero blocks. 0, or -1 with errno set. */
static int next_member(cap_tree_tar *t) {
  while (t->depth > 0) {
    level *l = &t->stack[t->depth - 1];
    errno = 0;
    struct dirent *de = readdir(l->d);
    if (!de) {
      if (errno) return -1;
      closedir(l->d);
      t->depth--;
      continue;
    }
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
    int dfd = dirfd(l->d);
    struct stat st;
    if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue; /* gone since it was listed */
      return -1;
    }
    size_t nl = strlen(n), len = l->prefix + 1 + nl;
    if (len + 1 >= sizeof t->rel) {
      errno = ENAMETOOLONG;
      return -1;
    }
    t->rel[l->prefix] = '/';
    memcpy(t->rel + l->prefix + 1, n, nl + 1);
    if (S_ISDIR(st.st_mode)) {
      int fd = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) return -1;
      t->rel[len] = '/';
      int rc = header(t, len + 1, '5', &st, NULL, 0);
      t->rel[len] = '\0';
      if (rc != 0) {
        close(fd);
        return -1;
      }
      return push(t, fd, len);
    }
    if (S_ISREG(st.st_mode)) {
      int fd = openat(dfd, n, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
      if (fd < 0) return -1;
      if (header(t, len, '0', &st, NULL, 0) != 0) {
        close(fd);
        return -1;
      }
      t->fd = fd;
      t->left = (unsigned long long)st.st_size;
      t->pad = (size_t)((CAP_BLOCK - st.st_size % CAP_BLOCK) % CAP_BLOCK);
      return 0;
    }
    if (S_ISLNK(st.st_mode)) {
      char target[FP_PATH_MAX];
      ssize_t tl = readlinkat(dfd, n, target, sizeof target);
      if (tl < 0) return -1;
      if ((size_t)tl >= sizeof target) {
        errno = ENAMETOOLONG;
        return -1;
      }
      return header(t, len, '2', &st, target, (size_t)tl);
    }
    /* a device, FIFO or socket: not sent */
  }
  t->walked = 1;
  t->pad = 2 * CAP_BLOCK;
  return 0;
}

cap_tree_tar *cap_tree_tar_open(const char *dir, const char *top, ss_error *e) {
  size_t tl = strlen(top);
  if (tl == 0 || tl > FP_NAME_MAX || strchr(top, '/') || strcmp(top, ".") == 0 || strcmp(top, "..") == 0) {
    ss_error_set(e, "invalid", "name", "upload: the directory's name in the archive must be a plain name");
    return NULL;
  }
  cap_tree_tar *t = calloc(1, sizeof *t);
  if (!t) {
    cap_err_io(e, ENOMEM, "cannot send the directory", dir);
    return NULL;
  }
  t->fd = -1;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    cap_err_io(e, errno, "cannot open the directory", dir);
    if (fd >= 0) close(fd);
    free(t);
    return NULL;
  }
  memcpy(t->rel, top, tl);
  t->rel[tl] = '/';
  if (header(t, tl + 1, '5', &st, NULL, 0) != 0 || push(t, fd, tl) != 0) {
    cap_err_io(e, errno, "cannot send the directory", dir);
    cap_tree_tar_close(t);
    return NULL;
  }
  t->rel[tl] = '\0';
  return t;
}

ssize_t cap_tree_tar_read(cap_tree_tar *t, void *buf, size_t n) {
  unsigned char *out = buf;
  size_t got = 0;
  while (got < n && !t->ended) {
    if (t->hdr_off < t->hdr_len) {
      size_t k = t->hdr_len - t->hdr_off < n - got ? t->hdr_len - t->hdr_off : n - got;
      memcpy(out + got, t->hdr + t->hdr_off, k);
      t->hdr_off += k;
      got += k;
    } else if (t->fd >= 0 && t->left > 0) {
      size_t want = t->left < n - got ? (size_t)t->left : n - got;
      ssize_t r = read(t->fd, out + got, want);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (r == 0) errno = ENODATA; /* the file shrank since its header was made */
        return -1;
      }
      got += (size_t)r;
      t->left -= (unsigned long long)r;
    } else if (t->fd >= 0) {
      close(t->fd);
      t->fd = -1;
    } else if (t->pad > 0) {
      size_t k = t->pad < n - got ? t->pad : n - got;
      memset(out + got, 0, k);
      t->pad -= k;
      got += k;
    } else if (t->walked) {
      t->ended = 1;
    } else if (next_member(t) != 0) {
      return -1;
    }
  }
  return (ssize_t)got;
}

void cap_tree_tar_close(cap_tree_tar *t) {
  if (!t) return;
  while (t->depth > 0) closedir(t->stack[--t->depth].d);
  free(t->stack);
  if (t->fd >= 0) close(t->fd);
  free(t);
}
