# shellcheck shell=bash
# Sourced by build-images.sh, nested-engine.sh and runsc-setup.sh: apt_mirror prints the one
# Debian mirror this machine's apt already uses (the first URI of a one-line sources.list entry
# or a deb822 *.sources stanza that is not the security archive), so debootstrap fetches from it
# and no host name is written into the repository. The same mirror serves every suite.
# It prints at most one line and reads every file to its end, so callers need no `head` (a
# `head` that exits early kills the writer with SIGPIPE, and `pipefail` turns that into 141).
apt_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk '$1 == "deb" && !found { u = ($2 ~ /^\[/) ? $3 : $2; if (u !~ /security/) found = u }
      END { if (found != "") print found }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
      { for (i = 1; i <= NF; i++) if (!found && $i ~ /^URIs:/) { split($i, a, /[ \t]+/)
          if (a[2] !~ /security/) found = a[2] } }
      END { if (found != "") print found }' "$f"
  done | awk 'NR == 1'
}
