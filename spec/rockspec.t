#!/usr/bin/env bash
# The rockspec builds and installs offline with Debian's luarocks, and the installed module and
# CLI load from that tree (Lua 5.4); the LuaJIT install (for nginx) holds the module alone and
# leaves the 5.4 command in place; bootstrap.sh's install (SANDSTACK_PREBUILT) installs the build
# it names as it is, and refuses a build for another Lua; `sandstack conform` from the installed
# tree runs every probe, the outside stand-in included, with no file of the source tree (run
# from /, the source copy removed).
echo "1..6"
top=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d /tmp/sandstack-rocktree.XXXXXX)
pbtree=$(mktemp -d /tmp/sandstack-rockpb.XXXXXX)
src=$(mktemp -d /tmp/sandstack-rocksrc.XXXXXX)
trap 'rm -rf "$tree" "$pbtree" "$src"' EXIT
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
make_rock() { # make_rock DIR TREE LUA-VERSION [VAR=VALUE...]: luarocks make in DIR, its output in TREE.log
  (cd "$1" && luarocks --lua-version="$3" make --tree="$2" --deps-mode=none \
    rockspec/sandstack-scm-1.rockspec CURL_INCDIR="/usr/include/$multiarch" "${@:4}") >"$2.log" 2>&1
}
# Build from a copy of the tracked tree so the developer's build dirs are not reused.
(cd "$top" && git ls-files -z | xargs -0 cp --parents -t "$src" 2>/dev/null) || cp -r "$top"/. "$src"
if make_rock "$src" "$tree" 5.4; then
  echo "ok 1 - luarocks make builds and installs offline"
else
  echo "not ok 1 - luarocks make failed"; sed 's/^/# /' "$tree.log" | tail -20
fi
rm -f "$tree.log"
# (LUA_PATH also names /usr/local, where bootstrap.sh installs: the module must come from $tree)
eval "$(luarocks --lua-version=5.4 --tree="$tree" path)"
v=$(cd / && lua5.4 -e 'local s = require "sandstack"; assert(s.core and s.VERSION); io.write(s.VERSION, " ",
  package.searchpath("sandstack", package.path), " ", package.searchpath("sandstack.core", package.cpath))' 2>&1)
if [[ "$v" =~ ^[0-9]+\.[0-9]+\.[0-9]+\ $tree/share/lua/5\.4/sandstack/init\.lua\ $tree/lib/lua/5\.4/sandstack/core\.so$ ]]; then
  echo "ok 2 - installed module loads from the tree (version ${v%% *})"
else echo "not ok 2 - installed module does not load from the tree: $v"; fi
if [ -x "$tree/bin/sandstack" ] && (cd / && "$tree/bin/sandstack" --help) >/dev/null 2>&1; then
  echo "ok 3 - installed sandstack CLI runs"
else echo "not ok 3 - installed sandstack CLI missing or failing"; fi

# The LuaJIT install into the same tree: lib/lua/5.1 and share/lua/5.1, no program (the command
# runs under lua5.4: a second owner would replace its wrapper with one for an absent lua5.1).
if [ ! -e /usr/include/luajit-2.1/luajit.h ] || ! command -v luajit >/dev/null; then
  echo "ok 4 - the LuaJIT install # SKIP needs luajit and its headers (libluajit2-5.1-dev)"
elif ! make_rock "$src" "$tree" 5.1 LUA_INCDIR=/usr/include/luajit-2.1; then
  echo "not ok 4 - luarocks --lua-version=5.1 make failed"; sed 's/^/# /' "$tree.log" | tail -20
else
  jv=$(cd / && LUA_PATH="$tree/share/lua/5.1/?.lua;$tree/share/lua/5.1/?/init.lua" LUA_CPATH="$tree/lib/lua/5.1/?.so" \
    luajit -e 'local s = require "sandstack"; assert(s.core and s.VERSION); io.write(s.VERSION)' 2>&1)
  wrapper=$(cat "$tree/bin/sandstack" 2>/dev/null)
  if [[ "$jv" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] && [[ "$wrapper" == *lua5.4* ]] && [[ "$wrapper" != *lua5.1* ]] &&
      (cd / && "$tree/bin/sandstack" --help) >/dev/null 2>&1 &&
      [ ! -e "$tree/lib/luarocks/rocks-5.1/sandstack/scm-1/bin" ]; then
    echo "ok 4 - the LuaJIT install loads in luajit (version $jv) and leaves the 5.4 command in place"
  else
    echo "not ok 4 - the LuaJIT install: luajit said: $jv"
    # shellcheck disable=SC2001 # a prefix on every line of a multi-line text
    sed 's/^/# /' <<<"$wrapper"; find "$tree/lib/luarocks/rocks-5.1/sandstack/scm-1/bin" 2>&1 | sed 's/^/# bin: /'
  fi
fi
rm -f "$tree.log"

# bootstrap.sh's install: SANDSTACK_PREBUILT=build in the checkout installs build/'s own core.so
# and sandstack-proxy byte for byte (compiling nothing), and a build for another Lua is refused.
if [ ! -f "$top/build/sandstack/core.so" ] || [ ! -x "$top/build/sandstack-proxy" ]; then
  echo "ok 5 - the prebuilt install # SKIP no build/ in the checkout (cmake --build build)"
elif ! SANDSTACK_PREBUILT=build make_rock "$top" "$pbtree" 5.4; then
  echo "not ok 5 - SANDSTACK_PREBUILT=build luarocks make failed"; sed 's/^/# /' "$pbtree.log" | tail -20
else
  refused=skipped
  if [ -e /usr/include/luajit-2.1/luajit.h ]; then
    if SANDSTACK_PREBUILT=build make_rock "$top" "$pbtree" 5.1 LUA_INCDIR=/usr/include/luajit-2.1; then refused=no
    elif grep -q "is not a plain luajit build" "$pbtree.log"; then refused=yes
    else refused="no: $(tail -5 "$pbtree.log" | tr '\n' ' ')"; fi
  fi
  if cmp -s "$top/build/sandstack/core.so" "$pbtree/lib/lua/5.4/sandstack/core.so" &&
      cmp -s "$top/build/sandstack-proxy" "$pbtree/bin/sandstack-proxy" && [ -x "$pbtree/bin/sandstack" ] &&
      [ "$refused" != no ] && [[ "$refused" != no:* ]]; then
    echo "ok 5 - the prebuilt install holds build/'s own files (a build for another Lua refused: $refused)"
  else
    echo "not ok 5 - the prebuilt install (a build for another Lua refused: $refused)"
    find "$pbtree/lib/lua/5.4/sandstack" "$pbtree/bin" 2>&1 | sed 's/^/# /'
  fi
fi
rm -f "$pbtree.log"

rm -rf "$src"
if [ "$(id -u)" = 0 ] && curl -sf --max-time 3 --unix-socket /var/run/docker.sock http://d/_ping >/dev/null 2>&1; then
  out=$(cd / && "$tree/bin/sandstack" conform 2>&1)
  rc=$?
  if [ "$rc" = 0 ] && ! grep -q "SKIP" <<<"$out" && grep -q "stand-in" <<<"$out" && grep -q "^# engine " <<<"$out"; then
    echo "ok 6 - installed sandstack conform runs every probe ($(grep -c '^ok' <<<"$out") passed, none skipped)"
  else
    echo "not ok 6 - installed sandstack conform (exit $rc)"
    # shellcheck disable=SC2001 # a prefix on every line of a multi-line text: sed says it plainly
    sed 's/^/# /' <<<"$out" | tail -30
  fi
else
  echo "ok 6 - installed sandstack conform # SKIP needs root and a Docker engine"
fi
