/* core.engine_address([host[, tls]]) -> { host =, unix_path =, base = } | nil, err: the one reading
 * of an Engine address (DOCKER_HOST's forms) for Lua, by the parser the engine client itself uses
 * (engine/host.c). host nil or "": $DOCKER_HOST when it is set and not empty, else the default
 * socket, as `docker` does. unix_path: the socket's path for unix://, nil otherwise (the engine's
 * files are then not this host's); base: scheme://host:port libcurl speaks. A bad address is nil,
 * err (kind "invalid", reason "bad_host"). */
#include <stdlib.h>

#include "engine/host.h"
#include "lua/binding.h"

#define DEFAULT_ENGINE_HOST "unix:///var/run/docker.sock"

static int l_engine_address(lua_State *L) {
  const char *host = luaL_optstring(L, 1, NULL);
  int tls = lua_toboolean(L, 2);
  if (!host || !*host) host = getenv("DOCKER_HOST");
  if (!host || !*host) host = DEFAULT_ENGINE_HOST;
  sse_host h;
  ss_error err;
  ss_error_init(&err);
  if (sse_host_parse(host, tls, &h, &err) != 0) return ss_push_error(L, &err);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, host);
  lua_setfield(L, -2, "host");
  if (h.unix_path[0]) {
    lua_pushstring(L, h.unix_path);
    lua_setfield(L, -2, "unix_path");
  }
  lua_pushstring(L, h.base);
  lua_setfield(L, -2, "base");
  return 1;
}

void sandstack_open_engine_address(lua_State *L) {
  static const luaL_Reg fns[] = {{"engine_address", l_engine_address}, {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
}
