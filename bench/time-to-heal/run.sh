#!/bin/bash
# Time-to-heal on a real Ganeti 3.0.2 cluster (5 namespace nodes, tests/ganeti/), with the
# package's default intervals (agent diagnose every 60 s, coordinator round every 30 s): a node
# with 5 instances says `evacuate`; measured are the moments the diagnose script first prints the
# new verdict, the first Ganeti job is received, the node holds no primary instance, and the
# repairready tag is on the node. Two runs in one cluster: round by round (`job_chains = false`,
# node2, 4 possible targets) then job chains (the default, node3, 3 possible targets).
# Root, Debian 12; release binaries in target/release (built unless --no-build). CI runs its smoke
# mode (BENCH_SMOKE=1: debug binaries, agents diagnose and the coordinator rounds every 2 s, the
# job-chain run only).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GNT=$ROOT/tests/ganeti
# shellcheck disable=SC1091
. "$ROOT/bench/lib.sh"
# The package's defaults: agents diagnose every 60 s, the coordinator rounds every 30 s.
DIAGNOSE_S=$(bench_size 2 60)
ROUND_S=$(bench_size 2 30)
# The coordinator's first rounds (every agent seen Ok) before a verdict flips.
FIRST_ROUNDS_S=$(bench_size 10 35)
BUILD=1
for a in "$@"; do
  case $a in
    --no-build) BUILD=0 ;;
    *) echo "usage: $0 [--no-build]" >&2; exit 2 ;;
  esac
done
export NODECARE_GNT_STATE=${NODECARE_GNT_STATE:-/tmp/nodecare-heal}
export NODECARE_GNT_PREFIX=${NODECARE_GNT_PREFIX:-nch}
export NODECARE_GNT_RAPI_PORT=${NODECARE_GNT_RAPI_PORT:-15280}
export NODECARE_GNT_MOND_FWD_BASE=${NODECARE_GNT_MOND_FWD_BASE:-25350}
COORD_PORT=1817
INSTANCES="a1:diskless:2,a2:diskless:2,a3:diskless:2,a4:diskless:2,a5:sharedfile:2,b1:diskless:3,b2:diskless:3,b3:diskless:3,b4:diskless:3,b5:sharedfile:3"
log() { echo "heal[$(date +%T)]: $*" >&2; }
[[ $(id -u) -eq 0 ]] || { echo "must run as root" >&2; exit 2; }
cleanup() {
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1 || true
  "$GNT/cluster-down.sh" --quiet || true
}
trap cleanup EXIT
if [[ $BUILD -eq 1 ]]; then
  (cd "$ROOT" && bench_build -p nodecare-agent -p nodecare-coordinator) || exit 1
fi
AGENT=$ROOT/$BENCH_TARGET/nodecare-agent
COORD=$ROOT/$BENCH_TARGET/nodecare-coordinator
log "cluster up (5 nodes)"
"$GNT/cluster-up.sh" --nodes 5 --instances "$INSTANCES" --no-mond >&2 || { echo "cluster-up failed" >&2; exit 1; }
# shellcheck disable=SC1091
. "$NODECARE_GNT_STATE/cluster.env"
S=$NODECARE_GNT_STATE
RAPI_PW=$(<"$NODECARE_GNT_RAPI_PASSWORD_FILE")
printf '%s:%s\n' "$NODECARE_GNT_RAPI_USER" "$RAPI_PW" >"$S/rapi-credentials"
chmod 600 "$S/rapi-credentials"
rapi() { curl -sk -m 30 -u "$NODECARE_GNT_RAPI_USER:$RAPI_PW" "$NODECARE_GNT_RAPI_URL$1"; }
py() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }
mkdir -p "$S/heal"
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
  root_var="NODECARE_GNT_NODE${i}_ROOT" ip_var="NODECARE_GNT_NODE${i}_IP" name_var="NODECARE_GNT_NODE${i}_NAME"
  nroot=${!root_var}
  echo '{"status":"Ok","details":"bench"}' >"$S/heal/diag-$i"
  install -d -o root -g root -m 0755 "$nroot/etc/ganeti/node-diagnose-commands"
  # Prints the verdict; the first time it prints a non-Ok one, it notes the moment.
  printf '#!/bin/sh\ncat %s\ngrep -q evacuate %s && [ ! -e %s ] && date +%%s.%%N > %s\nexit 0\n' \
    "$S/heal/diag-$i" "$S/heal/diag-$i" "$S/heal/printed-$i" "$S/heal/printed-$i" \
    >"$nroot/etc/ganeti/node-diagnose-commands/bench-state"
  chmod 0755 "$nroot/etc/ganeti/node-diagnose-commands/bench-state"
  "$GNT/node-exec.sh" "$i" --bg "agent-$i" "$AGENT" --listen "${!ip_var}:1815" --node-name "${!name_var}" \
    --hmac-key /var/lib/ganeti/hmac.key --state-dir "$S/heal/agent-state-$i" \
    --diagnose-dir /etc/ganeti/node-diagnose-commands --diagnose-interval-secs "$DIAGNOSE_S" --log info >/dev/null || exit 1
done
run() { # NAME NODE-INDEX JOB_CHAINS
  local name=$1 i=$2 chains=$3 node_var="NODECARE_GNT_NODE${2}_NAME"
  local node=${!node_var}
  printf 'job_chains = %s\n' "$chains" >"$S/heal/coord-$name.toml"
  "$GNT/node-exec.sh" 1 --bg coordinator "$COORD" --config "$S/heal/coord-$name.toml" \
    --node-name "$NODECARE_GNT_MASTER" --state-dir "$S/heal/coord-state-$name" \
    --listen "$NODECARE_GNT_NODE1_IP:$COORD_PORT" --hmac-key /var/lib/ganeti/hmac.key \
    --rapi-url "https://$NODECARE_GNT_CLUSTER_IP:5080" --rapi-certificate /var/lib/ganeti/rapi.pem \
    --rapi-credentials "$S/rapi-credentials" --max-disrupted-nodes 2 --min-healthy-nodes 2 \
    --round-interval "$ROUND_S" >/dev/null || exit 1
  sleep "$FIRST_ROUNDS_S" # the coordinator's first rounds: every agent seen Ok
  local last_job
  last_job=$(rapi "/2/jobs" | py "print(max([int(j['id']) for j in d] or [0]))")
  log "$name: $node says evacuate"
  local flip empty="" tagged="" k
  flip=$(date +%s.%N)
  echo '{"status":"evacuate","details":"bench: disk dying"}' >"$S/heal/diag-$i"
  for ((k = 0; k < 1200; k++)); do
    local nj
    nj=$(rapi "/2/nodes/$node")
    if [[ -z $empty ]] && py "sys.exit(0 if not d['pinst_list'] else 1)" <<<"$nj" 2>/dev/null; then empty=$(date +%s.%N); fi
    if py "sys.exit(0 if any(t.startswith('maintd:repairready:') for t in d['tags']) else 1)" <<<"$nj" 2>/dev/null; then
      tagged=$(date +%s.%N); break
    fi
    sleep 0.5
  done
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1
  local first_job
  first_job=$(rapi "/2/jobs?bulk=1" | py "
js=[j for j in d if int(j['id'])>$last_job]
j=min(js,key=lambda j:int(j['id'])) if js else None
print('%d.%06d' % tuple(j['received_ts']) if j else '')")
  local jobs
  jobs=$(rapi "/2/jobs" | py "print(len([j for j in d if int(j['id'])>$last_job]))")
  local printed
  printed=$(cat "$S/heal/printed-$i" 2>/dev/null || echo "")
  python3 - "$name" "$flip" "$printed" "$first_job" "$empty" "$tagged" "$jobs" <<'PY'
import sys
name, flip, printed, first, empty, tagged, jobs = sys.argv[1:]
def since(t, base):
    return f"{float(t) - float(base):6.1f} s" if t and base else "   n/a"
print(f"{name:14} verdict printed {since(printed, flip)} after the flip; from the printed verdict: "
      f"first job {since(first, printed)}, node empty {since(empty, printed)}, "
      f"repairready tag {since(tagged, printed)}; {jobs} Ganeti jobs")
PY
}
echo "time to heal, 5-node Ganeti 3.0.2 cluster, node with 5 instances, diagnose every $DIAGNOSE_S s, rounds every $ROUND_S s"
[[ $BENCH_SMOKE == 1 ]] || run round-by-round 2 false
run chains 3 true
