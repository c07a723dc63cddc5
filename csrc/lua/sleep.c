/* core.sleep: a wait that needs neither LuaSocket nor a shell. */
#include <errno.h>
#include <time.h>

#include "lua/binding.h"

/* core.sleep(seconds): blocks this thread only. Replaces os.execute("sleep"), which forks a
 * shell that inherits the host's descriptors and, inside nginx, loses its exit status. */
static int l_sleep(lua_State *L) {
  lua_Number s = luaL_checknumber(L, 1);
  if (s <= 0) return 0;
  struct timespec ts = {(time_t)s, (long)((s - (lua_Number)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  return 0;
}

void sandstack_open_sleep(lua_State *L) {
  lua_pushcfunction(L, l_sleep);
  lua_setfield(L, -2, "sleep");
}
