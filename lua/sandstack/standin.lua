-- The "internet" stand-in of `sandstack conform` and the tests, shipped in the module so that an
-- installed rock needs no file from the source tree: a network namespace joined to the host by
-- a veth, with an address in 198.51.100.0/30 on both ends and only that /30 routed inside. Like
-- the internet, it can answer only traffic that was NATed to the host's end (198.51.100.1): a
-- packet from a container address gets no route back. A TCP listener inside answers with a
-- fixed line, so a probe can tell it from anything else. Needs root, iproute2, socat and bash.
-- With opts.within = "A.B.0.0/16" (a private range) it takes a free /30 of that /16 instead: a
-- lab service at a private address, to try allow_private with (design/proxy.md, "A local stand-in").
--   local standin = require "sandstack.standin"
--   local addr, err = standin.up(name, port)   -- "198.51.100.2"
--   local lab = standin.up(name, port, { within = "10.213.0.0/16" })   -- e.g. "10.213.41.6"
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
    port=${3:?port} within=${4:-}
    ip netns add "$name"
    ip link add "$host_if" type veth peer name "$ns_if"
    ip link set "$ns_if" netns "$name"
    a_host=198.51.100.1 a_ns=198.51.100.2
    ip link set "$host_if" up # (a route through a device that is down is refused)
    if [ -z "$within" ]; then
      ip addr add "$a_host/30" dev "$host_if"
    else
      # a /30 of the /16 "A.B" that no route covers or lies in (an engine's network, another
      # stand-in); the route itself is the claim, which a concurrent run cannot also make
      a_host=
      for _ in $(seq 1 64); do
        n=$(( (RANDOM * 32768 + RANDOM) % 16384 * 4 ))
        net="$within.$((n / 256)).$((n % 256))"
        [ -z "$(ip -4 route show match "$net/30" | grep -v '^default')$(ip -4 route show root "$net/30")" ] || continue
        ip addr add "$within.$((n / 256)).$((n % 256 + 1))/30" dev "$host_if" noprefixroute
        if ip route add "$net/30" dev "$host_if" src "$within.$((n / 256)).$((n % 256 + 1))" 2>/dev/null; then
          a_host=$within.$((n / 256)).$((n % 256 + 1)) a_ns=$within.$((n / 256)).$((n % 256 + 2))
          break
        fi
        ip addr del "$within.$((n / 256)).$((n % 256 + 1))/30" dev "$host_if"
      done
      [ -n "$a_host" ] || { echo "no free /30 in $within.0.0/16" >&2; exit 1; }
    fi
    ip netns exec "$name" ip addr add "$a_ns/30" dev "$ns_if"
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
    echo "$a_ns" ;;
  down)
    if [ -f "/run/sandstack-standin-$name.pid" ]; then
      kill "$(cat "/run/sandstack-standin-$name.pid")" 2>/dev/null || true
      rm -f "/run/sandstack-standin-$name.pid"
    fi
    ip link del "$host_if" 2>/dev/null || true
    ip netns del "$name" 2>/dev/null || true ;;
  *) echo "usage: $0 up NAME PORT [A.B] | down NAME" >&2; exit 2 ;;
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
-- or nil and the script's output (then whatever it made is removed again). opts.within: a /16
-- of a private range ("10.213.0.0/16") to take the address from instead of 198.51.100.0/30.
function M.up(name, port, opts)
  local within = opts and opts.within
  local ab = within and within:match("^(%d+%.%d+)%.0%.0/16$")
  if within and not ab then return nil, "within must be a /16 written A.B.0.0/16, got " .. tostring(within) end
  local ok, out = run(("up %s %d%s"):format(q(name), port, ab and (" " .. ab) or ""))
  local addr = ok and out:match("(%d+%.%d+%.%d+%.%d+)%s*$")
  if not addr or (not ab and addr ~= M.ADDR) then
    M.down(name)
    return nil, out
  end
  return addr
end

function M.down(name) run("down " .. q(name)) end

-- The same stand-in where this process has no shell: a node of a swarm, reached only through
-- its Engine API. A container on the node's host network (so its veth end and its address are
-- the node's, where the node's NAT sends a task's egress) runs this script in the forwarder's
-- image (busybox and socat). The listener gets a network namespace of its own (unshare); its
-- end of the veth is moved there by pid. Removing the container ends every process in it, the
-- namespace with them, and the veth pair with its end: the node keeps nothing (node_down
-- deletes the node's end first, so that holds at once, not when the kernel reaps the namespace). With
-- STANDIN_CERT and STANDIN_KEY (PEM text) a TLS listener on 443 answers too: it appends each
-- request's head to /tmp/requests.log and sends the head back, so a probe sees what arrived.
-- /tmp/ready appears once the plain listener answers on the stand-in's address.
M.node_script = [=[
set -eu
port=$1 hif=$2
if [ -n "${STANDIN_CERT:-}" ]; then
  printf '%s\n' "$STANDIN_CERT" >/tmp/srv.pem
  printf '%s\n' "$STANDIN_KEY" >/tmp/srv.key
  cat >/tmp/answer.sh <<'ANSWER'
head=""
while IFS= read -r l; do
  l=$(printf '%s' "$l" | tr -d '\r')
  [ -z "$l" ] && break
  head="$head$l
"
done
printf '%s' "$head" >>/tmp/requests.log
printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#head}" "$head"
ANSWER
fi
unshare -n sh -c '
  ip link set lo up
  if [ -f /tmp/srv.pem ]; then
    socat OPENSSL-LISTEN:443,cert=/tmp/srv.pem,key=/tmp/srv.key,verify=0,fork,reuseaddr SYSTEM:"sh /tmp/answer.sh" &
  fi
  exec socat TCP-LISTEN:'"$port"',fork,reuseaddr SYSTEM:"echo inet-standin"' &
ns=$!
while [ "$(readlink /proc/$ns/ns/net)" = "$(readlink /proc/self/ns/net)" ]; do sleep 0.05; done
ip link add "$hif" type veth peer name "${hif}p"
echo "$hif" >/tmp/hif
peer=$(ip -o link show "$hif" | sed -n 's/^[0-9]*: [^@]*@\([^:]*\):.*/\1/p')
ip link set "$peer" netns "$ns"
ip addr add 198.51.100.1/30 dev "$hif"
ip link set "$hif" up
nsenter -t "$ns" -n sh -c "ip link set $peer name inet0 && ip addr add 198.51.100.2/30 dev inet0 && ip link set inet0 up"
for _ in $(seq 1 100); do
  if [ "$(nsenter -t "$ns" -n sh -c "nc 198.51.100.2 $port </dev/null" 2>/dev/null)" = inet-standin ]; then
    echo ready >/tmp/ready
    break
  fi
  sleep 0.1
done
wait "$ns"
]=]

-- The body of the stand-in's container on a node (the engine's create): labels given by the
-- caller (the run's project, so its leftover check counts it), the few capabilities it needs
-- and nothing else. tls: { cert =, key = } PEM text, or nil.
function M.node_body(image, port, ifname, labels, tls)
  local env = {}
  if tls then env = { "STANDIN_CERT=" .. tls.cert, "STANDIN_KEY=" .. tls.key } end
  return { Image = image, Entrypoint = { "sh", "-c", M.node_script, "sandstack-standin" },
    Cmd = { tostring(port), ifname }, Env = env, Labels = labels,
    HostConfig = { NetworkMode = "host", CapDrop = { "ALL" },
      -- the veth and its addresses; unshare and nsenter of a network namespace; 443 in it
      CapAdd = { "NET_ADMIN", "SYS_ADMIN", "NET_BIND_SERVICE" },
      SecurityOpt = { "no-new-privileges" }, RestartPolicy = { Name = "no" } } }
end

return M
