#!/usr/bin/env bash
# The README's main job: bring up the demo stack, show the agent answering through the
# forwarder, show from inside the sandbox that the host and the outside stand-in are
# unreachable (while the egress sidecar reaches the stand-in), and tear it all down.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash spec/support/bootstrap.sh

session="demo-$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')"
project="sandstack-$session"
standin="$project-inet"
listener_pid=""
cleanup() {
  if [ -n "$listener_pid" ]; then kill "$listener_pid" 2>/dev/null || true; fi
  bin/sandstack down "$project" >/dev/null 2>&1 || true
  bash spec/support/inet_standin.sh down "$standin" >/dev/null 2>&1 || true
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
probe() { # probe CONTAINER HOST PORT LABEL: a TCP connect attempted from inside CONTAINER
  if docker exec "$1" agent connect "$2" "$3" 1500 >/dev/null 2>&1; then echo "  reachable    $4 ($2:$3)"
  else echo "  unreachable  $4 ($2:$3)"; fi
}

step "the outside stand-in: a network namespace that answers only NATed traffic (198.51.100.2:8099)"
bash spec/support/inet_standin.sh up "$standin" 8099 >/dev/null
echo "  host -> stand-in: $(socat -T2 - TCP:198.51.100.2:8099 </dev/null)"

step "a host service listening on 0.0.0.0"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])')
socat TCP-LISTEN:"$port",fork,reuseaddr SYSTEM:'echo host-service' </dev/null >/dev/null 2>&1 &
listener_pid=$!
echo "  listening on 0.0.0.0:$port"

step "sandstack up examples/demo-stack.lua"
# (not `| tee /dev/stderr`: when stderr is a file, reopening it truncates what came before)
out=$(bin/sandstack up examples/demo-stack.lua --session "$session")
printf '%s\n' "$out"
endpoint=$(printf '%s\n' "$out" | awk '/^endpoint/ { print $2 }')

step "the agent answers through the forwarder at $endpoint"
echo "  GET /health -> $(curl -sS -m 5 "$endpoint/health")"
echo "  first answer ${SECONDS} s after demo.sh started"
answer=$(curl -sS -m 5 -d '{"hello":"agent"}' "$endpoint/v1/messages")
echo "  POST /v1/messages -> ${answer:0:200}"

step "credentials: the sandbox holds a per-session token, the proxy the real key"
docker exec "$project-sandbox" sh -c 'env | grep ^ANTHROPIC_' | sed 's/^/  sandbox: /'
docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$project-proxy" | grep -E '^(ANTHROPIC_API_KEY|SANDSTACK_SESSION_TOKEN)=' | sed 's/^/  proxy:   /'

step "from inside the sandbox"
gw=$(docker network inspect -f '{{range .IPAM.Config}}{{.Subnet}}{{end}}' "$project-sbx" | awk -F'[./]' '{ printf "%s.%s.%s.%d", $1, $2, $3, $4 + 1 }')
probe "$project-sandbox" "$gw" "$port" "host on the sandbox network's gateway"
for a in $(ip -4 -o addr show | awk '$2 != "lo" { split($4, x, "/"); print $2 "=" x[1] }'); do
  probe "$project-sandbox" "${a#*=}" "$port" "host on ${a%%=*}"
done
probe "$project-sandbox" 198.51.100.2 8099 "the outside stand-in"
probe "$project-sandbox" db 5432 "the db sidecar, by name"
probe "$project-sandbox" proxy 3128 "the proxy sidecar, by name"

step "through the egress proxy sandstack added: a CONNECT from the sandbox with its token"
via_proxy() { # via_proxy TARGET: the proxy's answer and what came through the tunnel
  docker exec "$project-sandbox" sh -c 'auth=$(printf "sandstack:%s" "$ANTHROPIC_API_KEY" | base64 -w0)
    { printf "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n" "$1" "$1" "$auth"; sleep 3; } |
    timeout 5 nc proxy 3128' _ "$1" 2>&1 | tr -d '\r' |
    awk -v t="$1" 'NR == 1 { printf "  %-22s %s\n", t, $0 } /inet-standin/ { print "    through the tunnel: " $0 }
      /"decision"/ { match($0, /"decision":"[^"]*"/); print "    " substr($0, RSTART, RLENGTH) }'
}
via_proxy 198.51.100.2:8099            # admitted by egress_policy
via_proxy example.com:443              # no rule admits it: refused before any lookup
step "from the db sidecar (egress = \"none\")"
probe "$project-db" 198.51.100.2 8099 "the outside stand-in"

step "sandstack status $project"
bin/sandstack status "$project"

step "sandstack down $project"
bin/sandstack down "$project"
left=$(( $(docker ps -aq --filter "label=io.sandstack.project=$project" | wc -l) +
         $(docker network ls -q --filter "label=io.sandstack.project=$project" | wc -l) +
         $(docker volume ls -q --filter "label=io.sandstack.project=$project" | wc -l) ))
echo "  objects left with label io.sandstack.project=$project: $left"
[ "$left" -eq 0 ]
