/* The requests of a session over time for Lua (csrc/stack/session_requests.c):
 *   core.session_requests(action, names, args) -> { request, ... }
 * names: a list of container, image or volume names (nil for the unnamed actions); args: the
 * action's parameters (t, repo, tag, labels, label, body, timeout). An unknown action or a
 * missing argument raises: the callers are sandstack's own files. */
#include "lua/binding.h"
#include "stack/session_requests.h"

static cJSON *opt_table(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return NULL;
  luaL_checktype(L, idx, LUA_TTABLE);
  ss_error err;
  ss_error_init(&err);
  cJSON *j = ss_lua_to_json(L, idx, 1, &err);
  if (!j) {
    lua_pushfstring(L, "session_requests: %s", err.message);
    ss_error_clear(&err);
    lua_error(L);
  }
  return j;
}

static int l_session_requests(lua_State *L) {
  const char *action = luaL_checkstring(L, 1);
  cJSON *names = opt_table(L, 2);
  cJSON *args = NULL;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    ss_error err;
    ss_error_init(&err);
    args = ss_lua_to_json(L, 3, 1, &err);
    if (!args) { /* names is freed before the raise */
      cJSON_Delete(names);
      lua_pushfstring(L, "session_requests: %s", err.message);
      ss_error_clear(&err);
      return lua_error(L);
    }
  }
  const char *why = NULL;
  cJSON *out = ss_session_requests(action, names, args, &why);
  cJSON_Delete(names);
  cJSON_Delete(args);
  if (!out) return luaL_error(L, "session_requests(%s): %s", action, why ? why : "failed");
  ss_json_to_lua(L, out);
  cJSON_Delete(out);
  return 1;
}

void sandstack_open_session_requests(lua_State *L) {
  lua_pushcfunction(L, l_session_requests);
  lua_setfield(L, -2, "session_requests");
}
