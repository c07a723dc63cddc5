/* core.json_encode and core.json_decode, over the one Lua <-> cJSON bridge (json_bridge.c). */
#include "lua/binding.h"

/* core.json_encode(v) -> string, or nil, err. */
static int l_json_encode(lua_State *L) {
  ss_error err;
  ss_error_init(&err);
  cJSON *j = ss_lua_to_json(L, 1, 0, &err);
  if (!j) return ss_push_error(L, &err);
  return ss_push_json_string(L, j);
}

/* core.json_decode(s) -> value, or nil, err. Uses the length-bounded parser, never cJSON's
 * global error pointer. */
static int l_json_decode(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(s, len, &end, 0);
  if (!j) return ss_return_error(L, "invalid", "bad_json", "not valid JSON near byte %d",
                                 end ? (int)(end - s) : 0);
  ss_json_to_lua(L, j);
  cJSON_Delete(j);
  return 1;
}

void sandstack_open_json(lua_State *L) {
  static const luaL_Reg fns[] = {{"json_encode", l_json_encode}, {"json_decode", l_json_decode}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
