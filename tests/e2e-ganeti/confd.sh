#!/usr/bin/env bash
# nodecare-agent against a REAL Ganeti 3.0.2 confd (namespaces on this machine).
#
#   tests/e2e-ganeti/confd.sh [--keep]
#
# Needs root on Debian 12 and the Ganeti packages (tests/ganeti/install-packages.sh, run here
# when missing) and a built agent: $NODECARE_AGENT_BIN, else target/release/nodecare-agent,
# else target/debug/nodecare-agent. Brings up a 2-node cluster of its own (state dir, netns
# prefix and ports distinct from tests/e2e-ganeti/run.sh and from the defaults), runs the agent
# in node2 on <node2-ip>:1815 with the node's own hmac.key and ssconf, and checks:
#   C1 the collector configuration comes from confd: diskstats and drbd, disabled by
#      cluster-up.sh, are absent from /1/list/collectors and /1/report/all, and their report
#      paths answer mond's 404;
#   C2 node2's primary instances and DRBD minors in the agent's confd view equal what the
#      cluster says (gnt-instance list; no DRBD here, so the minors are the empty list) and
#      what a direct signed confd query answers;
#   C3 gnt-cluster modify --enabled-data-collectors=lv=false removes lv within the confd
#      refresh interval + margin; lv=true brings it back;
#   C4 the cluster's data collector interval cpu-avg-load=1 s (OpClusterSetParams through RAPI,
#      as gnt-cluster 3.0.2's --data-collector-interval crashes) makes the agent collect
#      cpu-avg-load every second (the default is 5 s).
# Prints PASS/FAIL per check; exit 1 if any failed. The cluster is removed at the end unless
# --keep.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GNT=$ROOT/tests/ganeti

KEEP=0
for a in "$@"; do
  case $a in
    --keep) KEEP=1 ;;
    *) echo "usage: $0 [--keep]" >&2; exit 2 ;;
  esac
done

export NODECARE_GNT_STATE=${NODECARE_CONFD_E2E_STATE:-/tmp/nodecare-confd}
export NODECARE_GNT_PREFIX=${NODECARE_CONFD_E2E_PREFIX:-ncc}
export NODECARE_GNT_RAPI_PORT=${NODECARE_CONFD_E2E_RAPI_PORT:-15280}
export NODECARE_GNT_MOND_FWD_BASE=${NODECARE_CONFD_E2E_MOND_FWD_BASE:-18250}
# The agent asks confd every 15 s and re-reads its collectors' configuration every second.
CONFD_BOUND=${NODECARE_CONFD_E2E_BOUND:-25}
INSTANCES="inst1:diskless:2,inst2:diskless:2,inst3:diskless:1"

T0=$(date +%s)
FAILED=0
log() { echo "confd-e2e[$(( $(date +%s) - T0 ))s]: $*" >&2; }
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; FAILED=1; }

[[ $(id -u) -eq 0 ]] || { echo "confd-e2e: must run as root" >&2; exit 2; }

AGENT=${NODECARE_AGENT_BIN:-}
if [[ -z $AGENT ]]; then
  for candidate in "$ROOT/target/release/nodecare-agent" "$ROOT/target/debug/nodecare-agent"; do
    if [[ -x $candidate ]]; then AGENT=$candidate; break; fi
  done
fi
[[ -n $AGENT && -x $AGENT ]] || { echo "confd-e2e: no nodecare-agent binary (cargo build --release -p nodecare-agent)" >&2; exit 2; }
command -v curl >/dev/null || { echo "confd-e2e: curl is missing" >&2; exit 2; }
command -v jq >/dev/null || { echo "confd-e2e: jq is missing" >&2; exit 2; }

cleanup() {
  if [[ $KEEP -eq 0 ]]; then "$GNT/cluster-down.sh" --quiet || true; fi
}
trap cleanup EXIT

"$GNT/install-packages.sh" >&2 || { echo "confd-e2e: package installation failed" >&2; exit 1; }

log "cluster up (2 nodes, instances $INSTANCES)"
ENV_FILE=$("$GNT/cluster-up.sh" --nodes 2 --instances "$INSTANCES" --no-mond | tail -n 1)
if [[ ! -f $ENV_FILE ]]; then
  echo "FAIL cluster-up: no env file"; exit 1
fi
# shellcheck disable=SC1090
. "$ENV_FILE"
log "cluster up: $ENV_FILE"

N=2
NODE=$NODECARE_GNT_NODE2_NAME
IP=$NODECARE_GNT_NODE2_IP
URL="http://$NODECARE_GNT_NODE2_MOND_FWD"
WORK=$NODECARE_GNT_STATE/confd-e2e
mkdir -p "$WORK/diagnose" "$WORK/state"
chown root:root "$WORK" "$WORK/diagnose"
chmod 0755 "$WORK" "$WORK/diagnose"
printf '#!/bin/sh\necho '"'"'{"status":"Ok"}'"'"'\n' >"$WORK/diagnose/ok"
chown root:root "$WORK/diagnose/ok"
chmod 0755 "$WORK/diagnose/ok"

log "agent $AGENT in node $N ($NODE) on $IP:1815"
"$GNT/node-exec.sh" $N --bg confd-agent "$AGENT" --listen "$IP:1815" --node-name "$NODE" \
  --hmac-key /var/lib/ganeti/hmac.key --state-dir "$WORK/state" \
  --diagnose-dir "$WORK/diagnose" --log info >/dev/null

get() { curl -sS --max-time 5 "$URL$1"; }
status_of() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL$1"; }
list_names() { get /1/list/collectors | jq -c '[.[][0]]'; }
all_names() { get /1/report/all | jq -c '[.[].name]'; }

# Wait until the agent has a complete answer from confd.
deadline=$(( $(date +%s) + 30 ))
until view=$(get /1/debug/confd 2>/dev/null) && [[ $(jq -r '.refreshed_age_s != null and .data_collectors != null' <<<"$view" 2>/dev/null) == true ]]; do
  if (( $(date +%s) > deadline )); then
    echo "FAIL agent: no confd view within 30 s: ${view:-no answer}"
    tail -n 20 "$NODECARE_GNT_STATE/logs/bg-confd-agent.log" >&2
    exit 1
  fi
  sleep 0.5
done
sleep 1.5  # the scheduler applies a new view within a second
log "confd view: $(jq -c . <<<"$view")"

# C1: the cluster's collector configuration.
list=$(list_names); all=$(all_names)
log "list: $list; report/all: $all"
if [[ $(jq -r '.data_collectors.diskstats.active, .data_collectors.drbd.active, .data_collectors.lv.active' <<<"$view" | tr '\n' ' ') == "false false true " ]] \
  && jq -e 'index("diskstats") == null and index("drbd") == null and index("lv") != null and index("cpu-avg-load") != null' <<<"$list" >/dev/null \
  && jq -e 'index("diskstats") == null and index("drbd") == null and index("lv") != null' <<<"$all" >/dev/null \
  && [[ $(status_of /1/report/storage/diskstats) == 404 && $(status_of /1/report/storage/drbd) == 404 && $(status_of /1/report/storage/lv) == 200 ]]; then
  pass "C1 collectors disabled by the cluster (diskstats, drbd) are absent; lv present: $list"
else
  fail C1 "list $list, all $all, view $(jq -c .data_collectors <<<"$view")"
fi

# C2: instances and DRBD minors from confd.
expected=$("$GNT/node-exec.sh" 1 gnt-instance list --no-headers -o name --filter "pnode == \"$NODE\"" | sort | jq -R . | jq -sc .)
secondary=$("$GNT/node-exec.sh" 1 gnt-instance list --no-headers -o name --filter "\"$NODE\" in snodes" | sort | jq -R . | jq -sc .)
agent_primary=$(jq -c '[.instances.primary[].name] | sort' <<<"$view")
agent_secondary=$(jq -c '[.instances.secondary[].name] | sort' <<<"$view")
agent_minors=$(jq -c '.drbd_minors' <<<"$view")
direct=$(ip netns exec "$NODECARE_GNT_CLIENT_NETNS" "$GNT/confd-query.py" --key "$NODECARE_GNT_HMAC_KEY" \
  --type 8 --query "\"$NODE\"" "$NODECARE_GNT_NODE1_IP" 2>&1)
direct_primary=$(jq -c '.. | objects | select(has("answer")) | .answer[0] | map(if type == "object" then .name else . end) | sort' <<<"$direct" 2>/dev/null | head -n 1)
direct_drbd=$(ip netns exec "$NODECARE_GNT_CLIENT_NETNS" "$GNT/confd-query.py" --key "$NODECARE_GNT_HMAC_KEY" \
  --type 7 --query "\"$NODE\"" "$NODECARE_GNT_NODE1_IP" 2>&1)
direct_minors=$(jq -c '.. | objects | select(has("answer")) | .answer' <<<"$direct_drbd" 2>/dev/null | head -n 1)
log "gnt-instance: primary $expected secondary $secondary; agent: primary $agent_primary secondary $agent_secondary minors $agent_minors; direct confd: primary ${direct_primary:-$direct} minors ${direct_minors:-$direct_drbd}"
if [[ $expected != "[]" && $agent_primary == "$expected" && $agent_secondary == "$secondary" ]] \
  && [[ $direct_primary == "$expected" && $agent_minors == "$direct_minors" && $agent_minors == "[]" ]]; then
  pass "C2 node instances from confd: primary $agent_primary (gnt-instance and a direct confd query: $expected), secondary $agent_secondary; DRBD pairing $agent_minors (direct confd query: $direct_minors)"
else
  fail C2 "agent primary $agent_primary secondary $agent_secondary minors $agent_minors; cluster primary $expected secondary $secondary; direct ${direct_primary:-$direct} / ${direct_minors:-$direct_drbd}"
fi

# C3: disabling and re-enabling lv at run time.
wait_for() {  # wait_for <seconds> <command...>: time taken, or nothing on timeout
  local limit=$1; shift
  local start; start=$(date +%s.%N)
  local end; end=$(echo "$start + $limit" | bc)
  while (( $(echo "$(date +%s.%N) < $end" | bc) )); do
    if "$@"; then echo "$(date +%s.%N) - $start" | bc | xargs printf '%.1f'; return 0; fi
    sleep 0.5
  done
  return 1
}
lv_listed() { jq -e 'index("lv") != null' <<<"$(list_names)" >/dev/null; }
lv_gone() { ! lv_listed && [[ $(status_of /1/report/storage/lv) == 404 ]] && jq -e 'index("lv") == null' <<<"$(all_names)" >/dev/null; }
"$GNT/node-exec.sh" 1 gnt-cluster modify --enabled-data-collectors=lv=false >&2
if took=$(wait_for "$CONFD_BOUND" lv_gone); then
  pass "C3a gnt-cluster modify --enabled-data-collectors=lv=false: lv gone from the list, report/all and its path after ${took} s (bound ${CONFD_BOUND} s)"
else
  fail C3a "lv still listed after ${CONFD_BOUND} s: $(list_names)"
fi
"$GNT/node-exec.sh" 1 gnt-cluster modify --enabled-data-collectors=lv=true >&2
lv_back() { lv_listed && [[ $(status_of /1/report/storage/lv) == 200 ]]; }
if took=$(wait_for "$CONFD_BOUND" lv_back); then
  pass "C3b --enabled-data-collectors=lv=true: lv back after ${took} s"
else
  fail C3b "lv not back after ${CONFD_BOUND} s: $(list_names)"
fi

# C4: the cluster's interval is honoured. gnt-cluster 3.0.2's --data-collector-interval
# crashes before submitting (it compares the collector names, not the intervals, with 0), so
# the same opcode parameter goes through RAPI (microseconds, as the CLI would send it).
rapi_port=${NODECARE_GNT_RAPI_URL##*:}
job=$(curl -sS --max-time 10 --cacert "$NODECARE_GNT_RAPI_CERT" \
  --resolve "$NODECARE_GNT_RAPI_CERT_CN:$rapi_port:127.0.0.1" \
  -u "$NODECARE_GNT_RAPI_USER:$(cat "$NODECARE_GNT_RAPI_PASSWORD_FILE")" \
  -X PUT -H 'Content-Type: application/json' \
  -d '{"data_collector_interval": {"cpu-avg-load": 1000000}}' \
  "https://$NODECARE_GNT_RAPI_CERT_CN:$rapi_port/2/modify")
log "RAPI /2/modify data_collector_interval cpu-avg-load=1 s: job $job"
interval_set() { [[ $(get /1/debug/confd | jq -r '.data_collectors["cpu-avg-load"].interval_ms') == 1000 ]]; }
if took=$(wait_for "$CONFD_BOUND" interval_set); then
  sleep 1.5
  stamps=()
  for _ in $(seq 1 12); do
    stamps+=("$(get /1/report/default/cpu-avg-load | jq -r .timestamp)")
    sleep 0.5
  done
  distinct=$(printf '%s\n' "${stamps[@]}" | sort -u | wc -l)
  # 6 s at a 1 s interval: about 6 collections; at the default 5 s it would be 1 or 2.
  if (( distinct >= 4 )); then
    pass "C4 data_collector_interval cpu-avg-load=1 s seen after ${took} s: $distinct distinct cpu-avg-load reports in 6 s"
  else
    fail C4 "only $distinct distinct cpu-avg-load reports in 6 s with a 1 s interval"
  fi
else
  fail C4 "interval not 1000 ms in the agent's confd view after ${CONFD_BOUND} s: $(get /1/debug/confd | jq -c .data_collectors)"
fi

"$GNT/node-exec.sh" $N --stop confd-agent >/dev/null 2>&1 || true
log "done"
exit $FAILED
