#!/bin/sh
# One explanation's cost on a recorder holding many rounds of a big cluster: each kind of query
# (`GET /1/explain?node=`, `?record=`, `?job=`) answered by decoding the newest rounds whole, as
# before the recorder's index, and through the index, as the coordinator answers; the heap's
# peak, the peak RSS's growth, the CPU time and the parts decoded of each, side by side
# (nodecare-bench-explain).
# Usage: bench/coordinator/explain.sh [NODES] [ROUNDS]   (default: 1000 386)
# BENCH_BIN=path uses that build of nodecare-bench-explain instead of building one.
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
if [ -z "${BENCH_BIN:-}" ]; then
    bench_build -p nodecare-tests --bin nodecare-bench-explain
    BENCH_BIN=$BENCH_TARGET/nodecare-bench-explain
fi
"$BENCH_BIN" "${1:-1000}" "${2:-386}"
