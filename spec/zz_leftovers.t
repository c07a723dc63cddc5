#!/usr/bin/env bash
# Runs last in every mode: no container, network or volume with a sandstack label may remain.
echo "1..3"
n=1
for kind in "ps -aq" "network ls -q" "volume ls -q"; do
  left=$(docker $kind --filter label=io.sandstack.project 2>/dev/null | wc -l)
  if [ "$left" -eq 0 ]; then echo "ok $n - no labelled ${kind%% *} objects left"
  else echo "not ok $n - $left labelled objects left by: docker $kind --filter label=io.sandstack.project"; fi
  n=$((n + 1))
done
