/* A minimal `lua` built with AddressSanitizer, so the ASan run instruments the process that
 * loads sandstack/core.so without LD_PRELOAD (which every child process, docker and sh
 * included, would inherit). Usage: sandstack-asan-lua SCRIPT [ARGS...] */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

static int traceback(lua_State *L) {
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCRIPT [ARGS...]\n", argv[0]);
    return 2;
  }
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_createtable(L, argc, 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  lua_setglobal(L, "arg");
  lua_pushcfunction(L, traceback);
  int status = luaL_loadfile(L, argv[1]);
  if (status == LUA_OK) {
    for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
    status = lua_pcall(L, argc - 2, 0, 1);
  }
  if (status != LUA_OK) fprintf(stderr, "%s\n", lua_tostring(L, -1));
  lua_close(L);
  return status == LUA_OK ? 0 : 1;
}
