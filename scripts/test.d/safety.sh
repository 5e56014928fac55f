#!/usr/bin/env bash
# The independent safety checker over more seeds than the unit run: every duty at once on random
# simulated clusters with every fault, judged from Ganeti's side and the agents' deliveries
# (tests/tests/gate/all_duties.rs). NODECARE_SAFETY_SEEDS seeds (default 2000) from seed 6 (the
# unit run takes 1 to 5), NODECARE_SAFETY_JOBS side by side (default 24: a seed mostly waits for
# its simulated jobs, about 15 s each); a seed with a violation is replayed alone, and the
# violation is fatal when the replay shows one too (one seen side by side only is printed). The
# seeds' state directories live in /dev/shm when it is writable: the stores' fsyncs then cost
# nothing, and a seed's crashes are in-process (a dropped coordinator), which no fsync changes.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v hbal >/dev/null 2>&1; then
  if [ "${NODECARE_REQUIRE_GANETI:-0}" = 1 ]; then
    echo "safety: hbal is missing (Ganeti's htools)" >&2; exit 1
  fi
  echo "safety: skipped (no hbal)"; exit 0
fi
export NODECARE_ALL_DUTIES_FIRST=6
export NODECARE_ALL_DUTIES_SEEDS=${NODECARE_SAFETY_SEEDS:-2000}
export NODECARE_ALL_DUTIES_JOBS=${NODECARE_SAFETY_JOBS:-24}
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo nextest run -p nodecare-tests --locked --test coordinator \
  all_duties_together_keep_the_gate_s_invariants --no-capture >"$log" 2>&1 || status=$?
grep -E "seeds in|^seed [0-9]+ (round|quiet)|not ended|side by side|failed to run" "$log" \
  | grep -v "(known defect," || true
echo "safety: $NODECARE_ALL_DUTIES_SEEDS seeds in $(( $(date +%s) - start )) s"
if [ "$status" -ne 0 ]; then
  tail -n 40 "$log" >&2
  echo "safety: FAILED" >&2
fi
exit "$status"
