/* Test-only Lua module sandstack_test.stack (built into <build dir>/sandstack_test/, never
 * installed): the stack planner's reading of an API version ("1.41" -> 141, -1 when it is not
 * one), which the shipped module uses only inside the plan (csrc/stack/plan.c), and the names
 * its validator accepts (csrc/stack/validate.c). The specs assert the parser itself and pick
 * engine-dependent expectations with it; the docs' spec holds the documented options to the
 * validator's. */
#include <lauxlib.h>
#include <lua.h>

#include "stack/stack.h"

/* stack.api_number("1.41") -> 141 (-1 when the text is not MAJOR.MINOR). */
static int l_api_number(lua_State *L) {
  lua_pushinteger(L, ss_stack_api_number(luaL_checkstring(L, 1)));
  return 1;
}

/* stack.option_keys(level) -> { name, ... }: the names the validator accepts at that level of a
 * start's options (stack.h); raises for an unknown level. */
static int l_option_keys(lua_State *L) {
  const char *const *keys = ss_stack_option_keys(luaL_checkstring(L, 1));
  if (!keys) return luaL_argerror(L, 1, "no such level of the start options");
  lua_newtable(L);
  for (int i = 0; keys[i]; i++) {
    lua_pushstring(L, keys[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

int luaopen_sandstack_test_stack(lua_State *L) {
  static const luaL_Reg fns[] = {{"api_number", l_api_number}, {"option_keys", l_option_keys}, {NULL, NULL}};
  lua_newtable(L);
  luaL_setfuncs(L, fns, 0);
  return 1;
}
