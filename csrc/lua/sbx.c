/* The sbx part of the binding: the subprocess runner and the wrapper's texts and parsers. The
 * backend's logic is in lua/sandstack/sbx/; the generic host helpers it uses (base64, SHA-256,
 * directories) are in digest.c and hostfs.c. This file only moves bytes. */
#include "lua/binding.h"
#include "sbx/runner.h"
#include "sbx/wrapper.h"

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

/* core.sbx_run(argv, {timeout=, max_output=, stdin=, env=}) ->
 *   {stdout=, stderr=, exit_code=, signal=, timed_out=, over_limit=} or nil, err */
static int l_sbx_run(lua_State *L) {
  static const char *const keys[] = {"timeout", "max_output", "stdin", "env", NULL};
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
  lua_createtable(L, 0, 6);
  lua_pushlstring(L, r.out, r.out_len);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, r.err, r.err_len);
  lua_setfield(L, -2, "stderr");
  if (r.exited) {
    lua_pushinteger(L, r.exit_code);
    lua_setfield(L, -2, "exit_code");
  }
  if (r.term_signal) {
    lua_pushinteger(L, r.term_signal);
    lua_setfield(L, -2, "signal");
  }
  lua_pushboolean(L, r.timed_out);
  lua_setfield(L, -2, "timed_out");
  lua_pushboolean(L, r.over_limit);
  lua_setfield(L, -2, "over_limit");
  ss_run_result_free(&r);
  return 1;
}

/* core.sbx_split_stderr(stderr, nonce) -> chatter, own_stderr  (nil when the nonce is absent) */
static int l_sbx_split_stderr(lua_State *L) {
  size_t n, nn;
  const char *s = luaL_checklstring(L, 1, &n);
  const char *nonce = luaL_checklstring(L, 2, &nn);
  long off = ss_sbx_split_stderr(s, n, nonce, nn);
  if (off < 0) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushlstring(L, s, (size_t)off - nn - 1);
  lua_pushlstring(L, s + off, n - (size_t)off);
  return 2;
}

/* core.sbx_json_start(s) -> the text from the first line starting with '{', or nil */
static int l_sbx_json_start(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  long off = ss_sbx_json_start(s, n);
  if (off < 0) return 0;
  lua_pushlstring(L, s + off, n - (size_t)off);
  return 1;
}

void sandstack_open_sbx(lua_State *L) {
  static const luaL_Reg fns[] = {{"sbx_run", l_sbx_run},
                                 {"sbx_split_stderr", l_sbx_split_stderr},
                                 {"sbx_json_start", l_sbx_json_start},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  lua_pushstring(L, ss_sbx_wrapper_script);
  lua_setfield(L, -2, "sbx_wrapper_script");
  lua_pushstring(L, ss_sbx_kill_script);
  lua_setfield(L, -2, "sbx_kill_script");
}
