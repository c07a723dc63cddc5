/* Binding for the readiness probe (csrc/probe):
 *   core.http_probe(url, {timeout = s, max_bytes = n}) -> {status =, bytes =, truncated =}
 *                                                       or nil, err (invalid, timeout, transport)
 * Wrong types, unknown keys and a timeout that is not > 0 raise (programming errors); a URL
 * that is not plain http:// is a returned `invalid` error, since it may come from a config.
 *   core.http_wait(url, {timeout = s | deadline = t, slice =, attempt_cap =, min_attempt =,
 *                        pause =, max_bytes =}) -> ready, last, deadline, now, answer
 * (answer: "HTTP <status>" of this call's last attempt that got one, or nil)
 * probes until 2xx, the deadline (absolute monotonic; else now + timeout) or the slice's end
 * (csrc/probe/http_wait.c): the readiness wait, one call for an agent that is up. */
#include <math.h>

#include "lua/binding.h"
#include "probe/http_probe.h"
#include "probe/http_wait.h"

/* Largest body a caller may ask to read: the bytes are dropped, so this bounds time, not memory. */
#define PROBE_MAX_BYTES_LIMIT (16.0 * 1024 * 1024)

static int l_http_probe(lua_State *L) {
  const char *url = luaL_checkstring(L, 1);
  static const char *const keys[] = {"timeout", "max_bytes", NULL};
  ss_check_keys(L, 2, keys, "http_probe");
  ss_probe_opts o;
  o.timeout = ss_opt_number(L, 2, "timeout", 5.0);
  double max_bytes = ss_opt_number(L, 2, "max_bytes", (double)SS_PROBE_BODY_DEFAULT);
  luaL_argcheck(L, o.timeout > 0 && isfinite(o.timeout), 2, "timeout must be a finite number > 0");
  luaL_argcheck(L, max_bytes >= 0 && max_bytes <= PROBE_MAX_BYTES_LIMIT && (double)(size_t)max_bytes == max_bytes, 2,
                "max_bytes must be an integer from 0 to 16 MiB");
  o.max_bytes = (size_t)max_bytes;
  ss_probe_result r;
  ss_error err;
  ss_error_init(&err);
  if (ss_http_probe(url, &o, &r, &err) != 0) return ss_push_error(L, &err);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)r.status);
  lua_setfield(L, -2, "status");
  lua_pushinteger(L, (lua_Integer)r.bytes);
  lua_setfield(L, -2, "bytes");
  lua_pushboolean(L, r.truncated);
  lua_setfield(L, -2, "truncated");
  return 1;
}

static double finite_at_least(lua_State *L, const char *key, double def, double min) {
  double v = ss_opt_number(L, 2, key, def);
  if (!(isfinite(v) && v >= min)) luaL_error(L, "http_wait: option '%s' must be a finite number >= %f", key, min);
  return v;
}

static int l_http_wait(lua_State *L) {
  const char *url = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const keys[] = {"timeout", "deadline", "slice", "attempt_cap", "min_attempt", "pause",
                                     "max_bytes", NULL};
  ss_check_keys(L, 2, keys, "http_wait");
  ss_wait_opts o = {
      .slice = finite_at_least(L, "slice", 1, 0),
      .attempt_cap = finite_at_least(L, "attempt_cap", 5, 0.001),
      .min_attempt = finite_at_least(L, "min_attempt", 0.05, 0.001),
      .pause = finite_at_least(L, "pause", 0.02, 0),
      .max_bytes = (size_t)finite_at_least(L, "max_bytes", (double)SS_PROBE_BODY_DEFAULT, 0),
  };
  lua_getfield(L, 2, "deadline");
  if (lua_isnil(L, -1)) o.deadline = ss_monotonic_now() + finite_at_least(L, "timeout", 30, 0);
  else o.deadline = finite_at_least(L, "deadline", 0, 0);
  lua_pop(L, 1);
  ss_wait_result r;
  ss_http_wait(url, &o, &r);
  lua_pushboolean(L, r.ready);
  lua_pushstring(L, r.last);
  lua_pushnumber(L, (lua_Number)o.deadline);
  lua_pushnumber(L, (lua_Number)r.now);
  if (r.answer[0]) lua_pushstring(L, r.answer);
  else lua_pushnil(L);
  return 5;
}

void sandstack_open_probe(lua_State *L) {
  static const luaL_Reg fns[] = {{"http_probe", l_http_probe}, {"http_wait", l_http_wait}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
