# Sourced by build-images.sh and nested-engine.sh: apt_mirror prints the Debian mirror this
# machine's apt already uses (the first URI of a one-line sources.list entry or a deb822
# *.sources stanza that is not the security archive), so debootstrap fetches from it and no host
# name is written into the repository. The same mirror serves every suite (bookworm, trixie, sid).
apt_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk '$1 == "deb" { u = ($2 ~ /^\[/) ? $3 : $2; if (u !~ /security/) { print u; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
      { for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/)
          if (a[2] !~ /security/) { print a[2]; exit } } }' "$f"
  done
}
