-- luarocks --lua-version=5.4 make rockspec/sandstack-scm-1.rockspec CURL_INCDIR=/usr/include/x86_64-linux-gnu
-- (for OpenResty's LuaJIT: luarocks --lua-version=5.1 make ... with LUA_INCDIR=/usr/include/luajit-2.1)
rockspec_format = "3.0"
package = "sandstack"
version = "scm-1"
source = { url = "git+file:///dev/null" } -- `luarocks make` builds the working tree and never fetches this
description = {
  summary = "Per-session sandboxes for AI agents: Docker stacks over the Engine API and Docker sbx",
  detailed = [[
A C core with a Lua API (the Lua module links libcurl and cJSON only; the egress
proxy program also libuv): sandstack.docker builds a per-session stack
(sandbox on an internal network, sidecars, a socat forwarder) straight over the Engine API;
sandstack.sbx drives Docker's sbx CLI with host checks, egress allowlists, a bounded exec
wrapper and a symlink-proof workspace file plane.]],
  license = "MIT",
}
-- No Lua rock is needed at run time: the readiness probe, waits and `sandstack conform`'s host
-- listener and connects are in the C core (LuaSocket is not used).
dependencies = { "lua >= 5.1" }
external_dependencies = {
  CURL = { library = "curl" },
  CJSON = { header = "cjson/cJSON.h", library = "cjson" },
  UV = { header = "uv.h", library = "uv" },
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    LUA_INCDIR = "$(LUA_INCDIR)",
    LIBDIR = "$(LIBDIR)",
    LUADIR = "$(LUADIR)",
    BINDIR = "$(BINDIR)", -- sandstack-proxy, beside the CLI (`sandstack images` builds its image from it)
    SANDSTACK_UNIT_TESTS = "OFF", -- the C unit tests are the test command's, not an install's
  },
  -- CMake installs everything (cmake/install.cmake): every file of lua/ into LUADIR, the gateway
  -- included, and for Lua 5.4 the `sandstack` command and sandstack-proxy into BINDIR; a LuaJIT
  -- (5.1) install, for nginx, holds the module alone. Its install target builds what it installs,
  -- so no separate build pass: with SANDSTACK_PREBUILT=<build dir> in the environment it installs
  -- that build's files and compiles nothing (spec/support/bootstrap.sh).
  build_pass = false,
}
test = { type = "command", command = "bash spec/support/run-tests.sh" }
