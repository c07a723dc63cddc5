/* Lua binding of the file plane (csrc/fileplane): core.fileplane_open{...} -> plane, shaped like
 * LuaFileSystem (`true` or `nil, err`; dir an iterator that closes on `break` in 5.4). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileplane/fileplane.h"
#include "lua/binding.h"

#define FP_MT "sandstack.fileplane"
#define FP_DIR_MT "sandstack.fileplane.dir"

typedef struct {
  fp_plane *p;
} l_plane;

typedef struct {
  DIR *d;
} l_dirobj;

static fp_plane *check_plane(lua_State *L) {
  l_plane *u = luaL_checkudata(L, 1, FP_MT);
  if (!u->p) luaL_error(L, "fileplane: the plane is closed");
  return u->p;
}

/* nil, err with the caller's path as err.path (the core names the host-relative one). */
static int fail(lua_State *L, ss_error *e, const char *path) {
  if (path) ss_error_field_str(e, "path", path);
  return ss_push_error(L, e);
}

/* What every path method starts from: plane:method(path, ...) with the plane open, the path
 * (argument 2, embedded NULs kept so the core can refuse them) and a fresh error. */
typedef struct {
  fp_plane *p;
  const char *path;
  size_t len;
  ss_error e;
} path_call;

static void path_call_init(lua_State *L, path_call *c) {
  c->p = check_plane(L);
  c->path = luaL_checklstring(L, 2, &c->len);
  ss_error_init(&c->e);
}

/* The end of a method that answers `true`: true, or nil, err when the core call (rc) failed. */
static int true_or_fail(lua_State *L, path_call *c, int rc) {
  if (rc != 0) return fail(L, &c->e, c->path);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_open(lua_State *L) {
  static const char *const keys[] = {"root", "guest_root", "cwd", "max_read", "resolver", "allow_hardlinks", "sync", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  ss_check_keys(L, 1, keys, "fileplane_open");
  fp_options o;
  memset(&o, 0, sizeof o);
  o.root = ss_opt_string(L, 1, "root", NULL);
  if (!o.root) return luaL_error(L, "fileplane_open: option 'root' is required");
  o.guest_root = ss_opt_string(L, 1, "guest_root", NULL);
  o.cwd = ss_opt_string(L, 1, "cwd", NULL);
  double max_read = ss_opt_number(L, 1, "max_read", 64.0 * 1024 * 1024);
  if (!(max_read >= 0 && max_read <= 1024.0 * 1024 * 1024 * 1024)) return luaL_error(L, "fileplane_open: bad max_read");
  o.max_read = (size_t)max_read;
  const char *res = ss_opt_string(L, 1, "resolver", "auto");
  if (strcmp(res, "auto") == 0) o.resolve = FP_RESOLVE_AUTO;
  else if (strcmp(res, "openat2") == 0) o.resolve = FP_RESOLVE_OPENAT2;
  else if (strcmp(res, "walk") == 0) o.resolve = FP_RESOLVE_WALK;
  else return luaL_error(L, "fileplane_open: resolver must be auto, openat2 or walk");
  o.allow_hardlinks = ss_opt_boolean(L, 1, "allow_hardlinks", 0);
  o.sync = ss_opt_boolean(L, 1, "sync", 0);
  l_plane *u = ss_newuserdata(L, sizeof *u);
  u->p = NULL;
  luaL_getmetatable(L, FP_MT);
  lua_setmetatable(L, -2);
  ss_error e;
  ss_error_init(&e);
  u->p = fp_open(&o, &e);
  if (!u->p) {
    /* Bad option values are programming errors: raise them, like unknown keys. */
    if (strcmp(e.kind, "invalid") == 0) {
      lua_pushstring(L, e.message);
      ss_error_clear(&e);
      return lua_error(L);
    }
    return ss_push_error(L, &e);
  }
  return 1;
}

static int l_close(lua_State *L) {
  l_plane *u = luaL_checkudata(L, 1, FP_MT);
  fp_close(u->p);
  u->p = NULL;
  return 0;
}

static int l_resolver(lua_State *L) {
  lua_pushstring(L, fp_resolver_name(check_plane(L)));
  return 1;
}

static const char *mode_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISLNK(m)) return "link";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISFIFO(m)) return "named pipe";
  if (S_ISCHR(m)) return "char device";
  if (S_ISBLK(m)) return "block device";
  return "other";
}

static void push_permissions(lua_State *L, mode_t m) {
  static const char letters[] = "rwxrwxrwx";
  char s[10];
  for (int i = 0; i < 9; i++) s[i] = (m & (0400u >> i)) ? letters[i] : '-';
  s[9] = '\0';
  lua_pushstring(L, s);
}

/* Pushes one attribute by name; 0 when the name is unknown. */
static int push_attr(lua_State *L, const struct stat *st, const char *k) {
  if (strcmp(k, "mode") == 0) lua_pushstring(L, mode_name(st->st_mode));
  else if (strcmp(k, "permissions") == 0) push_permissions(L, st->st_mode);
  else if (strcmp(k, "size") == 0) lua_pushinteger(L, (lua_Integer)st->st_size);
  else if (strcmp(k, "modification") == 0) lua_pushinteger(L, (lua_Integer)st->st_mtime);
  else if (strcmp(k, "access") == 0) lua_pushinteger(L, (lua_Integer)st->st_atime);
  else if (strcmp(k, "change") == 0) lua_pushinteger(L, (lua_Integer)st->st_ctime);
  else if (strcmp(k, "uid") == 0) lua_pushinteger(L, (lua_Integer)st->st_uid);
  else if (strcmp(k, "gid") == 0) lua_pushinteger(L, (lua_Integer)st->st_gid);
  else if (strcmp(k, "nlink") == 0) lua_pushinteger(L, (lua_Integer)st->st_nlink);
  else if (strcmp(k, "ino") == 0) lua_pushinteger(L, (lua_Integer)st->st_ino);
  else if (strcmp(k, "dev") == 0) lua_pushinteger(L, (lua_Integer)st->st_dev);
  else if (strcmp(k, "rdev") == 0) lua_pushinteger(L, (lua_Integer)st->st_rdev);
  else if (strcmp(k, "blocks") == 0) lua_pushinteger(L, (lua_Integer)st->st_blocks);
  else if (strcmp(k, "blksize") == 0) lua_pushinteger(L, (lua_Integer)st->st_blksize);
  else return 0;
  return 1;
}

static const char *const attr_names[] = {"mode", "permissions", "size", "modification", "access", "change", "uid",
                                         "gid", "nlink", "ino", "dev", "rdev", "blocks", "blksize", NULL};

/* plane:attributes(path [, name]) -> table (or the one value), or nil, err. Never follows a
 * final link: it reports mode "link", like lfs.symlinkattributes. */
static int l_attributes(lua_State *L) {
  path_call c;
  path_call_init(L, &c);
  const char *want = luaL_optstring(L, 3, NULL);
  struct stat st;
  if (fp_lstat(c.p, c.path, c.len, &st, &c.e) != 0) return fail(L, &c.e, c.path);
  if (want) {
    if (!push_attr(L, &st, want)) return luaL_argerror(L, 3, "unknown attribute name");
    return 1;
  }
  lua_newtable(L);
  for (int i = 0; attr_names[i]; i++) {
    push_attr(L, &st, attr_names[i]);
    lua_setfield(L, -2, attr_names[i]);
  }
  return 1;
}

static int l_read(lua_State *L) {
  path_call c;
  path_call_init(L, &c);
  size_t n = 0;
  char *buf = NULL;
  if (fp_read(c.p, c.path, c.len, &buf, &n, &c.e) != 0) return fail(L, &c.e, c.path);
  lua_pushlstring(L, buf, n);
  free(buf);
  return 1;
}

static int l_write(lua_State *L) {
  path_call c;
  path_call_init(L, &c);
  size_t n;
  const char *data = luaL_checklstring(L, 3, &n);
  return true_or_fail(L, &c, fp_write(c.p, c.path, c.len, data, n, &c.e));
}

static int l_mkdir(lua_State *L) {
  path_call c;
  path_call_init(L, &c);
  return true_or_fail(L, &c, fp_mkdir(c.p, c.path, c.len, &c.e));
}

static int l_check(lua_State *L) {
  path_call c;
  path_call_init(L, &c);
  char guest[FP_PATH_MAX + 512];
  return true_or_fail(L, &c, fp_check(c.p, c.path, c.len, guest, sizeof guest, &c.e));
}

static int l_resolve(lua_State *L) {
  path_call c;
  path_call_init(L, &c);
  fp_path rel;
  char guest[FP_PATH_MAX + 512];
  if (fp_normalize(c.p, c.path, c.len, &rel, &c.e) != 0 || fp_guest_path(c.p, &rel, guest, sizeof guest, &c.e) != 0)
    return fail(L, &c.e, c.path);
  lua_pushstring(L, guest);
  return 1;
}

/* Directory iteration: the iterator, the dir object as state, and (5.4) the dir object again
 * as the to-be-closed value, so `break` out of a generic for closes it. */
static int l_dir_close(lua_State *L) {
  l_dirobj *d = luaL_checkudata(L, 1, FP_DIR_MT);
  if (d->d) closedir(d->d);
  d->d = NULL;
  return 0;
}

static int l_dir_next(lua_State *L) {
  l_dirobj *d = luaL_checkudata(L, 1, FP_DIR_MT);
  if (!d->d) return luaL_error(L, "fileplane: calling 'next' on a closed directory");
  errno = 0;
  struct dirent *de = readdir(d->d);
  if (de) {
    lua_pushstring(L, de->d_name);
    return 1;
  }
  int err = errno;
  closedir(d->d);
  d->d = NULL;
  if (err) return luaL_error(L, "fileplane: cannot list directory: %s", strerror(err));
  return 0;
}

static int l_dir(lua_State *L) {
  path_call c;
  path_call_init(L, &c);
  lua_pushcfunction(L, l_dir_next);
  l_dirobj *d = ss_newuserdata(L, sizeof *d);
  d->d = NULL;
  luaL_getmetatable(L, FP_DIR_MT);
  lua_setmetatable(L, -2);
  int fd = fp_opendir(c.p, c.path, c.len, &c.e);
  if (fd < 0) return fail(L, &c.e, c.path);
  d->d = fdopendir(fd);
  if (!d->d) {
    int err = errno;
    close(fd);
    return ss_return_error(L, "io", strerrorname_np(err), "cannot list '%s': %s", c.path, strerror(err));
  }
#if LUA_VERSION_NUM >= 504
  lua_pushnil(L);
  lua_pushvalue(L, -2);
  return 4;
#else
  return 2;
#endif
}

/* core.fileplane_bench_plain(op, host_path [, data_or_size]): the benchmark's baseline, plain
 * lstat ("stat"), open+read+close ("read", returns the bytes) or open+write+close ("write"). */
static int l_bench_plain(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  const char *path = luaL_checkstring(L, 2);
  if (strcmp(op, "stat") == 0) {
    lua_pushboolean(L, fp_bench_plain('s', path, NULL, 0) == 0);
    return 1;
  }
  if (strcmp(op, "write") == 0) {
    size_t n;
    const char *data = luaL_checklstring(L, 3, &n);
    lua_pushboolean(L, fp_bench_plain('w', path, (char *)data, n) == (long)n);
    return 1;
  }
  if (strcmp(op, "read") != 0) return luaL_argerror(L, 1, "stat, read or write");
  lua_Integer n = luaL_optinteger(L, 3, 65536);
  luaL_argcheck(L, n > 0 && n <= 16 * 1024 * 1024, 3, "size out of range");
  char *buf = malloc((size_t)n);
  if (!buf) return luaL_error(L, "out of memory");
  long r = fp_bench_plain('r', path, buf, (size_t)n);
  if (r >= 0) lua_pushlstring(L, buf, (size_t)r);
  else lua_pushnil(L);
  free(buf);
  return 1;
}

void sandstack_open_fileplane(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"attributes", l_attributes}, {"dir", l_dir},         {"read", l_read},       {"write", l_write},
      {"mkdir", l_mkdir},           {"check", l_check},     {"resolve", l_resolve}, {"resolver", l_resolver},
      {"close", l_close},           {NULL, NULL}};
  static const luaL_Reg dir_methods[] = {{"next", l_dir_next}, {"close", l_dir_close}, {NULL, NULL}};
  static const luaL_Reg fns[] = {{"fileplane_open", l_open}, {"fileplane_bench_plain", l_bench_plain}, {NULL, NULL}};
  ss_define_class(L, FP_MT, methods, l_close);
  ss_define_class(L, FP_DIR_MT, dir_methods, l_dir_close);
  luaL_setfuncs(L, fns, 0);
}
