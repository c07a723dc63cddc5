/* Test-only Lua module sandstack_test.sbx (built into <build dir>/sandstack_test/, never
 * installed): the parts of the sbx exec that the shipped module uses only inside core.sbx_exec
 * (csrc/lua/sbx.c), for the specs that check them alone or drive the wrapper by hand. */
#include <lauxlib.h>
#include <lua.h>

#include "sbx/wrapper.h"

/* sbx.split_stderr(stderr, nonce) -> chatter, own_stderr  (nil when the nonce is absent) */
static int l_split_stderr(lua_State *L) {
  size_t n, nn;
  const char *s = luaL_checklstring(L, 1, &n);
  const char *nonce = luaL_checklstring(L, 2, &nn);
  long off = ss_sbx_split_stderr(s, n, nonce, nn);
  if (off < 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlstring(L, s, (size_t)off - nn - 1);
  lua_pushlstring(L, s + off, n - (size_t)off);
  return 2;
}

/* sbx.json_start(s) -> the text from the first line starting with '{', or nil */
static int l_json_start(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  long off = ss_sbx_json_start(s, n);
  if (off < 0) return 0;
  lua_pushlstring(L, s + off, n - (size_t)off);
  return 1;
}

int luaopen_sandstack_test_sbx(lua_State *L) {
  static const luaL_Reg fns[] = {{"split_stderr", l_split_stderr}, {"json_start", l_json_start}, {NULL, NULL}};
  lua_newtable(L);
  luaL_setfuncs(L, fns, 0);
  lua_pushstring(L, ss_sbx_wrapper_script); /* the wrapper core.sbx_exec runs, as it sends it */
  lua_setfield(L, -2, "wrapper_script");
  return 1;
}
