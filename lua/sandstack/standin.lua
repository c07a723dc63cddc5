-- The "internet" stand-in of `sandstack conform` and the tests, shipped in the module so that an
-- installed rock needs no file from the source tree: a network namespace joined to the host by
-- a veth, with an address in 198.51.100.0/30 on both ends and only that /30 routed inside. Like
-- the internet, it can answer only traffic that was NATed to the host's end (198.51.100.1): a
-- packet from a container address gets no route back. A TCP listener inside answers with a
-- fixed line, so a probe can tell it from anything else. Needs root, iproute2, socat and bash.
--   local standin = require "sandstack.standin"
--   local addr, err = standin.up(name, port)   -- "198.51.100.2"
--   standin.down(name)
-- spec/support/inet_standin.sh runs the same script from a shell.
local M = {}

M.ADDR = "198.51.100.2"

M.script = [=[
set -euo pipefail
cmd=${1:?up|down} name=${2:?name}
short=$(printf '%s' "$name" | md5sum | cut -c1-8)
host_if="si${short}h" ns_if="si${short}n"
case "$cmd" in
  up)
    port=${3:?port}
    ip netns add "$name"
    ip link add "$host_if" type veth peer name "$ns_if"
    ip link set "$ns_if" netns "$name"
    ip addr add 198.51.100.1/30 dev "$host_if"
    ip link set "$host_if" up
    ip netns exec "$name" ip addr add 198.51.100.2/30 dev "$ns_if"
    ip netns exec "$name" ip link set "$ns_if" up
    ip netns exec "$name" ip link set lo up
    # the listener answers with a fixed line, so a test can tell it from anything else
    ip netns exec "$name" setsid socat TCP-LISTEN:"$port",fork,reuseaddr SYSTEM:'echo inet-standin' \
      </dev/null >/dev/null 2>&1 &
    echo $! >"/run/sandstack-standin-$name.pid"
    for _ in $(seq 1 50); do
      ip netns exec "$name" bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null && break
      sleep 0.1
    done
    echo 198.51.100.2 ;;
  down)
    if [ -f "/run/sandstack-standin-$name.pid" ]; then
      kill "$(cat "/run/sandstack-standin-$name.pid")" 2>/dev/null || true
      rm -f "/run/sandstack-standin-$name.pid"
    fi
    ip link del "$host_if" 2>/dev/null || true
    ip netns del "$name" 2>/dev/null || true ;;
  *) echo "usage: $0 up NAME PORT | down NAME" >&2; exit 2 ;;
esac
]=]

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function run(args)
  local p = io.popen("bash -c " .. q(M.script) .. " sandstack-standin " .. args .. " 2>&1")
  local out = p:read("*a")
  local ok = p:close()
  return ok, out
end

-- Brings the stand-in up as network namespace `name`, listening on port. Returns its address,
-- or nil and the script's output (then whatever it made is removed again).
function M.up(name, port)
  local ok, out = run(("up %s %d"):format(q(name), port))
  if not ok or not out:find(M.ADDR, 1, true) then
    M.down(name)
    return nil, out
  end
  return M.ADDR
end

function M.down(name) run("down " .. q(name)) end

return M
