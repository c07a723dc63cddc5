# Installing: `cmake --install`, or LuaRocks through rockspec/sandstack-scm-1.rockspec, which
# passes LUA_INCDIR, LIBDIR, LUADIR and BINDIR.
#
# The Lua the module is built for decides where it goes and what comes with it. The command
# (bin/sandstack) and sandstack-proxy belong to a Lua 5.4 install: the command runs under lua5.4.
# A LuaJIT install (for nginx's LuaJIT, which reads lib/lua/5.1 and share/lua/5.1) holds the
# module alone, so installing both never puts two owners on the same command.
if(LUA_INCDIR)
  file(STRINGS "${LUA_INCDIR}/lua.h" lua_version_num REGEX "^#define[ \t]+LUA_VERSION_NUM[ \t]+[0-9]+")
  string(REGEX MATCH "[0-9]+$" lua_version_num "${lua_version_num}")
elseif(SANDSTACK_LUA STREQUAL "luajit")
  set(lua_version_num 501)
else()
  set(lua_version_num 504)
endif()
if(NOT lua_version_num MATCHES "^50[1-4]$")
  message(FATAL_ERROR "no LUA_VERSION_NUM in ${LUA_INCDIR}/lua.h: LUA_INCDIR must hold the headers of Lua 5.4 or LuaJIT")
endif()
string(REGEX REPLACE "^50" "5." lua_abi "${lua_version_num}") # 504 -> 5.4, 501 -> 5.1
set(install_programs OFF)
if(lua_abi STREQUAL "5.4")
  set(install_programs ON)
endif()

if(NOT DEFINED LIBDIR)
  set(LIBDIR "${CMAKE_INSTALL_PREFIX}/lib/lua/${lua_abi}")
endif()
if(NOT DEFINED LUADIR)
  set(LUADIR "${CMAKE_INSTALL_PREFIX}/share/lua/${lua_abi}")
endif()
# The programs beside the `sandstack` command (LuaRocks passes BINDIR): `sandstack images` finds
# sandstack-proxy there to build the sandstack/proxy image.
if(NOT DEFINED BINDIR)
  set(BINDIR "${CMAKE_INSTALL_PREFIX}/bin")
endif()

# SANDSTACK_PREBUILT, from the environment (LuaRocks hands CMake only the rockspec's variables):
# a build directory of this source tree, for the same Lua, neither sanitized nor fuzzing, whose
# core.so and sandstack-proxy are installed as they are. bootstrap.sh installs so the build it
# has just made, the one the demo and the tests run, without compiling it a second time (the
# rockspec then skips its build pass, and install does not depend on `all`).
set(prebuilt "$ENV{SANDSTACK_PREBUILT}")
if(prebuilt)
  get_filename_component(prebuilt "${prebuilt}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
  if(NOT EXISTS "${prebuilt}/CMakeCache.txt" OR NOT EXISTS "${prebuilt}/sandstack/core.so")
    message(FATAL_ERROR "SANDSTACK_PREBUILT=${prebuilt} is not a finished build directory (no sandstack/core.so)")
  endif()
  load_cache("${prebuilt}" READ_WITH_PREFIX pb_ SANDSTACK_LUA SANDSTACK_SANITIZE SANDSTACK_FUZZ CMAKE_HOME_DIRECTORY)
  set(want_lua "lua5.4")
  if(NOT lua_abi STREQUAL "5.4")
    set(want_lua "luajit")
  endif()
  get_filename_component(pb_home "${pb_CMAKE_HOME_DIRECTORY}" REALPATH)
  get_filename_component(here "${CMAKE_SOURCE_DIR}" REALPATH)
  if(NOT pb_SANDSTACK_LUA STREQUAL want_lua OR pb_SANDSTACK_SANITIZE OR pb_SANDSTACK_FUZZ OR NOT pb_home STREQUAL here)
    message(FATAL_ERROR "SANDSTACK_PREBUILT=${prebuilt} is not a plain ${want_lua} build of ${here}"
      " (it is ${pb_SANDSTACK_LUA} of ${pb_home}, sanitize ${pb_SANDSTACK_SANITIZE}, fuzz ${pb_SANDSTACK_FUZZ})")
  endif()
  set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)
  install(FILES "${prebuilt}/sandstack/core.so" DESTINATION "${LIBDIR}/sandstack")
  if(install_programs)
    install(PROGRAMS "${prebuilt}/sandstack-proxy" DESTINATION "${BINDIR}")
  endif()
else()
  install(TARGETS sandstack_lua LIBRARY DESTINATION "${LIBDIR}/sandstack")
  if(install_programs)
    install(TARGETS sandstack-proxy RUNTIME DESTINATION "${BINDIR}")
  endif()
endif()

# The Lua half, every file of lua/ (sandstack.gateway and its modules included: nginx loads them).
install(DIRECTORY lua/ DESTINATION "${LUADIR}" FILES_MATCHING PATTERN "*.lua")
if(install_programs)
  # LuaRocks wraps the command so that it finds the tree it was installed in.
  install(PROGRAMS bin/sandstack DESTINATION "${BINDIR}")
  # The gateway console's files (vendor/ once scripts/vendor-console.sh ran), which `sandstack
  # gateway` serves: gateway/console.lua finds them at <prefix>/share/sandstack/console beside
  # share/lua/5.x, or in a LuaRocks tree under the rock's own directory.
  install(DIRECTORY web/console/ DESTINATION "${CMAKE_INSTALL_PREFIX}/share/sandstack/console")
endif()
