/* The archives of the session file methods (lua/sandstack/docker/handle_files.lua): what the
 * Engine's archive API sends and takes, read with the capture's streaming tar reader
 * (csrc/capture) and its name rules.
 *   core.tar_header(name, size, mode, mtime)  -> the header block(s) of one regular file
 *   core.archive_file(src, {to =, max_bytes =}) -> {name =, size =, mode =, mtime =, data =}
 *       the archive's one member, a regular file: its data as a string, or written to the host
 *       file `to` (created 0600 without following a link, then given the member's permission
 *       bits less set-id, sticky and group/other write)
 *   core.archive_list(src, {max_entries =})   -> { {name =, type =, size =, mode =, mtime =, link =}, ... }
 * src is {data = archive bytes} or {path = an archive file}. Errors: "invalid" (reason
 * "symlink", "not_regular", "archive", ...), "output_limit", "io". */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture/internal.h"
#include "lua/binding.h"

typedef struct {
  const char *data;
  size_t len, at;
  int fd;
  cap_source src;
  cap_reader reader;
} src_ctx;

static ssize_t src_read(void *ud, void *buf, size_t n) {
  src_ctx *s = ud;
  if (s->fd >= 0) return read(s->fd, buf, n);
  size_t k = s->len - s->at < n ? s->len - s->at : n;
  memcpy(buf, s->data + s->at, k);
  s->at += k;
  return (ssize_t)k;
}

/* Opens the source of the table at idx; -1 with e set when the archive file cannot be opened. */
static int open_src(lua_State *L, int idx, src_ctx *s, ss_error *e) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "data");
  if (lua_type(L, -1) == LUA_TSTRING) {
    s->data = lua_tolstring(L, -1, &s->len); /* kept alive by the src table */
    lua_pop(L, 1);
    return 0;
  }
  lua_pop(L, 1);
  const char *path = ss_opt_string(L, idx, "path", NULL);
  if (!path) luaL_error(L, "archive: src must be {data = string} or {path = string}");
  s->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (s->fd < 0) {
    cap_err_io(e, errno, "cannot open the archive", path);
    return -1;
  }
  return 0;
}

/* open_src, then the tar reader on it. */
static int open_reader(lua_State *L, int idx, src_ctx *s, ss_error *e) {
  if (open_src(L, idx, s, e) != 0) return -1;
  s->src.read = src_read;
  s->src.ctx = s;
  cap_reader_init(&s->reader, &s->src);
  return 0;
}

static void close_src(src_ctx *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

static uint64_t opt_count(lua_State *L, int idx, const char *key, uint64_t def) {
  double v = ss_opt_number(L, idx, key, (double)def);
  if (!(v >= 0 && v <= 9007199254740992.0) || floor(v) != v)
    luaL_error(L, "archive: option '%s' must be a whole number >= 0", key);
  return (uint64_t)v;
}

static const char *type_name(char t) {
  switch (t) {
    case '0': case '\0': case '7': return "file";
    case '5': return "directory";
    case '2': return "link";
    case '1': return "hardlink";
    case '3': return "char device";
    case '4': return "block device";
    case '6': return "named pipe";
    default: return "other";
  }
}

static int l_tar_header(lua_State *L) {
  size_t nlen;
  const char *name = luaL_checklstring(L, 1, &nlen);
  double size = luaL_checknumber(L, 2);
  lua_Integer mode = luaL_optinteger(L, 3, 0644);
  double mtime = luaL_optnumber(L, 4, 0);
  if (nlen == 0 || memchr(name, '\0', nlen) || nlen >= FP_PATH_MAX) return luaL_argerror(L, 1, "a member name");
  if (!(size >= 0 && size < 8589934592.0 * 1024)) return luaL_argerror(L, 2, "a size in bytes");
  size_t cap = CAP_TAR_HEADER_MAX(nlen);
  unsigned char *buf = ss_newuserdata(L, cap);
  size_t n = cap_tar_header(buf, cap, name, nlen, (unsigned long long)size, (unsigned)mode, (long long)mtime);
  lua_pushlstring(L, (const char *)buf, n);
  return 1;
}

static int refuse_member(lua_State *L, const cap_entry *ent) {
  ss_error e;
  ss_error_init(&e);
  const char *t = type_name(ent->type);
  if (ent->type == '2') {
    ss_error_set(&e, "invalid", "symlink", "%.200s is a symbolic link (to %.200s); it is not followed", ent->name.s,
                 ent->link.s);
    ss_error_field_str(&e, "target", ent->link.s);
  } else {
    ss_error_set(&e, "invalid", "not_regular", "%.200s is not a regular file (a %s)", ent->name.s, t);
  }
  ss_error_field_str(&e, "type", t);
  return ss_push_error(L, &e);
}

/* Copies the member's data to fd; 0, or -1 with e set. */
static int copy_to_fd(cap_reader *r, int fd, ss_error *e) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = cap_reader_data(r, buf, sizeof buf, e);
    if (n < 0) return -1;
    if (n == 0) return 0;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(fd, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        cap_err_io(e, errno, "cannot write the file", NULL);
        return -1;
      }
      off += w;
    }
  }
}

/* The member's data from an archive file to fd in the kernel (copy_file_range), when the reader
 * stands at the data's start (it never reads ahead of a header): 1 when done, 0 when the kernel
 * cannot (the caller then copies through memory, nothing having been consumed), -1 with e set. */
static int copy_in_kernel(src_ctx *s, uint64_t size, int fd, ss_error *e) {
  uint64_t left = size;
  while (left > 0) {
    ssize_t n = copy_file_range(s->fd, NULL, fd, NULL, left < (1u << 30) ? (size_t)left : (1u << 30), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && left == size && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) return 0;
    if (n < 0) {
      cap_err_io(e, errno, "cannot write the file", NULL);
      return -1;
    }
    if (n == 0) {
      cap_err_archive(e, s->reader.consumed, "the archive ends inside its member");
      return -1;
    }
    left -= (uint64_t)n;
  }
  s->reader.left = 0; /* the data is consumed; what follows is not read */
  return 1;
}

static int l_archive_file(lua_State *L) {
  static const char *const keys[] = {"to", "max_bytes", NULL};
  ss_check_keys(L, 2, keys, "archive_file");
  const char *to = ss_opt_string(L, 2, "to", NULL);
  uint64_t max = opt_count(L, 2, "max_bytes", UINT64_MAX >> 12);
  ss_error e;
  ss_error_init(&e);
  src_ctx s;
  if (open_reader(L, 1, &s, &e) != 0) return ss_push_error(L, &e);
  cap_reader *r = &s.reader;
  cap_entry ent;
  int rc = cap_reader_next(r, &ent, &e);
  if (rc <= 0) {
    close_src(&s);
    if (rc == 0) ss_error_set(&e, "invalid", "archive", "the archive holds no member");
    return ss_push_error(L, &e);
  }
  if (type_name(ent.type)[0] != 'f' || strcmp(type_name(ent.type), "file") != 0 || ent.sparse) {
    close_src(&s);
    return refuse_member(L, &ent);
  }
  if (ent.size > max) {
    close_src(&s);
    ss_error_set(&e, "output_limit", NULL, "%.200s has %llu bytes, over the budget of %llu", ent.name.s,
                 (unsigned long long)ent.size, (unsigned long long)max);
    ss_error_field_num(&e, "limit", (double)max);
    ss_error_field_num(&e, "size", (double)ent.size);
    return ss_push_error(L, &e);
  }
  unsigned mode = ent.mode & 0755; /* no set-id, sticky, group or other write */
  lua_createtable(L, 0, 5);
  int out = lua_gettop(L);
  if (to) {
    int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      close_src(&s);
      cap_err_io(&e, errno, "cannot create the file", to);
      return ss_push_error(L, &e);
    }
    int k = s.fd >= 0 ? copy_in_kernel(&s, ent.size, fd, &e) : 0;
    int ok = k >= 0 && (k == 1 || copy_to_fd(r, fd, &e) == 0) && fchmod(fd, mode) == 0;
    if (ok && close(fd) != 0) ok = 0, cap_err_io(&e, errno, "cannot write the file", to);
    else if (!ok) close(fd);
    close_src(&s);
    if (!ok) {
      if (!ss_error_isset(&e)) cap_err_io(&e, errno, "cannot set the file's mode", to);
      unlink(to);
      return ss_push_error(L, &e);
    }
  } else {
    /* a userdata, so an error raised before the string is made frees it too */
    char *p = ss_newuserdata(L, ent.size ? (size_t)ent.size : 1);
    size_t got = 0;
    while (got < ent.size) {
      ssize_t n = cap_reader_data(r, p + got, (size_t)ent.size - got, &e);
      if (n <= 0) {
        close_src(&s);
        if (n == 0) ss_error_set(&e, "invalid", "archive", "the archive ends inside %.200s", ent.name.s);
        return ss_push_error(L, &e);
      }
      got += (size_t)n;
    }
    close_src(&s);
    lua_pushlstring(L, p, got);
    lua_setfield(L, out, "data");
    lua_pop(L, 1);
  }
  lua_pushstring(L, ent.name.s);
  lua_setfield(L, out, "name");
  lua_pushinteger(L, (lua_Integer)ent.size);
  lua_setfield(L, out, "size");
  lua_pushinteger(L, (lua_Integer)(ent.mode & 07777));
  lua_setfield(L, out, "mode");
  lua_pushinteger(L, (lua_Integer)ent.mtime);
  lua_setfield(L, out, "mtime");
  return 1;
}

static int l_archive_list(lua_State *L) {
  static const char *const keys[] = {"max_entries", NULL};
  ss_check_keys(L, 2, keys, "archive_list");
  uint64_t max = opt_count(L, 2, "max_entries", CAP_DEFAULT_MAX_ENTRIES);
  ss_error e;
  ss_error_init(&e);
  src_ctx s;
  if (open_reader(L, 1, &s, &e) != 0) return ss_push_error(L, &e);
  cap_reader *r = &s.reader;
  lua_newtable(L);
  int out = lua_gettop(L);
  uint64_t n = 0;
  for (;;) {
    cap_entry ent;
    int rc = cap_reader_next(r, &ent, &e);
    if (rc < 0) {
      close_src(&s);
      return ss_push_error(L, &e);
    }
    if (rc == 0) break;
    if (++n > max) {
      close_src(&s);
      ss_error_set(&e, "output_limit", NULL, "the listing has more than %llu entries", (unsigned long long)max);
      ss_error_field_num(&e, "limit", (double)max);
      return ss_push_error(L, &e);
    }
    lua_createtable(L, 0, 6);
    lua_pushstring(L, ent.name.s);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, type_name(ent.type));
    lua_setfield(L, -2, "type");
    lua_pushinteger(L, (lua_Integer)ent.size);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, (lua_Integer)(ent.mode & 07777));
    lua_setfield(L, -2, "mode");
    lua_pushinteger(L, (lua_Integer)ent.mtime);
    lua_setfield(L, -2, "mtime");
    if (ent.type == '2' || ent.type == '1') {
      lua_pushstring(L, ent.link.s);
      lua_setfield(L, -2, "link");
    }
    lua_rawseti(L, out, (int)n);
  }
  close_src(&s);
  return 1;
}

void sandstack_open_archive(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"tar_header", l_tar_header},
      {"archive_file", l_archive_file},
      {"archive_list", l_archive_list},
      {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}
