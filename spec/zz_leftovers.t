#!/usr/bin/env bash
# Runs last in every mode: no container, network or volume with a sandstack label may remain,
# no nested engine the matrix or the scale-out test started, and no network namespace a test
# made (stand-ins "<project>-inet", the proxy specs' "ssh*" namespaces, the demo's "sandstack-*"), and
# no stack's control directory under /run/sandstack (a stack's destroy, down or reap removes it).
echo "1..6"
n=1
for kind in "ps -aq" "network ls -q" "volume ls -q"; do
  # shellcheck disable=SC2086 # $kind is a subcommand and its flag, split on purpose
  left=$(docker $kind --filter label=io.sandstack.project 2>/dev/null | wc -l)
  if [ "$left" -eq 0 ]; then echo "ok $n - no labelled ${kind%% *} objects left"
  else echo "not ok $n - $left labelled objects left by: docker $kind --filter label=io.sandstack.project"; fi
  n=$((n + 1))
done
left=$(( $(docker ps -aq --filter label=io.sandstack.test=nested-engine 2>/dev/null | wc -l) +
          $(docker ps -aq --filter label=io.sandstack.test=fresh-machine 2>/dev/null | wc -l) ))
if [ "$left" -eq 0 ]; then echo "ok $n - no nested engine or fresh machine left running"
else echo "not ok $n - $left left: docker ps -a --filter label=io.sandstack.test=nested-engine (or =fresh-machine)"; fi
n=$((n + 1))
left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^(sstest-|ssh[0-9]|sandstack-)' || true)
if [ -z "$left" ]; then echo "ok $n - no test network namespace left"
else echo "not ok $n - network namespaces left: ${left//$'\n'/ }"; fi
n=$((n + 1))
left=$(find /run/sandstack -mindepth 1 -maxdepth 1 2>/dev/null | head -5 || true)
if [ -z "$left" ]; then echo "ok $n - no control directory left under /run/sandstack"
else echo "not ok $n - control directories left: ${left//$'\n'/ }"; fi
