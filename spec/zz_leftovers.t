#!/usr/bin/env bash
# Runs last in every mode: no container, network or volume with a sandstack label may remain,
# no nested engine the matrix or the scale-out test started, and no network namespace a test
# made (stand-ins "<project>-inet", the proxy specs' "ssh*" namespaces, the demo's "sandstack-*"), and
# no stack's control directory under /run/sandstack (a stack's destroy, down or reap removes it).
# What the machine had before the run began is not this run's: run-tests.sh lists it in
# $SANDSTACK_LEFTOVER_BASELINE (one "kind name" a line, kind-free for namespaces and directories,
# written by the same function as below), and only what is new counts. Run alone, without it,
# everything found counts.
baseline=${SANDSTACK_LEFTOVER_BASELINE:-/dev/null}
# shellcheck source=spec/support/leftovers.sh
. "$(dirname "$0")/support/leftovers.sh"
new_of() { # KIND: the objects of KIND now that the baseline did not have
  leftovers_of "$1" | grep -vxF -f <(grep "^$1 " "$baseline" 2>/dev/null | cut -d' ' -f2-; echo "//none") || true
}
report() { # N WHAT HINT: ok when nothing new of WHAT is left
  local left
  left=$(new_of "$2")
  if [ -z "$left" ]; then echo "ok $1 - no $2 left"
  else echo "not ok $1 - $(printf '%s\n' "$left" | wc -l) $2 left ($3): $(printf '%s\n' "$left" | head -5 | tr '\n' ' ')"; fi
}
echo "1..6"
report 1 containers "docker ps -a --filter label=io.sandstack.project"
report 2 networks "docker network ls --filter label=io.sandstack.project"
report 3 volumes "docker volume ls --filter label=io.sandstack.project"
report 4 nested-engines "docker ps -a --filter label=io.sandstack.test=nested-engine (or =fresh-machine)"
report 5 namespaces "ip netns list: sstest-*, ssh*, sandstack-*"
report 6 control-directories "under /run/sandstack"
