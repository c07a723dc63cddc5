/* core.base64, core.base64_decode and core.sha256_hex: strings made printable, over csrc/util's one base64 and one
 * SHA-256. */
#include <stdlib.h>

#include "lua/binding.h"
#include "util/base64.h"
#include "util/sha256.h"

/* core.base64(s) -> base64 text (RFC 4648, with padding). */
static int l_base64(lua_State *L) {
  size_t n, on;
  const char *s = luaL_checklstring(L, 1, &n);
  char *b = ss_base64(s, n, &on);
  if (!b) return luaL_error(L, "out of memory");
  lua_pushlstring(L, b, on);
  free(b);
  return 1;
}

/* core.base64_decode(s) -> the bytes, or nil when s is not strict base64. */
static int l_base64_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  unsigned char *out = ss_newuserdata(L, n / 4 * 3 + 1); /* freed by the GC, also on an error */
  long len = ss_base64_decode(s, n, out, n / 4 * 3 + 1);
  if (len < 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlstring(L, (const char *)out, (size_t)len);
  return 1;
}

/* core.sha256_hex(s[, nbytes]) -> lowercase hex of the first nbytes (default 32) of SHA-256(s). */
static int l_sha256_hex(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  lua_Integer nb = luaL_optinteger(L, 2, 32);
  luaL_argcheck(L, nb >= 1 && nb <= 32, 2, "between 1 and 32");
  char out[65];
  ss_sha256_hex(s, n, (size_t)nb, out);
  lua_pushstring(L, out);
  return 1;
}

void sandstack_open_digest(lua_State *L) {
  static const luaL_Reg fns[] = {{"base64", l_base64}, {"base64_decode", l_base64_decode}, {"sha256_hex", l_sha256_hex}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
