#!/usr/bin/env bash
# One short nemesis seed on a real Ganeti 3.0.2 cluster (tests/nemesis/run.sh --short: 8 faults
# against agents and replicated coordinators while evacuations, live repairs, grants, a
# campaign and instance repairs run, then the independent checker). NODECARE_NEMESIS_SEED picks
# the seed (default 1); a failing seed replays with the same command. Needs root; CI installs
# Ganeti's packages and libfaketime for it (tests/ganeti/install-packages.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ]; then
  if [ "${NODECARE_REQUIRE_GANETI:-0}" = 1 ]; then
    echo "nemesis: needs root" >&2; exit 1
  fi
  echo "nemesis: skipped (needs root)"; exit 0
fi
if ! command -v gnt-cluster >/dev/null 2>&1; then
  if [ "${NODECARE_REQUIRE_GANETI:-0}" = 1 ]; then
    echo "nemesis: Ganeti's packages are missing" >&2; exit 1
  fi
  echo "nemesis: skipped (no Ganeti packages)"; exit 0
fi
exec tests/nemesis/run.sh --seed "${NODECARE_NEMESIS_SEED:-1}" --short
