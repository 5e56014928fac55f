#!/bin/sh
# The flight recorder's cost: rounds with and without it over the same fake agents, in turn,
# while every round refuses an incident (nodecare-bench-coordinator's `recorder`).
# Usage: bench/coordinator/recorder.sh [ROUNDS] [COUNTS...]   (default: 20, 1000 5000)
# BENCH_BIN=path uses that build of nodecare-bench-coordinator instead of building one.
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
. bench/coordinator/agents.sh
rounds=${1:-20}
[ $# -gt 0 ] && shift
if [ -z "${BENCH_BIN:-}" ]; then
    bench_build -p nodecare-tests --bin nodecare-bench-coordinator
    BENCH_BIN=$BENCH_TARGET/nodecare-bench-coordinator
fi
each_agent_count recorder "${*:-1000 5000}" "$rounds"
