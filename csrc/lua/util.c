/* Small functions of the module table: CSPRNG tokens, error objects made from Lua, JSON, a
 * sleep that needs no LuaSocket, durable record writes, base64, SHA-256, and host directories
 * (list, make, remove a tree; their failures are kind "io"). */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "lua/binding.h"
#include "util/durable.h"
#include "util/random.h"
#include "util/base64.h"
#include "util/rmtree.h"
#include "util/sha256.h"

/* core.random_hex(nbytes) -> hex string from getrandom(2). A CSPRNG failure (the kernel's, not
 * the caller's) raises an error object of kind "io", reason "random": no caller could go on
 * without the token, and every name and secret is minted this way. */
static int l_random_hex(lua_State *L) {
  lua_Integer n = luaL_optinteger(L, 1, 32);
  luaL_argcheck(L, n >= 1 && n <= 64, 1, "between 1 and 64 bytes");
  char out[129];
  if (ss_random_hex(out, (size_t)n) != 0) {
    ss_error e;
    ss_error_init(&e);
    ss_random_error(&e, errno, "random_hex");
    ss_push_error_object(L, &e);
    return lua_error(L);
  }
  lua_pushstring(L, out);
  return 1;
}

/* core.error(kind, reason, message, fields) -> an error object (not raised). */
static int l_error(lua_State *L) {
  const char *kind = luaL_checkstring(L, 1);
  const char *reason = luaL_optstring(L, 2, NULL);
  const char *message = luaL_optstring(L, 3, "");
  lua_newtable(L);
  if (lua_istable(L, 4)) {
    lua_pushnil(L);
    while (lua_next(L, 4)) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, -4);
    }
  }
  lua_pushstring(L, kind);
  lua_setfield(L, -2, "kind");
  if (reason) {
    lua_pushstring(L, reason);
    lua_setfield(L, -2, "reason");
  }
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  luaL_getmetatable(L, SS_ERROR_MT);
  lua_setmetatable(L, -2);
  return 1;
}

/* core.is_error(v) -> true when v is an error object. */
static int l_is_error(lua_State *L) {
  int is = 0;
  if (lua_getmetatable(L, 1)) {
    luaL_getmetatable(L, SS_ERROR_MT);
    is = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  lua_pushboolean(L, is);
  return 1;
}

/* core.json_encode(v) -> string, or nil, err. */
static int l_json_encode(lua_State *L) {
  ss_error err;
  ss_error_init(&err);
  cJSON *j = ss_lua_to_json(L, 1, 0, &err);
  if (!j) return ss_push_error(L, &err);
  return ss_push_json_string(L, j);
}

/* core.json_decode(s) -> value, or nil, err. Uses the length-bounded parser, never cJSON's
 * global error pointer. */
static int l_json_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
  if (!j) return ss_return_error(L, "invalid", "bad_json", "not valid JSON near byte %d",
                                 end ? (int)(end - s) : 0);
  ss_json_to_lua(L, j);
  cJSON_Delete(j);
  return 1;
}

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

/* core.sleep(seconds): blocks this thread only. Replaces os.execute("sleep"), which forks a
 * shell that inherits the host's descriptors and, inside nginx, loses its exit status. */
static int l_sleep(lua_State *L) {
  lua_Number s = luaL_checknumber(L, 1);
  if (s <= 0) return 0;
  struct timespec ts = {(time_t)s, (long)((s - (lua_Number)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return 0;
}

/* core.base64(s) -> base64 text (RFC 4648, with padding). */
static int l_base64(lua_State *L) {
  size_t n, on;
  const char *s = luaL_checklstring(L, 1, &n);
  char *b = ss_base64(s, n, &on);
  if (!b) return luaL_error(L, "out of memory");
  lua_pushlstring(L, b, on);
  free(b);
  return 1;
}

/* core.sha256_hex(s[, nbytes]) -> lowercase hex of the first nbytes (default 32) of SHA-256(s). */
static int l_sha256_hex(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  lua_Integer nb = luaL_optinteger(L, 2, 32);
  luaL_argcheck(L, nb >= 1 && nb <= 32, 2, "between 1 and 32");
  char out[65];
  ss_sha256_hex(s, n, (size_t)nb, out);
  lua_pushstring(L, out);
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

void sandstack_open_util(lua_State *L) {
  static const luaL_Reg fns[] = {{"random_hex", l_random_hex},   {"error", l_error},
                                 {"is_error", l_is_error},       {"json_encode", l_json_encode},
                                 {"json_decode", l_json_decode}, {"write_file_durable", l_write_file_durable},
                                 {"sleep", l_sleep},             {"base64", l_base64},
                                 {"sha256_hex", l_sha256_hex},   {"listdir", l_listdir},
                                 {"mkdir", l_mkdir},             {"rmtree", l_rmtree},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
