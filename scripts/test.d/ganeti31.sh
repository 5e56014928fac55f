#!/usr/bin/env bash
# Ganeti 3.1 (Debian 13) on every run, beside the full 3.0.2 suite: a Debian 13 root with
# trixie's Ganeti (tests/ganeti/make-root.sh, cached after its first run), a 3-node cluster
# brought up from it (NODECARE_GNT_VERSION=3.1), then smoke.sh (RAPI, confd, LUXI, a program of
# ours in a node, a live migration), filters-compat.sh (docs/ganeti-filters.md's filters hold
# nodecare's jobs; POSIX regular expressions), htools-compat.sh (hbal and hroller of both
# releases on Ganeti's 50 test clusters) and nodecare's own standalone end-to-end scenarios
# (tests/e2e-ganeti/run.sh: a campaign at the seams, a maintenance freeze, the ladder, an
# approval and failback) on a 5-node 3.1 cluster, real harep 3.1 beside `nodecare harep`
# (tests/e2e-ganeti/harep-side-by-side.sh) and one short nemesis seed (tests/nemesis/run.sh).
# scripts/test runs it beside the 3.0.2 real-cluster steps: every cluster here has its own state
# directory, prefix and forwarded ports (RAPI, coordinators, mond), none of those of the 3.0.2
# steps (15180-15185 and 25251-25255 for run.sh, 15190 and 25291-25293 for harep, 16180-16185
# and 26251-26255 for the nemesis). docs/ganeti-versions.md says what each part costs and what it
# shows. Needs root, Ganeti's packages (htools-compat.sh compares with them) and debootstrap;
# CI installs them.
set -euo pipefail
cd "$(dirname "$0")/../.."
skip() {
  if [ "${NODECARE_REQUIRE_GANETI:-0}" = 1 ]; then
    echo "ganeti31: $1" >&2; exit 1
  fi
  echo "ganeti31: skipped ($1)"; exit 0
}
[ "$(id -u)" -eq 0 ] || skip "needs root"
command -v gnt-cluster >/dev/null 2>&1 || skip "Ganeti's packages are missing"
command -v debootstrap >/dev/null 2>&1 || skip "debootstrap is missing"
export NODECARE_GNT_VERSION=3.1
export NODECARE_GNT_STATE=${NODECARE_GANETI31_STATE:-/tmp/nodecare-ganeti31}
export NODECARE_GNT_PREFIX=${NODECARE_GANETI31_PREFIX:-nc31}
export NODECARE_GNT_RAPI_PORT=${NODECARE_GANETI31_RAPI_PORT:-15380}
export NODECARE_GNT_MOND_FWD_BASE=${NODECARE_GANETI31_MOND_FWD_BASE:-28150}
start=$(date +%s)
root=$(tests/ganeti/make-root.sh trixie)
export NODECARE_GNT_ROOT=$root
echo "ganeti31: Debian 13 root $root ($(( $(date +%s) - start )) s)"
status=0
trap 'tests/ganeti/cluster-down.sh --quiet >/dev/null 2>&1 || true' EXIT
tests/ganeti/smoke.sh --keep || status=1
echo "ganeti31: smoke done ($(( $(date +%s) - start )) s)"
tests/ganeti/filters-compat.sh || status=1
echo "ganeti31: filters done ($(( $(date +%s) - start )) s)"
tests/ganeti/htools-compat.sh "$root" || status=1
echo "ganeti31: htools done ($(( $(date +%s) - start )) s)"
# nodecare itself on 3.1: a 5-node cluster from the same root, the agents and the coordinator,
# the full master-candidate pool (drains need auto_promote), a campaign at the seams (an
# instance started on a drained node moved before its hook; an agent away past its hook
# timeout), a maintenance freeze holding a request and a campaign, and the escalation ladder,
# an approval of a large evacuation and failback of its instances (run.sh's standalone
# scenarios; the release binaries e2e-ganeti.sh built, or a build of its own).
tests/ganeti/cluster-down.sh --quiet >/dev/null 2>&1 || true
# The same release build as e2e-ganeti.sh (the same packages, so one build serves both; when
# that step builds at the same time, cargo's lock makes this one wait and find it done).
cargo build --release --locked -p nodecare-agent -p nodecare-coordinator -p nodecare-cli -p nodecare-packaging-gen
NODECARE_E2E_STATE=${NODECARE_GANETI31_E2E_STATE:-/tmp/nodecare-e2e31} NODECARE_E2E_PREFIX=nce31 \
  NODECARE_E2E_RAPI_PORT=15480 NODECARE_E2E_COORD_PORT=15481 NODECARE_E2E_MOND_FWD_BASE=25650 \
  NODECARE_E2E_ONLY="seams freeze failback" tests/e2e-ganeti/run.sh --no-build || status=1
echo "ganeti31: e2e done ($(( $(date +%s) - start )) s)"
# Real harep 3.1 and `nodecare harep` side by side on a 3-node 3.1 cluster of their own.
NODECARE_GNT_STATE=${NODECARE_GANETI31_HAREP_STATE:-/tmp/nodecare-harep31} NODECARE_GNT_PREFIX=nch31 \
  NODECARE_GNT_RAPI_PORT=15390 NODECARE_GNT_MOND_FWD_BASE=25490 NODECARE_CLI=target/release/nodecare \
  tests/e2e-ganeti/harep-side-by-side.sh --no-build || status=1
echo "ganeti31: harep side by side done ($(( $(date +%s) - start )) s)"
# One short nemesis seed on 3.1 (the seed nemesis.sh runs on 3.0.2), judged by the same checker.
NODECARE_NEMESIS_STATE=${NODECARE_GANETI31_NEMESIS_STATE:-/tmp/nodecare-nemesis31} NODECARE_NEMESIS_PREFIX=ncn31 \
  NODECARE_NEMESIS_RAPI_PORT=16380 NODECARE_NEMESIS_COORD_PORT=16381 NODECARE_NEMESIS_MOND_FWD_BASE=26450 \
  tests/nemesis/run.sh --seed "${NODECARE_NEMESIS_SEED:-1}" --short || status=1
echo "ganeti31: nemesis done ($(( $(date +%s) - start )) s)"
echo "ganeti31: $(( $(date +%s) - start )) s in all"
exit "$status"
