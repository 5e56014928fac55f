#!/usr/bin/env bash
# Accelerated coordinator soak over the simulated cluster: rounds back to back, random verdict
# flips on 8 nodes, acknowledgements, RAPI connection resets now and then (tests/tests/soak).
# Prints one JSON line per minute (rounds, errors, RSS, state database size) and a summary;
# fails on a round error no injected fault explains, memory growth, an unbounded database or a
# job submitted twice.
#
#   bench/soak/coordinator.sh              # one hour (SOAK_SECONDS=3600)
#   SOAK_SECONDS=900 bench/soak/coordinator.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export SOAK_SECONDS=${SOAK_SECONDS:-3600}
exec cargo nextest run --locked -p nodecare-tests --test coordinator soak::coordinator_soak \
    --run-ignored only --no-capture
