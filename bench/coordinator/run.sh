#!/bin/sh
# One coordinator round over 1000 and 5000 agents on loopback, and the coordinator's peak RSS.
# Fake agents (canned signed reports, one listener each) run in a separate process, so the
# RSS measured is the coordinator's (with the simulated Ganeti it talks to in-process).
# Usage: bench/coordinator/run.sh [COUNTS...]   (default: 1000 5000)
set -eu
cd "$(dirname "$0")/../.."
cargo build --quiet --release -p nodecare-tests --bin nodecare-bench-coordinator
bin=target/release/nodecare-bench-coordinator
ulimit -n 20000 2>/dev/null || true
work=$(mktemp -d)
agents_pid=
cleanup() { [ -n "$agents_pid" ] && kill "$agents_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT INT TERM
for count in ${*:-1000 5000}; do
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
    "$bin" round "$file" 3
    kill "$agents_pid"; wait "$agents_pid" 2>/dev/null || true
    agents_pid=
done
