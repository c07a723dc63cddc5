/* core.sleep: a wait that needs neither LuaSocket nor a shell. */
#include "lua/binding.h"
#include "util/clock.h"

/* core.sleep(seconds): blocks this thread only. Replaces os.execute("sleep"), which forks a
 * shell that inherits the host's descriptors and, inside nginx, loses its exit status. */
static int l_sleep(lua_State *L) {
  ss_sleep((double)luaL_checknumber(L, 1));
  return 0;
}

void sandstack_open_sleep(lua_State *L) {
  lua_pushcfunction(L, l_sleep);
  lua_setfield(L, -2, "sleep");
}
