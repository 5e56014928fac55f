#!/bin/sh
# 5000 (or COUNT) watched agents on loopback: the coordinator daemon keeps one long-poll open to
# each fake agent; one agent's verdict flips; prints how long after the flip the round started
# and the new verdict was seen, the coordinator's RSS while watching, and the time of one more
# round with nothing changed.
# Fake agents run in separate processes, so the RSS measured is the coordinator's.
# Usage: bench/coordinator/watch.sh [COUNT] [SETTLE_SECONDS]   (default: 5000 10)
# BENCH_BIN=path uses that build of nodecare-bench-coordinator instead of building one.
set -eu
cd "$(dirname "$0")/../.."
. bench/coordinator/agents.sh
if [ -z "${BENCH_BIN:-}" ]; then
    cargo build --quiet --release -p nodecare-tests --bin nodecare-bench-coordinator
    BENCH_BIN=${CARGO_TARGET_DIR:-target}/release/nodecare-bench-coordinator
fi
count=${1:-5000}
raise_nofile "$count"
work=$(mktemp -d)
cleanup() { stop_agents; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
file="$work/agents-$count"
start_agents "$BENCH_BIN" "$count" "$file"
"$BENCH_BIN" watch "$file" "${2:-10}"
