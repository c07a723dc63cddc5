/* The sbx part of the binding: the subprocess runner, the wrapper's texts and parsers, digests.
 * The backend's logic is in lua/sandstack/sbx.lua; this file only moves bytes. */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "lua/binding.h"
#include "sbx/digest.h"
#include "sbx/fsutil.h"
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

/* core.sbx_base64(s) -> base64 text */
static int l_sbx_base64(lua_State *L) {
  size_t n, on;
  const char *s = luaL_checklstring(L, 1, &n);
  char *b = ss_base64(s, n, &on);
  if (!b) return luaL_error(L, "out of memory");
  lua_pushlstring(L, b, on);
  free(b);
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

/* core.sbx_digest(s, nbytes) -> lowercase hex of the first nbytes of SHA-256(s) */
static int l_sbx_digest(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  lua_Integer nb = luaL_optinteger(L, 2, 32);
  luaL_argcheck(L, nb >= 1 && nb <= 32, 2, "between 1 and 32");
  char out[65];
  ss_sha256_hex(s, n, (size_t)nb, out);
  lua_pushstring(L, out);
  return 1;
}

/* core.sbx_listdir(path) -> array of names (without . and ..), or nil, err */
static int l_sbx_listdir(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  DIR *d = opendir(p);
  if (!d) return ss_return_error(L, "sbx", errno == ENOENT ? "not_found" : "io", "%s: %s", p, strerror(errno));
  lua_newtable(L);
  int i = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    lua_pushstring(L, de->d_name);
    lua_rawseti(L, -2, ++i);
  }
  closedir(d);
  return 1;
}

/* core.sbx_mkdir(path, mode) -> true, or nil, err (an existing directory is an error: "exists") */
static int l_sbx_mkdir(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  lua_Integer mode = luaL_optinteger(L, 2, 0700);
  if (mkdir(p, (mode_t)mode) != 0)
    return ss_return_error(L, "sbx", errno == EEXIST ? "exists" : "io", "mkdir %s: %s", p, strerror(errno));
  lua_pushboolean(L, 1);
  return 1;
}

/* core.sbx_rmtree(path) -> true (also when path does not exist), or nil, err: kind "sbx",
 * reason "mount" (a mount point inside), "changing" (the tree kept changing under the walk) or
 * "io", with errno. Never follows a link below path's parent (csrc/sbx/fsutil.c). */
static int l_sbx_rmtree(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  ss_rmtree_fail why;
  if (ss_rmtree(p, &why) == 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  const char *reason = why.err == EXDEV ? "mount" : why.err == ENOTEMPTY ? "changing" : "io";
  ss_error e;
  ss_error_init(&e);
  ss_error_set(&e, "sbx", reason, "remove %s: cannot %s '%s' (depth %zu below it): %s", p, why.step ? why.step : "remove",
               why.name, why.depth, strerror(why.err));
  ss_error_field_num(&e, "errno", why.err);
  ss_error_field_str(&e, "path", p);
  return ss_push_error(L, &e);
}

void sandstack_open_sbx(lua_State *L) {
  static const luaL_Reg fns[] = {{"sbx_run", l_sbx_run},
                                 {"sbx_base64", l_sbx_base64},
                                 {"sbx_split_stderr", l_sbx_split_stderr},
                                 {"sbx_json_start", l_sbx_json_start},
                                 {"sbx_digest", l_sbx_digest},
                                 {"sbx_listdir", l_sbx_listdir},
                                 {"sbx_mkdir", l_sbx_mkdir},
                                 {"sbx_rmtree", l_sbx_rmtree},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  lua_pushstring(L, ss_sbx_wrapper_script);
  lua_setfield(L, -2, "sbx_wrapper_script");
  lua_pushstring(L, ss_sbx_kill_script);
  lua_setfield(L, -2, "sbx_kill_script");
}
