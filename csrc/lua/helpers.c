/* Class definition and option-table readers shared by every Lua-visible type. */
#include <string.h>

#include "lua/binding.h"

void ss_define_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction close_fn) {
  if (!luaL_newmetatable(L, name)) {
    lua_pop(L, 1); /* already defined in this state: loading twice is fine */
    return;
  }
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, close_fn);
  lua_setfield(L, -2, "__gc");
#if LUA_VERSION_NUM >= 504
  lua_pushcfunction(L, close_fn);
  lua_setfield(L, -2, "__close");
#endif
  lua_pop(L, 1);
}

const char *ss_opt_string(lua_State *L, int idx, const char *key, const char *def) {
  if (lua_isnoneornil(L, idx)) return def;
  lua_getfield(L, idx, key);
  const char *v = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "option '%s' must be a string", key);
    v = lua_tostring(L, -1);
  }
  lua_pop(L, 1); /* the string stays alive: it is referenced by the options table */
  return v;
}

double ss_opt_number(lua_State *L, int idx, const char *key, double def) {
  if (lua_isnoneornil(L, idx)) return def;
  lua_getfield(L, idx, key);
  double v = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER) luaL_error(L, "option '%s' must be a number", key);
    v = (double)lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

int ss_opt_boolean(lua_State *L, int idx, const char *key, int def) {
  if (lua_isnoneornil(L, idx)) return def;
  lua_getfield(L, idx, key);
  int v = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TBOOLEAN) luaL_error(L, "option '%s' must be a boolean", key);
    v = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

void ss_check_keys(lua_State *L, int idx, const char *const allowed[], const char *what) {
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  idx = ss_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "%s: option keys must be strings", what);
    const char *k = lua_tostring(L, -1);
    int ok = 0;
    for (int i = 0; allowed[i]; i++)
      if (strcmp(allowed[i], k) == 0) ok = 1;
    if (!ok) luaL_error(L, "%s: unknown option '%s'", what, k);
  }
}
