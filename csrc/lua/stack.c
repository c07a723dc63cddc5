/* The stack part of the binding: the pure planner of csrc/stack as one Lua object.
 *   core.stack_model(opts, session_key[, fixed]) -> model | nil, err
 *       Validates the options once, compiles egress_policy, mints the session token (when the
 *       stack has a proxy) and the run label. fixed = {now=, token=, run=} pins what is
 *       otherwise taken from the clock and the CSPRNG (for a plan shown to a user or a test).
 *   model:plan{api_version=, pool=, subnets={sbx=, pub=, egress=, isocheck=}, redact=, control_dir=,
 *              control_uid=, init={image=}} -> plan | nil, err
 *       Every create as a finished request {method, path, body_json}; the same model gives the
 *       same token, label, names and credential placeholders to every plan (a retry with new
 *       subnets plans again). redact = true: a plan to show, with no credential's secret in it.
 *       init: the sandbox under sandstack-init (csrc/stack/init_wrap.h): {image = the sandbox
 *       image's Config {Entrypoint =, Cmd =} as the engine's inspect gives it}.
 *   model:swarm_plan{api_version=, redact=, constraints={...}, node_id=, pool=} -> plan | nil, err
 *       The same plan with its Swarm shape as plan.swarm (csrc/stack/swarm.h): every service and
 *       overlay create finished; node_id pins every service after the first to that node.
 *   model:close()
 *   core.stack_pick_subnet(pool, used, seed|nil[, prefix[, count]]) -> "a.b.c.d/28" | {count of them} | nil, err
 *     (seed nil: drawn from the CSPRNG)
 * opts is a table (function values are left out: callbacks stay in Lua) or a JSON string.
 * An unknown option key raises; every other refusal is a returned error object. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lua/binding.h"
#include "stack/model.h"
#include "stack/swarm.h"
#include "util/random.h"

#define STACK_MODEL_MT "sandstack.stack.model"
#define TOKEN_MAX 256
#define RUN_LABEL_HEX 8

typedef struct {
  cJSON *opts;            /* owned: the model borrows its strings */
  ss_stack_model *model;  /* NULL once closed */
  char *session_key;
  char *policy_json;      /* rendered egress policy, or NULL */
  char token[TOKEN_MAX + 1];
  char run_label[2 * RUN_LABEL_HEX + 1];
  double now;
} model_ud;

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
    ss_where(L, 1);
    lua_pushfstring(L, "options: %s", err.message);
    lua_concat(L, 2);
    ss_error_clear(&err);
    lua_error(L);
  }
  return j;
}

static int m_close(lua_State *L) {
  model_ud *u = luaL_checkudata(L, 1, STACK_MODEL_MT);
  free(u->model);
  u->model = NULL;
  cJSON_Delete(u->opts);
  u->opts = NULL;
  free(u->session_key);
  u->session_key = NULL;
  cJSON_free(u->policy_json);
  u->policy_json = NULL;
  return 0;
}

/* Unknown keys, wrong types and non-table options are programming errors: raise them (after
 * freeing) at the caller outside the library (ss_where). */
static int fail(lua_State *L, ss_error *err) {
  if (strcmp(err->kind, "usage") == 0 && strcmp(err->reason, "oom") != 0) {
    ss_where(L, 1);
    lua_pushstring(L, err->message);
    lua_concat(L, 2);
    ss_error_clear(err);
    return lua_error(L);
  }
  return ss_push_error(L, err);
}

static int pick_token(model_ud *u, const char *fixed, ss_error *err) {
  if (u->model->proxy_idx < 0) return 0;
  const cJSON *given = cJSON_GetObjectItemCaseSensitive(u->opts, "session_token");
  const char *t = fixed ? fixed : cJSON_IsString(given) ? given->valuestring : NULL; /* validated */
  if (t) {
    snprintf(u->token, sizeof u->token, "%s", t);
    return 0;
  }
  if (ss_random_hex(u->token, 32) == 0) return 0;
  ss_error_set(err, "io", "random", "could not read the kernel CSPRNG for the session token");
  return -1;
}

static int l_stack_model(lua_State *L) {
  const char *key = luaL_checkstring(L, 2);
  const char *fixed_token = NULL, *fixed_run = NULL;
  double now = (double)time(NULL);
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const keys[] = {"now", "token", "run", NULL};
    ss_check_keys(L, 3, keys, "stack_model fixed values");
    now = ss_opt_number(L, 3, "now", now);
    fixed_token = ss_opt_string(L, 3, "token", NULL);
    fixed_run = ss_opt_string(L, 3, "run", NULL);
  }
  model_ud *u = ss_newuserdata(L, sizeof *u);
  memset(u, 0, sizeof *u);
  luaL_getmetatable(L, STACK_MODEL_MT);
  lua_setmetatable(L, -2);
  int ud = lua_gettop(L);
  u->opts = opts_arg(L, 1); /* raises before anything is owned but the (empty) userdata */
  u->now = now;
  u->session_key = strdup(key);
  u->model = calloc(1, sizeof *u->model);
  ss_error err;
  ss_error_init(&err);
  if (!u->session_key || !u->model) {
    ss_error_set(&err, "usage", "oom", "out of memory");
  } else if (ss_stack_model_build(u->opts, u->session_key, u->model, &err) == 0 &&
             pick_token(u, fixed_token, &err) == 0) {
    u->policy_json = ss_stack_egress_policy(u->opts, &err);
    if (!ss_error_isset(&err)) {
      if (fixed_run) snprintf(u->run_label, sizeof u->run_label, "%s", fixed_run);
      else if (ss_random_hex(u->run_label, RUN_LABEL_HEX) != 0)
        ss_error_set(&err, "io", "random", "could not read the kernel CSPRNG for the run label");
    }
  }
  if (ss_error_isset(&err)) {
    lua_pushcfunction(L, m_close);
    lua_pushvalue(L, ud);
    lua_call(L, 1, 0);
    return fail(L, &err);
  }
  lua_settop(L, ud);
  return 1;
}

static const char *subnet_field(lua_State *L, int idx, const char *key) {
  lua_getfield(L, idx, key);
  const char *s = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
  lua_pop(L, 1); /* the string stays referenced by the subnets table */
  return s;
}

/* 24 bits of the CSPRNG as a subnet seed; -1 (err set) when it cannot be read. */
static lua_Integer random_seed(ss_error *err) {
  unsigned char b[3];
  if (ss_random_bytes(b, sizeof b) != 0) {
    ss_random_error(err, errno, "stack_pick_subnet");
    return -1;
  }
  return (lua_Integer)b[0] << 16 | (lua_Integer)b[1] << 8 | b[2];
}

/* Pushes a list of count distinct /prefix subnets of pool that overlap none of the list at
 * used_idx (each pick is avoided by the next). Returns 0, or -1 with err set. */
static int push_picks(lua_State *L, const char *pool, int used_idx, lua_Integer seed, lua_Integer prefix,
                      lua_Integer count, ss_error *err) {
  size_t n = ss_rawlen(L, used_idx);
  if (n > 100000) return luaL_argerror(L, used_idx, "too many subnets");
  const char **used = lua_newuserdata(L, (n + (size_t)count) * sizeof *used); /* freed by the GC */
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, used_idx, (int)i + 1);
    used[i] = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    lua_pop(L, 1); /* the strings stay referenced by the table */
  }
  lua_createtable(L, (int)count, 0); /* above the array, which stays alive until the return */
  char out[64];
  for (lua_Integer k = 0; k < count; k++) {
    if (ss_stack_pick_subnet(pool, (int)prefix, used, n + (size_t)k, (uint32_t)seed, out, sizeof out, err) != 0)
      return -1;
    lua_pushstring(L, out);
    used[n + (size_t)k] = lua_tostring(L, -1);
    lua_rawseti(L, -2, (int)k + 1); /* the list keeps the string alive */
  }
  return 0;
}

/* model:plan{subnet_pool =, used = {...}}: the subnets of all four networks (sbx, pub, egress,
 * isocheck) picked from the pool against `used` (the engine's networks) with a fresh seed, in
 * the same call as the plan; they are set in ctx and their table is left on the stack (its
 * index returned; 0 when not asked). Negative: nil and the error object are pushed. */
static int pick_all(lua_State *L, ss_stack_ctx *ctx) {
  static const char *const keys[] = {"sbx", "pub", "egress", "isocheck"};
  lua_getfield(L, 2, "subnet_pool");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  const char *pool = luaL_checkstring(L, -1);
  lua_getfield(L, 2, "used");
  luaL_checktype(L, -1, LUA_TTABLE);
  ss_error err;
  ss_error_init(&err);
  lua_Integer seed = random_seed(&err);
  if (seed < 0 || push_picks(L, pool, lua_gettop(L), seed, 28, 4, &err) != 0) {
    lua_pushnil(L); /* m_plan returns nil, err */
    ss_push_error_object(L, &err);
    return -2;
  }
  int list = lua_gettop(L);
  lua_createtable(L, 0, 4);
  for (int k = 0; k < 4; k++) {
    lua_rawgeti(L, list, k + 1);
    lua_setfield(L, -2, keys[k]);
  }
  const char **slots[] = {&ctx->subnets.sbx, &ctx->subnets.pub, &ctx->subnets.egress, &ctx->subnets.isocheck};
  for (int k = 0; k < 4; k++) {
    lua_getfield(L, -1, keys[k]);
    *slots[k] = lua_tostring(L, -1); /* kept alive by the table */
    lua_pop(L, 1);
  }
  return lua_gettop(L);
}

/* What the model fixed once for all its plans: the key, the clock, the token, the policy, the run. */
static void model_values(const model_ud *u, ss_stack_ctx *ctx) {
  ctx->session_key = u->session_key;
  ctx->now = u->now;
  ctx->token = u->token[0] ? u->token : NULL;
  ctx->egress_policy_json = u->policy_json;
  ctx->run_label = u->run_label;
}

/* model:plan's init = {image =}: sets ctx.init_image (*out, which the caller deletes; NULL
 * without init). Raises for a malformed one. */
static void init_arg(lua_State *L, ss_stack_ctx *ctx, cJSON **out) {
  lua_getfield(L, 2, "init");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  int idx = lua_gettop(L);
  luaL_checktype(L, idx, LUA_TTABLE);
  static const char *const keys[] = {"image", NULL};
  ss_check_keys(L, idx, keys, "model:plan init");
  lua_getfield(L, idx, "image");
  cJSON *image = NULL;
  if (lua_istable(L, -1)) {
    ss_error err;
    ss_error_init(&err);
    image = ss_lua_to_json(L, lua_gettop(L), 1, &err);
    ss_error_clear(&err);
    if (!image) luaL_error(L, "model:plan init: image must be the image's Config table");
  } else if (lua_isnil(L, -1)) {
    image = cJSON_CreateObject(); /* an image with neither: the body's own command */
  } else {
    luaL_error(L, "model:plan init: image must be the image's Config table");
  }
  lua_pop(L, 2);
  ctx->init_image = *out = image;
}

static int m_plan(lua_State *L) {
  model_ud *u = luaL_checkudata(L, 1, STACK_MODEL_MT);
  if (!u->model) return luaL_error(L, "the stack model is closed");
  cJSON *image = NULL;
  ss_stack_ctx ctx = {0};
  int picked = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const keys[] = {"api_version", "pool", "subnets", "redact", "subnet_pool", "used", "control_dir",
                                       "control_uid", "init", NULL};
    ss_check_keys(L, 2, keys, "model:plan");
    lua_getfield(L, 2, "redact");
    ctx.redact_secrets = lua_toboolean(L, -1);
    lua_pop(L, 1);
    ctx.api_version = ss_opt_string(L, 2, "api_version", NULL);
    ctx.pool = ss_opt_string(L, 2, "pool", NULL);
    ctx.control_dir = ss_opt_string(L, 2, "control_dir", NULL);
    lua_getfield(L, 2, "control_uid");
    ctx.control_uid = (long)luaL_optinteger(L, -1, 0);
    lua_pop(L, 1);
    lua_getfield(L, 2, "subnets");
    if (!lua_isnil(L, -1)) {
      int sidx = lua_gettop(L);
      luaL_checktype(L, sidx, LUA_TTABLE);
      static const char *const nets[] = {"sbx", "pub", "egress", "isocheck", NULL};
      ss_check_keys(L, sidx, nets, "model:plan subnets");
      ctx.subnets.sbx = subnet_field(L, sidx, "sbx");
      ctx.subnets.pub = subnet_field(L, sidx, "pub");
      ctx.subnets.egress = subnet_field(L, sidx, "egress");
      ctx.subnets.isocheck = subnet_field(L, sidx, "isocheck");
    }
    lua_pop(L, 1);
    if ((picked = pick_all(L, &ctx)) < 0) return 2; /* nil, err */
    init_arg(L, &ctx, &image);
  }
  model_values(u, &ctx);
  ss_error err;
  ss_error_init(&err);
  cJSON *plan = ss_stack_plan_model(u->model, &ctx, &err);
  cJSON_Delete(image);
  if (!plan) return fail(L, &err);
  ss_json_to_lua(L, plan);
  cJSON_Delete(plan);
  if (picked) { /* what was picked, for a later plan of the same run */
    lua_pushvalue(L, picked);
    lua_setfield(L, -2, "subnets");
  }
  return 1;
}

static int m_swarm_plan(lua_State *L) {
  model_ud *u = luaL_checkudata(L, 1, STACK_MODEL_MT);
  if (!u->model) return luaL_error(L, "the stack model is closed");
  ss_stack_ctx ctx = {0};
  ss_swarm_ctx sw = {0};
  cJSON *constraints = NULL;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const keys[] = {"api_version", "redact", "constraints", "node_id", "pool", NULL};
    ss_check_keys(L, 2, keys, "model:swarm_plan");
    lua_getfield(L, 2, "redact");
    ctx.redact_secrets = lua_toboolean(L, -1);
    lua_pop(L, 1);
    ctx.api_version = ss_opt_string(L, 2, "api_version", NULL);
    sw.node_id = ss_opt_string(L, 2, "node_id", NULL);
    ctx.pool = ss_opt_string(L, 2, "pool", NULL);
    lua_getfield(L, 2, "constraints");
    if (!lua_isnil(L, -1)) {
      luaL_checktype(L, -1, LUA_TTABLE);
      ss_error jerr;
      ss_error_init(&jerr);
      constraints = ss_lua_to_json(L, lua_gettop(L), 1, &jerr);
      if (!constraints) {
        lua_pushfstring(L, "model:swarm_plan constraints: %s", jerr.message);
        ss_error_clear(&jerr);
        return lua_error(L);
      }
    }
    lua_pop(L, 1);
  }
  sw.constraints = constraints;
  model_values(u, &ctx);
  ss_error err;
  ss_error_init(&err);
  cJSON *plan = ss_swarm_plan(u->model, &ctx, &sw, &err);
  cJSON_Delete(constraints);
  if (!plan) return fail(L, &err);
  ss_json_to_lua(L, plan);
  cJSON_Delete(plan);
  return 1;
}

/* With count, returns a list of count distinct subnets (each pick is avoided by the next). */
static int l_stack_pick_subnet(lua_State *L) {
  const char *pool = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  ss_error err;
  ss_error_init(&err);
  lua_Integer seed = luaL_optinteger(L, 3, -1);
  if (lua_isnoneornil(L, 3) && (seed = random_seed(&err)) < 0) return ss_push_error(L, &err);
  lua_Integer prefix = luaL_optinteger(L, 4, 28);
  int as_list = !lua_isnoneornil(L, 5);
  lua_Integer count = luaL_optinteger(L, 5, 1);
  if (count < 1 || count > 16) return luaL_argerror(L, 5, "count must be 1 to 16");
  if (push_picks(L, pool, 2, seed, prefix, count, &err) != 0) return ss_push_error(L, &err);
  if (!as_list) lua_rawgeti(L, -1, 1);
  return 1;
}

void sandstack_open_stack(lua_State *L) {
  static const luaL_Reg methods[] = {{"plan", m_plan}, {"swarm_plan", m_swarm_plan}, {"close", m_close}, {NULL, NULL}};
  ss_define_class(L, STACK_MODEL_MT, methods, m_close);
  static const luaL_Reg fns[] = {{"stack_model", l_stack_model},
                                 {"stack_pick_subnet", l_stack_pick_subnet},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
