/* Test-only Lua module sandstack_test.fileplane_bench (built into <build dir>/sandstack_test/,
 * never installed): the baseline of bench/fileplane_bench.lua. Plain syscalls on a host path
 * with no plane in between, behind the same Lua-to-C call as the plane's methods. */
#include <fcntl.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* plain(op, host_path [, data_or_size]): lstat ("stat" -> boolean), open+read+close ("read" ->
 * the bytes, or nil) or open(O_TRUNC)+write+close ("write" -> boolean). */
static int l_plain(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  const char *path = luaL_checkstring(L, 2);
  if (strcmp(op, "stat") == 0) {
    struct stat st;
    lua_pushboolean(L, lstat(path, &st) == 0);
    return 1;
  }
  if (strcmp(op, "write") == 0) {
    size_t n;
    const char *data = luaL_checklstring(L, 3, &n);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ssize_t w = fd >= 0 ? write(fd, data, n) : -1;
    if (fd >= 0) close(fd);
    lua_pushboolean(L, w == (ssize_t)n);
    return 1;
  }
  if (strcmp(op, "read") != 0) return luaL_argerror(L, 1, "stat, read or write");
  lua_Integer n = luaL_optinteger(L, 3, 65536);
  luaL_argcheck(L, n > 0 && n <= 16 * 1024 * 1024, 3, "size out of range");
  char *buf = malloc((size_t)n);
  if (!buf) return luaL_error(L, "out of memory");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t r = fd >= 0 ? read(fd, buf, (size_t)n) : -1;
  if (fd >= 0) close(fd);
  if (r >= 0) lua_pushlstring(L, buf, (size_t)r);
  else lua_pushnil(L);
  free(buf);
  return 1;
}

int luaopen_sandstack_test_fileplane_bench(lua_State *L) {
  static const luaL_Reg fns[] = {{"plain", l_plain}, {NULL, NULL}};
  lua_newtable(L);
  luaL_setfuncs(L, fns, 0);
  return 1;
}
