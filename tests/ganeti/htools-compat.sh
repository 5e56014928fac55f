#!/usr/bin/env bash
# Ganeti's htools of two releases side by side on the same clusters: the machine's own (Debian
# 12, Ganeti 3.0.2) and those of a root made by make-root.sh (default: Debian 13, Ganeti 3.1),
# run with chroot (they only read their input). For every htools text cluster of the machine's
# ganeti-testsuite (test/data/htools/*.data), `hbal -t FILE` (moves and scores), `hroller -t FILE`
# and `hroller -t FILE --offline-maintenance` (reboot groups) must print the same on both; a
# difference is printed as a diff and counted. "nodecare's duties agree with hbal -L / hroller"
# then holds on both releases when it holds on one. Needs root (chroot).
#   htools-compat.sh [ROOT]
# Prints `N passed, N failed`.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${1:-${NODECARE_GNT_ROOT:-}}
[[ -n $ROOT ]] || ROOT=$("$HERE/make-root.sh" trixie)
DATA=/usr/share/ganeti/testsuite/test/data/htools
[[ -d $DATA ]] || { echo "htools-compat: $DATA missing (install-packages.sh)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "htools-compat: must run as root (chroot)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/nodecare-htools-compat.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# A command of the root, with the machine's test clusters over the root's own at the same path
# (a bind mount in a mount namespace of its own: the root is not written).
in_root() {
  # shellcheck disable=SC2016
  unshare --mount --propagation private sh -c 'r=$1 d=$2; shift 2
    mount --bind "$d" "$r$d" && exec chroot "$r" "$@"' sh "$ROOT" "$DATA" "$@"
}
old_version=$(hbal --version 2>&1 | head -n 1)
new_version=$(in_root hbal --version 2>&1 | head -n 1)
echo "# machine: $old_version; root: $new_version"

PASS=0 FAIL=0
compare() { # NAME FILE ARGS...
  local name=$1 file=$2 a b
  shift 2
  a=$("$@" -t "$file" 2>&1 | grep -v '^Warning: ' || true)
  b=$(in_root "$@" -t "$file" 2>&1 | grep -v '^Warning: ' || true)
  if [[ $a == "$b" ]]; then
    PASS=$((PASS + 1))
  else
    FAIL=$((FAIL + 1))
    echo "FAIL - $name differs:"
    diff <(echo "$a") <(echo "$b") | head -n 20
  fi
}
for f in "$DATA"/*.data; do
  base=$(basename "$f" .data)
  compare "hbal $base" "$f" hbal
  compare "hroller $base" "$f" hroller
  compare "hroller --offline-maintenance $base" "$f" hroller --offline-maintenance
done
echo "$PASS passed, $FAIL failed"
[[ $FAIL -eq 0 ]]
