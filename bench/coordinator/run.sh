#!/bin/sh
# One coordinator round over 1000 and 5000 agents on loopback, and the coordinator's peak RSS.
# Fake agents (canned signed reports, one listener each) run in separate processes, so the
# RSS measured is the coordinator's (with the simulated Ganeti it talks to in-process).
# Usage: bench/coordinator/run.sh [COUNTS...]   (default: 1000 5000)
# BENCH_BIN=path uses that build of nodecare-bench-coordinator instead of building one.
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
. bench/coordinator/agents.sh
if [ -z "${BENCH_BIN:-}" ]; then
    bench_build -p nodecare-tests --bin nodecare-bench-coordinator
    BENCH_BIN=$BENCH_TARGET/nodecare-bench-coordinator
fi
each_agent_count round "${*:-1000 5000}" 3
