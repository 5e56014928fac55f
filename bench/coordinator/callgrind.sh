#!/bin/sh
# Instruction counts of one coordinator round under valgrind --tool=callgrind (Debian package
# `valgrind`): the same binary and input give about the same count whatever else the machine
# does, so a regression shows as a number.
#
#   bench/coordinator/callgrind.sh [AGENTS] [ROUNDS]     # default 1000 2
#
# Fake agents (separate processes, not counted) serve AGENTS canned signed reports. The
# coordinator runs under callgrind with 0 and ROUNDS rounds after its first, and the script prints
# (instructions with ROUNDS − instructions with 0) / ROUNDS for
#   round:   rounds back to back without watches (`nodecare-bench-coordinator round`), and
#   watched: the daemon with a watch per agent, each round woken through the board
#            (`watched-rounds`, 5 s after the first round so that every watch has answered).
# BENCH_BIN=path uses that build of nodecare-bench-coordinator instead of building one.
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
. bench/coordinator/agents.sh
count=${1:-1000}
rounds=${2:-2}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 2; }
if [ -z "${BENCH_BIN:-}" ]; then
    bench_build -p nodecare-tests --bin nodecare-bench-coordinator
    BENCH_BIN=$BENCH_TARGET/nodecare-bench-coordinator
fi
raise_nofile "$count"
work=$(mktemp -d)
cleanup() { stop_agents; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
file="$work/agents-$count"
start_agents "$BENCH_BIN" "$count" "$file"
instructions() { # command rounds [args]
    what=$1; n=$2; shift 2
    timeout 1800 valgrind --tool=callgrind --callgrind-out-file="$work/out" \
        "$BENCH_BIN" "$what" "$file" "$n" "$@" >"$work/print" 2>"$work/log" \
        || { cat "$work/log" "$work/print" >&2; return 1; }
    awk '/^summary:/ {print $2}' "$work/out"
}
# Rounds after the first in both (the first reads every agent over the network, new connections).
zero=$(instructions round 1); many=$(instructions round $(( rounds + 1 )))
echo "round: $(( (many - zero) / rounds )) instructions per round of $count agents ($many with $rounds more rounds, $zero with 0)"
zero=$(instructions watched-rounds 0 5); many=$(instructions watched-rounds "$rounds" 5)
echo "watched: $(( (many - zero) / rounds )) instructions per round of $count watched agents ($many with $rounds rounds, $zero with 0)"
