#!/usr/bin/env bash
# Every shell script of the repository passes shellcheck (Debian's package), one TAP line per
# script. A warning that is intended is disabled at its line, with a comment that says why.
# It also looks for the pipeline class that once broke the README's commands on a fresh machine:
# a reader that may exit early (head, grep -q/-m, awk ... exit) after a writer, in a script under pipefail.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
if ! command -v shellcheck >/dev/null; then
  echo "1..1"; echo "not ok 1 - shellcheck is not installed (bootstrap.sh --test installs it)"; exit 0
fi
scripts=()
while IFS= read -r f; do scripts+=("$f"); done < <(
  { git ls-files '*.sh' '*.t' 2>/dev/null
    # extensionless scripts with a shell shebang (.ci/run, spec/support/tap-runner, ...)
    git ls-files 2>/dev/null | grep -v '\.[A-Za-z0-9]*$' | while IFS= read -r f; do
      [ -f "$f" ] && head -c 64 "$f" | grep -qE '^#!.*(/|env )(ba|da)?sh\b' && echo "$f"
    done
  } | sort -u)
[ ${#scripts[@]} -gt 0 ] || { echo "1..1"; echo "not ok 1 - found no shell scripts (not a git checkout?)"; exit 0; }
echo "1..$(( ${#scripts[@]} + 1 ))"
n=0
for f in "${scripts[@]}"; do
  n=$((n + 1))
  if out=$(shellcheck -x -f gcc "$f" 2>&1); then echo "ok $n - shellcheck $f"
  else echo "not ok $n - shellcheck $f"; printf '%s\n' "$out" | sed 's/^/# /'; fi
done
n=$((n + 1))
# head/grep -q/grep -m reading from a pipe, in a script that sets pipefail (comments excluded)
early=$(for f in "${scripts[@]}"; do
  grep -qE '^[^#]*set -[a-z]*o pipefail' "$f" || continue
  grep -nE '\|[[:space:]]*(head|grep[[:space:]]+(-[a-zA-Z]*[qm][a-zA-Z]*|--quiet|--max-count))([[:space:]]|$)|\|[[:space:]]*awk[^|]*[^a-z_]exit([^a-z_]|$)' "$f" |
    grep -vE '^[0-9]+:[[:space:]]*#' | sed "s|^|$f:|"
done)
if [ -z "$early" ]; then echo "ok $n - no early-exit reader after a pipe in a pipefail script"
else echo "not ok $n - early-exit readers after a pipe under pipefail (SIGPIPE -> 141):"; printf '%s\n' "$early" | sed 's/^/# /'; fi
