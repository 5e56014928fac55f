#!/bin/sh
# The state's growth on a changing cluster: rounds that each decide anew (every node's free
# memory moves), writers filling the audit log and the overrides, retention every 360 rounds;
# what the snapshot pushed to the master candidates weighs (nodecare-bench-coordinator's
# `state-growth`). A short run of the same is a test (`state_growth` in tests/tests).
# Usage: bench/coordinator/state.sh [NODES] [ROUNDS]   (default: 1000 10000)
# BENCH_BIN=path uses that build of nodecare-bench-coordinator instead of building one.
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
if [ -z "${BENCH_BIN:-}" ]; then
    bench_build -p nodecare-tests --bin nodecare-bench-coordinator
    BENCH_BIN=$BENCH_TARGET/nodecare-bench-coordinator
fi
"$BENCH_BIN" state-growth "${1:-1000}" "${2:-10000}"
