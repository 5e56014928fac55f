#!/usr/bin/env bash
# Ganeti 3.1 (Debian 13) on every run, beside the full 3.0.2 suite: a Debian 13 root with
# trixie's Ganeti (tests/ganeti/make-root.sh, cached after its first run), a 3-node cluster
# brought up from it (NODECARE_GNT_VERSION=3.1), then smoke.sh (RAPI, confd, LUXI, a program of
# ours in a node, a live migration), filters-compat.sh (docs/ganeti-filters.md's filters hold
# nodecare's jobs; POSIX regular expressions), htools-compat.sh (hbal and hroller of both
# releases on Ganeti's 50 test clusters) and nodecare's own standalone end-to-end scenarios
# (tests/e2e-ganeti/run.sh: a campaign at the seams, a maintenance freeze, the ladder, an
# approval and failback) on a 5-node 3.1 cluster. docs/ganeti-versions.md says what each part costs and
# what it shows. Needs root, Ganeti's packages (htools-compat.sh compares with them) and
# debootstrap; CI installs them.
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
e2e_build=--no-build
[ -x target/release/nodecare-coordinator ] && [ -x target/release/nodecare-agent ] && [ -x target/release/nodecare ] || e2e_build=
NODECARE_E2E_STATE=${NODECARE_GANETI31_E2E_STATE:-/tmp/nodecare-e2e31} NODECARE_E2E_PREFIX=nce31 \
  NODECARE_E2E_ONLY="seams freeze failback" tests/e2e-ganeti/run.sh $e2e_build || status=1
echo "ganeti31: $(( $(date +%s) - start )) s in all"
exit "$status"
