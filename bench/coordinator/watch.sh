#!/bin/sh
# 5000 (or COUNT) watched agents on loopback: the coordinator daemon keeps one long-poll open to
# each fake agent; one agent's verdict flips; prints how long after the flip the round started
# and the new verdict was seen, and the coordinator's RSS while watching.
# Fake agents run in a separate process, so the RSS measured is the coordinator's.
# Usage: bench/coordinator/watch.sh [COUNT] [SETTLE_SECONDS]   (default: 5000 10)
set -eu
cd "$(dirname "$0")/../.."
cargo build --quiet --release -p nodecare-tests --bin nodecare-bench-coordinator
bin=target/release/nodecare-bench-coordinator
ulimit -n 20000 2>/dev/null || true
work=$(mktemp -d)
agents_pid=
cleanup() { [ -n "$agents_pid" ] && kill "$agents_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT INT TERM
count=${1:-5000}
file="$work/agents-$count"
"$bin" serve-agents "$count" "$file" &
agents_pid=$!
# The fake agents write the file once they listen: wait for it, bounded, and stop if they died.
waited=0
while [ ! -f "$file" ]; do
    kill -0 "$agents_pid" 2>/dev/null || { echo "the fake agents exited before listening" >&2; exit 1; }
    [ "$waited" -lt "${AGENTS_START_TIMEOUT:-600}" ] || { echo "timed out after ${AGENTS_START_TIMEOUT:-600} s waiting for $count fake agents to listen" >&2; exit 1; }
    sleep 1; waited=$((waited + 1))
done
"$bin" watch "$file" "${2:-10}"
