/* Lua binding of the host-side TCP probes (csrc/util/tcp.c), which sandstack.conformance uses
 * in place of LuaSocket:
 *   core.tcp_listen(addr, port) -> listener | nil, err   (port 0: the kernel picks one)
 *   listener:port() -> the bound port    listener:close()  (idempotent; also __gc, __close)
 *   core.tcp_connect(addr, port, timeout) -> true | nil, err (transport: refused, timeout, ...)
 * Addresses are numeric IPv4 or IPv6. A listener is never accepted on: the kernel completes
 * the handshakes, which is all a reachability probe asks. */
#include <unistd.h>

#include "lua/binding.h"
#include "util/tcp.h"

#define LISTENER_MT "sandstack.tcp_listener"

typedef struct {
  int fd; /* -1 once closed */
  int port;
} listener;

static listener *open_listener(lua_State *L) {
  listener *l = luaL_checkudata(L, 1, LISTENER_MT);
  if (l->fd < 0) luaL_error(L, "tcp listener: it is closed");
  return l;
}

static int l_close(lua_State *L) {
  listener *l = luaL_checkudata(L, 1, LISTENER_MT);
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
  return 0;
}

static int l_port(lua_State *L) {
  lua_pushinteger(L, open_listener(L)->port);
  return 1;
}

static int check_port(lua_State *L, int idx) {
  lua_Integer port = luaL_checkinteger(L, idx);
  luaL_argcheck(L, port >= 0 && port <= 65535, idx, "a port between 0 and 65535");
  return (int)port;
}

static int l_tcp_listen(lua_State *L) {
  const char *addr = luaL_checkstring(L, 1);
  int port = check_port(L, 2);
  listener *l = ss_newuserdata(L, sizeof *l);
  l->fd = -1; /* the metatable (and its __gc) comes before the descriptor exists */
  luaL_getmetatable(L, LISTENER_MT);
  lua_setmetatable(L, -2);
  ss_error err;
  ss_error_init(&err);
  l->fd = ss_tcp_listen(addr, port, &l->port, &err);
  if (l->fd < 0) return ss_push_error(L, &err);
  return 1;
}

static int l_tcp_connect(lua_State *L) {
  const char *addr = luaL_checkstring(L, 1);
  int port = check_port(L, 2);
  double timeout = luaL_checknumber(L, 3);
  luaL_argcheck(L, timeout > 0, 3, "a positive number of seconds");
  ss_error err;
  ss_error_init(&err);
  if (ss_tcp_connect(addr, port, timeout, &err) != 0) return ss_push_error(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

void sandstack_open_net(lua_State *L) {
  static const luaL_Reg methods[] = {{"port", l_port}, {"close", l_close}, {NULL, NULL}};
  ss_define_class(L, LISTENER_MT, methods, l_close);
  static const luaL_Reg fns[] = {{"tcp_listen", l_tcp_listen}, {"tcp_connect", l_tcp_connect}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
