/* Error objects: plain tables {kind, reason, message, ...fields} with a __tostring. */
#include <stdio.h>

#include "lua/binding.h"

void ss_push_error_object(lua_State *L, ss_error *e) {
  lua_newtable(L);
  if (e->fields) {
    cJSON *f;
    cJSON_ArrayForEach(f, e->fields) {
      ss_json_to_lua(L, f);
      lua_setfield(L, -2, f->string);
    }
  }
  lua_pushstring(L, e->kind[0] ? e->kind : "error");
  lua_setfield(L, -2, "kind");
  if (e->reason[0]) {
    lua_pushstring(L, e->reason);
    lua_setfield(L, -2, "reason");
  }
  lua_pushstring(L, e->message);
  lua_setfield(L, -2, "message");
  luaL_getmetatable(L, SS_ERROR_MT);
  lua_setmetatable(L, -2);
  ss_error_clear(e);
}

int ss_push_error(lua_State *L, ss_error *e) {
  lua_pushnil(L);
  ss_push_error_object(L, e);
  return 2;
}

int ss_return_error(lua_State *L, const char *kind, const char *reason, const char *fmt, ...) {
  ss_error e;
  ss_error_init(&e);
  va_list ap;
  va_start(ap, fmt);
  ss_error_vset(&e, kind, reason, fmt, ap);
  va_end(ap);
  return ss_push_error(L, &e);
}
