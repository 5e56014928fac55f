#!/usr/bin/env bash
# Real harep 3.0.2 and nodecare's instance auto-repair, side by side on the same REAL cluster.
#
#   flock /tmp/ganeti-cluster.lock tests/e2e-ganeti/harep-side-by-side.sh [--no-build] [--keep]
#
# This kernel has no LVM or DRBD, and harep repairs only plain and DRBD instances, so two file
# instances are turned into a DRBD and a plain one by editing the stopped master's
# config.data (as spec/real-ganeti-cluster.md describes). Their primary node2 is then set
# offline and tagged `failover` (inst1, DRBD) and `reinstall` (inst2, plain); inst3 (DRBD
# with the same primary, tagged `failover` and `suspend:`) and inst6 (plain on the same primary,
# tagged `reinstall` and the bare `suspend`, which harep reads as a forever-suspend) must be
# left alone by both.
#
#   1. dry runs: `harep --luxi=SOCKET --dry-run` and `nodecare harep -L --dry-run` (-L: nodecare reaches
#      the master through the RAPI settings of its configuration file), normalised (uuids,
#      times, job ids), must print the same lines except the `jobs:` lines (harep's one job
#      with OP_TEST_DELAY vs nodecare's one job per opcode, see docs/harep.md);
#   2. real runs: harep twice (repair, then results), the tags and jobs read back; the tags
#      restored; nodecare until it has nothing left to do; the tags left (normalised) must be
#      equal, and the repair opcodes run the same (harep's delay opcode and RAPI's reinstall
#      wrapping aside).
#
# Prints PASS/FAIL lines and `N passed, N failed`; exit 1 if any failed. Outputs in
# $NODECARE_GNT_STATE/harep-side-by-side/.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GNT=$ROOT/tests/ganeti

BUILD=1
KEEP=0
for a in "$@"; do
  case $a in
    --no-build) BUILD=0 ;;
    --keep) KEEP=1 ;;
    *) echo "usage: $0 [--no-build] [--keep]" >&2; exit 2 ;;
  esac
done

export NODECARE_GNT_STATE=${NODECARE_GNT_STATE:-/tmp/nodecare-harep}
export NODECARE_GNT_PREFIX=${NODECARE_GNT_PREFIX:-nchrp}
export NODECARE_GNT_RAPI_PORT=${NODECARE_GNT_RAPI_PORT:-15190}
export NODECARE_GNT_MOND_FWD_BASE=${NODECARE_GNT_MOND_FWD_BASE:-25290}
DOMAIN=nodecare.test
INSTANCES="inst1:file:2,inst2:file:2,inst3:file:2,inst4:diskless:1,inst5:diskless:3,inst6:file:2"

PASSED=0
FAILED=0
pass() { echo "PASS $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $1: $2"; FAILED=$((FAILED + 1)); }
log() { echo "harep-side-by-side: $*" >&2; }

[[ $(id -u) -eq 0 ]] || { echo "harep-side-by-side: must run as root" >&2; exit 2; }
cleanup() { if [[ $KEEP -eq 0 ]]; then "$GNT/cluster-down.sh" --quiet || true; fi; }
trap cleanup EXIT

"$GNT/install-packages.sh" >&2 || { echo "harep-side-by-side: package installation failed" >&2; exit 1; }
if [[ $BUILD -eq 1 ]]; then
  (cd "$ROOT" && cargo build -p nodecare-cli) >&2 || { echo "harep-side-by-side: build failed" >&2; exit 1; }
fi
NODECARE=${NODECARE_CLI:-$ROOT/target/debug/nodecare}
[[ -x $NODECARE ]] || { echo "harep-side-by-side: $NODECARE missing" >&2; exit 1; }

"$GNT/cluster-up.sh" --nodes 3 --instances "$INSTANCES" --no-mond >&2 || { echo "harep-side-by-side: cluster-up failed" >&2; exit 1; }
# shellcheck disable=SC1091
. "$NODECARE_GNT_STATE/cluster.env"
S=$NODECARE_GNT_STATE
OUT=$S/harep-side-by-side
mkdir -p "$OUT"
printf '%s:%s\n' "$NODECARE_GNT_RAPI_USER" "$(<"$NODECARE_GNT_RAPI_PASSWORD_FILE")" >"$S/rapi-credentials"
chmod 600 "$S/rapi-credentials"
gnt() { "$GNT/node-exec.sh" 1 "$@"; }

# ---- config surgery: inst1 and inst3 DRBD (node2 → node3), inst2 and inst6 plain on node2 ----
log "config surgery"
gnt /usr/lib/ganeti/daemon-util stop ganeti-luxid >&2
gnt /usr/lib/ganeti/daemon-util stop ganeti-wconfd >&2
python3 - "$NODECARE_GNT_NODE1_ROOT/var/lib/ganeti/config.data" "$DOMAIN" <<'EOF' || exit 1
import json, sys
path, domain = sys.argv[1], sys.argv[2]
c = json.load(open(path))
node = {n['name']: u for u, n in c['nodes'].items()}
n2, n3 = node['node2.' + domain], node['node3.' + domain]
inst = {i['name']: i for i in c['instances'].values()}
def lv(uuid, name, on, size):
    return {'logical_id': ['xenvg', name], 'dev_type': 'plain', 'children': [], 'nodes': [on],
            'iv_name': '', 'size': size, 'mode': 'rw', 'params': {}, 'uuid': uuid,
            'serial_no': 1, 'ctime': 0.0, 'mtime': 0.0}
for port, name in ((11000, 'inst1'), (11001, 'inst3')):
    d = c['disks'][inst[name + '.' + domain]['disks'][0]]
    d.update({'dev_type': 'drbd', 'nodes': [n2, n3],
              'logical_id': [n2, n3, port, port - 11000, port - 11000, 'secret'],
              'children': [lv(d['uuid'] + '-d', name + '.disk0_data', n2, d['size']),
                           lv(d['uuid'] + '-m', name + '.disk0_meta', n2, 128)]})
for name in ('inst2', 'inst6'):
    d = c['disks'][inst[name + '.' + domain]['disks'][0]]
    d.update({'dev_type': 'plain', 'logical_id': ['xenvg', name + '.disk0'], 'nodes': [n2]})
for t in ('plain', 'drbd'):
    if t not in c['cluster']['enabled_disk_templates']:
        c['cluster']['enabled_disk_templates'].append(t)
c['cluster']['volume_group_name'] = 'xenvg'
c['serial_no'] += 1
json.dump(c, open(path, 'w'))
EOF
gnt /usr/lib/ganeti/daemon-util start ganeti-wconfd >&2
gnt /usr/lib/ganeti/daemon-util start ganeti-luxid >&2
"$GNT/master-daemons.sh" check --timeout 20 >&2 || { echo "harep-side-by-side: master daemons did not come back" >&2; exit 1; }
gnt gnt-instance list -o name,disk_template,pnode,snodes >"$OUT/instances.txt"
grep -q 'inst1.* drbd ' "$OUT/instances.txt" && grep -q 'inst2.* plain ' "$OUT/instances.txt" &&
  grep -q 'inst6.* plain ' "$OUT/instances.txt" ||
  { echo "harep-side-by-side: surgery did not take"; cat "$OUT/instances.txt"; exit 1; } >&2

gnt gnt-node modify -O yes --force "node2.$DOMAIN" >&2
P=ganeti:watcher:autorepair
gnt gnt-instance add-tags "inst1.$DOMAIN" "$P:failover" >&2
gnt gnt-instance add-tags "inst2.$DOMAIN" "$P:reinstall" >&2
gnt gnt-instance add-tags "inst3.$DOMAIN" "$P:failover" "$P:suspend:" >&2
# The bare suspend tag (no final colon): harep 3.0.2 suspends forever (its chompPrefix).
gnt gnt-instance add-tags "inst6.$DOMAIN" "$P:reinstall" "$P:suspend" >&2

harep_run() { "$GNT/gnt-tool.sh" harep --luxi="$NODECARE_GNT_LUXI_SOCKET" "$@" 2>&1 | grep -v -e '^Warning: cluster has inconsistent data' -e '^  - node ' -e '^$'; }
# The coordinator's configuration as on the master: its [rapi] section is what -L uses.
cat >"$OUT/coordinator.toml" <<TOML
state_dir = "$OUT/nodecare-state"
max_disrupted_nodes = 1
min_healthy_nodes = 1
[rapi]
url = "$NODECARE_GNT_RAPI_URL"
certificate = "$NODECARE_GNT_RAPI_CERT"
credentials = "$S/rapi-credentials"
TOML
nodecare_run() { "$NODECARE" harep -L -c "$OUT/coordinator.toml" "$@" 2>&1; }
# uuids, Unix times and the job lists of pending/result tags are per run.
normalise() {
  sed -E -e 's/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/<uuid>/g' \
    -e 's/:[0-9]{10}:/:<ts>:/g' \
    -e 's/(:(pending|result):[a-z-]+:<uuid>:<ts>:([a-z]+:)?)[0-9+]*/\1<jobs>/g'
}
autorepair_tags() {
  for i in inst1 inst2 inst3 inst6; do
    echo "$i: $(gnt gnt-instance list-tags "$i.$DOMAIN" | grep "^$P" | sort | tr '\n' ' ')"
  done
}
# The job ids listed in the pending and result tags (their last field).
jobs_in_tags() {
  autorepair_tags | tr ' ' '\n' | grep -E ":(pending|result):" | sed -E 's/.*://' | tr '+' '\n' | grep -E '^[0-9]+$' | sort -un
}
wait_jobs() { for j in "$@"; do gnt gnt-job watch "$j" >/dev/null 2>&1 || true; done; }
# The opcodes of each job (one line per job); the whole `gnt-job info` goes to $OUT/<tag>-jobs.txt.
job_ops() {
  local tag=$1
  shift
  : >"$OUT/$tag-jobs.txt"
  for j in "$@"; do
    gnt gnt-job info "$j" 2>/dev/null | tee -a "$OUT/$tag-jobs.txt" | sed -n -E 's/^ *- Opcode: *(OP_[A-Z_]+).*/\1/p' | tr '\n' ' '
    echo
  done
}
restore_tags() {
  for i in inst1 inst2 inst3 inst6; do
    local extra
    extra=$(gnt gnt-instance list-tags "$i.$DOMAIN" | grep -E "^$P:(pending|result):" || true)
    # shellcheck disable=SC2086
    [[ -n $extra ]] && gnt gnt-instance remove-tags "$i.$DOMAIN" $extra >&2
  done
}

# ---- 1. dry runs ----
log "dry runs"
harep_run --dry-run >"$OUT/harep-dry.txt"
nodecare_run --dry-run >"$OUT/nodecare-dry.txt"
if diff <(grep -v '^jobs: ' "$OUT/harep-dry.txt" | normalise) <(grep -v '^jobs: ' "$OUT/nodecare-dry.txt" | normalise) >"$OUT/dry.diff"; then
  pass "dry runs print the same lines (jobs lines aside)"
else
  fail "dry runs" "differ, see $OUT/dry.diff"
fi
# The bare suspend: both leave inst6 alone, with harep's line for a suspended broken instance.
SUSPENDED_LINE="Not repairing inst6.$DOMAIN because it's in state ArSuspended Forever"
if grep -qxF "$SUSPENDED_LINE" "$OUT/harep-dry.txt" && grep -qxF "$SUSPENDED_LINE" "$OUT/nodecare-dry.txt"; then
  pass "bare suspend tag: both dry runs leave inst6 suspended forever"
else
  fail "bare suspend (dry run)" "no '$SUSPENDED_LINE' line in both $OUT/harep-dry.txt and $OUT/nodecare-dry.txt"
fi
TAGS0=$(autorepair_tags)

# ---- 2. real harep, twice ----
log "harep real runs"
harep_run --job-delay=0 >"$OUT/harep-run1.txt"
mapfile -t HJOBS < <(jobs_in_tags)
wait_jobs "${HJOBS[@]}"
harep_run --job-delay=0 >"$OUT/harep-run2.txt"
autorepair_tags >"$OUT/harep-tags.txt"
job_ops harep "${HJOBS[@]}" >"$OUT/harep-ops.txt"
restore_tags
[[ "$(autorepair_tags)" == "$TAGS0" ]] || fail "restore" "tags differ after restoring"

# ---- 3. nodecare, until it has nothing left to do ----
log "nodecare real runs"
# nodecare does not wait for its jobs (harep waits for its tag jobs), and submits a repair's
# next job only once the one before has succeeded: run it until it has nothing left to do,
# waiting for every job in between.
wait_all_jobs() {
  for _ in $(seq 1 120); do
    gnt gnt-job list --no-headers -o status | grep -qE 'queued|waiting|running|canceling' || return 0
    sleep 1
  done
  return 1
}
: >"$OUT/nodecare-runs.txt"
for n in 1 2 3 4; do
  nodecare_run --job-delay=0 >"$OUT/nodecare-run$n.txt"
  cat "$OUT/nodecare-run$n.txt" >>"$OUT/nodecare-runs.txt"
  wait_all_jobs || fail "nodecare jobs" "still running after 120 s"
  [[ $(autorepair_tags | grep -o ':result:' | wc -l) -ge 2 ]] && break
done
mapfile -t NJOBS < <(jobs_in_tags)
autorepair_tags >"$OUT/nodecare-tags.txt"
job_ops nodecare "${NJOBS[@]}" >"$OUT/nodecare-ops.txt"
if grep -q 'gnt:daemon:maintd nodecare incident=' "$OUT/nodecare-jobs.txt"; then
  pass "nodecare's jobs carry the reason trail with the repair uuid"
else
  fail "reason trail" "no gnt:daemon:maintd entry in $OUT/nodecare-jobs.txt"
fi

if diff <(normalise <"$OUT/harep-tags.txt") <(normalise <"$OUT/nodecare-tags.txt") >"$OUT/tags.diff"; then
  pass "real runs leave the same tags"
else
  fail "real runs" "tags differ, see $OUT/tags.diff"
fi
grep -q "inst3: $P:failover $P:suspend: $" "$OUT/nodecare-tags.txt" && pass "suspended instance left alone" ||
  fail "suspend" "inst3's tags changed: $(grep inst3 "$OUT/nodecare-tags.txt")"
if grep -qxF "inst6: $P:reinstall $P:suspend " "$OUT/harep-tags.txt" &&
  grep -qxF "inst6: $P:reinstall $P:suspend " "$OUT/nodecare-tags.txt"; then
  pass "bare suspend tag: neither harep nor nodecare touches inst6"
else
  fail "bare suspend" "inst6's tags changed: harep: $(grep inst6 "$OUT/harep-tags.txt"); nodecare: $(grep inst6 "$OUT/nodecare-tags.txt")"
fi
# Opcodes: the first repair opcode of each job (harep's jobs hold all of a repair's opcodes, the
# later ones never run once the first fails; nodecare submits the next job only after the one
# before succeeded), without harep's delay opcode and RAPI's reinstall wrapping.
first_ops() {
  sed -E 's/OP_TEST_DELAY|OP_INSTANCE_SHUTDOWN|OP_INSTANCE_STARTUP//g' | awk 'NF {print $1}' | sort | tr '\n' ' '
}
H_OPS=$(first_ops <"$OUT/harep-ops.txt")
N_OPS=$(first_ops <"$OUT/nodecare-ops.txt")
if [[ -n $H_OPS && $H_OPS == "$N_OPS" ]]; then
  pass "same repair opcodes run ($H_OPS)"
else
  fail "opcodes" "harep: $H_OPS; nodecare: $N_OPS"
fi
for f in harep-dry nodecare-dry harep-run1 harep-run2 nodecare-runs harep-tags nodecare-tags harep-ops nodecare-ops; do
  echo "---- $f"; cat "$OUT/$f.txt"
done >"$OUT/all.txt"
echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
