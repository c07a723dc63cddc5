# shellcheck shell=bash
# What a test run may leave behind, by kind, one name a line: sourced by spec/zz_leftovers.t and
# by run-tests.sh, which lists the same kinds before the run so that only new ones count.
leftovers_of() {
  case $1 in
    containers) docker ps -a --filter label=io.sandstack.project --format '{{.Names}}' 2>/dev/null ;;
    networks) docker network ls --filter label=io.sandstack.project --format '{{.Name}}' 2>/dev/null ;;
    volumes) docker volume ls -q --filter label=io.sandstack.project 2>/dev/null ;;
    nested-engines)
      docker ps -a --filter label=io.sandstack.test=nested-engine --format '{{.Names}}' 2>/dev/null
      docker ps -a --filter label=io.sandstack.test=fresh-machine --format '{{.Names}}' 2>/dev/null ;;
    namespaces) ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^(sstest-|ssh[0-9]|sandstack-)' ;;
    control-directories) find /run/sandstack -mindepth 1 -maxdepth 1 2>/dev/null ;;
  esac
}
# shellcheck disable=SC2034 # read by the scripts that source this file
leftover_kinds="containers networks volumes nested-engines namespaces control-directories"
