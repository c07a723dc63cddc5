#ifndef SANDSTACK_LUA_ENGINE_HANDLE_H
#define SANDSTACK_LUA_ENGINE_HANDLE_H
/* What the engine handle class (engine.c) shares with its batch method (engine_batch.c) and the
 * two halves of that method: reading a caller's request (engine_request.c) and settling its
 * answer (engine_settle.c). */
#include "engine/client.h"
#include "lua/binding.h"

/* The open client of the handle at idx; raises when it is not one or is closed. */
sse_client *ss_check_engine_client(lua_State *L, int idx);
/* Pushes a result table as h:take gives it (body as text). */
void ss_push_engine_result(lua_State *L, sse_result *r);
/* h:perform(requests, defaults) (engine_batch.c) and h:exec(container, argv, opts, api_version,
 * timeout, max_bytes, exec_max_bytes) (engine_exec.c): module.c hands them to the class
 * (sandstack_open_engine), so engine.c does not call back into the files that call it. */
int ss_engine_perform(lua_State *L);
int ss_engine_exec(lua_State *L);

/* How a batch reads its requests: the refusals' prefix ("perform", or "call" for a call made
 * as a batch of one, whose options may also carry `ok`), the client's API version (NULL:
 * unversioned) and where a misuse is raised (luaL_where's level). */
typedef struct ss_request_ctx {
  const char *what;
  const char *api_version;
  int level;
  int call_keys;
} ss_request_ctx;

/* One request as the transport sends it, plus what settling its answer needs. The strings live
 * on the Lua stack (pushed by ss_read_request) until the caller pops them. */
typedef struct ss_request {
  const char *method; /* upper-case */
  const char *path;   /* as the caller wrote it: errors name it */
  const char *target; /* versioned, with the query */
  const char *body;   /* NULL: none */
  size_t body_len;
  double timeout, max_bytes; /* 0: the batch's defaults */
  int raw;            /* no JSON decoding of the answer */
  int ok_idx;         /* stack index of the accepted statuses' table, or 0 */
} ss_request;

/* Reads {method, path, body, opts, ok=} at stack index q (the n-th of the batch). Raises on a
 * programming error; a body that cannot be encoded as JSON is returned as err (-1). */
int ss_read_request(lua_State *L, int q, size_t n, const ss_request_ctx *ctx, ss_request *out, ss_error *err);

/* Pushes the target of path: "/v<api_version><path>" (as it is for a versioned path, /_ping or no
 * version) and the query table at query_idx (0 or nil: none) after it, keys sorted, values
 * percent-encoded, a table value as JSON. Misuse of the query raises as ss_read_request's. */
void ss_push_target(lua_State *L, const char *path, int query_idx, const ss_request_ctx *ctx);
/* Pushes the n bytes at s percent-encoded (util/url.h). Both are engine_target.c's: the request
 * reader (engine_request.c) calls them, never the other way. */
void ss_push_urlencoded(lua_State *L, const char *s, size_t n);

/* Pushes the settled result {ok=, status=, body=, err=} of req: ok when the status is 2xx or
 * accepted by req's ok table; body decoded (JSON, unless raw) or text, `true` for an accepted
 * empty answer; err the engine's error (kind engine, reason after the status), bad_json, or the
 * transport's, naming the caller's method and path. r NULL: the transfer never ended. */
void ss_push_settled(lua_State *L, sse_result *r, const ss_request *req);

/* The error of an answer nobody accepted: kind "engine", reason after the status (else
 * http_<status>), the daemon's message (else "HTTP <status>"), status, method and path. */
void ss_push_engine_error(lua_State *L, long status, const char *method, const char *path, const char *message);

#endif
