#!/usr/bin/env bash
# Instruction counts of the agent's hot paths under valgrind --tool=callgrind (Debian package
# `valgrind`): the same binary and input give the same count whatever else the machine does, so a
# regression shows as a number.
#
#   bench/agent/callgrind.sh [N]        # default 1000
#
# Runs agent/examples/hot_paths.rs (release) with 0 and N operations of each hot path and prints
# (instructions with N − instructions with 0) / N: one GET /1/report/all through the agent's
# HTTP stack (client included), and one signed diagnose report. HOT_PATHS=path uses that binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
N=${1:-$(bench_size 10 1000)}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 2; }
if [[ -z ${HOT_PATHS:-} ]]; then
  bench_build -p nodecare-agent --example hot_paths
  HOT_PATHS=$BENCH_TARGET/examples/hot_paths
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
instructions() { # path count
  timeout 600 valgrind --tool=callgrind --callgrind-out-file="$WORK/out" "$HOT_PATHS" "$1" "$2" \
    2>"$WORK/log" >/dev/null || { cat "$WORK/log" >&2; return 1; }
  # "Collected : <Ir>" summed over threads (one line per thread with --separate-threads=no).
  awk '/^summary:/ {print $2}' "$WORK/out"
}
for path in request sign; do
  zero=$(instructions "$path" 0)
  many=$(instructions "$path" "$N")
  echo "$path: $(( (many - zero) / N )) instructions per operation ($many with $N, $zero with 0)"
done
