/* core.reap_program() -> the bytes of sandstack-reap (csrc/reap), the static program the exec
 * kill runs inside a helper container (lua/sandstack/docker/exec_kill.lua). The build includes
 * the program's file here, so the module carries it wherever it is installed. */
#include "lua/binding.h"
#include "lua/incbin.h"

#ifndef SANDSTACK_REAP_PATH
#error "SANDSTACK_REAP_PATH: the build passes the path of the sandstack-reap program"
#endif

SS_INCBIN(ss_reap_program, SANDSTACK_REAP_PATH);

static int l_reap_program(lua_State *L) {
  lua_pushlstring(L, ss_reap_program_start, (size_t)(ss_reap_program_end - ss_reap_program_start));
  return 1;
}

void sandstack_open_reap(lua_State *L) {
  lua_pushcfunction(L, l_reap_program);
  lua_setfield(L, -2, "reap_program");
}
