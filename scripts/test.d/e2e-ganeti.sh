#!/usr/bin/env bash
# End-to-end: nodecare agents and the coordinator on a real Ganeti 3.0.2 cluster (network
# namespaces on this machine). Needs root; CI installs Ganeti's packages for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ]; then
  if [ "${NODECARE_REQUIRE_GANETI:-0}" = 1 ]; then
    echo "e2e-ganeti: needs root" >&2; exit 1
  fi
  echo "e2e-ganeti: skipped (needs root)"; exit 0
fi
cargo build --release --locked -p nodecare-agent -p nodecare-coordinator
tests/e2e-ganeti/run.sh --no-build
