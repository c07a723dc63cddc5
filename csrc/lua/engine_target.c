/* The engine client's request target for the Lua half: one builder (the versioned path, the
 * sorted percent-encoded query) for perform's request reader (engine_request.c, which calls it)
 * and for the requests that go through h:submit (request, call with headers, submit, download,
 * events), and one percent-encoder (util/url.h) for every path and query of the binding.
 *   core.engine_target(api_version|nil, path, query|nil, what, level) -> target
 *   core.urlencode(s) -> s percent-encoded (sandstack.engine.urlencode)
 * Misuse raises with perform's texts, where luaL_where(level) points (1: the Lua function that
 * called engine_target), so a caller passes the level it would give error(). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua/engine_handle.h"
#include "util/url.h"

void ss_push_urlencoded(lua_State *L, const char *s, size_t n) {
  enum { SLICE = LUAL_BUFFERSIZE / 3 }; /* the most input one prepared block holds encoded */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  while (n > 0) {
    size_t take = n < SLICE ? n : SLICE;
    char *out = luaL_prepbuffer(&b);
    luaL_addsize(&b, ss_urlencode(out, s, take));
    s += take;
    n -= take;
  }
  luaL_pushresult(&b);
}

/* Pushes a query value as text: a string as it is, an integral number without a fraction, a
 * boolean as true/false, a table as JSON. */
static void push_query_value(lua_State *L, int idx, const ss_request_ctx *ctx) {
  switch (lua_type(L, idx)) {
  case LUA_TSTRING:
    lua_pushvalue(L, idx);
    return;
  case LUA_TNUMBER: {
    lua_Number v = lua_tonumber(L, idx);
    if (v == floor(v) && v > -9007199254740992.0 && v < 9007199254740992.0) {
      char num[32];
      snprintf(num, sizeof num, "%lld", (long long)v);
      lua_pushstring(L, num);
    } else {
      lua_pushvalue(L, idx);
      lua_tostring(L, -1);
    }
    return;
  }
  case LUA_TBOOLEAN:
    lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false");
    return;
  case LUA_TTABLE: {
    ss_error err;
    ss_error_init(&err);
    cJSON *j = ss_lua_to_json(L, idx, 0, &err);
    if (!j) {
      lua_pushstring(L, err.message);
      ss_error_clear(&err);
      ss_raise_at(L, ctx->level, "%s: query value cannot be JSON-encoded: %s", ctx->what, lua_tostring(L, -1));
    }
    ss_push_json_string(L, j);
    return;
  }
  default:
    ss_raise_at(L, ctx->level, "%s: query values must be strings, numbers, booleans or tables", ctx->what);
  }
}

static int by_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Pushes "k=v&k=v" (keys sorted, so URLs are stable in logs and tests) of the query table at
 * idx (0: none), or "" for none. */
static void push_query(lua_State *L, int idx, const ss_request_ctx *ctx) {
  if (idx == 0 || lua_isnil(L, idx)) {
    lua_pushliteral(L, "");
    return;
  }
  if (!lua_istable(L, idx)) ss_raise_at(L, ctx->level, "%s: option 'query' must be a table", ctx->what);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) ss_raise_at(L, ctx->level, "%s: query keys must be strings", ctx->what);
    n++;
  }
  const char **keys = lua_newuserdata(L, (n ? n : 1) * sizeof *keys); /* the table keeps the strings */
  size_t i = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) { /* the same walk as the count's: the table is not changed between */
    lua_pop(L, 1);
    keys[i++] = lua_tostring(L, -1);
  }
  qsort(keys, n, sizeof *keys, by_name);
  int kept = lua_gettop(L);
  lua_pushliteral(L, "");
  for (i = 0; i < n; i++) {
    if (i) lua_pushliteral(L, "&");
    ss_push_urlencoded(L, keys[i], strlen(keys[i]));
    lua_pushliteral(L, "=");
    lua_getfield(L, idx, keys[i]);
    push_query_value(L, lua_gettop(L), ctx);
    size_t vlen;
    const char *v = lua_tolstring(L, -1, &vlen);
    ss_push_urlencoded(L, v, vlen);
    lua_replace(L, -3); /* the encoded value over the raw one */
    lua_pop(L, 1);
    lua_concat(L, i ? 5 : 4);
  }
  lua_replace(L, kept); /* the query string where the key list was */
}

/* Pushes the target: "/v<version><path>" (not for a versioned path or /_ping) and the query
 * (engine_handle.h): ss_read_request's, and core.engine_target's for the submit path. */
void ss_push_target(lua_State *L, const char *path, int query_idx, const ss_request_ctx *ctx) {
  int versioned = 0;
  if (path[1] == 'v') {
    const char *p = path + 2;
    const char *major = p;
    while (*p >= '0' && *p <= '9') p++;
    if (p > major && *p == '.') {
      const char *minor = ++p;
      while (*p >= '0' && *p <= '9') p++;
      versioned = p > minor && *p == '/';
    }
  }
  int ping = strncmp(path, "/_ping", 6) == 0;
  if (ctx->api_version && !versioned && !ping) lua_pushfstring(L, "/v%s%s", ctx->api_version, path);
  else lua_pushstring(L, path);
  push_query(L, query_idx, ctx);
  size_t qlen;
  lua_tolstring(L, -1, &qlen);
  if (qlen == 0) {
    lua_pop(L, 1);
    return;
  }
  lua_pushstring(L, strchr(path, '?') ? "&" : "?");
  lua_insert(L, -2);
  lua_concat(L, 3);
}

static int l_engine_target(lua_State *L) {
  const char *api_version = luaL_optstring(L, 1, NULL);
  const char *what = luaL_checkstring(L, 4);
  int level = (int)luaL_checkinteger(L, 5);
  const char *path = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (!path || path[0] != '/') {
    ss_where(L, level);
    lua_pushfstring(L, "%s: path must be a string starting with '/'", what);
    lua_concat(L, 2);
    return lua_error(L);
  }
  ss_request_ctx ctx = {.what = what, .api_version = api_version, .level = level};
  lua_settop(L, 3);
  ss_push_target(L, path, 3, &ctx);
  return 1;
}

static int l_urlencode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  ss_push_urlencoded(L, s, n);
  return 1;
}

void sandstack_open_engine_target(lua_State *L) {
  lua_pushcfunction(L, l_engine_target);
  lua_setfield(L, -2, "engine_target");
  lua_pushcfunction(L, l_urlencode);
  lua_setfield(L, -2, "urlencode");
}
