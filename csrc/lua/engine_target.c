/* The engine client's request target for the Lua half: the one builder perform uses
 * (engine_request.c: the versioned path, the sorted percent-encoded query) serves the requests
 * that go through h:submit (request, call with headers, submit, download, events), and the one
 * percent-encoder (util/url.h) serves every path and query of the binding.
 *   core.engine_target(api_version|nil, path, query|nil, what, level) -> target
 *   core.urlencode(s) -> s percent-encoded (sandstack.engine.urlencode)
 * Misuse raises with perform's texts, where luaL_where(level) points (1: the Lua function that
 * called engine_target), so a caller passes the level it would give error(). */
#include "lua/engine_handle.h"
#include "util/url.h"

void ss_push_urlencoded(lua_State *L, const char *s, size_t n) {
  enum { SLICE = LUAL_BUFFERSIZE / 3 }; /* the most input one prepared block holds encoded */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  while (n > 0) {
    size_t take = n < SLICE ? n : SLICE;
    char *out = luaL_prepbuffer(&b);
    luaL_addsize(&b, ss_urlencode(out, s, take));
    s += take;
    n -= take;
  }
  luaL_pushresult(&b);
}

static int l_engine_target(lua_State *L) {
  const char *api_version = luaL_optstring(L, 1, NULL);
  const char *what = luaL_checkstring(L, 4);
  int level = (int)luaL_checkinteger(L, 5);
  const char *path = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (!path || path[0] != '/') {
    ss_where(L, level);
    lua_pushfstring(L, "%s: path must be a string starting with '/'", what);
    lua_concat(L, 2);
    return lua_error(L);
  }
  ss_request_ctx ctx = {.what = what, .api_version = api_version, .level = level};
  lua_settop(L, 3);
  ss_push_target(L, path, 3, &ctx);
  return 1;
}

static int l_urlencode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  ss_push_urlencoded(L, s, n);
  return 1;
}

void sandstack_open_engine_target(lua_State *L) {
  lua_pushcfunction(L, l_engine_target);
  lua_setfield(L, -2, "engine_target");
  lua_pushcfunction(L, l_urlencode);
  lua_setfield(L, -2, "urlencode");
}
