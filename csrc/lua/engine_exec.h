#ifndef SANDSTACK_LUA_ENGINE_EXEC_H
#define SANDSTACK_LUA_ENGINE_EXEC_H
/* What h:exec (engine_exec.c) shares with its stdin half (engine_exec_stdin.c): the requests'
 * bounds and the command's clock (engine_exec_clock.c: its time counts from its process
 * running, seen by polling the exec's /json), and the hijacked start that writes stdin. Internal
 * to csrc/lua. Calls go one way: engine_exec.c to the other two, engine_exec_stdin.c to the
 * clock. */
#include "engine/client.h"
#include "engine/demux.h"
#include "lua/binding.h"

typedef struct ss_exec_run {
  sse_client *c;
  double timeout, deadline;
  size_t max_bytes; /* the budget of a buffered answer (the client's) */
} ss_exec_run;

/* A request run to its end under x's bounds (engine_exec_clock.c): its settled result
 * {ok=, status=, body=, err=} pushed (engine_settle.c), ok returned. With keep, the finished
 * transfer is handed back (the caller frees it). */
int ss_exec_call(lua_State *L, sse_client *c, const sse_spec *spec, const char *path, sse_result **keep);
/* A buffered request of x: the client's budget, a timeout never past x's deadline. */
sse_spec ss_exec_buffered(const ss_exec_run *x, const char *method, const char *target, const char *body);
/* The settled body on top has field `key` of Lua type `type`: pushes it and returns 1, else
 * pushes nothing. */
int ss_exec_body_field(lua_State *L, const char *key, int type);

/* The command's clock: until a poll of jpath (the exec's /json, versioned as jtarget) sees its
 * process run, polls are due from START_POLL_FIRST after the start, the pauses doubling; once it
 * ran (or the engine has had run_wait to run it, or a poll failed), the command has `timeout`
 * seconds. The strings live on the Lua stack while the clock is used. */
typedef struct ss_exec_clock {
  double run_for, run_wait, end, pause, next_poll, timeout;
  const char *jpath, *jtarget;
} ss_exec_clock;

void ss_exec_clock_start(ss_exec_clock *k, double request_timeout, double timeout, const char *jpath,
                         const char *jtarget);
/* When the next thing is due (a poll, the engine's run_wait, or the command's end), monotonic. */
double ss_exec_clock_until(const ss_exec_clock *k);
/* Polls when one is due; 1 when the command's time is up. */
int ss_exec_clock_tick(lua_State *L, ss_exec_run *x, ss_exec_clock *k);
/* When the command's time ends, or was to end (now + timeout when no poll saw it run). */
double ss_exec_clock_ran_by(const ss_exec_clock *k);

/* The error of a command past its time: transport/timeout, naming the start (spath). */
void ss_exec_ran_past(ss_error *err, const char *spath, double timeout);

/* The start with stdin (engine_exec_stdin.c): hijacked over its own connection to cfg's engine
 * (k started again once the engine took it, as the other start's clock starts at its submit), `in` written while the output is read (a command echoing its input never blocks
 * on a full pipe), then a half-close; the framed output demultiplexed into d under its budget
 * until the stream ends or the clock k says the time is up. Returns 1, or 0 with an error
 * object pushed (transport timeout, output_limit, a refused start: d holds the output so far). */
int ss_exec_stdin_run(lua_State *L, ss_exec_run *x, ss_exec_clock *k, const sse_config *cfg, const char *spath,
                      const char *starget, const char *in, size_t in_len, sse_demux *d);

#endif
