#ifndef SANDSTACK_COMPAT_H
#define SANDSTACK_COMPAT_H
/* The few differences between Lua 5.4 and LuaJIT 2.1 (5.1 API) that the binding meets. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#if LUA_VERSION_NUM < 502
#define ss_rawlen(L, i) lua_objlen((L), (i))
#define ss_absindex(L, i) (((i) > 0 || (i) <= LUA_REGISTRYINDEX) ? (i) : lua_gettop(L) + (i) + 1)
#define ss_newuserdata(L, sz) lua_newuserdata((L), (sz))
static inline int ss_isinteger(lua_State *L, int i) {
  if (lua_type(L, i) != LUA_TNUMBER) return 0;
  lua_Number n = lua_tonumber(L, i);
  return n == (lua_Number)(long long)n;
}
#else
#define ss_rawlen(L, i) lua_rawlen((L), (i))
#define ss_absindex(L, i) lua_absindex((L), (i))
#define ss_newuserdata(L, sz) lua_newuserdatauv((L), (sz), 1)
#define ss_isinteger(L, i) lua_isinteger((L), (i))
#endif

#endif
