#!/usr/bin/env bash
# Every benchmark under bench/ in its smoke mode (BENCH_SMOKE=1, bench/lib.sh): debug builds,
# tiny sizes, seconds. The figures mean nothing here; what fails is a benchmark that cannot start,
# that exits non-zero, or whose output lacks its figure. A script under bench/ that this list does
# not name fails the run too, so that no benchmark is left out to rot.
#
# A benchmark whose tool is missing (it exits 2: valgrind, wrk, ganeti-mond, root) is skipped,
# unless NODECARE_REQUIRE_BENCH_TOOLS=1 (CI installs them and sets it).
set -euo pipefail
cd "$(dirname "$0")/../.."
export BENCH_SMOKE=1

# script|arguments|an extended regular expression its output must match
SMOKES=(
  "bench/agent/callgrind.sh|5|^sign: [0-9]+ instructions per operation"
  "bench/agent/idle.sh||^pair 1: agent [0-9.]+ s .* ratio CPU [0-9.]+"
  "bench/agent/mond-compare.sh||^ratio agent/mond: [0-9.]+x"
  "bench/agent/run.sh||^agent/bare throughput: diagnose [0-9]+%"
  "bench/campaign/run.sh|12 48 0.05 0.2|^mean after / before wall over [0-9]+ pairs: [0-9.]+"
  "bench/coordinator/callgrind.sh|20 1|^watched: [0-9]+ instructions per round"
  "bench/coordinator/explain.sh|20 10|^query=node rounds_shown=1 whole: heap_peak_mib=[0-9.]+ .* index: heap_peak_mib=[0-9.]+ .* same=true"
  "bench/coordinator/recorder.sh|2 30|^agents=30 rounds=2 median_round_with_recorder=[0-9.]+ .*ratio=[0-9.]+"
  "bench/coordinator/run.sh|30|^agents=30 round=3 seconds=[0-9.]+ peak_rss_mib=[0-9.]+"
  "bench/coordinator/state.sh|20 40|^nodes=20 rounds=40 seconds=[0-9.]+ recorded_bytes=[0-9]+"
  "bench/coordinator/what-if.sh|1 30|^what_if=control nodes=30 watch=true gap_ms=250 median_round_quiet=[0-9.]+ .*ratio=[0-9.]+"
  "bench/coordinator/watch.sh|30 2|^agents=30 flip_to_round_start_ms=[0-9]+ flip_to_verdict_seen_ms=[0-9]+"
  "bench/repair/run.sh||^valid request latency under flood *: n=[1-9][0-9]* p50=[0-9.]+ ms"
  "bench/roll/run.sh||^\| 20/200 \| [0-9.]+ s"
  "bench/soak/agent.sh||\"valid_refused\": 0"
  "bench/soak/coordinator.sh||\"rounds\": [1-9][0-9]*, \"round_errors\": 0"
  "bench/time-to-heal/run.sh||repairready tag +[0-9.]+ s"
)
# Sourced by the others or run by them, not benchmarks of their own.
HELPERS=" bench/lib.sh bench/coordinator/agents.sh bench/roll/gen.py bench/soak/agent-soak.py "

listed=" "
for smoke in "${SMOKES[@]}"; do listed+="${smoke%%|*} "; done
missing=()
while IFS= read -r script; do
  [[ $listed == *" $script "* || $HELPERS == *" $script "* ]] || missing+=("$script")
done < <(find bench -type f | sort)
if ((${#missing[@]})); then
  echo "bench-smoke: no smoke run for ${missing[*]}: add it to SMOKES in $0" >&2
  exit 1
fi

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
failed=() skipped=()
for smoke in "${SMOKES[@]}"; do
  IFS='|' read -r script args expect <<<"$smoke"
  name=${script#bench/}
  out="$log/$(tr '/' '_' <<<"$name").log"
  start=$SECONDS
  # shellcheck disable=SC2086 # the arguments are words
  if timeout 900 bash -c "exec \"\$0\" \"\$@\"" "$script" $args >"$out" 2>&1; then
    status=0
  else
    status=$?
  fi
  took=$((SECONDS - start))
  if ((status == 2)) && [[ ${NODECARE_REQUIRE_BENCH_TOOLS:-} != 1 ]]; then
    skipped+=("$name")
    echo "bench-smoke: SKIP $name (${took} s): $(tail -n 1 "$out")"
  elif ((status == 0)) && grep -Eq -- "$expect" "$out"; then
    echo "bench-smoke: ok   $name (${took} s): $(grep -Em1 -- "$expect" "$out" | cut -c1-120)"
  else
    failed+=("$name")
    echo "bench-smoke: FAIL $name (${took} s, exit $status; its output must match /$expect/):" >&2
    tail -n 30 "$out" | sed 's/^/    /' >&2
  fi
done
echo "bench-smoke: ${#SMOKES[@]} benchmarks, ${#failed[@]} failed, ${#skipped[@]} skipped"
((${#failed[@]} == 0))
