/* The stack part of the binding: the pure planner of csrc/stack as Lua functions.
 *   core.stack_validate(opts, session_key) -> true | nil, err
 *   core.stack_plan(opts, ctx) -> plan | nil, err      ctx = {session_key=, api_version=, now=,
 *                                                            token=, egress_policy=, pool=}
 *   core.stack_pick_subnet(pool, used, seed[, prefix]) -> "a.b.c.d/28" | nil, err
 *   core.stack_api_number("1.41") -> 141
 * opts is a table (function values are left out: callbacks stay in Lua) or a JSON string.
 * An unknown option key raises; every other refusal is a returned error object. */
#include <string.h>
#include <time.h>

#include "lua/binding.h"
#include "stack/stack.h"

/* Converts argument idx to cJSON; raises on what can never be an options table. */
static cJSON *opts_arg(lua_State *L, int idx) {
  ss_error err;
  ss_error_init(&err);
  cJSON *j = NULL;
  if (lua_type(L, idx) == LUA_TSTRING) {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    j = cJSON_ParseWithLengthOpts(s, len, NULL, 0);
    if (!j) luaL_argerror(L, idx, "options: not valid JSON");
    return j;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  j = ss_lua_to_json(L, idx, 1, &err);
  if (!j) {
    lua_pushfstring(L, "options: %s", err.message);
    ss_error_clear(&err);
    lua_error(L);
  }
  return j;
}

/* Unknown keys and non-table options are programming errors: raise them. */
static int finish_error(lua_State *L, cJSON *opts, ss_error *err) {
  cJSON_Delete(opts);
  if (strcmp(err->kind, "usage") == 0) {
    lua_pushstring(L, err->message);
    ss_error_clear(err);
    return lua_error(L);
  }
  return ss_push_error(L, err);
}

static int l_stack_validate(lua_State *L) {
  cJSON *opts = opts_arg(L, 1);
  const char *key = luaL_checkstring(L, 2);
  ss_error err;
  ss_error_init(&err);
  if (ss_stack_validate(opts, key, &err) != 0) return finish_error(L, opts, &err);
  cJSON_Delete(opts);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_stack_plan(lua_State *L) {
  cJSON *opts = opts_arg(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const keys[] = {"session_key", "api_version", "now", "token",
                                     "egress_policy", "pool", NULL};
  ss_check_keys(L, 2, keys, "stack_plan context");
  ss_stack_ctx ctx = {0};
  ctx.session_key = ss_opt_string(L, 2, "session_key", NULL);
  if (!ctx.session_key) luaL_argerror(L, 2, "session_key is required");
  ctx.api_version = ss_opt_string(L, 2, "api_version", NULL);
  ctx.now = ss_opt_number(L, 2, "now", (double)time(NULL));
  ctx.token = ss_opt_string(L, 2, "token", NULL);
  ctx.egress_policy_json = ss_opt_string(L, 2, "egress_policy", NULL);
  ctx.pool = ss_opt_string(L, 2, "pool", NULL);
  ss_error err;
  ss_error_init(&err);
  cJSON *plan = ss_stack_plan(opts, &ctx, &err);
  if (!plan) return finish_error(L, opts, &err);
  cJSON_Delete(opts);
  ss_json_to_lua(L, plan);
  cJSON_Delete(plan);
  return 1;
}

static int l_stack_pick_subnet(lua_State *L) {
  const char *pool = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer seed = luaL_optinteger(L, 3, 0);
  lua_Integer prefix = luaL_optinteger(L, 4, 28);
  size_t n = ss_rawlen(L, 2);
  if (n > 100000) return luaL_argerror(L, 2, "too many subnets");
  const char **used = lua_newuserdata(L, (n + 1) * sizeof *used); /* freed by the GC */
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, 2, (int)i + 1);
    used[i] = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* the strings stay referenced by the table */
  }
  char out[64];
  ss_error err;
  ss_error_init(&err);
  if (ss_stack_pick_subnet(pool, (int)prefix, used, n, (uint32_t)seed, out, sizeof out, &err) != 0)
    return ss_push_error(L, &err);
  lua_pushstring(L, out);
  return 1;
}

static int l_stack_api_number(lua_State *L) {
  lua_pushinteger(L, ss_stack_api_number(luaL_checkstring(L, 1)));
  return 1;
}

void sandstack_open_stack(lua_State *L) {
  static const luaL_Reg fns[] = {{"stack_validate", l_stack_validate},
                                 {"stack_plan", l_stack_plan},
                                 {"stack_pick_subnet", l_stack_pick_subnet},
                                 {"stack_api_number", l_stack_api_number},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
