#!/usr/bin/env bash
# How the real harep (Debian's ganeti-htools 3.0.2) reads the numbers of a result tag, without a
# cluster (as suspend-corners.sh): inst7 (needs a reinstall) carries `…:reinstall` and
# `…:result:reinstall:<uuid>:<spelling>`; a tag harep reads makes the instance Healthy with that
# repair's data, so the dry run's repair lists it for removal (`parsed`); a tag it cannot read
# is ignored (`not-parsed`). Prints `<spelling><TAB><verdict>`, the file
# core/tests/data/harep/result-corners.txt (instance_repair_tests.rs,
# `result_tags_read_as_real_harep_reads_them`).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TRACE=${HAREP_LUXI_TRACE:-$ROOT/core/tests/data/harep/luxi-harep-dryrun-trace.json}
command -v harep >/dev/null || { echo "result-corners: harep not installed (ganeti-htools-3.0)" >&2; exit 2; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
P=ganeti:watcher:autorepair
U=23f92606-8671-4932-827d-5ca5c0324f1c
SPELLINGS=(
  "1795331514:success:58" "1795331514:success:" "1795331514:success:5+6" "1795331514:success:5+"
  "1795331514:success:0x10" "1795331514:success:0o17+010" "1795331514:success:+5"
  "1795331514:success:-5" "1795331514:success:-0" "1795331514:success:18446744073709551617"
  "1795331514:success:9223372036854775807" "1795331514:success:9223372036854775808"
  "1795331514:success:-18446744073709551615" "1795331514:success:5.0" "0x10:success:5"
  "+1:success:5" "-1:success:5" "1e9:success:5" "99999999999999999999999:success:5"
  "1795331514:maybe:5" "1795331514:success" "1795331514:success:5:6"
)
for rest in "${SPELLINGS[@]}"; do
  tag="$P:result:reinstall:$U:$rest"
  sock=$DIR/luxi.sock
  rm -f "$sock"
  python3 "$HERE/fake_luxi.py" "$TRACE" "$sock" inst7.gnt.test "[\"$P:reinstall\", \"$tag\"]" &
  pid=$!
  for _ in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done
  out=$(timeout 30 harep --luxi="$sock" --dry-run 2>&1 || true)
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  grep -q "^Executing ArReinstall repair on inst7.gnt.test$" <<<"$out" ||
    { echo "result-corners: unexpected harep output for $rest:" >&2; echo "$out" >&2; exit 1; }
  if grep -qxF "\"$tag\"" <<<"$out"; then verdict=parsed; else verdict=not-parsed; fi
  printf '%s\t%s\n' "$rest" "$verdict"
done
