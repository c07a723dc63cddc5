/* The one place an Engine answer is settled: what perform, call and the stack
 * executor's steps all return, {ok=, status=, body=, err=}. A 2xx, or a status the request
 * accepts (its ok table: {[304] = true} or the list form {304, 404}), is ok; any other status is
 * the engine's error, named after the status; a transfer that failed keeps the transport's
 * error with the caller's own method and path. */
#include <stdio.h>
#include <string.h>

#include "engine/cause.h"
#include "engine/errmsg.h"
#include "lua/engine_handle.h"

static const struct {
  long status;
  const char *reason;
} REASONS[] = {
    {304, "not_modified"}, {400, "bad_request"},  {401, "unauthorized"}, {403, "forbidden"},
    {404, "not_found"},    {409, "conflict"},     {500, "server_error"}, {503, "unavailable"},
};

void ss_push_engine_error(lua_State *L, long status, const char *method, const char *path, const char *message) {
  ss_error e;
  ss_error_init(&e);
  char reason[32];
  snprintf(reason, sizeof reason, "http_%ld", status);
  for (size_t i = 0; i < sizeof REASONS / sizeof REASONS[0]; i++)
    if (REASONS[i].status == status) snprintf(reason, sizeof reason, "%s", REASONS[i].reason);
  if (message && message[0]) ss_error_set(&e, "engine", reason, "%s", message);
  else ss_error_set(&e, "engine", reason, "HTTP %ld", status);
  ss_error_field_num(&e, "status", (double)status);
  ss_error_field_str(&e, "method", method);
  ss_error_field_str(&e, "path", path);
  /* what the daemon's text says, for the callers to compare (engine/cause.c) */
  const char *cause = sse_engine_cause(message);
  if (cause) ss_error_field_str(&e, "cause", cause);
  ss_push_error_object(L, &e);
}

/* The ok table at idx accepts status: as a set or as a list. */
static int accepts(lua_State *L, int idx, long status) {
  if (!idx) return 0;
  lua_rawgeti(L, idx, (lua_Integer)status);
  int yes = lua_toboolean(L, -1);
  lua_pop(L, 1);
  for (int i = 1; !yes; i++) {
    lua_rawgeti(L, idx, i);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      break;
    }
    yes = lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) == (lua_Number)status;
    lua_pop(L, 1);
  }
  return yes;
}

static int is_json(const char *ctype) {
  for (const char *p = ctype; p && *p; p++)
    if (strncasecmp(p, "json", 4) == 0) return 1;
  return 0;
}

/* Pushes the body: decoded when the answer says JSON (unless raw) and parses, else the text.
 * Returns 0 when it said JSON and did not parse. */
static int push_body(lua_State *L, const sse_result *r, int raw) {
  if (!raw && r->body.len && is_json(r->content_type)) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(r->body.data, r->body.len, &end, 0);
    if (j) {
      ss_json_to_lua(L, j);
      cJSON_Delete(j);
      return 1;
    }
    lua_pushlstring(L, r->body.data, r->body.len);
    return 0;
  }
  lua_pushlstring(L, r->body.data ? r->body.data : "", r->body.len);
  return 1;
}

static void set_failed(lua_State *L) {
  lua_pushboolean(L, 0);
  lua_setfield(L, -3, "ok");
  lua_setfield(L, -2, "err");
}

void ss_push_settled(lua_State *L, sse_result *r, const ss_request *req) {
  lua_newtable(L);
  if (!r) {
    ss_error e;
    ss_error_init(&e);
    ss_error_set(&e, "transport", "protocol", "the transfer could not be driven to its end");
    ss_push_error_object(L, &e);
    set_failed(L);
    return;
  }
  if (r->status) {
    lua_pushinteger(L, (lua_Integer)r->status);
    lua_setfield(L, -2, "status");
  }
  if (ss_error_isset(&r->err)) {
    lua_pushlstring(L, r->body.data ? r->body.data : "", r->body.len);
    lua_setfield(L, -2, "body");
    ss_push_error_object(L, &r->err);
    lua_getfield(L, -1, "path"); /* the transport names the versioned target: callers see theirs */
    int named = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (named) {
      lua_pushstring(L, req->path);
      lua_setfield(L, -2, "path");
      lua_pushstring(L, req->method);
      lua_setfield(L, -2, "method");
    }
    set_failed(L);
    return;
  }
  long st = r->status;
  int accepted = (st >= 200 && st < 300) || accepts(L, req->ok_idx, st);
  if (!accepted) {
    push_body(L, r, req->raw);
    lua_setfield(L, -2, "body");
    char msg[1024] = "";
    if (st >= 300) sse_error_message(r->body.data, r->body.len, msg, sizeof msg);
    ss_push_engine_error(L, st, req->method, req->path, msg);
    set_failed(L);
    return;
  }
  if (r->body.len == 0) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "body");
  } else {
    int parsed = push_body(L, r, req->raw);
    lua_setfield(L, -2, "body");
    if (!parsed) {
      ss_error e;
      ss_error_init(&e);
      ss_error_set(&e, "engine", "bad_json", "%s %s: the answer is not valid JSON", req->method, req->path);
      ss_error_field_num(&e, "status", (double)st);
      ss_error_field_str(&e, "method", req->method);
      ss_error_field_str(&e, "path", req->path);
      ss_push_error_object(L, &e);
      set_failed(L);
      return;
    }
  }
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "ok");
}
