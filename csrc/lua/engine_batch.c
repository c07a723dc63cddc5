/* h:perform(requests, defaults) -> results: a batch of buffered Engine requests in one crossing.
 *   requests[i] = {method, target, body|nil, timeout=, max_bytes=, raw=}
 *   defaults    = {timeout=, max_bytes=}
 * Every request is submitted before any is waited for, so they run together on the client's
 * multi handle (each with its own deadline); results come back in request order as
 * {status=, body=, headers=, content_type=, message=, err=, bad_json=}. A JSON answer (by its
 * content type, unless raw) arrives decoded; one that does not parse stays text with bad_json.
 * The executor of a stack sends each step's batch this way: its bodies are the plan's finished
 * JSON text, and the answers need no second trip through Lua to be decoded. */
#include <string.h>

#include "lua/engine_handle.h"

#define MAX_BATCH 4096

static int is_json(const char *ctype) {
  for (const char *p = ctype; p && *p; p++)
    if (strncasecmp(p, "json", 4) == 0) return 1;
  return 0;
}

/* Replaces the text body of the result table on top with the decoded value, when it is JSON. */
static void decode_body(lua_State *L, const sse_result *r) {
  if (!r->body.len || !is_json(r->content_type)) return;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(r->body.data, r->body.len, &end, 0);
  if (!j) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "bad_json");
    return;
  }
  ss_json_to_lua(L, j);
  cJSON_Delete(j);
  lua_setfield(L, -2, "body");
}

int ss_engine_perform(lua_State *L) {
  sse_client *c = ss_check_engine_client(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const keys[] = {"timeout", "max_bytes", NULL};
  ss_check_keys(L, 3, keys, "perform");
  double def_timeout = ss_opt_number(L, 3, "timeout", 30);
  double def_max = ss_opt_number(L, 3, "max_bytes", 16u << 20);
  size_t n = ss_rawlen(L, 2);
  if (n > MAX_BATCH) return luaL_argerror(L, 2, "too many requests in one batch");
  long *ids = lua_newuserdata(L, (n ? n : 1) * sizeof *ids); /* freed by the GC */
  int ids_idx = lua_gettop(L);
  lua_createtable(L, (int)n, 0);
  int out = lua_gettop(L);
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, 2, (int)i + 1);
    int q = lua_gettop(L);
    luaL_checktype(L, q, LUA_TTABLE);
    lua_rawgeti(L, q, 1);
    lua_rawgeti(L, q, 2);
    lua_rawgeti(L, q, 3);
    size_t body_len = 0;
    const char *body = lua_isnil(L, -1) ? NULL : luaL_checklstring(L, -1, &body_len);
    double max = ss_opt_number(L, q, "max_bytes", def_max);
    if (!(max >= 1 && max <= 1e15)) return luaL_error(L, "perform: max_bytes must be a positive byte count");
    sse_spec spec = {
        .method = luaL_checkstring(L, q + 1),
        .target = luaL_checkstring(L, q + 2),
        .body = body,
        .body_len = body_len,
        .timeout = ss_opt_number(L, q, "timeout", def_timeout),
        .max_bytes = (size_t)max,
        .mode = SSE_BODY_BUFFER,
        .fd = -1,
    };
    ss_error err;
    ss_error_init(&err);
    ids[i] = sse_client_submit(c, &spec, &err); /* copies what it keeps: the strings may go */
    if (ids[i] < 0) {
      lua_newtable(L);
      ss_push_error_object(L, &err);
      lua_setfield(L, -2, "err");
      lua_rawseti(L, out, (int)i + 1);
    }
    lua_settop(L, out);
  }
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0) continue;
    sse_client_run(c, ids[i], -1); /* every transfer has its own deadline */
    sse_result *r = sse_client_take(c, ids[i]);
    if (!r) {
      sse_client_cancel(c, ids[i]);
      lua_newtable(L);
      ss_error err;
      ss_error_init(&err);
      ss_error_set(&err, "transport", "protocol", "the transfer could not be driven to its end");
      ss_push_error_object(L, &err);
      lua_setfield(L, -2, "err");
    } else {
      ss_push_engine_result(L, r);
      lua_rawgeti(L, 2, (int)i + 1);
      lua_getfield(L, -1, "raw");
      int raw = lua_toboolean(L, -1);
      lua_pop(L, 2);
      if (!raw && r->status) decode_body(L, r);
      sse_result_free(r);
    }
    lua_rawseti(L, out, (int)i + 1);
  }
  (void)ids_idx;
  return 1;
}
