/* The host's own files and directories (records, workspaces): list, make, remove a tree, and
 * write a file durably. A failure is nil, err of kind "io" (or the caller's kind for a durable
 * write), never a raise: the host's state, not the caller's mistake. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lua/binding.h"
#include "util/durable.h"
#include "util/io.h"
#include "util/rmtree.h"

/* core.write_file_durable(path, data[, kind]) -> true, or nil, err (kind, reason "io"). */
static int l_write_file_durable(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  const char *kind = luaL_optstring(L, 3, "io");
  ss_error err;
  ss_error_init(&err);
  if (ss_write_durable(path, data, len, kind, &err) != 0) return ss_push_error(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

/* nil, err of kind "io" for host I/O: reason "not_found", "exists" or "failed", with errno. */
static int host_io_error(lua_State *L, int err, const char *what, const char *path) {
  ss_error e;
  ss_error_init(&e);
  const char *reason = err == ENOENT ? "not_found" : err == EEXIST ? "exists" : "failed";
  ss_error_set(&e, "io", reason, "%s %s: %s", what, path, strerror(err));
  ss_error_field_num(&e, "errno", err);
  ss_error_field_str(&e, "path", path);
  return ss_push_error(L, &e);
}

/* core.listdir(path) -> array of names (without . and ..), or nil, err (kind "io"). */
static int l_listdir(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  DIR *d = opendir(p);
  if (!d) return host_io_error(L, errno, "list", p);
  lua_newtable(L);
  int i = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    lua_pushstring(L, de->d_name);
    lua_rawseti(L, -2, ++i);
  }
  closedir(d);
  return 1;
}

/* core.mkdir(path[, mode]) -> true, or nil, err (kind "io"; an existing entry is reason "exists"). */
static int l_mkdir(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  lua_Integer mode = luaL_optinteger(L, 2, 0700);
  if (mkdir(p, (mode_t)mode) != 0) return host_io_error(L, errno, "mkdir", p);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.rmtree(path) -> true (also when path does not exist), or nil, err: kind "io", reason
 * "mount" (a mount point inside), "changing" (the tree kept changing under the walk) or
 * "failed", with errno. Never follows a link below path's parent (csrc/util/rmtree.c). */
static int l_rmtree(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  ss_rmtree_fail why;
  if (ss_rmtree(p, &why) == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  const char *reason = why.err == EXDEV ? "mount" : why.err == ENOTEMPTY ? "changing" : "failed";
  ss_error e;
  ss_error_init(&e);
  ss_error_set(&e, "io", reason, "remove %s: cannot %s '%s' (depth %zu below it): %s", p, why.step ? why.step : "remove",
               why.name, why.depth, strerror(why.err));
  ss_error_field_num(&e, "errno", why.err);
  ss_error_field_str(&e, "path", p);
  return ss_push_error(L, &e);
}

/* core.file_stat(path[, nofollow]) -> {size =, mode = permission bits, type = "file"|"directory"|
 * "other", uid =, gid =}, or nil, err (kind "io", reason the errno name). Follows links (the caller's own host
 * path), unless nofollow: then a link is type "link". */
static int l_file_stat(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int nofollow = lua_toboolean(L, 2);
  struct stat st;
  if ((nofollow ? lstat(path, &st) : stat(path, &st)) != 0) {
    int e = errno;
    const char *ename = strerrorname_np(e);
    return ss_return_error(L, "io", ename ? ename : "EIO", "%s: %s", path, strerror(e));
  }
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, (lua_Integer)st.st_size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, (lua_Integer)(st.st_mode & 07777));
  lua_setfield(L, -2, "mode");
  lua_pushstring(L, S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "link" : "other");
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, (lua_Integer)st.st_uid);
  lua_setfield(L, -2, "uid");
  lua_pushinteger(L, (lua_Integer)st.st_gid);
  lua_setfield(L, -2, "gid");
  return 1;
}

/* core.group_name(gid) -> the host's name of that group, or nil when it has none. The gateway
 * names the Engine socket's group for its unprivileged workers (nginx takes a name, not a gid). */
static int l_group_name(lua_State *L) {
  lua_Integer gid = luaL_checkinteger(L, 1);
  luaL_argcheck(L, gid >= 0 && gid <= (lua_Integer)UINT32_MAX, 1, "a group id");
  char buf[4096]; /* getgrgid_r's lines; ERANGE (a group of thousands of members) is "no name" */
  struct group gr, *found = NULL;
  if (getgrgid_r((gid_t)gid, &gr, buf, sizeof buf, &found) != 0 || !found) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, found->gr_name);
  return 1;
}

/* core.write_new_file(path, data, mode) -> true, or nil, err (kind "io", reason the errno name):
 * a file that was not there (O_EXCL, never through a link), given exactly mode. */
static int l_write_new_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  mode_t mode = (mode_t)(luaL_checkinteger(L, 3) & 07777);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
  int rc = fd < 0 ? -1 : ss_write_all(fd, data, len);
  if (rc == 0) rc = fchmod(fd, mode);
  int e = errno;
  if (fd >= 0 && close(fd) != 0 && rc == 0) rc = -1, e = errno;
  if (rc != 0) {
    if (fd >= 0) unlink(path);
    const char *ename = strerrorname_np(e);
    return ss_return_error(L, "io", ename ? ename : "EIO", "cannot write %s: %s", path, strerror(e));
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* core.rename(from, to[, noreplace]) -> true, or nil, err (kind "io", reason the errno name).
 * A link at `to` is replaced, never followed; with noreplace nothing at `to` is (EEXIST). */
static int l_rename(lua_State *L) {
  const char *from = luaL_checkstring(L, 1), *to = luaL_checkstring(L, 2);
  if (renameat2(AT_FDCWD, from, AT_FDCWD, to, lua_toboolean(L, 3) ? RENAME_NOREPLACE : 0) != 0) {
    int e = errno;
    const char *ename = strerrorname_np(e);
    return ss_return_error(L, "io", ename ? ename : "EIO", "cannot put %s at %s: %s", from, to, strerror(e));
  }
  lua_pushboolean(L, 1);
  return 1;
}

void sandstack_open_hostfs(lua_State *L) {
  static const luaL_Reg fns[] = {{"write_file_durable", l_write_file_durable}, {"listdir", l_listdir},
                                 {"mkdir", l_mkdir}, {"rmtree", l_rmtree}, {"file_stat", l_file_stat},
                                 {"group_name", l_group_name},
                                 {"write_new_file", l_write_new_file}, {"rename", l_rename}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
