#!/usr/bin/env bash
# How the real harep (Debian's ganeti-htools 3.0.2, `harep` on PATH) reads suspend tags, without
# a cluster: for each spelling below, fake_luxi.py replays a recorded cluster in which inst7
# (plain, primary offline: needs a reinstall) carries `ganeti:watcher:autorepair:reinstall` and
# the spelling; `harep --luxi=SOCKET --dry-run` either repairs it (`not-suspended`) or says it
# is `ArSuspended Forever` / `ArSuspended (Until …)`. Prints `<spelling><TAB><verdict>` lines,
# the file core/tests/data/harep/suspend-corners.txt that nodecare's duty is tested
# against (instance_repair_tests.rs, `suspend_tags_read_as_real_harep_reads_them`).
#
#   tests/harep-luxi/suspend-corners.sh > core/tests/data/harep/suspend-corners.txt
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TRACE=${HAREP_LUXI_TRACE:-$ROOT/core/tests/data/harep/luxi-harep-dryrun-trace.json}
command -v harep >/dev/null || { echo "suspend-corners: harep not installed (ganeti-htools-3.0)" >&2; exit 2; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
P=ganeti:watcher:autorepair
# Spellings after `$P:suspend`; FUTURE is 4000000000 (2096), PAST 1000000000 (2001).
SPELLINGS=(
  "" ":" ":4000000000" ":1000000000" ":2000000000" ":0xee6b2800" ":0XEE6B2800" ":0o35632624000"
  ":004000000000" ":+4000000000" ":4000000000.0" ":4e9" ":4000000000x" ":-4000000000" ":-0"
  ":99999999999999999999999999999" ":0xffffffffffffffffffffffffffff" ":0x" ":0b1" ":soon"
  ":4_000_000_000" ":4000000000:" "::" "x" "ed" "ed:"
)
for rest in "${SPELLINGS[@]}"; do
  sock=$DIR/luxi.sock
  rm -f "$sock"
  python3 "$HERE/fake_luxi.py" "$TRACE" "$sock" inst7.gnt.test "[\"$P:reinstall\", \"$P:suspend$rest\"]" &
  pid=$!
  for _ in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done
  out=$(timeout 30 harep --luxi="$sock" --dry-run 2>&1 || true)
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if grep -q "^Not repairing inst7.gnt.test because it's in state ArSuspended Forever$" <<<"$out"; then
    verdict=suspended-forever
  elif grep -q "^Not repairing inst7.gnt.test because it's in state ArSuspended (Until" <<<"$out"; then
    verdict=suspended-until
  elif grep -q "^Executing ArReinstall repair on inst7.gnt.test$" <<<"$out"; then
    verdict=not-suspended
  else
    echo "suspend-corners: unexpected harep output for suspend$rest:" >&2
    echo "$out" >&2
    exit 1
  fi
  printf 'suspend%s\t%s\n' "$rest" "$verdict"
done
