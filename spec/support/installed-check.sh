#!/bin/sh
# What the README's main command leaves installed, tried as a user would from a directory of
# their own: from /, with no LUA_PATH or LUA_CPATH, `require "sandstack"` in lua5.4 loads the
# installed module (its C core too), `sandstack --help` runs from PATH, and sandstack-proxy is on
# PATH and runs; where nginx has its Lua module, LuaJIT loads the module too. One line each, "installed: ok WHAT" or "installed: not ok WHAT: WHY"; the exit
# status is the number of failures. spec/fresh_machine.t runs it after examples/demo.sh on the
# fresh machine; bootstrap.sh's install step can be checked with it on any machine.
cd / || exit 1
unset LUA_PATH LUA_CPATH LUA_PATH_5_4 LUA_CPATH_5_4
failed=0
say() { # say ok|not WHAT [WHY]
  if [ "$1" = ok ]; then echo "installed: ok $2"; else echo "installed: not ok $2: $3"; failed=$((failed + 1)); fi
}
if out=$(lua5.4 -e 'local s = require "sandstack"; assert(s.core and s.VERSION)
  io.write(s.VERSION, " from ", package.searchpath("sandstack", package.path), " and ",
    package.searchpath("sandstack.core", package.cpath))' 2>&1); then
  say ok "require \"sandstack\" from / (version $out)"
else say not "require \"sandstack\" from /" "$(printf '%s' "$out" | head -n 3 | tr '\n' ' ')"; fi
cli=$(command -v sandstack || true)
if [ -z "$cli" ]; then say not "sandstack --help on PATH" "no sandstack on PATH ($PATH)"
elif out=$(sandstack --help 2>&1) && printf '%s\n' "$out" | grep -q "sandstack"; then
  say ok "sandstack --help on PATH ($cli)"
else say not "sandstack --help on PATH ($cli)" "$(printf '%s' "$out" | head -n 3 | tr '\n' ' ')"; fi
proxy=$(command -v sandstack-proxy || true)
# without its configuration the proxy runs (its libraries load) and says what is missing, status 2
if [ -z "$proxy" ]; then say not "sandstack-proxy on PATH" "no sandstack-proxy on PATH ($PATH)"
else
  out=$(sandstack-proxy --no-such-option 2>&1); rc=$?
  if [ "$rc" = 2 ] && printf '%s\n' "$out" | grep -q "^sandstack-proxy: "; then say ok "sandstack-proxy on PATH ($proxy)"
  else say not "sandstack-proxy on PATH ($proxy)" "exit $rc: $(printf '%s' "$out" | head -n 3 | tr '\n' ' ')"; fi
fi
# where nginx has its Lua module, bootstrap.sh installs the module for LuaJIT too: LuaJIT's default
# search path, which nginx's `;;` keeps, finds it (luajit2 and nginx's libluajit2 are one build)
if [ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] && command -v luajit >/dev/null; then
  if out=$(luajit -e 'local s = require "sandstack"; assert(s.core and s.VERSION)
    io.write(s.VERSION, " from ", package.searchpath("sandstack.core", package.cpath))' 2>&1); then
    say ok "require \"sandstack\" in LuaJIT, for nginx (version $out)"
  else say not "require \"sandstack\" in LuaJIT, for nginx" "$(printf '%s' "$out" | head -n 3 | tr '\n' ' ')"; fi
fi
exit "$failed"
