#!/usr/bin/env bash
# Flood benchmark of the agent's repair endpoint, on loopback only.
#
# Starts a repair server (its own tokio runtime, a whitelist with one command "noop", the default
# 1.5 s invalid-request delay) and floods it for a bounded time and request count with invalid
# requests in equal parts: bad signatures, validly signed requests for a command that is not
# whitelisted, bodies declared larger than the 256 KiB limit, and replays of an accepted request.
# "Patient" senders wait for each answer, "impatient" ones close right after sending. Meanwhile a
# valid request is sent every FLOOD_PROBE_MS and its latency measured. The run fails if anything
# but the valid requests ran, if a flood request got a non-4xx answer, or if a valid request
# waited as long as the deliberate delay.
#
# Bounded: FLOOD_SECONDS (30) and FLOOD_MAX_REQUESTS (500000), whichever comes first.
# Knobs: FLOOD_PATIENT (200), FLOOD_IMPATIENT (16), FLOOD_PROBE_MS (200), FLOOD_DELAY_MS (1500).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
export FLOOD_SECONDS=${FLOOD_SECONDS:-$(bench_size 3 30)}
export FLOOD_MAX_REQUESTS=${FLOOD_MAX_REQUESTS:-$(bench_size 5000 500000)}
export FLOOD_PATIENT=${FLOOD_PATIENT:-$(bench_size 20 200)}
release=--release
[ "$BENCH_SMOKE" = 1 ] && release=
timeout $((FLOOD_SECONDS + 600)) \
    cargo test $release --locked -p nodecare-agent --test repair_flood -- \
    --ignored --exact flood_benchmark --nocapture --test-threads 1
