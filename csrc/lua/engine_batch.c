/* h:perform(requests, defaults) -> results: a batch of buffered Engine requests in one crossing,
 * settled here (engine_settle.c), so Lua gets the answer once, in its final shape.
 *   requests[i] = {method, path, body|nil, opts|nil, ok = {status...}}
 *                 (engine_request.c: opts = {timeout=, max_bytes=, query=, raw=}, checked here)
 *   defaults    = {timeout=, max_bytes=, api_version=, what="perform"|"call", level=}
 *   ...         = later lists ("waves"), each sent only when every request of the one before
 *                 is ok (a step of several rounds, such as networks, then containers, then
 *                 their connects, in one call); their results are the further values, up to
 *                 the first wave with a failure
 * Each results list also carries `at`: the monotonic clock when its answers were in.
 * Pipelining (the stack start's: a dependency's follow-up need not wait for its whole wave):
 *   requests[i].watch = true   the wave returns as soon as a watched request has settled (the
 *                              first watched one still running is waited for); every request
 *                              not finished by then comes back as {pending = <transfer id>},
 *                              still in flight on the client, and no later wave is sent
 *   requests[i].pending = id   the request was sent by an earlier call and came back pending:
 *                              it is not sent again, its answer is awaited and settled here
 *                              (the request as it was written then, for the settle)
 * Every request is submitted before any is waited for, so they run together on the client's
 * multi handle (each with its own deadline); results come back in request order as
 * {ok=, status=, body=, err=}. what="call" reads call()'s options (they may carry ok); level is
 * where a misuse is raised (luaL_where's count; default 2, the caller of the Lua function that
 * called this). The stack executor sends each step this way: the plan's bodies as finished
 * JSON text, the answers decoded in C. */
#include <string.h>

#include "lua/engine_handle.h"
#include "util/clock.h"

#define MAX_BATCH 4096

typedef struct {
  sse_client *c;
  ss_request_ctx ctx;
  double timeout, max_bytes; /* the batch's defaults */
} batch;

static void push_failed(lua_State *L, ss_error *err) {
  lua_newtable(L);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "ok");
  ss_push_error_object(L, err);
  lua_setfield(L, -2, "err");
}

/* A request's transfer id from its `pending` field: a positive integer naming a transfer the
 * client still holds, else 0 (and a misuse raises). */
static long pending_id(lua_State *L, const batch *b, int q) {
  lua_getfield(L, q, "pending");
  long id = 0;
  if (!lua_isnil(L, -1)) {
    lua_Number v = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
    if (!(v >= 1 && v <= 1e15) || v != (lua_Number)(long)v || !sse_client_peek(b->c, (long)v)) luaL_error(L, "%s: 'pending' names no transfer in flight", b->ctx.what);
    id = (long)v;
  }
  lua_pop(L, 1);
  return id;
}

static int watched(lua_State *L, int q) {
  lua_getfield(L, q, "watch");
  int w = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return w;
}

/* With watched requests, drives the transfers until one of them has settled. */
static void await_watched(const batch *b, const long *ids, const char *watch, size_t n) {
  for (;;) {
    long first = 0;
    for (size_t i = 0; i < n; i++) {
      if (!watch[i] || ids[i] < 0) continue;
      sse_result *r = sse_client_peek(b->c, ids[i]);
      if (!r || r->done) return;
      if (!first) first = ids[i];
    }
    if (!first) return;
    sse_client_run(b->c, first, -1); /* every transfer has its own deadline */
  }
}

/* Sends the requests of the list at list_idx together and pushes their settled results (a
 * list). Returns 1 when every one is ok (none pending). */
static int run_wave(lua_State *L, const batch *b, int list_idx) {
  size_t n = ss_rawlen(L, list_idx);
  if (n > MAX_BATCH) return luaL_argerror(L, list_idx, "too many requests in one batch");
  int base = lua_gettop(L);
  ss_request *reqs = lua_newuserdata(L, (n ? n : 1) * sizeof *reqs); /* freed by the GC */
  long *ids = lua_newuserdata(L, (n ? n : 1) * sizeof *ids);
  char *watch = lua_newuserdata(L, n ? n : 1);
  lua_createtable(L, (int)n, 0);
  int out = lua_gettop(L);
  int all_ok = 1, any_watch = 0;
  /* Every request is read before any is sent: a misuse raises with nothing in flight. The
   * strings each one needs stay on the stack until the results are in. */
  if (!lua_checkstack(L, (int)n * 12 + 20)) return luaL_error(L, "perform: batch too large for the stack");
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, list_idx, (int)i + 1);
    int q = lua_gettop(L);
    ss_error err;
    ss_error_init(&err);
    ids[i] = -1;
    watch[i] = 0;
    if (ss_read_request(L, q, i + 1, &b->ctx, &reqs[i], &err) < 0) {
      push_failed(L, &err);
      lua_rawseti(L, out, (int)i + 1);
      ids[i] = -2;
      all_ok = 0;
      continue;
    }
    long pend = pending_id(L, b, q);
    if (pend) ids[i] = pend;
    watch[i] = (char)watched(L, q);
    any_watch = any_watch || watch[i];
  }
  for (size_t i = 0; i < n; i++) {
    if (ids[i] != -1) continue; /* failed to read, or already in flight */
    const ss_request *q = &reqs[i];
    sse_spec spec = {
        .method = q->method,
        .target = q->target,
        .body = q->body,
        .body_len = q->body_len,
        .timeout = q->timeout > 0 ? q->timeout : b->timeout,
        .max_bytes = (size_t)(q->max_bytes > 0 ? q->max_bytes : b->max_bytes),
        .mode = SSE_BODY_BUFFER,
        .fd = -1,
    };
    ss_error err;
    ss_error_init(&err);
    ids[i] = sse_client_submit(b->c, &spec, &err); /* copies what it keeps */
    if (ids[i] < 0) {
      push_failed(L, &err);
      lua_rawseti(L, out, (int)i + 1);
      all_ok = 0;
    }
  }
  if (any_watch) await_watched(b, ids, watch, n);
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0) continue;
    if (any_watch) {
      sse_result *p = sse_client_peek(b->c, ids[i]);
      if (p && !p->done) { /* still running: the caller collects it later */
        lua_createtable(L, 0, 1);
        lua_pushinteger(L, (lua_Integer)ids[i]);
        lua_setfield(L, -2, "pending");
        lua_rawseti(L, out, (int)i + 1);
        all_ok = 0;
        continue;
      }
    }
    sse_client_run(b->c, ids[i], -1); /* every transfer has its own deadline */
    sse_result *r = sse_client_take(b->c, ids[i]);
    if (!r) sse_client_cancel(b->c, ids[i]);
    ss_push_settled(L, r, &reqs[i]);
    if (r) sse_result_free(r);
    lua_getfield(L, -1, "ok");
    all_ok = all_ok && lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_rawseti(L, out, (int)i + 1);
  }
  lua_pushvalue(L, out);
  lua_replace(L, base + 1);
  lua_settop(L, base + 1);
  return all_ok;
}

int ss_engine_perform(lua_State *L) {
  batch b = {.c = ss_check_engine_client(L, 1)};
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const keys[] = {"timeout", "max_bytes", "api_version", "what", "level", NULL};
  ss_check_keys(L, 3, keys, "perform");
  while (lua_gettop(L) > 3 && lua_isnil(L, -1)) lua_pop(L, 1); /* a trailing nil is no wave */
  int waves = lua_gettop(L) < 3 ? 1 : lua_gettop(L) - 2; /* the first list, then the later ones */
  if (waves > 8) return luaL_error(L, "perform: at most 8 waves");
  for (int w = 4; w <= lua_gettop(L); w++) luaL_checktype(L, w, LUA_TTABLE);
  b.timeout = ss_opt_number(L, 3, "timeout", 30);
  b.max_bytes = ss_opt_number(L, 3, "max_bytes", 16u << 20);
  b.ctx.what = ss_opt_string(L, 3, "what", "perform");
  b.ctx.api_version = ss_opt_string(L, 3, "api_version", NULL);
  b.ctx.level = (int)ss_opt_number(L, 3, "level", 2);
  b.ctx.call_keys = strcmp(b.ctx.what, "call") == 0;
  int top = lua_gettop(L);
  for (int w = 0; w < waves; w++) {
    int all_ok = run_wave(L, &b, w == 0 ? 2 : 3 + w);
    lua_pushnumber(L, (lua_Number)ss_monotonic_now()); /* when its answers were in */
    lua_setfield(L, -2, "at");
    if (!all_ok) break; /* a later wave depends on this one */
  }
  return lua_gettop(L) - top;
}
