/* The stack's bodiless requests for Lua (csrc/stack/requests.c): what a plan does not hold
 * because it is made from answers (a teardown's extra objects, a memo's key) or read before any
 * plan exists.
 *   core.stack_lifecycle(plan) -> a copy of plan with each container's start and inspect and
 *       the plan's removals (a handle rebuilt from a record, which keeps names only)
 *   core.stack_removals{containers =, networks =, volumes =} -> the same keys, each a list of removals
 *   core.stack_list_requests(label, ...) -> the three lists of objects carrying every label
 *   core.isolation_memo_requests(labels, memo, stale) -> {create =, replace =, stale = {...}}
 *   core.engine_reads = {networks =, version =, info =, bridge =, memos =}   (made per state)
 * Each request is the keyed form the engine client sends as it is. */
#include "lua/binding.h"
#include "stack/requests.h"

/* Pushes j as Lua and frees it. */
static int push_owned(lua_State *L, cJSON *j) {
  ss_json_to_lua(L, j);
  cJSON_Delete(j);
  return 1;
}

static int l_stack_lifecycle(lua_State *L) {
  cJSON *plan = ss_table_arg(L, 1, "stack_lifecycle");
  ss_stack_add_lifecycle(plan);
  return push_owned(L, plan);
}

static int l_stack_removals(lua_State *L) {
  cJSON *objs = ss_table_arg(L, 1, "stack_removals");
  cJSON *out = ss_stack_removals(cJSON_GetObjectItemCaseSensitive(objs, "containers"),
                                 cJSON_GetObjectItemCaseSensitive(objs, "networks"),
                                 cJSON_GetObjectItemCaseSensitive(objs, "volumes"));
  cJSON_Delete(objs);
  return push_owned(L, out);
}

#define MAX_LIST_LABELS 8

static int l_stack_list_requests(lua_State *L) {
  const char *labels[MAX_LIST_LABELS];
  int n = lua_gettop(L);
  if (n < 1 || n > MAX_LIST_LABELS) return luaL_error(L, "stack_list_requests: 1 to %d labels", MAX_LIST_LABELS);
  for (int i = 0; i < n; i++) labels[i] = luaL_checkstring(L, i + 1);
  return push_owned(L, ss_stack_list_requests(labels, n));
}

static int l_isolation_memo_requests(lua_State *L) {
  const char *memo = luaL_checkstring(L, 2);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  cJSON *stale = lua_isnoneornil(L, 3) ? NULL : ss_table_arg(L, 3, "isolation_memo_requests");
  luaL_checktype(L, 1, LUA_TTABLE);
  ss_error err;
  ss_error_init(&err);
  cJSON *labels = ss_lua_to_json(L, 1, 1, &err);
  if (!labels) { /* stale is freed before the raise */
    cJSON_Delete(stale);
    lua_pushfstring(L, "isolation_memo_requests: %s", err.message);
    ss_error_clear(&err);
    return lua_error(L);
  }
  cJSON *out = ss_isolation_memo_requests(labels, memo, stale);
  cJSON_Delete(labels);
  cJSON_Delete(stale);
  return push_owned(L, out);
}

void sandstack_open_stack_requests(lua_State *L) {
  static const luaL_Reg fns[] = {{"stack_lifecycle", l_stack_lifecycle},
                                 {"stack_removals", l_stack_removals},
                                 {"stack_list_requests", l_stack_list_requests},
                                 {"isolation_memo_requests", l_isolation_memo_requests},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  push_owned(L, ss_engine_reads());
  lua_setfield(L, -2, "engine_reads");
}
