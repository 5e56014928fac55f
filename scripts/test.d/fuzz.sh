#!/usr/bin/env bash
# Each fuzz target for a short time from its seed corpus, when asked: NODECARE_FUZZ_SECONDS=10
# (seconds per target) and cargo-fuzz installed (`cargo install cargo-fuzz --locked`); skipped
# otherwise.
# Cost on the 2-core machine: installing cargo-fuzz ~3 min, building the targets ~5 min (the two
# that need the daemons' crates, agent_query and harep_tags, several more), 10 s per target.
# The recorded long campaign is fuzz/campaign.sh (docs/RELIABILITY.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${NODECARE_FUZZ_SECONDS:-}" ] || ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "fuzz: skipped (set NODECARE_FUZZ_SECONDS and install cargo-fuzz to run)"; exit 0
fi
FEATURES=agent,coordinator SECONDS_PER_TARGET=$NODECARE_FUZZ_SECONDS RUNS=1000000000 fuzz/campaign.sh
