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

/* What every path method starts from: plane:method(path, ..., opts) with the plane open, the
 * path (argument 2, embedded NULs kept so the core can refuse them), the call's own working
 * directory (opts.cwd, normalized like any guest path from the plane's) and a fresh error. */
typedef struct {
  fp_plane *p;
  const char *path;
  size_t len;
  fp_path cwd_buf;
  const fp_path *cwd; /* NULL: the plane's */
  size_t max_bytes;   /* read's opts.max_bytes; 0 when not given */
  int child;          /* check's opts.child */
  ss_error e;
} path_call;

/* Reads the options table at idx (nil or absent: none). A bad value is an error object, like a
 * refused path: returns -1 with c->e set. An unknown key raises (a programming error). */
static int read_opts(lua_State *L, path_call *c, int idx, const char *const keys[], const char *what) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  ss_check_keys(L, idx, keys, what);
  lua_getfield(L, idx, "max_bytes");
  if (!lua_isnil(L, -1)) {
    /* a byte budget: a positive integer, never a string that looks like one */
    double v = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
    if (!(v >= 1 && v <= 1e15 && v == (double)(long long)v)) {
      lua_pop(L, 1);
      ss_error_set(&c->e, "invalid", "option", "%s: max_bytes must be a positive integer", what);
      ss_error_field_str(&c->e, "option", "max_bytes");
      return -1;
    }
    c->max_bytes = (size_t)v;
  }
  lua_pop(L, 1);
  c->child = ss_opt_boolean(L, idx, "child", 0);
  lua_getfield(L, idx, "cwd");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "%s: cwd must be a string", what);
    size_t n;
    const char *cwd = lua_tolstring(L, -1, &n);
    int rc = fp_normalize(c->p, NULL, cwd, n, &c->cwd_buf, &c->e);
    if (rc != 0) ss_error_field_str(&c->e, "cwd", cwd);
    lua_pop(L, 1);
    if (rc != 0) return -1;
    c->cwd = &c->cwd_buf;
    return 0;
  }
  lua_pop(L, 1);
  return 0;
}

static const char *const cwd_keys[] = {"cwd", NULL};

/* Starts a path method; opts_idx is where its options table may be (0: none). Returns -1 with
 * c->e set when the options were refused. */
static int path_call_init(lua_State *L, path_call *c, int opts_idx, const char *const keys[], const char *what) {
  c->p = check_plane(L);
  c->path = luaL_checklstring(L, 2, &c->len);
  c->cwd = NULL;
  c->max_bytes = 0;
  c->child = 0;
  ss_error_init(&c->e);
  return opts_idx ? read_opts(L, c, opts_idx, keys, what) : 0;
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
  /* attributes(path [, name] [, opts]): the name is a string, the options a table */
  int named = lua_type(L, 3) == LUA_TSTRING;
  const char *want = named ? lua_tostring(L, 3) : NULL;
  if (path_call_init(L, &c, named ? 4 : 3, cwd_keys, "attributes") != 0) return fail(L, &c.e, c.path);
  struct stat st;
  if (fp_lstat(c.p, c.cwd, c.path, c.len, &st, &c.e) != 0) return fail(L, &c.e, c.path);
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
  static const char *const keys[] = {"cwd", "max_bytes", NULL};
  path_call c;
  if (path_call_init(L, &c, 3, keys, "read") != 0) return fail(L, &c.e, c.path);
  size_t n = 0;
  char *buf = NULL;
  if (fp_read(c.p, c.cwd, c.path, c.len, c.max_bytes, &buf, &n, &c.e) != 0) return fail(L, &c.e, c.path);
  lua_pushlstring(L, buf, n);
  free(buf);
  return 1;
}

static int l_write(lua_State *L) {
  path_call c;
  size_t n;
  const char *data = luaL_checklstring(L, 3, &n);
  if (path_call_init(L, &c, 4, cwd_keys, "write") != 0) return fail(L, &c.e, c.path);
  return true_or_fail(L, &c, fp_write(c.p, c.cwd, c.path, c.len, data, n, &c.e));
}

static int l_mkdir(lua_State *L) {
  path_call c;
  if (path_call_init(L, &c, 3, cwd_keys, "mkdir") != 0) return fail(L, &c.e, c.path);
  return true_or_fail(L, &c, fp_mkdir(c.p, c.cwd, c.path, c.len, &c.e));
}

/* plane:check(path [, {cwd =, child =}]) -> the guest path of a target that is there, false
 * when there is nothing to remove, or nil, err when the removal is refused. */
static int l_check(lua_State *L) {
  static const char *const keys[] = {"cwd", "child", NULL};
  path_call c;
  if (path_call_init(L, &c, 3, keys, "check") != 0) return fail(L, &c.e, c.path);
  char guest[FP_PATH_MAX + 512];
  int rc = fp_check(c.p, c.cwd, c.path, c.len, c.child ? FP_CHECK_CHILD : 0, guest, sizeof guest, &c.e);
  if (rc < 0) return fail(L, &c.e, c.path);
  if (rc == FP_MISSING) lua_pushboolean(L, 0);
  else lua_pushstring(L, guest);
  return 1;
}

static int l_resolve(lua_State *L) {
  path_call c;
  if (path_call_init(L, &c, 3, cwd_keys, "resolve") != 0) return fail(L, &c.e, c.path);
  fp_path rel;
  char guest[FP_PATH_MAX + 512];
  if (fp_normalize(c.p, c.cwd, c.path, c.len, &rel, &c.e) != 0 || fp_guest_path(c.p, &rel, guest, sizeof guest, &c.e) != 0)
    return fail(L, &c.e, c.path);
  lua_pushstring(L, guest);
  return 1;
}

/* Raises the error object (as lfs.dir raises): an iterator has no `nil, err` to return, since
 * `for name in plane:dir(x)` would call the nil. */
static int raise(lua_State *L, ss_error *e, const char *path) {
  if (path) ss_error_field_str(e, "path", path);
  ss_push_error_object(L, e);
  return lua_error(L);
}

/* Directory iteration: the iterator, the dir object as state, and (5.4) the dir object again
 * as the to-be-closed value, so `break` out of a generic for closes it. A path that cannot be
 * listed raises. */
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
  if (err) {
    ss_error e;
    ss_error_init(&e);
    ss_error_set(&e, "io", strerrorname_np(err), "cannot list a directory: %s", strerror(err));
    return raise(L, &e, NULL);
  }
  return 0;
}

static int l_dir(lua_State *L) {
  path_call c;
  if (path_call_init(L, &c, 3, cwd_keys, "dir") != 0) return raise(L, &c.e, c.path);
  lua_pushcfunction(L, l_dir_next);
  l_dirobj *d = ss_newuserdata(L, sizeof *d);
  d->d = NULL;
  luaL_getmetatable(L, FP_DIR_MT);
  lua_setmetatable(L, -2);
  int fd = fp_opendir(c.p, c.cwd, c.path, c.len, &c.e);
  if (fd < 0) return raise(L, &c.e, c.path);
  d->d = fdopendir(fd);
  if (!d->d) {
    int err = errno;
    close(fd);
    ss_error_set(&c.e, "io", strerrorname_np(err), "cannot list '%s': %s", c.path, strerror(err));
    return raise(L, &c.e, c.path);
  }
#if LUA_VERSION_NUM >= 504
  lua_pushnil(L);
  lua_pushvalue(L, -2);
  return 4;
#else
  return 2;
#endif
}

void sandstack_open_fileplane(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"attributes", l_attributes}, {"dir", l_dir},         {"read", l_read},       {"write", l_write},
      {"mkdir", l_mkdir},           {"check", l_check},     {"resolve", l_resolve}, {"resolver", l_resolver},
      {"close", l_close},           {NULL, NULL}};
  static const luaL_Reg dir_methods[] = {{"next", l_dir_next}, {"close", l_dir_close}, {NULL, NULL}};
  static const luaL_Reg fns[] = {{"fileplane_open", l_open}, {NULL, NULL}};
  ss_define_class(L, FP_MT, methods, l_close);
  ss_define_class(L, FP_DIR_MT, dir_methods, l_dir_close);
  luaL_setfuncs(L, fns, 0);
}
