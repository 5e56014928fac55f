#!/usr/bin/env bash
# Accelerated coordinator soak: the coordinator binary, rounds every 20 ms, random verdict
# flips on 8 simulated nodes (about 2 a second), acknowledgements (tests/tests/soak).
# Prints one JSON line per minute (the coordinator's RSS, the state database's size, jobs) and a
# summary; fails if the coordinator logs a warning or an error, dies, submits an intent twice, or
# its memory or database grows.
#
#   bench/soak/coordinator.sh              # one hour (SOAK_SECONDS=3600)
#   SOAK_SECONDS=900 bench/soak/coordinator.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
export SOAK_SECONDS=${SOAK_SECONDS:-$(bench_size 20 3600)}
exec cargo nextest run --locked -p nodecare-tests --test coordinator soak::coordinator_soak \
    --run-ignored only --no-capture
