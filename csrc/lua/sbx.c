/* The sbx part of the binding: the subprocess runner and the wrapper's texts and parsers. The
 * backend's logic is in lua/sandstack/sbx/; the generic host helpers it uses (base64, SHA-256,
 * directories) are in digest.c and hostfs.c. This file only moves bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lua/binding.h"
#include "sbx/runner.h"
#include "sbx/wrapper.h"
#include "util/random.h"

/* Reads a Lua array of strings at idx into a NULL-ended vector (strings stay owned by Lua). */
static const char **string_vector(lua_State *L, int idx, const char *what) {
  luaL_checktype(L, idx, LUA_TTABLE);
  size_t n = ss_rawlen(L, idx);
  const char **v = lua_newuserdata(L, (n + 1) * sizeof *v); /* freed by the GC */
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, idx, (lua_Integer)i + 1);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "%s: element %d is not a string", what, (int)i + 1);
    v[i] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  v[n] = NULL;
  return v;
}

/* Pushes a run's result table; stderr from byte `from` on (0: all of it). */
static void push_run_result(lua_State *L, const ss_run_result *r, size_t from) {
  lua_createtable(L, 0, 8);
  lua_pushlstring(L, r->out, r->out_len);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, r->err + from, r->err_len - from);
  lua_setfield(L, -2, "stderr");
  if (r->exited) {
    lua_pushinteger(L, r->exit_code);
    lua_setfield(L, -2, "exit_code");
  }
  if (r->term_signal) {
    lua_pushinteger(L, r->term_signal);
    lua_setfield(L, -2, "signal");
  }
  lua_pushboolean(L, r->timed_out);
  lua_setfield(L, -2, "timed_out");
  lua_pushboolean(L, r->over_limit);
  lua_setfield(L, -2, "over_limit");
}

/* With json = true, the result also carries the JSON answer sbx printed (after any daemon
 * start-up lines, ss_sbx_json_start) decoded as `json`, or `json_error` saying why there is none:
 * the CLI's answer in the same call as its run. */
static void push_json_answer(lua_State *L, const ss_run_result *r) {
  long off = ss_sbx_json_start(r->out, r->out_len);
  if (off < 0) {
    lua_pushliteral(L, "no JSON in the output");
    lua_setfield(L, -2, "json_error");
    return;
  }
  const char *text = r->out + off, *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, r->out_len - (size_t)off, &end, 0);
  if (!j) {
    lua_pushfstring(L, "not valid JSON near byte %d", end ? (int)(end - text) : 0);
    lua_setfield(L, -2, "json_error");
    return;
  }
  ss_json_to_lua(L, j);
  cJSON_Delete(j);
  lua_setfield(L, -2, "json");
}

/* core.sbx_run(argv, {timeout=, max_output=, stdin=, env=, json=}) ->
 *   {stdout=, stderr=, exit_code=, signal=, timed_out=, over_limit=, json=, json_error=} or nil, err */
static int l_sbx_run(lua_State *L) {
  static const char *const keys[] = {"timeout", "max_output", "stdin", "env", "json", NULL};
  lua_settop(L, 2); /* the option readers look at index 2 */
  ss_check_keys(L, 2, keys, "sbx_run");
  const char **argv = string_vector(L, 1, "argv");
  int argv_keep = lua_gettop(L);
  ss_run_opts o = {0};
  o.argv = argv;
  o.timeout = ss_opt_number(L, 2, "timeout", 60);
  double mo = ss_opt_number(L, 2, "max_output", 8 << 20);
  luaL_argcheck(L, mo >= 1 && mo <= 1e12, 2, "max_output out of range");
  o.max_output = (size_t)mo;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "stdin");
    if (lua_type(L, -1) == LUA_TSTRING) o.stdin_data = lua_tolstring(L, -1, &o.stdin_len);
    lua_getfield(L, 2, "env");
    if (!lua_isnil(L, -1)) o.envp = string_vector(L, lua_gettop(L), "env");
  }
  ss_run_result r;
  ss_error e;
  ss_error_init(&e);
  if (ss_run(&o, &r, &e) != 0) return ss_push_error(L, &e);
  (void)argv_keep;
  push_run_result(L, &r, 0);
  if (ss_opt_boolean(L, 2, "json", 0)) push_json_answer(L, &r);
  ss_run_result_free(&r);
  return 1;
}

/* The list at idx as byte strings (kept alive by the list); *n their count. */
static ss_bytes *bytes_vector(lua_State *L, int idx, const char *what, size_t *n) {
  luaL_checktype(L, idx, LUA_TTABLE);
  *n = ss_rawlen(L, idx);
  ss_bytes *v = lua_newuserdata(L, (*n ? *n : 1) * sizeof *v); /* freed by the GC */
  for (size_t i = 0; i < *n; i++) {
    lua_rawgeti(L, idx, (lua_Integer)i + 1);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "%s: element %d is not a string", what, (int)i + 1);
    v[i].p = lua_tolstring(L, -1, &v[i].n);
    lua_pop(L, 1);
  }
  return v;
}

static ss_bytes field_bytes(lua_State *L, int idx, const char *key) {
  ss_bytes b = {NULL, 0};
  lua_getfield(L, idx, key);
  if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "sbx_exec: '%s' must be a string", key);
  b.p = lua_tolstring(L, -1, &b.n); /* kept alive by the job table */
  lua_pop(L, 1);
  return b;
}

/* core.sbx_exec(prefix, {workspace=, mount=, cwd=, env={"K=V"...}|nil, argv=, dir=, timeout=,
 *                        max_output=})
 *   -> {stdout=, stderr=, exit_code=, signal=, timed_out=, over_limit=, ran=, token=} or nil, err
 * One command through the exec wrapper in one call: prefix is `sbx exec -i [-u USER] NAME`; the
 * nonce and the kill token are drawn here, the wrapper's stdin built here (csrc/sbx/wrapper.c),
 * the sbx CLI run by the runner, and its stderr split at the nonce: ran is true when the wrapper
 * started, and stderr is then the command's own; otherwise stderr is sbx's, whole, for the
 * caller's error classifier. token names the command's process group for a kill. */
static int l_sbx_exec(lua_State *L) {
  static const char *const keys[] = {"workspace", "mount", "cwd", "env", "argv", "dir", "timeout", "max_output", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  ss_check_keys(L, 2, keys, "sbx_exec");
  ss_bytes head[3] = {field_bytes(L, 2, "workspace"), field_bytes(L, 2, "mount"), field_bytes(L, 2, "cwd")};
  const char *dir = field_bytes(L, 2, "dir").p;
  size_t nenv = 0, nargv = 0, nprefix = ss_rawlen(L, 1);
  lua_getfield(L, 2, "env");
  ss_bytes *env = lua_isnil(L, -1) ? NULL : bytes_vector(L, lua_gettop(L), "env", &nenv);
  lua_getfield(L, 2, "argv");
  ss_bytes *argv = bytes_vector(L, lua_gettop(L), "argv", &nargv);
  const char **prefix = string_vector(L, 1, "prefix");
  double mo = ss_opt_number(L, 2, "max_output", 8 << 20);
  luaL_argcheck(L, mo >= 1 && mo <= 1e12, 2, "max_output out of range");
  /* nonce: the wrapper's first stderr line, unguessable by the command; token: its group's files */
  char nonce[sizeof "sandstack-" + 32], token[25];
  memcpy(nonce, "sandstack-", sizeof "sandstack-" - 1);
  ss_error e;
  ss_error_init(&e);
  if (ss_random_hex(nonce + sizeof "sandstack-" - 1, 16) != 0 || ss_random_hex(token, 12) != 0) {
    ss_random_error(&e, errno, "sbx exec");
    return ss_push_error(L, &e);
  }
  const char **cmd = lua_newuserdata(L, (nprefix + 8) * sizeof *cmd); /* freed by the GC */
  memcpy(cmd, prefix, nprefix * sizeof *cmd);
  const char *tail[] = {"sh", "-c", ss_sbx_wrapper_script, "sandstack-sbx", nonce, dir, token, NULL};
  memcpy(cmd + nprefix, tail, sizeof tail);
  ss_run_opts o = {.argv = cmd, .timeout = ss_opt_number(L, 2, "timeout", 60), .max_output = (size_t)mo};
  /* nothing below raises until the input is freed */
  o.stdin_data = ss_sbx_wrapper_input(head, env, nenv, argv, nargv, &o.stdin_len);
  if (!o.stdin_data) return ss_return_error(L, "io", "nomem", "sbx exec: out of memory");
  ss_run_result r;
  int rc = ss_run(&o, &r, &e);
  free((char *)o.stdin_data);
  if (rc != 0) return ss_push_error(L, &e);
  long own = r.err_len ? ss_sbx_split_stderr(r.err, r.err_len, nonce, strlen(nonce)) : -1;
  push_run_result(L, &r, own < 0 ? 0 : (size_t)own);
  ss_run_result_free(&r);
  lua_pushboolean(L, own >= 0);
  lua_setfield(L, -2, "ran");
  lua_pushstring(L, token);
  lua_setfield(L, -2, "token");
  return 1;
}

void sandstack_open_sbx(lua_State *L) {
  static const luaL_Reg fns[] = {{"sbx_run", l_sbx_run},
                                 {"sbx_exec", l_sbx_exec},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  lua_pushstring(L, ss_sbx_kill_script);
  lua_setfield(L, -2, "sbx_kill_script");
}
