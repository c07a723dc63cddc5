/* One Engine request as a Lua caller writes it, read into what the transport sends:
 *   {method, path, body, opts, ok = {...}}   (perform's entries; call() makes a batch of one)
 * or as the plan holds it (csrc/stack/requests.c, the keyed form, passed on untouched):
 *   {method =, path =, body_json =, query =, ok = {...}, timeout =, max_bytes =}
 * The method goes upper-case; the target is the path behind the client's API version (unless it
 * carries one or is /_ping) with opts.query after it (keys sorted, values percent-encoded, a
 * table as JSON); a table body goes as JSON. The option keys are checked here, once, with the
 * wording of core.check_keys (util/keys.h), so neither an internal caller nor a batch of many
 * requests crosses into C per table. Misuse raises where ctx->level points. */
#include <math.h>
#include <string.h>

#include "lua/engine_handle.h"

static const char *const PERFORM_KEYS[] = {"timeout", "query", "max_bytes", "raw", NULL};
/* call()'s keys but headers and content_type, which go through submit (requests.lua) */
static const char *const CALL_KEYS[] = {"timeout", "query", "max_bytes", "raw", "ok", NULL};

/* A positive number (at most `max`) or nil; 0 for nil. A value of another type raises at the
 * caller (a programming error); a number out of range is -1 with err set (invalid/invalid_option):
 * docs/api/README.md, "Conventions". */
static double positive(lua_State *L, int opts, const char *name, double max, const ss_request_ctx *ctx,
                       ss_error *err) {
  if (!opts) return 0;
  lua_getfield(L, opts, name);
  double v = 0;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      ss_raise_at(L, ctx->level, "%s: option '%s' must be a number, got %s", ctx->what, name, luaL_typename(L, -1));
    v = (double)lua_tonumber(L, -1);
    if (!(v > 0 && v <= max)) {
      ss_error_set(err, "invalid", "invalid_option", "%s: option '%s' must be a number above 0", ctx->what, name);
      ss_error_field_str(err, "option", name);
      v = -1;
    }
  }
  lua_pop(L, 1);
  return v;
}

int ss_read_request(lua_State *L, int q, size_t n, const ss_request_ctx *ctx, ss_request *out, ss_error *err) {
  memset(out, 0, sizeof *out);
  if (!lua_istable(L, q)) ss_raise_at(L, ctx->level, "%s: request %d needs a method", ctx->what, (int)n);
  lua_rawgeti(L, q, 1);
  /* keyed: the plan's own fields; its other fields (name, service, ...) are the plan's */
  int keyed = lua_isnil(L, -1) && !ctx->call_keys;
  if (keyed) {
    lua_pop(L, 1);
    lua_getfield(L, q, "method");
  }
  if (lua_type(L, -1) != LUA_TSTRING) {
    if (ctx->call_keys) ss_raise_at(L, ctx->level, "%s: method must be a string", ctx->what);
    ss_raise_at(L, ctx->level, "%s: request %d needs a method", ctx->what, (int)n);
  }
  size_t mlen;
  const char *m = lua_tolstring(L, -1, &mlen);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t i = 0; i < mlen; i++) luaL_addchar(&b, (char)((m[i] >= 'a' && m[i] <= 'z') ? m[i] - 32 : m[i]));
  luaL_pushresult(&b);
  lua_replace(L, -2);
  out->method = lua_tostring(L, -1);

  int opts = 0;
  if (keyed) {
    opts = q;
  } else {
    lua_rawgeti(L, q, 4);
    if (!lua_isnil(L, -1)) {
      opts = lua_gettop(L);
      ss_check_keys_at(L, opts, ctx->call_keys ? CALL_KEYS : PERFORM_KEYS, ctx->what, ctx->level);
    }
  }
  out->timeout = positive(L, opts, "timeout", HUGE_VAL, ctx, err);
  if (out->timeout < 0) return -1;
  out->max_bytes = positive(L, opts, "max_bytes", 1e15, ctx, err);
  if (out->max_bytes < 0) return -1;
  if (opts) {
    lua_getfield(L, opts, "raw");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      ss_raise_at(L, ctx->level, "%s: option 'raw' must be a boolean, got %s", ctx->what, luaL_typename(L, -1));
    out->raw = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }

  /* the accepted statuses: the request's ok, else (call) its options' */
  lua_getfield(L, q, "ok");
  if (lua_isnil(L, -1) && opts && ctx->call_keys) {
    lua_pop(L, 1);
    lua_getfield(L, opts, "ok");
  }
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1)) ss_raise_at(L, ctx->level, "%s: option 'ok' must be a table", ctx->what);
    out->ok_idx = lua_gettop(L);
  }

  if (keyed) lua_getfield(L, q, "path");
  else lua_rawgeti(L, q, 2);
  if (lua_type(L, -1) != LUA_TSTRING || lua_tostring(L, -1)[0] != '/')
    ss_raise_at(L, ctx->level, "%s: path must be a string starting with '/'", ctx->what);
  out->path = lua_tostring(L, -1);
  if (opts) lua_getfield(L, opts, "query");
  else lua_pushnil(L);
  ss_push_target(L, out->path, lua_gettop(L), ctx);
  lua_remove(L, -2); /* the query table */
  out->target = lua_tostring(L, -1);

  if (keyed) {
    lua_getfield(L, q, "body_json");
    if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TSTRING)
      ss_raise_at(L, ctx->level, "%s: body_json must be a string", ctx->what);
  } else {
    lua_rawgeti(L, q, 3);
  }
  switch (lua_type(L, -1)) {
  case LUA_TNIL:
    break;
  case LUA_TSTRING:
    out->body = lua_tolstring(L, -1, &out->body_len);
    break;
  case LUA_TTABLE: {
    cJSON *j = ss_lua_to_json(L, lua_gettop(L), 0, err);
    if (!j) return -1;
    ss_push_json_string(L, j);
    out->body = lua_tolstring(L, -1, &out->body_len);
    break;
  }
  default:
    ss_raise_at(L, ctx->level, "%s: body must be a table (sent as JSON) or a string", ctx->what);
  }
  return 0;
}
