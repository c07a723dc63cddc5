/* sandstack.policy in C: compile (Lua table -> validated policy), load (rendered JSON ->
 * policy), and the policy object (admits, explain, rules, render). The table goes through the
 * same JSON validator as a proxy's rendered policy, so both backends read one language. */
#include <stdlib.h>
#include <string.h>

#include "lua/binding.h"
#include "policy/policy.h"

#define POLICY_MT "sandstack.policy"

typedef struct {
  ss_policy *p;
} policy_ud;

static policy_ud *check_policy(lua_State *L, int idx) {
  policy_ud *u = luaL_checkudata(L, idx, POLICY_MT);
  if (!u->p) luaL_error(L, "the policy is closed");
  return u;
}

static int push_policy(lua_State *L, ss_policy *p) {
  policy_ud *u = ss_newuserdata(L, sizeof *u);
  u->p = p;
  luaL_getmetatable(L, POLICY_MT);
  lua_setmetatable(L, -2);
  return 1;
}

static int invalid(lua_State *L, cJSON *root, int rule, const char *msg) {
  cJSON_Delete(root);
  ss_error e;
  ss_error_init(&e);
  ss_error_set(&e, "invalid", "policy", "%s", msg);
  if (rule > 0) ss_error_field_num(&e, "rule", rule);
  return ss_push_error(L, &e);
}

/* allow list at idx -> cJSON array; a rule that JSON cannot carry is named by its index. */
static int allow_to_json(lua_State *L, int idx, cJSON *root) {
  if (lua_type(L, idx) != LUA_TTABLE) return invalid(L, root, 0, "'allow' must be a list of rules");
  size_t n = ss_rawlen(L, idx), count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (!ss_isinteger(L, -1) || lua_tonumber(L, -1) < 1 || lua_tonumber(L, -1) > (lua_Number)n) {
      lua_pop(L, 1);
      return invalid(L, root, 0, "'allow' must be a list (keys 1..n, no holes, no names)");
    }
    count++;
  }
  if (count != n) return invalid(L, root, 0, "'allow' must be a list (keys 1..n, no holes, no names)");
  if (n > SS_POLICY_MAX_RULES) return invalid(L, root, 0, "a policy has more than 256 rules");
  cJSON *arr = cJSON_AddArrayToObject(root, "allow");
  for (size_t i = 1; arr && i <= n; i++) {
    lua_rawgeti(L, idx, (int)i);
    ss_error e;
    ss_error_init(&e);
    cJSON *item = ss_lua_to_json(L, -1, 0, &e);
    lua_pop(L, 1);
    if (!item) {
      char msg[1100];
      snprintf(msg, sizeof msg, "rule %d cannot be read: %s", (int)i, e.message);
      ss_error_clear(&e);
      return invalid(L, root, (int)i, msg);
    }
    cJSON_AddItemToArray(arr, item);
  }
  return 0;
}

static int l_compile(lua_State *L) {
  if (luaL_testudata(L, 1, POLICY_MT)) { /* an already compiled policy is its own compilation */
    check_policy(L, 1);
    lua_settop(L, 1);
    return 1;
  }
  luaL_checktype(L, 1, LUA_TTABLE);
  cJSON *root = cJSON_CreateObject();
  if (!root) return luaL_error(L, "out of memory");
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 1);
      return invalid(L, root, 0,
                     "a policy is { allow = {...}, inspect =, ask =, ask_timeout =, allow_private = {...} } and has no "
                     "other keys");
    }
    const char *k = lua_tostring(L, -1);
    /* any other name goes on to the C validation, which names the key and the nearest known one */
    if (strcmp(k, "allow") != 0 && strcmp(k, "inspect") != 0 && strcmp(k, "ask") != 0 && strcmp(k, "ask_timeout") != 0 &&
        strcmp(k, "allow_private") != 0)
      cJSON_AddNullToObject(root, k);
  }
  lua_getfield(L, 1, "allow_private");
  if (!lua_isnil(L, -1)) { /* its entries are checked by the C validation, as a rendered policy's are */
    if (lua_type(L, -1) != LUA_TTABLE)
      return invalid(L, root, 0, "'allow_private' must be a list of addresses ('10.0.0.7', '10.0.0.7:5000')");
    ss_error e;
    ss_error_init(&e);
    cJSON *list = ss_lua_to_json(L, -1, 0, &e);
    if (!list) {
      char msg[1100];
      snprintf(msg, sizeof msg, "'allow_private' cannot be read: %s", e.message);
      ss_error_clear(&e);
      return invalid(L, root, 0, msg);
    }
    cJSON_AddItemToObject(root, "allow_private", list);
  }
  lua_pop(L, 1);
  static const char *const flags[] = {"inspect", "ask"};
  for (int i = 0; i < 2; i++) {
    lua_getfield(L, 1, flags[i]);
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != LUA_TBOOLEAN) {
        char msg[64];
        snprintf(msg, sizeof msg, "'%s' must be true or false", flags[i]);
        return invalid(L, root, 0, msg);
      }
      cJSON_AddBoolToObject(root, flags[i], lua_toboolean(L, -1));
    }
    lua_pop(L, 1);
  }
  lua_getfield(L, 1, "ask_timeout");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      return invalid(L, root, 0, "'ask_timeout' must be a whole number of seconds from 1 to 3600");
    cJSON_AddNumberToObject(root, "ask_timeout", lua_tonumber(L, -1));
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "allow");
  int idx = lua_gettop(L);
  if (!lua_isnil(L, idx)) {
    int r = allow_to_json(L, idx, root);
    if (r) return r;
  }
  ss_error e;
  ss_error_init(&e);
  ss_policy *p = ss_policy_from_json(root, &e);
  cJSON_Delete(root);
  if (!p) return ss_push_error(L, &e);
  return push_policy(L, p);
}

static int l_load(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  ss_error e;
  ss_error_init(&e);
  ss_policy *p = ss_policy_parse(s, len, &e);
  if (!p) return ss_push_error(L, &e);
  return push_policy(L, p);
}

static int l_is_policy(lua_State *L) {
  lua_pushboolean(L, luaL_testudata(L, 1, POLICY_MT) != NULL);
  return 1;
}

/* Shared by admits and explain: (self, host, method?, path?, port?) -> verdict. */
static void run_check(lua_State *L, ss_policy_verdict *v) {
  policy_ud *u = check_policy(L, 1);
  size_t hl = 0, ml = 0, pl = 0;
  const char *host = luaL_checklstring(L, 2, &hl);
  const char *method = lua_isnoneornil(L, 3) ? NULL : luaL_checklstring(L, 3, &ml);
  const char *path = lua_isnoneornil(L, 4) ? NULL : luaL_checklstring(L, 4, &pl);
  lua_Integer port = luaL_optinteger(L, 5, 0);
  if (port < 0 || port > 65535) { /* no such port: nothing admits it */
    memset(v, 0, sizeof *v);
    v->reason = SS_DENY_HOST;
    return;
  }
  ss_policy_check(u->p, host, hl, method, ml, path, pl, (int)port, v);
}

static int l_admits(lua_State *L) {
  ss_policy_verdict v;
  run_check(L, &v);
  lua_pushboolean(L, v.admitted);
  if (!v.admitted) return 1;
  lua_pushinteger(L, v.rule);
  return 2;
}

static int l_explain(lua_State *L) {
  ss_policy_verdict v;
  run_check(L, &v);
  lua_createtable(L, 0, 3);
  lua_pushboolean(L, v.admitted);
  lua_setfield(L, -2, "admitted");
  if (v.rule) {
    lua_pushinteger(L, v.rule);
    lua_setfield(L, -2, "rule");
  }
  if (!v.admitted) {
    lua_pushstring(L, ss_deny_reason_name(v.reason));
    lua_setfield(L, -2, "reason");
    if (v.named && v.named->reason) { /* the author's own words for this refusal */
      lua_pushstring(L, v.named->reason);
      lua_setfield(L, -2, "rule_reason");
    }
  }
  if (v.raw) { /* a connection a raw rule admits: its bytes need not be TLS */
    lua_pushinteger(L, v.raw);
    lua_setfield(L, -2, "raw");
  }
  return 1;
}

static int l_rules(lua_State *L) {
  policy_ud *u = check_policy(L, 1);
  lua_createtable(L, u->p->n, 0);
  for (int i = 0; i < u->p->n; i++) {
    const ss_policy_rule *r = &u->p->rules[i];
    cJSON *j = ss_policy_rule_json(r);
    if (!j) return luaL_error(L, "out of memory");
    ss_json_to_lua(L, j);
    cJSON_Delete(j);
    /* host is the name without "*." (the apex of a wildcard), as the sbx backend builds its
     * resources from host + wildcard; pattern is the rule as written ("*.example.com") */
    lua_getfield(L, -1, "host");
    lua_setfield(L, -2, "pattern");
    lua_pushstring(L, r->host);
    lua_setfield(L, -2, "host");
    lua_pushboolean(L, r->wildcard);
    lua_setfield(L, -2, "wildcard");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_render(lua_State *L) {
  policy_ud *u = check_policy(L, 1);
  return ss_push_json_string(L, ss_policy_render(u->p));
}

/* policy:coverage(resource) -> "all" | "covered" | "wider" | "disjoint": an sbx host resource
 * (a global allow rule) against this policy. */
static int l_coverage(lua_State *L) {
  policy_ud *u = check_policy(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  lua_pushstring(L, ss_coverage_name(ss_policy_coverage(u->p, s, n)));
  return 1;
}

/* policy:reaches(pattern) -> boolean: an sbx host pattern (a secret's target) matches a host
 * this policy names; true for a pattern the policy language cannot read. */
static int l_reaches(lua_State *L) {
  policy_ud *u = check_policy(L, 1);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  lua_pushboolean(L, ss_policy_pattern_reaches(u->p, s, n));
  return 1;
}

/* p:ask() -> whether the policy holds what no rule admits, and for how many seconds */
static int l_ask(lua_State *L) {
  policy_ud *u = check_policy(L, 1);
  lua_pushboolean(L, u->p->ask);
  lua_pushinteger(L, u->p->ask ? u->p->ask_timeout : 0);
  return 2;
}

static int l_tostring(lua_State *L) {
  policy_ud *u = luaL_checkudata(L, 1, POLICY_MT);
  if (u->p) lua_pushfstring(L, "sandstack.policy (%d rules)", u->p->n);
  else lua_pushliteral(L, "sandstack.policy (closed)");
  return 1;
}

static int l_close(lua_State *L) {
  policy_ud *u = luaL_checkudata(L, 1, POLICY_MT);
  ss_policy_free(u->p);
  u->p = NULL;
  return 0;
}

void sandstack_open_policy(lua_State *L) {
  static const luaL_Reg methods[] = {{"admits", l_admits}, {"explain", l_explain}, {"rules", l_rules},
                                     {"render", l_render}, {"coverage", l_coverage}, {"reaches", l_reaches},
                                     {"close", l_close},   {"ask", l_ask},       {NULL, NULL}};
  ss_define_class(L, POLICY_MT, methods, l_close);
  luaL_getmetatable(L, POLICY_MT);
  lua_pushcfunction(L, l_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  static const luaL_Reg fns[] = {
      {"policy_compile", l_compile}, {"policy_load", l_load}, {"policy_is", l_is_policy}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
