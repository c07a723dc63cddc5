/* The sandstack.error class as Lua sees it: its metatable (a __tostring of "kind: message"),
 * core.error to make one from Lua and core.is_error to recognize one. error.c builds them from C. */
#include "lua/binding.h"

static int error_tostring(lua_State *L) {
  lua_getfield(L, 1, "kind");
  lua_getfield(L, 1, "message");
  lua_pushfstring(L, "%s: %s", lua_isstring(L, -2) ? lua_tostring(L, -2) : "error",
                  lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
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

void sandstack_open_error_class(lua_State *L) {
  if (luaL_newmetatable(L, SS_ERROR_MT)) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {{"error", l_error}, {"is_error", l_is_error}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
