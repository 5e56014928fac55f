#!/bin/sh
# 5000 (or COUNT) watched agents on loopback: the coordinator daemon keeps one long-poll open to
# each fake agent; one agent's verdict flips; prints how long after the flip the round started
# and the new verdict was seen, the coordinator's RSS while watching, and the time of one more
# round with nothing changed.
# Fake agents and the simulated Ganeti (nodecare-ganeti-sim, plain HTTP on loopback) run in
# separate processes, so the RSS measured is the coordinator's.
# Usage: bench/coordinator/watch.sh [COUNT] [SETTLE_SECONDS]   (default: 5000 10)
# BENCH_BIN=path uses that build of nodecare-bench-coordinator instead of building one (and the
# nodecare-ganeti-sim beside it, or SIM_BIN=path). BENCH_SIM=in-process runs the simulated
# Ganeti inside the benchmark's process, as before (its answers then count in the RSS).
set -eu
cd "$(dirname "$0")/../.."
. bench/lib.sh
. bench/coordinator/agents.sh
if [ -z "${BENCH_BIN:-}" ]; then
    bench_build -p nodecare-tests --bin nodecare-bench-coordinator \
        -p nodecare-ganeti-sim --bin nodecare-ganeti-sim
    BENCH_BIN=$BENCH_TARGET/nodecare-bench-coordinator
fi
SIM_BIN=${SIM_BIN:-$(dirname "$BENCH_BIN")/nodecare-ganeti-sim}
count=${1:-5000}
raise_nofile "$count"
work=$(mktemp -d)
sim_pid=
cleanup() {
    stop_agents
    if [ -n "$sim_pid" ]; then kill "$sim_pid" 2>/dev/null || true; wait "$sim_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
file="$work/agents-$count"
start_agents "$BENCH_BIN" "$count" "$file"
if [ "${BENCH_SIM:-process}" != in-process ]; then
    # The same cluster as the benchmark's in-process one: COUNT nodes, no instances, sim.test.
    "$SIM_BIN" --nodes "$count" --instances "" --domain sim.test --url-file "$work/sim-url" >/dev/null &
    sim_pid=$!
    waited=0
    while [ ! -s "$work/sim-url" ]; do
        if dead "$sim_pid" || [ "$waited" -ge 600 ]; then
            echo "the simulated Ganeti ($SIM_BIN) did not start" >&2
            exit 1
        fi
        sleep 0.1; waited=$((waited + 1))
    done
    BENCH_SIM_URL=$(cat "$work/sim-url")
    export BENCH_SIM_URL
fi
"$BENCH_BIN" watch "$file" "${2:-10}"
