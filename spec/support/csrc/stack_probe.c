/* Test-only Lua module sandstack_test.stack (built into <build dir>/sandstack_test/, never
 * installed): the stack planner's reading of an API version ("1.41" -> 141, -1 when it is not
 * one), which the shipped module uses only inside the plan (csrc/stack/plan.c). The specs assert
 * the parser itself and pick engine-dependent expectations with it. */
#include <lauxlib.h>
#include <lua.h>

#include "stack/stack.h"

/* stack.api_number("1.41") -> 141 (-1 when the text is not MAJOR.MINOR). */
static int l_api_number(lua_State *L) {
  lua_pushinteger(L, ss_stack_api_number(luaL_checkstring(L, 1)));
  return 1;
}

int luaopen_sandstack_test_stack(lua_State *L) {
  lua_newtable(L);
  lua_pushcfunction(L, l_api_number);
  lua_setfield(L, -2, "api_number");
  return 1;
}
