/* The requests h:exec makes besides its start (engine_exec.c) and the command's clock both of
 * its starts keep (engine_exec.c without stdin, engine_exec_stdin.c with it): each request runs
 * to its end under the run's bounds and is settled by the one settle layer (engine_settle.c);
 * the clock polls the exec's /json until its process runs, then gives the command its time. */
#include <string.h>

#include "lua/engine_exec.h"
#include "lua/engine_handle.h"
#include "util/clock.h"

/* What a request may take: the timeout, never past the deadline, and never nothing. */
static double left(const ss_exec_run *x) {
  double l = x->deadline - ss_monotonic_now();
  if (l > x->timeout) l = x->timeout;
  return l > 0.001 ? l : 0.001;
}

/* Runs a request to its end and pushes its settled result {ok=, status=, body=, err=} (the one
 * settle layer, engine_settle.c); returns ok. With keep, the finished transfer is handed back
 * (the caller frees it) for what settling leaves out: an exec stream's stdout and stderr. */
int ss_exec_call(lua_State *L, sse_client *c, const sse_spec *spec, const char *path, sse_result **keep) {
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

sse_spec ss_exec_buffered(const ss_exec_run *x, const char *method, const char *target, const char *body) {
  sse_spec spec = {.method = method, .target = target, .body = body, .body_len = body ? strlen(body) : 0,
                   .timeout = left(x), .max_bytes = x->max_bytes, .mode = SSE_BODY_BUFFER, .fd = -1};
  return spec;
}

/* The settled body on top of the stack has field `key` of Lua type `type`: pushes it and
 * returns 1, else pushes nothing. */
int ss_exec_body_field(lua_State *L, const char *key, int type) {
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

/* The process of exec `id` has run: its Pid is known, or it has an exit code. Docker answers
 * Running as soon as it accepts the start, before runc has made the process (seconds later on a
 * loaded host), so Running is not the sign; the Pid is set once the process exists. 1 when it
 * ran, 0 not yet, -1 when the read failed. */
static int process_ran(lua_State *L, ss_exec_run *x, const char *path, const char *target) {
  int base = lua_gettop(L);
  sse_spec spec = ss_exec_buffered(x, "GET", target, NULL);
  int ran = -1;
  if (ss_exec_call(L, x->c, &spec, path, NULL)) {
    ran = 0;
    if (ss_exec_body_field(L, "Pid", LUA_TNUMBER)) {
      ran = lua_tonumber(L, -1) > 0;
      lua_pop(L, 1);
    }
    if (!ran && ss_exec_body_field(L, "ExitCode", LUA_TNUMBER)) ran = 1;
  }
  lua_settop(L, base);
  return ran;
}

/* A poll of the process's state begins this long after the start: most commands have ended by
 * then and pay no poll. The pause between polls then doubles up to START_POLL_MAX, which bounds
 * how much longer than its timeout a command that ran between two polls may run. */
#define START_POLL_FIRST 0.05
#define START_POLL_MAX 0.1

void ss_exec_clock_start(ss_exec_clock *k, double request_timeout, double timeout, const char *jpath,
                         const char *jtarget) {
  double now = ss_monotonic_now();
  *k = (ss_exec_clock){.run_for = request_timeout, .run_wait = now + request_timeout, .end = -1,
                       .pause = START_POLL_FIRST, .next_poll = now + START_POLL_FIRST, .timeout = timeout,
                       .jpath = jpath, .jtarget = jtarget};
}

double ss_exec_clock_until(const ss_exec_clock *k) {
  return k->end >= 0 ? k->end : k->next_poll < k->run_wait ? k->next_poll : k->run_wait;
}

int ss_exec_clock_tick(lua_State *L, ss_exec_run *x, ss_exec_clock *k) {
  double now = ss_monotonic_now();
  if (k->end < 0 && now >= k->run_wait) k->end = now; /* never ran within the client's timeout */
  if (k->end >= 0 && now >= k->end) return 1;
  if (k->end < 0 && now >= k->next_poll) {
    int ran = process_ran(L, x, k->jpath, k->jtarget);
    if (ran != 0) k->end = now + k->timeout; /* a failed read: count from here, as without polls */
    k->pause = k->pause * 2 < START_POLL_MAX ? k->pause * 2 : START_POLL_MAX;
    k->next_poll = ss_monotonic_now() + k->pause;
  }
  return 0;
}

double ss_exec_clock_ran_by(const ss_exec_clock *k) { return k->end >= 0 ? k->end : ss_monotonic_now() + k->timeout; }

void ss_exec_ran_past(ss_error *err, const char *spath, double timeout) {
  ss_error_set(err, "transport", "timeout", "POST %s: the command ran past %gs", spath, timeout);
  ss_error_field_str(err, "method", "POST");
  ss_error_field_str(err, "path", spath);
}
