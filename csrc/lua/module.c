/* luaopen_sandstack_core: the C half of `require "sandstack"`. Each part registers its own
 * functions; nothing here keeps state outside the returned table, so the module can be
 * loaded in many Lua states at once (OpenResty worker threads). */
#include "lua/binding.h"
#include "util/version.h"

static int error_tostring(lua_State *L) {
  lua_getfield(L, 1, "kind");
  lua_getfield(L, 1, "message");
  lua_pushfstring(L, "%s: %s", lua_isstring(L, -2) ? lua_tostring(L, -2) : "error",
                  lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
  return 1;
}

int luaopen_sandstack_core(lua_State *L) {
  if (luaL_newmetatable(L, SS_ERROR_MT)) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);

  lua_newtable(L);
  lua_pushliteral(L, SANDSTACK_VERSION);
  lua_setfield(L, -2, "VERSION");
  sandstack_open_util(L);
  sandstack_open_engine(L);
  sandstack_open_stack(L);
  sandstack_open_policy(L);
  sandstack_open_sbx(L);
  sandstack_open_fileplane(L);
  sandstack_open_capture(L);
  sandstack_open_probe(L);
  sandstack_open_net(L);
  sandstack_open_options(L);
  return 1;
}
