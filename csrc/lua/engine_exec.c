/* h:exec(container, argv, opts, api_version, timeout, max_bytes, exec_max_bytes)
 *     -> {stdout=, stderr=, exit_code=} | nil, err
 * The whole of eng:exec in one call into C (lua/sandstack/engine/exec.lua only passes the
 * client's settings): the argument and option checks, the Env list, exec create, start without a
 * hijack (the answer is the raw framed stream until EOF, demultiplexed byte-exact under the
 * budget by the transfer's DEMUX mode), then the exit code, re-read while the daemon is still
 * recording it. The create is a request under the client's timeout; the command's timeout
 * counts from its process running (run_start: a daemon slow to create the exec, or to run its
 * process, takes none of it), and the exit code has 1 s past that, on CLOCK_MONOTONIC. Every
 * answer is settled by the one settle layer (engine_settle.c), so the errors are the objects
 * call() gives.
 *
 * Programming errors raise at the caller outside the library (ss_where), where exec.lua's checks
 * raised them, with the same texts. */
#include <stdlib.h>
#include <string.h>

#include "lua/engine_handle.h"
#include "util/clock.h"

enum { A_CONTAINER = 2, A_ARGV, A_OPTS, A_API, A_TIMEOUT, A_MAX, A_EXEC_MAX };
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
  static const char *const keys[] = {"user", "env", "workdir", "max_bytes", "timeout", NULL};
  ss_check_keys_at(L, A_OPTS, keys, "exec", WHERE);
  if (lua_isnoneornil(L, A_OPTS)) {
    lua_newtable(L);
    lua_replace(L, A_OPTS);
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
static int push_create_body(lua_State *L, ss_error *err) {
  lua_createtable(L, 0, 8);
  int body = lua_gettop(L);
  lua_pushboolean(L, 0);
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

typedef struct {
  sse_client *c;
  double timeout, deadline;
  size_t max_bytes; /* the budget of a buffered answer (the client's) */
} exec_run;

/* What a request may take: the timeout, never past the deadline, and never nothing. */
static double left(const exec_run *x) {
  double l = x->deadline - ss_monotonic_now();
  if (l > x->timeout) l = x->timeout;
  return l > 0.001 ? l : 0.001;
}

/* Runs a request to its end and pushes its settled result {ok=, status=, body=, err=} (the one
 * settle layer, engine_settle.c); returns ok. With keep, the finished transfer is handed back
 * (the caller frees it) for what settling leaves out: an exec stream's stdout and stderr. */
static int call(lua_State *L, sse_client *c, const sse_spec *spec, const char *path, sse_result **keep) {
  ss_error err;
  ss_error_init(&err);
  long id = sse_client_submit(c, spec, &err);
  if (id < 0) { /* refused before anything was sent: the error as it is */
    lua_newtable(L);
    ss_push_error_object(L, &err);
    lua_setfield(L, -2, "err");
    return 0;
  }
  sse_client_run(c, id, -1); /* the transfer has its own deadline */
  sse_result *r = sse_client_take(c, id);
  if (!r) sse_client_cancel(c, id);
  ss_request req = {.method = spec->method, .path = path, .target = spec->target};
  ss_push_settled(L, r, &req);
  if (keep) *keep = r;
  else if (r) sse_result_free(r);
  lua_getfield(L, -1, "ok");
  int ok = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return ok;
}

/* nil and the err of the settled result on top: for `return fail(L)`. */
static int fail(lua_State *L) {
  lua_getfield(L, -1, "err");
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

static sse_spec buffered(const exec_run *x, const char *method, const char *target, const char *body) {
  sse_spec spec = {.method = method, .target = target, .body = body, .body_len = body ? strlen(body) : 0,
                   .timeout = left(x), .max_bytes = x->max_bytes, .mode = SSE_BODY_BUFFER, .fd = -1};
  return spec;
}

/* The settled body on top of the stack has field `key` of Lua type `type`: pushes it and
 * returns 1, else pushes nothing. */
static int body_field(lua_State *L, const char *key, int type) {
  lua_getfield(L, -1, "body");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_getfield(L, -1, key);
  lua_remove(L, -2);
  if (lua_type(L, -1) == type) return 1;
  lua_pop(L, 1);
  return 0;
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
    sse_spec spec = buffered(x, "GET", target, NULL);
    if (!call(L, x->c, &spec, path, NULL)) return fail(L);
    int stopped = 0;
    lua_getfield(L, -1, "body");
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "Running");
      stopped = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (stopped && body_field(L, "Pid", LUA_TNUMBER)) {
      *started = lua_tonumber(L, -1) != 0;
      lua_pop(L, 1);
    }
    if (stopped && body_field(L, "ExitCode", LUA_TNUMBER)) return 1;
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

/* The process of exec `id` has run: its Pid is known, or it has an exit code. Docker answers
 * Running as soon as it accepts the start, before runc has made the process (seconds later on a
 * loaded host), so Running is not the sign; the Pid is set once the process exists. 1 when it
 * ran, 0 not yet, -1 when the read failed. */
static int process_ran(lua_State *L, exec_run *x, const char *path, const char *target) {
  int base = lua_gettop(L);
  sse_spec spec = buffered(x, "GET", target, NULL);
  int ran = -1;
  if (call(L, x->c, &spec, path, NULL)) {
    ran = 0;
    if (body_field(L, "Pid", LUA_TNUMBER)) {
      ran = lua_tonumber(L, -1) > 0;
      lua_pop(L, 1);
    }
    if (!ran && body_field(L, "ExitCode", LUA_TNUMBER)) ran = 1;
  }
  lua_settop(L, base);
  return ran;
}

/* A poll of the process's state begins this long after the start: most commands have ended by
 * then and pay no poll. The pause between polls then doubles up to START_POLL_MAX, which bounds
 * how much longer than its timeout a command that ran between two polls may run. */
#define START_POLL_FIRST 0.05
#define START_POLL_MAX 0.1

/* Runs the start's stream (submitted as sid) to its end, or until the command's time is up:
 * `timeout` seconds from the poll that first saw its process run (process_ran). The engine has
 * the client's request timeout to run it at all. Returns call()'s ok with the settled result on
 * top; when the time was up, *cut is the still-running transfer (its output so far is in its
 * demux: keep_partial reads it, then the caller cancels it). *ran_by is when the command's time
 * ends, or was to end (now + timeout when no poll saw it run). */
static int run_start(lua_State *L, exec_run *x, long sid, const char *spath, const sse_spec *start, const char *id,
                     double request_timeout, double timeout, sse_result **kept, int *cut, double *ran_by) {
  const char *jpath = push_path(L, "/exec/", id, strlen(id), "/json");
  const char *jtarget = push_target(L, jpath);
  double now = ss_monotonic_now(), run_wait = now + request_timeout;
  double end = -1, pause = START_POLL_FIRST, next_poll = now + START_POLL_FIRST;
  *cut = 0;
  for (;;) {
    double until = end >= 0 ? end : next_poll < run_wait ? next_poll : run_wait;
    if (sse_client_run(x->c, sid, until > now ? until - now : 0)) {
      sse_result *r = sse_client_take(x->c, sid);
      ss_request req = {.method = start->method, .path = spath, .target = start->target};
      ss_push_settled(L, r, &req);
      *kept = r;
      *ran_by = end >= 0 ? end : ss_monotonic_now() + timeout;
      lua_getfield(L, -1, "ok");
      int ok = lua_toboolean(L, -1);
      lua_pop(L, 1);
      return ok;
    }
    now = ss_monotonic_now();
    if (end < 0 && now >= run_wait) end = now; /* never ran within the client's timeout */
    if (end >= 0 && now >= end) break;
    if (end < 0 && now >= next_poll) {
      int ran = process_ran(L, x, jpath, jtarget);
      if (ran != 0) end = now + timeout; /* a failed read: count from here, as without polls */
      pause = pause * 2 < START_POLL_MAX ? pause * 2 : START_POLL_MAX;
      now = ss_monotonic_now();
      next_poll = now + pause;
    }
  }
  *ran_by = end;
  *cut = 1;
  *kept = sse_client_peek(x->c, sid);
  ss_error err;
  ss_error_init(&err);
  ss_error_set(&err, "transport", "timeout", "%s %s: the command ran past %gs", start->method, spath, timeout);
  ss_error_field_str(&err, "method", start->method);
  ss_error_field_str(&err, "path", spath);
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
 * wrote until then and which exec it was: the err of the settled result on top gets stdout,
 * stderr and exec_id, so the caller can return the output so far and end the exec
 * (lua/sandstack/docker/exec_kill.lua). */
static void keep_partial(lua_State *L, const sse_result *r, const char *id) {
  lua_getfield(L, -1, "err");
  if (lua_istable(L, -1)) {
    const sse_demux *d = r ? &r->demux : NULL;
    lua_pushlstring(L, d && d->out.data ? d->out.data : "", d ? d->out.len : 0);
    lua_setfield(L, -2, "stdout");
    lua_pushlstring(L, d && d->err.data ? d->err.data : "", d ? d->err.len : 0);
    lua_setfield(L, -2, "stderr");
    lua_pushstring(L, id);
    lua_setfield(L, -2, "exec_id");
  }
  lua_pop(L, 1);
}

int ss_engine_exec(lua_State *L) {
  sse_client *c = ss_check_engine_client(L, 1);
  lua_settop(L, A_EXEC_MAX);
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
  if (!push_create_body(L, &err)) return ss_push_error(L, &err);
  const char *body = lua_tostring(L, -1);
  size_t clen;
  const char *container = lua_tolstring(L, A_CONTAINER, &clen);
  const char *cpath = push_path(L, "/containers/", container, clen, "/exec");
  const char *ctarget = push_target(L, cpath);

  sse_spec create = buffered(&x, "POST", ctarget, body);
  create.content_type = "application/json";
  if (!call(L, c, &create, cpath, NULL)) return fail(L);
  if (!body_field(L, "Id", LUA_TSTRING)) {
    ss_error_set(&err, "engine", "bad_json", "exec create answered without an Id");
    ss_error_field_str(&err, "method", "POST");
    ss_error_field_str(&err, "path", cpath);
    return ss_push_error(L, &err);
  }
  const char *id = lua_tostring(L, -1);

  /* The start's own timeout only backs run_start's: the wait for the process, then its time. */
  const char *spath = push_path(L, "/exec/", id, strlen(id), "/start");
  sse_spec start = {.method = "POST", .target = push_target(L, spath), .body = START_BODY,
                    .body_len = sizeof START_BODY - 1, .content_type = "application/json",
                    .timeout = request_timeout + timeout + 1, .max_bytes = budget, .mode = SSE_BODY_DEMUX, .fd = -1};
  long sid = sse_client_submit(c, &start, &err);
  if (sid < 0) return ss_push_error(L, &err);
  x.timeout = request_timeout;
  x.deadline = ss_monotonic_now() + request_timeout + timeout + 1;
  sse_result *r = NULL;
  int cut = 0;
  double ran_by = 0;
  int ok = run_start(L, &x, sid, spath, &start, id, request_timeout, timeout, &r, &cut, &ran_by);
  if (!ok) {
    keep_partial(L, r, id);
    if (cut) sse_client_cancel(c, sid); /* r was the client's: the cancel frees it */
    else if (r) sse_result_free(r);
    return fail(L);
  }
  x.timeout = timeout; /* the exit code: until 1 s past the command's time */
  x.deadline = ran_by + 1;
  lua_createtable(L, 0, 3);
  lua_pushlstring(L, r->demux.out.data ? r->demux.out.data : "", r->demux.out.len);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, r->demux.err.data ? r->demux.err.data : "", r->demux.err.len);
  lua_setfield(L, -2, "stderr");
  sse_result_free(r);
  int result = lua_gettop(L);

  int started = 1;
  if (push_exit_code(L, &x, id, &started) != 1) return 2;
  int code = (int)lua_tointeger(L, -1);
  lua_setfield(L, result, "exit_code");
  /* The engine's "OCI runtime exec failed: ..." came on stdout: it is an error text. Docker keeps
   * an exec's Pid after it ends, so Pid 0 says it never ran; Podman reports Pid 0 for every
   * ended exec, so only the codes of a program that could not be run (126, 127) count (the
   * stdin path's twin: lua/sandstack/docker/process.lua). */
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
