/* core.random_hex: the tokens, names and secrets every part mints (csrc/util/random.c). */
#include <errno.h>

#include "lua/binding.h"
#include "util/random.h"

/* core.random_hex(nbytes) -> hex string from getrandom(2). A CSPRNG failure (the kernel's, not
 * the caller's) raises an error object of kind "io", reason "random": no caller could go on
 * without the token, and every name and secret is minted this way. */
static int l_random_hex(lua_State *L) {
  lua_Integer n = luaL_optinteger(L, 1, 32);
  luaL_argcheck(L, n >= 1 && n <= 64, 1, "between 1 and 64 bytes");
  char out[129];
  if (ss_random_hex(out, (size_t)n) != 0) {
    ss_error e;
    ss_error_init(&e);
    ss_random_error(&e, errno, "random_hex");
    ss_push_error_object(L, &e);
    return lua_error(L);
  }
  lua_pushstring(L, out);
  return 1;
}

void sandstack_open_random(lua_State *L) {
  lua_pushcfunction(L, l_random_hex);
  lua_setfield(L, -2, "random_hex");
}
