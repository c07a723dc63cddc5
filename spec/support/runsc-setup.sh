#!/usr/bin/env bash
# gVisor for `runtime = "runsc"`, as root, idempotent. Called by bootstrap.sh.
#  1. Debian's runsc from bookworm-backports, pinned so that no other package comes from there.
#  2. runtimes.runsc = { path, runtimeArgs = [--platform=systrap, --network=host, --overlay2=none] } merged
#     into /etc/docker/daemon.json; every other key of that file is kept as it was.
#     --network=host: the sandbox's sockets are made by gVisor's Sentry in the container's own
#     network namespace, so Docker's embedded DNS (127.0.0.11, NATed inside that namespace)
#     answers and a stack's service names resolve. gVisor's own stack (netstack, the default)
#     cannot reach it, and with this runsc (0.0~20240729) on Linux >= ~6.8 it does not even
#     start (gvisor#10704). --overlay2=none: the root filesystem's writes reach the container's
#     own layer on the host (by default gVisor keeps them in a sandbox-private overlay), so the
#     engine's archive API, and with it stack:capture, sees what the guest wrote. Measured, and
#     the isolation that remains, in docs/runsc.md.
#  3. Only when the file changed and a dockerd is running: a reload (SIGHUP, which re-reads
#     `runtimes` without touching running containers), then a restart only if the reload did not
#     register the runtime. The restart is of the dockerd bootstrap.sh started (its pid file,
#     started again the same way), or systemd's unit when systemd runs the engine.
#   runsc-setup.sh [--no-engine]   (--no-engine: steps 1-2 only)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
daemon_json=/etc/docker/daemon.json
sources=/etc/apt/sources.list.d/sandstack-bookworm-backports.sources
pin=/etc/apt/preferences.d/sandstack-bookworm-backports
sock=/var/run/docker.sock
dockerd_log=/var/log/sandstack-dockerd.log
touch_engine=1
[ "${1:-}" = "--no-engine" ] && touch_engine=0

# --- 1. the package --------------------------------------------------------------------------
if [ "$(dpkg-query -W -f='${Status}' runsc 2>/dev/null || true)" != "install ok installed" ]; then
  # shellcheck source=spec/support/apt-mirror.sh
  . "$here/apt-mirror.sh"
  mirror=$(apt_mirror)
  [ -n "$mirror" ] || { echo "runsc-setup: no Debian mirror found in /etc/apt" >&2; exit 1; }
  cat >"$sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # backports are NotAutomatic already; the -1 makes "nothing but runsc" a rule, not a default
  cat >"$pin" <<'EOF'
Package: *
Pin: release n=bookworm-backports
Pin-Priority: -1

Package: runsc
Pin: release n=bookworm-backports
Pin-Priority: 500
EOF
  echo "runsc-setup: installing runsc from bookworm-backports"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null
fi
runsc_path=$(command -v runsc)

# --- 2. daemon.json --------------------------------------------------------------------------
mkdir -p "$(dirname "$daemon_json")"
changed=$(python3 - "$daemon_json" "$runsc_path" <<'EOF'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
try:
    with open(path) as f:
        text = f.read()
except FileNotFoundError:
    text = ""
conf = json.loads(text) if text.strip() else {}
if not isinstance(conf, dict):
    sys.exit("runsc-setup: %s is not a JSON object; not touching it" % path)
want = {"path": runsc, "runtimeArgs": ["--platform=systrap", "--network=host", "--overlay2=none"]}
runtimes = conf.setdefault("runtimes", {})
if runtimes.get("runsc") == want:
    print("no")
    sys.exit(0)
runtimes["runsc"] = want
tmp = path + ".sandstack-tmp"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(tmp, path)  # atomic: dockerd never reads a half-written file
print("yes")
EOF
)
echo "runsc-setup: $daemon_json $([ "$changed" = yes ] && echo updated || echo unchanged) ($runsc_path)"
[ "$touch_engine" = 1 ] && [ "$changed" = yes ] || exit 0

# --- 3. tell the engine ----------------------------------------------------------------------
engine_up() { curl -sf --max-time 3 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }
# registered as just written (a reload that has not happened yet shows the old entry)
registered() {
  curl -sf --max-time 5 --unix-socket "$sock" http://d/info | python3 -c '
import json, sys
have = (json.load(sys.stdin).get("Runtimes") or {}).get("runsc") or {}
want = json.load(open(sys.argv[1]))["runtimes"]["runsc"]
sys.exit(have.get("path") != want["path"] or (have.get("runtimeArgs") or []) != want["runtimeArgs"])' "$daemon_json"
}
wait_for() { for _ in $(seq 1 "$2"); do "$1" && return 0; sleep 0.5; done; return 1; }
engine_up || { echo "runsc-setup: no engine running; it reads $daemon_json when it starts"; exit 0; }

systemd_engine=0
if [ -d /run/systemd/system ] && systemctl is-active --quiet docker 2>/dev/null; then systemd_engine=1; fi
pid=$(cat /var/run/docker.pid 2>/dev/null || true)
if [ "$systemd_engine" = 0 ] && ! { [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; }; then
  echo "runsc-setup: the engine on $sock is not a dockerd this script knows how to reload; reload it yourself" >&2
  exit 1
fi

if [ "$systemd_engine" = 1 ]; then systemctl reload docker; else kill -HUP "$pid"; fi
if wait_for registered 20; then echo "runsc-setup: dockerd reloaded, runsc registered"; exit 0; fi

echo "runsc-setup: the reload did not register runsc; restarting dockerd"
if [ "$systemd_engine" = 1 ]; then
  systemctl restart docker
else
  kill -TERM "$pid"
  for _ in $(seq 1 60); do [ -d "/proc/$pid" ] || break; sleep 0.5; done
  [ -d "/proc/$pid" ] && { echo "runsc-setup: dockerd $pid did not stop" >&2; exit 1; }
  # as bootstrap.sh starts it
  # shellcheck disable=SC2086 # the arguments, split on purpose
  setsid nohup dockerd ${SANDSTACK_DOCKERD_ARGS:-} >>"$dockerd_log" 2>&1 </dev/null &
fi
wait_for engine_up 60 || { echo "runsc-setup: dockerd did not come back" >&2; exit 1; }
wait_for registered 20 || { echo "runsc-setup: runsc is still not registered" >&2; exit 1; }
echo "runsc-setup: dockerd restarted, runsc registered"
