#!/bin/sh
# A rolling maintenance campaign on the simulated cluster: wall time against the plan's lower
# bound, groups x (longest migration + reboot), with every budget checked at every round.
# Usage: bench/campaign/run.sh [NODES INSTANCES JOB_S REBOOT_S]   (default: 200 4000 0.5 20)
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
bench_build -p nodecare-tests --bin nodecare-bench-campaign
ulimit -n 20000 2>/dev/null || true
exec "$BENCH_TARGET/nodecare-bench-campaign" "$@"
