/* Small functions of the module table: CSPRNG tokens, error objects made from Lua, JSON, a
 * sleep that needs no LuaSocket, and durable record writes. */
#include <errno.h>
#include <time.h>

#include "lua/binding.h"
#include "util/durable.h"
#include "util/random.h"

/* core.random_hex(nbytes) -> hex string from getrandom(2). */
static int l_random_hex(lua_State *L) {
  lua_Integer n = luaL_optinteger(L, 1, 32);
  luaL_argcheck(L, n >= 1 && n <= 64, 1, "between 1 and 64 bytes");
  char out[129];
  if (ss_random_hex(out, (size_t)n) != 0) return luaL_error(L, "getrandom failed");
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

void sandstack_open_util(lua_State *L) {
  static const luaL_Reg fns[] = {{"random_hex", l_random_hex},   {"error", l_error},
                                 {"is_error", l_is_error},       {"json_encode", l_json_encode},
                                 {"json_decode", l_json_decode}, {"write_file_durable", l_write_file_durable},
                                 {"sleep", l_sleep},             {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
