/* h:exec(container, argv, opts, api_version, timeout, max_bytes, exec_max_bytes, cfg)
 *     -> {stdout=, stderr=, exit_code=} | nil, err
 * The whole of eng:exec in one call into C (lua/sandstack/engine/exec.lua only passes the
 * client's settings; cfg, its engine address, for a start with stdin): the argument and option
 * checks, the Env list, exec create, start without a hijack (the answer is the raw framed stream
 * until EOF, demultiplexed byte-exact under the budget by the transfer's DEMUX mode) or, with
 * opts.stdin, hijacked to write it (engine_exec_stdin.c, the same demultiplexer and clock), then
 * the exit code, re-read while the daemon is still recording it. The create is a request under
 * the client's timeout; the command's timeout counts from its process running (ss_exec_clock: a
 * daemon slow to create the exec, or to run its process, takes none of it), and the exit code has 1 s past that, on CLOCK_MONOTONIC. Every
 * answer is settled by the one settle layer (engine_settle.c), so the errors are the objects
 * call() gives.
 *
 * Programming errors raise at the caller outside the library (ss_where), where exec.lua's checks
 * raised them, with the same texts. */
#include <stdlib.h>
#include <string.h>

#include "lua/engine_exec.h"
#include "lua/engine_exec_options.h"
#include "lua/engine_handle.h"
#include "util/clock.h"

enum { A_CONTAINER = 2, A_ARGV, A_OPTS, A_API, A_TIMEOUT, A_MAX, A_EXEC_MAX, A_CFG };
#define WHERE 2 /* level 1 is exec.lua's wrapper; its caller is the user's code */

static const char START_BODY[] = "{\"Detach\":false,\"Tty\":false}";

static int raise_at(lua_State *L, const char *msg) {
  ss_where(L, WHERE);
  lua_pushstring(L, msg);
  lua_concat(L, 2);
  return lua_error(L);
}

/* nil, or a positive number (NaN refused), as engine/options.lua's check_number: another type
 * raises at the caller; a number that is not above 0 returns -1 with err set. */
static int check_positive(lua_State *L, const char *name, ss_error *err) {
  lua_getfield(L, A_OPTS, name);
  int rc = 0;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TNUMBER) {
      lua_pushfstring(L, "exec: option '%s' must be a number, got %s", name, luaL_typename(L, -1));
      raise_at(L, lua_tostring(L, -1));
    }
    lua_Number v = lua_tonumber(L, -1);
    if (v != v || v <= 0) {
      ss_error_set(err, "invalid", "invalid_option", "exec: option '%s' must be a number above 0", name);
      ss_error_field_str(err, "option", name);
      rc = -1;
    }
  }
  lua_pop(L, 1);
  return rc;
}

/* The arguments: a misuse raises at the caller; 0, or -1 with err set for a refused value. */
static int check_args(lua_State *L, ss_error *err) {
  size_t n = 0;
  if (lua_type(L, A_CONTAINER) != LUA_TSTRING || (lua_tolstring(L, A_CONTAINER, &n), n == 0))
    raise_at(L, "exec: container must be a string");
  if (!lua_istable(L, A_ARGV) || ss_rawlen(L, A_ARGV) == 0) raise_at(L, "exec: argv must be a non-empty list of strings");
  for (int i = 1;; i++) {
    lua_rawgeti(L, A_ARGV, i);
    int t = lua_type(L, -1);
    lua_pop(L, 1);
    if (t == LUA_TNIL) break;
    if (t != LUA_TSTRING) raise_at(L, "exec: argv must be a list of strings");
  }
  static const char *const keys[] = {SS_OPTIONS_EXEC(SS_OPTION_NAME) NULL};
  ss_check_keys_at(L, A_OPTS, keys, "exec", WHERE);
  if (lua_isnoneornil(L, A_OPTS)) {
    lua_newtable(L);
    lua_replace(L, A_OPTS);
  }
  /* user and workdir went into the create's body as given: a number there was the engine's
   * 400, not the caller's misuse. */
  static const char *const strings[] = {"stdin", "user", "workdir"};
  for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
    lua_getfield(L, A_OPTS, strings[i]);
    int t = lua_type(L, -1);
    lua_pop(L, 1);
    if (t != LUA_TNIL && t != LUA_TSTRING) {
      lua_pushfstring(L, "exec: option '%s' must be a string", strings[i]);
      raise_at(L, lua_tostring(L, -1));
    }
  }
  if (check_positive(L, "timeout", err) || check_positive(L, "max_bytes", err)) return -1;
  return 0;
}

typedef struct {
  const char *s;
  size_t len;
} name;

static int by_bytes(const void *a, const void *b) {
  const name *x = a, *y = b;
  int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The value as tostring() gives it (numbers converted on a copy, other types by tostring). */
static void push_tostring(lua_State *L, int idx) {
  idx = ss_absindex(L, idx);
  if (lua_type(L, idx) == LUA_TSTRING || lua_type(L, idx) == LUA_TNUMBER) {
    lua_pushvalue(L, idx);
    lua_tostring(L, -1);
    return;
  }
  lua_getglobal(L, "tostring");
  lua_pushvalue(L, idx);
  lua_call(L, 1, 1);
}

/* Pushes the Env list of opts.env, or nothing (returns 0) when there is none: {"K=V"} entries
 * as given, then {K = "V"} entries sorted by name, as the Docker API and exec.lua had them. */
static int push_env(lua_State *L) {
  lua_getfield(L, A_OPTS, "env");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1)) raise_at(L, "exec: option 'env' must be a table");
  int env = lua_gettop(L);
  size_t nnames = 0;
  lua_pushnil(L);
  while (lua_next(L, env)) {
    if (lua_type(L, -2) == LUA_TNUMBER) {
      const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
      if (!v || !strchr(v, '=')) raise_at(L, "exec: env entries must be 'K=V' strings");
    } else if (lua_type(L, -2) == LUA_TSTRING) {
      nnames++;
    } else {
      raise_at(L, "exec: env keys must be strings");
    }
    lua_pop(L, 1);
  }
  name *names = lua_newuserdata(L, (nnames ? nnames : 1) * sizeof *names); /* freed by the GC */
  size_t k = 0;
  lua_pushnil(L);
  while (lua_next(L, env)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) { /* the key stays alive: the env table holds it */
      names[k].s = lua_tolstring(L, -1, &names[k].len);
      k++;
    }
  }
  qsort(names, nnames, sizeof *names, by_bytes);
  lua_newtable(L);
  int out = lua_gettop(L);
  int n = 0;
  for (int i = 1;; i++) {
    lua_rawgeti(L, env, i);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      break;
    }
    lua_rawseti(L, out, ++n);
  }
  for (size_t i = 0; i < nnames; i++) {
    lua_pushlstring(L, names[i].s, names[i].len);
    lua_pushliteral(L, "=");
    lua_pushlstring(L, names[i].s, names[i].len);
    lua_rawget(L, env);
    push_tostring(L, -1);
    lua_remove(L, -2);
    lua_concat(L, 3);
    lua_rawseti(L, out, ++n);
  }
  lua_replace(L, env); /* the list where the env table was; the names array goes */
  lua_settop(L, env);
  return 1;
}

/* Pushes the create body as JSON text, or returns 0 with err set (a value JSON cannot carry:
 * the same refusal core.json_encode gives). */
static int push_create_body(lua_State *L, int with_stdin, ss_error *err) {
  lua_createtable(L, 0, 8);
  int body = lua_gettop(L);
  lua_pushboolean(L, with_stdin);
  lua_setfield(L, body, "AttachStdin");
  lua_pushboolean(L, 1);
  lua_setfield(L, body, "AttachStdout");
  lua_pushboolean(L, 1);
  lua_setfield(L, body, "AttachStderr");
  lua_pushboolean(L, 0);
  lua_setfield(L, body, "Tty");
  lua_pushvalue(L, A_ARGV);
  lua_setfield(L, body, "Cmd");
  if (push_env(L)) lua_setfield(L, body, "Env");
  lua_getfield(L, A_OPTS, "user");
  lua_setfield(L, body, "User");
  lua_getfield(L, A_OPTS, "workdir");
  lua_setfield(L, body, "WorkingDir");
  cJSON *j = ss_lua_to_json(L, body, 0, err);
  lua_settop(L, body - 1);
  if (!j) return 0;
  ss_push_json_string(L, j);
  return 1;
}

/* Pushes prefix .. urlencode(id) .. suffix (ss_push_urlencoded, as sandstack.engine.urlencode). */
static const char *push_path(lua_State *L, const char *prefix, const char *id, size_t len, const char *suffix) {
  lua_pushstring(L, prefix);
  ss_push_urlencoded(L, id, len);
  lua_pushstring(L, suffix);
  lua_concat(L, 3);
  return lua_tostring(L, -1);
}

/* Pushes the versioned target of path ("/v1.41/..."), built as perform builds every target;
 * unversioned when no version is known. */
static const char *push_target(lua_State *L, const char *path) {
  ss_request_ctx ctx = {.what = "exec", .api_version = lua_isnil(L, A_API) ? NULL : luaL_checkstring(L, A_API),
                        .level = WHERE};
  ss_push_target(L, path, 0, &ctx);
  return lua_tostring(L, -1);
}

typedef ss_exec_run exec_run;

/* nil and the err of the settled result on top: for `return fail(L)`. */
static int fail(lua_State *L) {
  lua_getfield(L, -1, "err");
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

/* The exit code once the daemon has it: ExitCode is null while the process runs, and for a
 * moment after the stream ended. Pushes it and returns 1, or returns fail(L)'s 2 (a failed
 * read, or no exit code by the deadline). *started is 0 when the process never ran (Pid 0: the
 * program is not there or cannot be executed; the stream then held the engine's message). */
static int push_exit_code(lua_State *L, exec_run *x, const char *id, int *started) {
  const char *path = push_path(L, "/exec/", id, strlen(id), "/json");
  const char *target = push_target(L, path);
  int base = lua_gettop(L);
  double pause = 0.01;
  for (;;) {
    sse_spec spec = ss_exec_buffered(x, "GET", target, NULL);
    if (!ss_exec_call(L, x->c, &spec, path, NULL)) return fail(L);
    int stopped = 0;
    lua_getfield(L, -1, "body");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "Running");
      stopped = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (stopped && ss_exec_body_field(L, "Pid", LUA_TNUMBER)) {
      *started = lua_tonumber(L, -1) != 0;
      lua_pop(L, 1);
    }
    if (stopped && ss_exec_body_field(L, "ExitCode", LUA_TNUMBER)) return 1;
    lua_settop(L, base);
    if (ss_monotonic_now() >= x->deadline) {
      ss_error err;
      ss_error_init(&err);
      ss_error_set(&err, "transport", "timeout", "exec %.200s: no exit code in time", id);
      ss_error_field_str(&err, "exec_id", id);
      ss_error_field_str(&err, "method", "GET");
      ss_error_field_str(&err, "path", path);
      return ss_push_error(L, &err);
    }
    sse_client_run(x->c, -1, pause); /* a sleep that keeps submitted transfers moving */
    pause = pause * 2 < 0.2 ? pause * 2 : 0.2;
  }
}

/* Runs the start's stream (submitted as sid) to its end, or until the clock k says the command's
 * time is up. Returns call()'s ok with the settled result on top; when the time was up, *cut is
 * the still-running transfer (its output so far is in its demux: keep_partial reads it, then the
 * caller cancels it). */
static int run_start(lua_State *L, exec_run *x, ss_exec_clock *k, long sid, const char *spath, const sse_spec *start,
                     sse_result **kept, int *cut) {
  *cut = 0;
  for (;;) {
    double now = ss_monotonic_now(), until = ss_exec_clock_until(k);
    if (sse_client_run(x->c, sid, until > now ? until - now : 0)) {
      sse_result *r = sse_client_take(x->c, sid);
      ss_request req = {.method = start->method, .path = spath, .target = start->target};
      ss_push_settled(L, r, &req);
      *kept = r;
      lua_getfield(L, -1, "ok");
      int ok = lua_toboolean(L, -1);
      lua_pop(L, 1);
      return ok;
    }
    if (ss_exec_clock_tick(L, x, k)) break;
  }
  *cut = 1;
  *kept = sse_client_peek(x->c, sid);
  ss_error err;
  ss_error_init(&err);
  ss_exec_ran_past(&err, spath, k->timeout);
  lua_newtable(L);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "ok");
  ss_push_error_object(L, &err);
  lua_setfield(L, -2, "err");
  return 0;
}

/* Opt max_bytes as the transfer takes it: a positive byte count. */
static size_t exec_budget(lua_State *L) {
  lua_getfield(L, A_OPTS, "max_bytes");
  double v = lua_isnil(L, -1) ? luaL_checknumber(L, A_EXEC_MAX) : lua_tonumber(L, -1);
  lua_pop(L, 1);
  if (!(v >= 1 && v <= 1e15)) raise_at(L, "option 'max_bytes' must be a positive byte count");
  return (size_t)v;
}

/* A start that failed (its deadline or the output budget passed) still says what the command
 * wrote until then and which exec it was: the error object on top gets stdout, stderr and
 * exec_id, so the caller can return the output so far and end the exec
 * (lua/sandstack/docker/exec_kill.lua). */
static void keep_partial(lua_State *L, const sse_demux *d, const char *id) {
  if (!lua_istable(L, -1)) return;
  lua_pushlstring(L, d && d->out.data ? d->out.data : "", d ? d->out.len : 0);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, d && d->err.data ? d->err.data : "", d ? d->err.len : 0);
  lua_setfield(L, -2, "stderr");
  lua_pushstring(L, id);
  lua_setfield(L, -2, "exec_id");
}

/* The engine's settings for the hijacked start, from the client's cfg table (A_CFG). */
static sse_config attach_config(lua_State *L) {
  luaL_checktype(L, A_CFG, LUA_TTABLE);
  sse_config cfg = {.host = ss_opt_string(L, A_CFG, "host", NULL), .tls = ss_opt_boolean(L, A_CFG, "tls", 0),
                    .tls_verify = ss_opt_boolean(L, A_CFG, "tls_verify", 1), .ca = ss_opt_string(L, A_CFG, "ca", NULL),
                    .cert = ss_opt_string(L, A_CFG, "cert", NULL), .key = ss_opt_string(L, A_CFG, "key", NULL)};
  if (!cfg.host) raise_at(L, "exec: the engine client has no host");
  return cfg;
}

/* The start without stdin: a transfer of the client whose answer is the framed stream. 1 with
 * the output in *d (the caller frees it), or 0 with the error object pushed (its output so far
 * kept). */
static int start_plain(lua_State *L, exec_run *x, ss_exec_clock *k, const char *spath, const char *starget,
                       double request_timeout, size_t budget, const char *id, sse_demux *d) {
  /* The start's own timeout only backs the clock's: the wait for the process, then its time. */
  sse_spec start = {.method = "POST", .target = starget, .body = START_BODY, .body_len = sizeof START_BODY - 1,
                    .content_type = "application/json", .timeout = request_timeout + k->timeout + 1,
                    .max_bytes = budget, .mode = SSE_BODY_DEMUX, .fd = -1};
  ss_error err;
  ss_error_init(&err);
  long sid = sse_client_submit(x->c, &start, &err);
  if (sid < 0) {
    ss_push_error_object(L, &err);
    return 0;
  }
  sse_result *r = NULL;
  int cut = 0;
  int ok = run_start(L, x, k, sid, spath, &start, &r, &cut);
  lua_getfield(L, -1, "err");
  lua_remove(L, -2);
  if (ok) {
    lua_pop(L, 1);
    *d = r->demux; /* the output moves to the caller */
    memset(&r->demux, 0, sizeof r->demux);
    sse_result_free(r);
    return 1;
  }
  keep_partial(L, r ? &r->demux : NULL, id);
  if (cut) sse_client_cancel(x->c, sid); /* r was the client's: the cancel frees it */
  else if (r) sse_result_free(r);
  return 0;
}

int ss_engine_exec(lua_State *L) {
  sse_client *c = ss_check_engine_client(L, 1);
  lua_settop(L, A_CFG);
  ss_error err;
  ss_error_init(&err);
  if (check_args(L, &err)) return ss_push_error(L, &err);
  lua_getfield(L, A_OPTS, "timeout");
  double timeout = lua_isnil(L, -1) ? luaL_checknumber(L, A_TIMEOUT) : lua_tonumber(L, -1);
  lua_pop(L, 1);
  double request_timeout = luaL_checknumber(L, A_TIMEOUT);
  exec_run x = {.c = c, .timeout = request_timeout, .deadline = ss_monotonic_now() + request_timeout,
                .max_bytes = (size_t)luaL_checknumber(L, A_MAX)};
  size_t budget = exec_budget(L);
  lua_getfield(L, A_OPTS, "stdin");
  int in_idx = lua_gettop(L);
  int with_stdin = !lua_isnil(L, in_idx);
  sse_config cfg = {0};
  if (with_stdin) cfg = attach_config(L);
  if (!push_create_body(L, with_stdin, &err)) return ss_push_error(L, &err);
  const char *body = lua_tostring(L, -1);
  size_t clen;
  const char *container = lua_tolstring(L, A_CONTAINER, &clen);
  const char *cpath = push_path(L, "/containers/", container, clen, "/exec");
  const char *ctarget = push_target(L, cpath);

  sse_spec create = ss_exec_buffered(&x, "POST", ctarget, body);
  create.content_type = "application/json";
  if (!ss_exec_call(L, c, &create, cpath, NULL)) return fail(L);
  if (!ss_exec_body_field(L, "Id", LUA_TSTRING)) {
    ss_error_set(&err, "engine", "bad_json", "exec create answered without an Id");
    ss_error_field_str(&err, "method", "POST");
    ss_error_field_str(&err, "path", cpath);
    return ss_push_error(L, &err);
  }
  const char *id = lua_tostring(L, -1);
  const char *spath = push_path(L, "/exec/", id, strlen(id), "/start");
  const char *starget = push_target(L, spath);
  const char *jpath = push_path(L, "/exec/", id, strlen(id), "/json");
  const char *jtarget = push_target(L, jpath);

  x.timeout = request_timeout;
  x.deadline = ss_monotonic_now() + request_timeout + timeout + 1;
  ss_exec_clock k;
  ss_exec_clock_start(&k, request_timeout, timeout, jpath, jtarget);
  sse_demux d;
  sse_demux_init(&d, budget);
  int ok;
  if (with_stdin) {
    size_t in_len;
    const char *in = lua_tolstring(L, in_idx, &in_len);
    ok = ss_exec_stdin_run(L, &x, &k, &cfg, spath, starget, in, in_len, &d);
    if (!ok) keep_partial(L, &d, id);
  } else {
    sse_demux_free(&d); /* the transfer's own demux takes its place */
    ok = start_plain(L, &x, &k, spath, starget, request_timeout, budget, id, &d);
  }
  if (!ok) {
    if (with_stdin) sse_demux_free(&d);
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  x.timeout = timeout; /* the exit code: until 1 s past the command's time */
  x.deadline = ss_exec_clock_ran_by(&k) + 1;
  lua_createtable(L, 0, 3);
  lua_pushlstring(L, d.out.data ? d.out.data : "", d.out.len);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, d.err.data ? d.err.data : "", d.err.len);
  lua_setfield(L, -2, "stderr");
  sse_demux_free(&d);
  int result = lua_gettop(L);

  int started = 1;
  if (push_exit_code(L, &x, id, &started) != 1) return 2;
  int code = (int)lua_tointeger(L, -1);
  lua_setfield(L, result, "exit_code");
  /* The engine's "OCI runtime exec failed: ..." came on stdout: it is an error text. Docker keeps
   * an exec's Pid after it ends, so Pid 0 says it never ran; Podman reports Pid 0 for every
   * ended exec, so only the codes of a program that could not be run (126, 127) count. */
  if (!started && (code == 126 || code == 127)) {
    lua_getfield(L, result, "stdout");
    lua_getfield(L, result, "stderr");
    lua_concat(L, 2);
    lua_setfield(L, result, "stderr");
    lua_pushliteral(L, "");
    lua_setfield(L, result, "stdout");
  }
  lua_settop(L, result);
  return 1;
}
