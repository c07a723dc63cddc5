/* Test-only Lua module sandstack_test.inherit (built into <build dir>/sandstack_test/, never
 * installed). It opens what a host process holds and children would inherit: a listening TCP
 * socket on 127.0.0.1 without close-on-exec, as nginx's listeners and a gateway's own sockets
 * are. spec/sbx_unit_spec.lua shows the subprocess runner passes none of them on. (The shipped
 * module's core.tcp_listen is close-on-exec, so it cannot stand in for one.) */
#include <arpa/inet.h>
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* inherit.listen() -> fd (an inheritable listening socket), or raises. */
static int l_listen(lua_State *L) {
  int fd = socket(AF_INET, SOCK_STREAM, 0); /* no SOCK_CLOEXEC: the point of the probe */
  if (fd < 0) return luaL_error(L, "socket: %s", strerror(errno));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 4) != 0) {
    int e = errno;
    close(fd);
    return luaL_error(L, "listen: %s", strerror(e));
  }
  lua_pushinteger(L, fd);
  return 1;
}

/* inherit.close(fd) */
static int l_close(lua_State *L) {
  close((int)luaL_checkinteger(L, 1));
  return 0;
}

int luaopen_sandstack_test_inherit(lua_State *L) {
  lua_newtable(L);
  lua_pushcfunction(L, l_listen);
  lua_setfield(L, -2, "listen");
  lua_pushcfunction(L, l_close);
  lua_setfield(L, -2, "close");
  return 1;
}
