#!/bin/sh
# What a what-if costs the coordinator on a big cluster (nodecare-bench-coordinator's
# `what-if`): one asked alone (heap peak, peak RSS growth, processor time, wall time), eight
# callers at once, and the daemon's rounds back to back with no what-if and while one caller
# asks what-ifs back to back (each side's median round and their ratio), over fake agents.
# Usage: bench/coordinator/what-if.sh [BLOCKS] [COUNTS...]   (default: 4, 1000)
# BENCH_BIN=path uses that build of nodecare-bench-coordinator instead of building one.
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
. bench/coordinator/agents.sh
blocks=${1:-4}
[ $# -gt 0 ] && shift
if [ -z "${BENCH_BIN:-}" ]; then
    bench_build -p nodecare-tests --bin nodecare-bench-coordinator
    BENCH_BIN=$BENCH_TARGET/nodecare-bench-coordinator
fi
each_agent_count what-if "${*:-1000}" "$blocks"
