#!/usr/bin/env bash
# The recorded fuzzing campaign: each target in turn (one at a time, niced), from its seed corpus
# under fuzz/corpus/<target>, until RUNS executions or SECONDS seconds, whichever comes first.
# Prints one line per target: executions, exec/s, corpus size, crashes (a crash stops the run and
# leaves its input under fuzz/artifacts/<target>/).
#
#   fuzz/campaign.sh [TARGET...]              # default: every target (`cargo fuzz list`)
#   RUNS=10000000 SECONDS_PER_TARGET=3600 fuzz/campaign.sh repair_request
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). agent_query needs FEATURES=agent,
# harep_tags and rapi_jobs FEATURES=coordinator.
set -uo pipefail
cd "$(dirname "$0")"
RUNS=${RUNS:-10000000}
LIMIT=${SECONDS_PER_TARGET:-3600}
FEATURES=${FEATURES:-}
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(cargo fuzz list 2>/dev/null)
fi
status=0
for target in "${targets[@]}"; do
  case $target in
    agent_query) needs=agent ;;
    harep_tags | rapi_jobs) needs=coordinator ;;
    *) needs= ;;
  esac
  if [[ -n $needs && ,$FEATURES, != *,$needs,* ]]; then
    printf '%-20s skipped (needs FEATURES=%s)\n' "$target" "$needs"
    continue
  fi
  mkdir -p "corpus/$target"
  log=$(mktemp)
  start=$(date +%s)
  nice -n 19 cargo fuzz run -s none -O ${FEATURES:+--features "$FEATURES"} "$target" "corpus/$target" -- \
    -runs="$RUNS" -max_total_time="$LIMIT" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {print $NF}' "$log")
  rate=$(awk '/stat::average_exec_per_sec/ {print $NF}' "$log")
  crashes=$(grep -c "^==[0-9]*== ERROR\|panicked at\|deadly signal" "$log")
  corpus=$(ls "corpus/$target" | wc -l)
  printf '%-20s executions %12s  exec/s %8s  seconds %5s  corpus %6s  crashes %s  rc %s\n' \
    "$target" "${execs:-?}" "${rate:-?}" "$(( $(date +%s) - start ))" "$corpus" "$crashes" "$rc"
  if [[ $rc -ne 0 ]]; then status=1; tail -n 30 "$log"; fi
  if [[ -n ${KEEP_LOGS:-} ]]; then mv "$log" "$KEEP_LOGS/$target.log"; else rm -f "$log"; fi
done
exit $status
