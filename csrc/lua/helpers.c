/* Class definition and option-table readers shared by every Lua-visible type. */
#include <string.h>

#include "lua/binding.h"
#include "util/keys.h"

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

/* Pushes field key of the options table at idx and returns 1 when it is set, raising unless it
 * has the given type ("option 'x' must be a string"); returns 0, pushing nothing, when the table
 * or the field is absent. */
static int opt_field(lua_State *L, int idx, const char *key, int type) {
  if (lua_isnoneornil(L, idx)) return 0;
  lua_getfield(L, idx, key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  if (lua_type(L, -1) != type) luaL_error(L, "option '%s' must be a %s", key, lua_typename(L, type));
  return 1;
}

const char *ss_opt_string(lua_State *L, int idx, const char *key, const char *def) {
  if (!opt_field(L, idx, key, LUA_TSTRING)) return def;
  const char *v = lua_tostring(L, -1);
  lua_pop(L, 1); /* the string stays alive: it is referenced by the options table */
  return v;
}

double ss_opt_number(lua_State *L, int idx, const char *key, double def) {
  if (!opt_field(L, idx, key, LUA_TNUMBER)) return def;
  double v = (double)lua_tonumber(L, -1);
  lua_pop(L, 1);
  return v;
}

int ss_opt_boolean(lua_State *L, int idx, const char *key, int def) {
  if (!opt_field(L, idx, key, LUA_TBOOLEAN)) return def;
  int v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* ss_key_hint over the string keys of the Lua set at set_idx ({ name = true, ... }). */
static void set_hint(lua_State *L, int set_idx, const char *key, char *buf, size_t n) {
  char best[SS_KEY_MAX + 1] = "";
  int bd = -1;
  lua_pushnil(L);
  while (lua_next(L, set_idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *name = lua_tostring(L, -1);
      int d = ss_key_distance(key, name);
      if (strlen(name) <= SS_KEY_MAX && (bd < 0 || d < bd || (d == bd && strcmp(name, best) < 0))) {
        bd = d;
        snprintf(best, sizeof best, "%s", name);
      }
    }
  }
  if (bd >= 0 && ss_key_near(key, bd))
    snprintf(buf, n, " (did you mean '%s'?)", best);
  else
    buf[0] = '\0';
}

/* The one walk over an options table's keys. The allowed names are a NULL-ended list, or (list
 * NULL) the keys of the Lua table at set_idx. A refusal is raised with the position of the
 * caller outside the library (ss_where; without a registered library directory, the function
 * `level` levels up, luaL_where's count). */
static void check_keys(lua_State *L, int idx, const char *const list[], int set_idx, const char *what,
                       int level) {
  idx = ss_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      ss_where(L, level);
      lua_pushfstring(L, "%s: option keys must be strings", what);
      lua_concat(L, 2);
      lua_error(L);
    }
    const char *k = lua_tostring(L, -1);
    int ok;
    if (list) {
      ok = ss_key_allowed(list, k);
    } else {
      lua_pushvalue(L, -1);
      lua_rawget(L, set_idx);
      ok = lua_toboolean(L, -1);
      lua_pop(L, 1);
    }
    if (!ok) {
      char hint[SS_KEY_MAX + 32];
      if (list)
        ss_key_hint(list, k, hint, sizeof hint);
      else
        set_hint(L, set_idx, k, hint, sizeof hint);
      ss_where(L, level);
      lua_pushfstring(L, SS_UNKNOWN_OPTION_FMT, what, k, hint);
      lua_concat(L, 2);
      lua_error(L);
    }
  }
}

void ss_check_keys(lua_State *L, int idx, const char *const allowed[], const char *what) {
  if (lua_isnoneornil(L, idx)) return;
  luaL_checktype(L, idx, LUA_TTABLE);
  check_keys(L, idx, allowed, 0, what, 1);
}

void ss_check_keys_at(lua_State *L, int idx, const char *const allowed[], const char *what, int level) {
  if (lua_isnoneornil(L, idx)) return;
  if (!lua_istable(L, idx)) {
    ss_where(L, level);
    lua_pushfstring(L, "%s: options must be a table", what);
    lua_concat(L, 2);
    lua_error(L);
  }
  check_keys(L, idx, allowed, 0, what, level);
}

/* core.check_keys(opts, allowed, what) -> opts (or a new {} for nil): the options check of every
 * public Lua function (sandstack.error.check_keys). allowed: { name = true, ... }. A non-table
 * and an unknown key raise at the caller of the public function that called this. */
static int l_check_keys(lua_State *L) {
  luaL_checktype(L, 2, LUA_TTABLE);
  const char *what = luaL_checkstring(L, 3);
  if (lua_isnoneornil(L, 1)) {
    lua_newtable(L);
    return 1;
  }
  if (!lua_istable(L, 1)) {
    ss_where(L, 2);
    lua_pushfstring(L, "%s: options must be a table", what);
    lua_concat(L, 2);
    return lua_error(L);
  }
  check_keys(L, 1, NULL, 2, what, 2);
  lua_settop(L, 1);
  return 1;
}

void sandstack_open_options(lua_State *L) {
  lua_pushcfunction(L, l_check_keys);
  lua_setfield(L, -2, "check_keys");
}
