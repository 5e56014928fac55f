#!/bin/bash
# Times `nodecare roll` (release build) against the real `hroller` on
# synthetic clusters and compares the number of reboot groups.
#
# usage: bench/roll/run.sh [HROLLER_TIMEOUT_SECONDS]   (default 400)
# Needs python3 and, for the comparison, hroller (ganeti-htools-3.0).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
TIMEOUT=${1:-$(bench_size 60 400)}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

bench_build -p nodecare-cli --bin nodecare
NODECARE=$BENCH_TARGET/nodecare

# name nodes instances group-size
CASES=(
  "200/4000 200 4000 50"
  "1000/20000 1000 20000 50"
  "5000/50000 5000 50000 100"
)
[[ $BENCH_SMOKE == 1 ]] && CASES=("20/200 20 200 5")

# Prints "<seconds> <max RSS KB>" of a command, its stdout to $2.
measure() {
  local out=$1; shift
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$@" >"$out" 2>"$WORK/stderr" || return $?
  cat "$WORK/time"
}

groups() { grep -vc "^'" "$1" || true; }

echo "| cluster (nodes/instances) | nodecare roll | groups | nodecare --hroller-compat | groups | hroller 3.0.2 | groups | speed-up |"
echo "|---|---|---|---|---|---|---|---|"
for c in "${CASES[@]}"; do
  read -r label nodes insts gsize <<<"$c"
  data="$WORK/$nodes.data"
  python3 bench/roll/gen.py "$nodes" "$insts" --group-size "$gsize" >"$data"
  read -r nt nm < <(measure "$WORK/n.out" "$NODECARE" roll --no-headers -t "$data")
  ng=$(groups "$WORK/n.out")
  read -r ct cm < <(measure "$WORK/c.out" "$NODECARE" roll --hroller-compat --no-headers -t "$data")
  cg=$(groups "$WORK/c.out")
  if command -v hroller >/dev/null; then
    if hr=$(measure "$WORK/h.out" timeout "$TIMEOUT" hroller --no-headers -t "$data"); then
      read -r ht hm <<<"$hr"
      hg=$(groups "$WORK/h.out")
      speed=$(python3 -c "print(f'{$ht / max($nt, 0.001):.0f}x')")
      same=$(cmp -s "$WORK/h.out" "$WORK/c.out" && echo ", compat output identical" || echo ", compat output DIFFERS")
      hcell="${ht} s (${hm} KB RSS)"
    else
      hcell="> ${TIMEOUT} s (timeout)"; hg="-"; same=""
      speed=$(python3 -c "print(f'> {$TIMEOUT / max($nt, 0.001):.0f}x')")
    fi
  else
    hcell="not installed"; hg="-"; speed="-"; same=""
  fi
  echo "| $label | ${nt} s (${nm} KB RSS) | $ng | ${ct} s | $cg | $hcell | $hg | $speed$same |"
done
