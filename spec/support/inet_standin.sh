#!/usr/bin/env bash
# The outside stand-in from a shell (tests, the demo). The script ships in the module,
# lua/sandstack/standin.lua, so `sandstack conform` from an installed rock has it too.
#   inet_standin.sh up NAME PORT     prints "198.51.100.2"
#   inet_standin.sh down NAME
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
script=$(LUA_PATH="$top/lua/?.lua;;" lua5.4 -e 'io.write(require("sandstack.standin").script)')
exec bash -c "$script" inet_standin.sh "$@"
