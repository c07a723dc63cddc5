/* Where a programming error is the fault of (docs/api/README.md, "Conventions"): a wrong type,
 * an unknown option key or a table that is not one is raised at the CALLER of the public
 * function, the first Lua frame outside sandstack's own files, however deep inside the library
 * the check runs. The library's directory is what sandstack.error registers when it loads (its
 * own chunk name without "error.lua"), kept in this Lua state's registry: each state (an
 * OpenResty worker thread's too) has its own, and the C side keeps none. */
#include <stdarg.h>
#include <string.h>

#include "lua/binding.h"

#define LIBRARY_KEY "sandstack.library_dir"

void ss_where(lua_State *L, int level) {
  lua_getfield(L, LUA_REGISTRYINDEX, LIBRARY_KEY);
  size_t n = 0;
  const char *dir = lua_tolstring(L, -1, &n);
  if (dir && n > 0) {
    lua_Debug ar;
    for (int lv = 1; lua_getstack(L, lv, &ar); lv++) {
      if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) continue; /* C, or a tail call's trace */
      if (ar.source && strncmp(ar.source, dir, n) == 0) continue;     /* the library's own */
      lua_pop(L, 1);
      lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
      return;
    }
  }
  lua_pop(L, 1);
  luaL_where(L, level); /* no directory registered (the core used alone), or no caller outside it */
}

int ss_raise_at(lua_State *L, int level, const char *fmt, ...) {
  ss_where(L, level);
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_concat(L, 2);
  return lua_error(L);
}

/* core.where() -> "file:line: " of the caller outside the library (or ""). */
static int l_where(lua_State *L) {
  ss_where(L, 2);
  return 1;
}

/* core.set_library_dir(chunkname_prefix): what sandstack.error registers, once per state. */
static int l_set_library_dir(lua_State *L) {
  luaL_checkstring(L, 1);
  lua_settop(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, LIBRARY_KEY);
  return 0;
}

void sandstack_open_where(lua_State *L) {
  lua_pushcfunction(L, l_where);
  lua_setfield(L, -2, "where");
  lua_pushcfunction(L, l_set_library_dir);
  lua_setfield(L, -2, "set_library_dir");
}
