#!/usr/bin/env bash
# End-to-end on a real Ganeti 3.0.2 cluster (network namespaces on this machine): nodecare agents
# and the coordinator through the repair lifecycle (run.sh), the agent against the real confd
# (confd.sh), and real harep beside `nodecare harep` (harep-side-by-side.sh). Needs root; CI
# installs Ganeti's packages for it.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ]; then
  if [ "${NODECARE_REQUIRE_GANETI:-0}" = 1 ]; then
    echo "e2e-ganeti: needs root" >&2; exit 1
  fi
  echo "e2e-ganeti: skipped (needs root)"; exit 0
fi
# The same package set as packaging/build-packages.sh, so that its release build is reused.
cargo build --release --locked -p nodecare-agent -p nodecare-coordinator -p nodecare-cli -p nodecare-packaging-gen
status=0
tests/e2e-ganeti/run.sh --no-build || status=1
tests/e2e-ganeti/confd.sh || status=1
# Real harep 3.0.2 and `nodecare harep` side by side on a 3-node cluster of their own.
NODECARE_CLI=target/release/nodecare tests/e2e-ganeti/harep-side-by-side.sh --no-build || status=1
exit "$status"
