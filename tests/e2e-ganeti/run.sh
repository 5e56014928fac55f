#!/usr/bin/env bash
# End-to-end test of nodecare on a REAL Ganeti 3.0.2 cluster (namespaces on this machine).
#
#   tests/e2e-ganeti/run.sh [--no-build] [--keep] [--reuse]
#
# Needs root on Debian 12 and the Ganeti packages (tests/ganeti/install-packages.sh, run here
# when missing). Builds the release binaries unless --no-build (then target/release must hold
# nodecare-agent and nodecare-coordinator). Prints PASS/FAIL per scenario; exit 1 if any failed.
#
# Steps: 1. cluster up (5 nodes; diskless, sharedfile and file instances);
#        0. RAPI wiring on the real cluster (pinned cert, drain, migrate, tags, job wait,
#           reason trail read back) through the coordinator's client test;
#        then an agent in every node (diagnose script reading a state file we flip) and the
#        coordinator on the master, and the scenarios:
#        S1 evacuate verdict: instances migrated away, node offline (evacuate and offline),
#           repairready tag, completed;
#        S2 live-repair verdict: the repair command runs through the agent;
#        S3 evacuation that must fail (file instance): incident failed, repairfailed tag, no
#           further jobs;
#        S6 budget (issue 11): with node2 offline by S1's incident, node3 drained by hand and
#           saying evacuate waits with blocked_by while the budget is used, and is emptied
#           once node2 is returned to service (set online);
#        S4 stopped agent: shown unreachable, nothing happens to its node;
#        S5 replayed Ok: a static server replaying a stopped agent's last signed Ok makes the
#           node read stale/unreachable (or unverifiable: refused as a replay) within one report
#           lifetime, never ok, and starts nothing;
#        S7 the gate: node2 (rack:a) and node3 (rack:b) say evacuate at once: node2 proceeds,
#           node3 waits naming rack:a; an admission request (curl) for node1 (rack:c) is refused
#           with 429 while a domain is busy; an override of rack:b lets node3 start and expires;
#           once both racks are returned to service, node1's admission is granted and released;
#           `nodecare check` makes an agent run its diagnose scripts at once.
#        S7 filter (s7-filter.sh) a Ganeti job filter (`gnt-filter add --action=PAUSE` on
#           nodecare's reason, docs/ganeti-filters.md) holds nodecare's job queued; deleted, the
#           job runs.
#        S10 (s10-campaign.sh) a rolling maintenance campaign over every node survives a kill -9
#           of the coordinator: hooks once each, no instance down, primaries back.
#        S10c (s10c-failback.sh) the escalation ladder, an approval of a large evacuation with
#           its ticket in every job, evacuation priority, failback of its instances.
#        S11 (s11-failover.sh, last) Ganeti master failovers with coordinators on three master
#           candidates: the standbys act on nothing; mid-evacuation `gnt-cluster
#           master-failover` to node2, whose coordinator finishes the evacuation while the old
#           one stands by; canceled and acknowledged incidents stay so; no job twice; then the
#           master's daemons killed and `master-failover --no-voting` to node1.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GNT=$ROOT/tests/ganeti

BUILD=1
KEEP=0
REUSE=0
for a in "$@"; do
  case $a in
    --no-build) BUILD=0 ;;
    --keep) KEEP=1 ;;
    # The cluster a --keep run left up (its agents and coordinator started again, the
    # coordinator's state kept): for developing a scenario with NODECARE_E2E_ONLY.
    --reuse) REUSE=1 KEEP=1 ;;
    *) echo "usage: $0 [--no-build] [--keep] [--reuse]" >&2; exit 2 ;;
  esac
done

# Our own cluster, namespaces and ports: never collide with a developer's default cluster.
export NODECARE_GNT_STATE=${NODECARE_E2E_STATE:-/tmp/nodecare-e2e}
export NODECARE_GNT_PREFIX=${NODECARE_E2E_PREFIX:-nce2e}
export NODECARE_GNT_RAPI_PORT=${NODECARE_E2E_RAPI_PORT:-15180}
export NODECARE_GNT_MOND_FWD_BASE=${NODECARE_E2E_MOND_FWD_BASE:-25250}
COORD_PORT=1817
COORD_FWD=${NODECARE_E2E_COORD_PORT:-15181}
INSTANCES="inst1:diskless:2,inst2:diskless:2,inst3:sharedfile:2,inst4:diskless:1,inst5:file:3,inst6:diskless:1"

T0=$(date +%s)
RESULTS=()
FAILED=0
log() { echo "e2e[$(( $(date +%s) - T0 ))s]: $*" >&2; }
pass() { RESULTS+=("PASS $1"); echo "PASS $1"; }
fail() { RESULTS+=("FAIL $1: $2"); echo "FAIL $1: $2"; FAILED=1; }
skip() { RESULTS+=("SKIP $1: $2"); echo "SKIP $1: $2"; }
# NODECARE_E2E_ONLY="gate harep": run only these of the scenarios defined as functions (S1–S3,
# S4 and the setup always run: later scenarios build on the state they leave). Scenarios in
# STANDALONE set up what they need themselves: when NODECARE_E2E_ONLY names only those, S0 and
# S1–S4 are left out too (the cluster, the agents, the coordinator and the full candidate pool
# stay).
want() { [[ -z ${NODECARE_E2E_ONLY:-} || " $NODECARE_E2E_ONLY " == *" $1 "* ]]; }
STANDALONE=" seams freeze failback "
base() {
  local w
  [[ -n ${NODECARE_E2E_ONLY:-} ]] || return 0
  for w in $NODECARE_E2E_ONLY; do [[ $STANDALONE == *" $w "* ]] || return 0; done
  return 1
}

[[ $(id -u) -eq 0 ]] || { echo "e2e: must run as root" >&2; exit 2; }

cleanup() {
  if [[ $KEEP -eq 0 ]]; then "$GNT/cluster-down.sh" --quiet || true; fi
}
trap cleanup EXIT

"$GNT/install-packages.sh" >&2 || { echo "e2e: package installation failed" >&2; exit 1; }

if [[ $BUILD -eq 1 ]]; then
  log "building release binaries"
  (cd "$ROOT" && cargo build --release -p nodecare-agent -p nodecare-coordinator -p nodecare-cli) >&2 || { echo "e2e: build failed" >&2; exit 1; }
fi
# NODECARE_E2E_AGENT / NODECARE_E2E_COORDINATOR: other binaries (e.g. debug builds, --no-build).
AGENT=${NODECARE_E2E_AGENT:-$ROOT/target/release/nodecare-agent}
COORD=${NODECARE_E2E_COORDINATOR:-$ROOT/target/release/nodecare-coordinator}
for b in "$AGENT" "$COORD"; do [[ -x $b ]] || { echo "e2e: $b missing" >&2; exit 1; }; done

if [[ $REUSE -eq 1 && -s $NODECARE_GNT_STATE/cluster.env ]] && "$GNT/master-daemons.sh" check --timeout 5 >/dev/null 2>&1; then
  log "reusing the cluster in $NODECARE_GNT_STATE"
  # The coordinator first: agents stopped under it would open its storm breaker.
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1 || true
  for ((i = 1; i <= 5; i++)); do "$GNT/node-exec.sh" "$i" --stop "agent-$i" >/dev/null 2>&1 || true; done
else
  log "cluster up"
  "$GNT/cluster-up.sh" --nodes 5 --instances "$INSTANCES" --no-mond >&2 || { echo "e2e: cluster-up failed" >&2; exit 1; }
fi
# shellcheck disable=SC1091
. "$NODECARE_GNT_STATE/cluster.env"
# shellcheck source=lib.sh
. "$HERE/lib.sh"
S=$NODECARE_GNT_STATE
RAPI_PW=$(<"$NODECARE_GNT_RAPI_PASSWORD_FILE")
printf '%s:%s\n' "$NODECARE_GNT_RAPI_USER" "$RAPI_PW" >"$S/rapi-credentials"
chmod 600 "$S/rapi-credentials"


# Before each scenario (and every 20 s while one waits) check the cluster with short timeouts:
# every node's private mounts, LUXI and wconfd on the master, RAPI. When something is broken
# (a mount detached by someone removing a mount-point directory in the root namespace; luxid or
# wconfd not answering), tests/ganeti/master-daemons.sh repairs it and its WARN lines go to the
# summary. A repair never makes a scenario pass: each scenario's own checks decide.
REPAIRS=()
CURRENT=setup
master_healthy() { # SCENARIO
  local why warn line
  CURRENT=${1%% *}
  if why=$("$GNT/master-daemons.sh" check --timeout 5); then
    curl -skf -m 15 -u "$NODECARE_GNT_RAPI_USER:$RAPI_PW" "$NODECARE_GNT_RAPI_URL/2/info" >/dev/null ||
      log "before $1: RAPI /2/info does not answer (LUXI and wconfd do)"
    return 0
  fi
  log "before $1: ${why//$'\n'/; }"
  warn=$("$GNT/master-daemons.sh" heal --reason "before $1: ${why//$'\n'/; }" 2>&1) ||
    warn+=$'\n'"ERROR the cluster is still unhealthy before $1"
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    REPAIRS+=("$line (before $1)")
    echo "$line (before $1)"
  done <<<"$warn"
}

# ---- scenario 0: the RAPI client on the real cluster -------------------------------------
master_healthy S0
# The test profile, so that CI reuses the test binaries its test run has built already.
# When a job wait fails the test repairs the cluster with master-daemons.sh and waits once more.
if ! base; then
  skip "S0 RAPI client" "only standalone scenarios selected"
elif log "S0 RAPI client against the real cluster" && (cd "$ROOT" && NODECARE_GNT_ENV=$S/cluster.env NODECARE_GNT_MASTER_HEAL="$GNT/master-daemons.sh" cargo test --locked -p nodecare-ganeti \
  --test rapi_real_ganeti -- --nocapture) >"$S/logs/s0.log" 2>&1; then
  pass "S0 RAPI client: pinned v1 cert, drain/undrain, migrate diskless, tags, job wait, job query, reason trail, OpPrereqError"
else
  fail "S0 RAPI client" "see $S/logs/s0.log: $(grep -m1 -E 'panicked|error' "$S/logs/s0.log")"
fi

# ---- agents and coordinator ----------------------------------------------------------------
# The diagnose verdict of node i is the JSON in $S/e2e/diag-<i>; a repair command writes a
# marker file so we can see it ran through the agent.
mkdir -p "$S/e2e"
# Agents diagnose every 2 s; a signed report lives 3 intervals.
AGENT_INTERVAL=2
REPORT_LIFETIME=$((3 * AGENT_INTERVAL))
ROUND_INTERVAL=2
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
  root_var="NODECARE_GNT_NODE${i}_ROOT"
  nroot=${!root_var}
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"
  # Each node's own boot id (the nodes share one kernel): a "reboot" writes a new one.
  cat /proc/sys/kernel/random/uuid >"$S/e2e/boot_id-$i"
  for d in node-diagnose-commands node-repair-commands; do
    install -d -o root -g root -m 0755 "$nroot/etc/ganeti/$d"
  done
  printf '#!/bin/sh\ncat %s\n' "$S/e2e/diag-$i" >"$nroot/etc/ganeti/node-diagnose-commands/e2e-state"
  printf '#!/bin/sh\necho "repaired by $0" > %s\necho done\n' "$S/e2e/repaired-$i" >"$nroot/etc/ganeti/node-repair-commands/e2e-fix"
  chmod 0755 "$nroot/etc/ganeti/node-diagnose-commands/e2e-state" "$nroot/etc/ganeti/node-repair-commands/e2e-fix"
  start_agent "$i" || { echo "e2e: agent $i did not start (see $S/logs/bg-agent-$i.log)" >&2; exit 1; }
done
# Failure domains from `rack:` node tags (nodes without one share the domain `rack:?`, as one node
# group would); a small cluster's scenarios open incidents on most nodes within minutes, which
# the storm breaker's defaults would take for a storm.
printf 'e2e e2e-secret write\n' >"$S/e2e/users"
chmod 600 "$S/e2e/users"
cat >"$S/e2e/coord.toml" <<TOML
failure_domains = "rack:"
users = "$S/e2e/users"
[breaker]
max_incident_percent = 100.0
max_incident_nodes = 10
# S8: inert until an instance, node group or the cluster carries an autorepair tag.
[instance_repair]
enabled = true
# As packaged: the state is kept by the master candidates' agents (every node here).
[replication]
enabled = true
TOML
# Scenarios may restart it (same state) with more in coord.toml.
start_coordinator() {
  "$GNT/node-exec.sh" 1 --bg coordinator "$COORD" --config "$S/e2e/coord.toml" --node-name "$NODECARE_GNT_MASTER" --state-dir "$S/e2e/coord-state" \
    --listen "$NODECARE_GNT_NODE1_IP:$COORD_PORT" --round-interval "$ROUND_INTERVAL" --hmac-key /var/lib/ganeti/hmac.key \
    --rapi-url "https://$NODECARE_GNT_CLUSTER_IP:5080" --rapi-certificate /var/lib/ganeti/rapi.pem \
    --rapi-credentials "$S/rapi-credentials" --max-disrupted-nodes 1 --min-healthy-nodes 1 >/dev/null
}
# Jobs nodecare submits from here on (S0's client test submitted some with the same trail).
COORD_STARTED=$(date +%s)
start_coordinator || { echo "e2e: coordinator did not start (see $S/logs/bg-coordinator.log)" >&2; exit 1; }
"$GNT/forward.sh" 1 "$COORD_PORT" "$COORD_FWD" >/dev/null || { echo "e2e: cannot forward the coordinator port" >&2; exit 1; }
coord() { curl -s -m 10 "http://127.0.0.1:$COORD_FWD$1"; }

# Wait until the coordinator answers and has seen every agent.
ready=0
for _ in $(seq 60); do
  if coord /1/agents >"$S/e2e/agents.json" 2>/dev/null && [[ -s $S/e2e/agents.json ]]; then ready=1; break; fi
  sleep 1
done
if [[ $ready -ne 1 ]]; then
  fail "setup" "coordinator API never answered (see $S/logs/bg-coordinator.log)"
fi
# A reused cluster's storm breaker may have been opened by the run before (agents stopped).
if [[ $REUSE -eq 1 ]] && coord /1/breaker | jq_py "sys.exit(0 if d.get('open') else 1)" 2>/dev/null; then
  curl -s -m 10 -u e2e:e2e-secret -H 'Content-Type: application/json' -X POST \
    --data '{"reason":"e2e: cluster reused"}' "http://127.0.0.1:$COORD_FWD/1/breaker/reset" >/dev/null
fi

# wait_until SECONDS PYTHON-CONDITION-ON-STATUS-JSON: polls /1/status
wait_status() {
  local secs=$1 cond=$2 k
  for ((k = 1; k <= secs; k++)); do
    if coord /1/status 2>/dev/null | jq_py "sys.exit(0 if ($cond) else 1)" 2>/dev/null; then return 0; fi
    # A long wait may hide wedged master daemons: look every 20 s.
    if ((k % 20 == 0)); then master_healthy "$CURRENT (after ${k}s of waiting)"; fi
    sleep 1
  done
  return 1
}

# The flight recorder (`nodecare explain`, issue 30).
CLI=${NODECARE_E2E_CLI:-$ROOT/target/release/nodecare}
# explain_refused SCENARIO NODE: NODE's waiting incident, explained by `nodecare explain UUID`,
# names the rule that refused it and the very blocked_by (holders included) /1/status shows.
explain_refused() {
  local sc=$1 n=$2 status id why text
  status=$(coord /1/status)
  id=$(jq_py "print(next(i['id'] for i in d if i.get('node')=='$n' and i.get('blocked_by')))" <<<"$status" 2>/dev/null)
  why=$(jq_py "print(next(i['blocked_by'] for i in d if i.get('node')=='$n' and i.get('blocked_by')))" <<<"$status" 2>/dev/null)
  [[ -n $id && -n $why ]] || { fail "$sc explain" "no waiting incident of $n: $(head -c 300 <<<"$status")"; return; }
  text=$("$CLI" explain "$id" --url "http://127.0.0.1:$COORD_FWD" 2>&1)
  if grep -q 'REFUSED by the rule "' <<<"$text" && grep -qF -- "$why" <<<"$text"; then
    pass "$sc explain: $n's incident refused by the rule \"$(grep -o 'REFUSED by the rule "[^"]*"' <<<"$text" | tail -n 1 | cut -d'"' -f2)\", holders as blocked_by says"
  else
    fail "$sc explain" "blocked_by '$why' not explained: $(head -c 800 <<<"$text")"
  fi
}
# explain_jobs SCENARIO: every Ganeti job with nodecare's reason trail submitted since the
# coordinator started leads, through
# `nodecare explain JOB`, to the round it came from; then every recorded round replays to the
# decision it recorded (`nodecare-coordinator --replay-rounds` on the coordinator's state).
explain_jobs() {
  local sc=$1 jobs job out missing="" n=0 replay
  jobs=$(rapi GET "/2/jobs?bulk=1&fields=id,ops,received_ts" | jq_py "
print(' '.join(str(j['id']) for j in d if (j.get('received_ts') or [0])[0] >= $COORD_STARTED and any('nodecare incident=' in (r[1] if isinstance(r, list) else '') for op in j.get('ops') or [] for r in (op.get('reason') or []))))")
  for job in $jobs; do
    n=$((n + 1))
    out=$("$CLI" explain "$job" --json --url "http://127.0.0.1:$COORD_FWD" 2>&1)
    jq_py "sys.exit(0 if d['job']['round'] is not None and d['rounds'] else 1)" <<<"$out" 2>/dev/null || missing+=" $job: $(head -c 200 <<<"$out");"
  done
  if ((n == 0)); then
    fail "$sc explain jobs" "no job with nodecare's reason trail"
  elif [[ -n $missing ]]; then
    fail "$sc explain jobs" "$n jobs, not traced to a round:$missing"
  else
    pass "$sc explain jobs: each of the $n jobs with nodecare's reason trail leads to its round"
  fi
  replay_rounds "$sc"
}
# replay_rounds SCENARIO: every round node1's coordinator recorded (or took over with the
# replicated state) replays to the decision it recorded (`nodecare-coordinator --replay-rounds`).
replay_rounds() {
  local sc=$1 replay
  replay=$("$GNT/node-exec.sh" 1 "$COORD" --config "$S/e2e/coord.toml" --node-name "$NODECARE_GNT_MASTER" \
    --state-dir "$S/e2e/coord-state" --hmac-key /var/lib/ganeti/hmac.key --rapi-url "https://$NODECARE_GNT_CLUSTER_IP:5080" \
    --rapi-certificate /var/lib/ganeti/rapi.pem --rapi-credentials "$S/rapi-credentials" --replay-rounds 2>&1)
  if grep -q ': 0 differ$' <<<"$replay" && ! grep -q '^0 recorded' <<<"$replay"; then
    pass "$sc replay: $replay"
  else
    fail "$sc replay" "$(head -c 600 <<<"$replay")"
  fi
}

# `nodecare what-if` (issue 30): predicted before a change, compared with what then ran.
# what_if SCENARIO CHANGE...: the prediction, kept in $S/e2e/what-if-SCENARIO.json (and .txt).
what_if() {
  local sc=$1
  shift
  "$CLI" what-if "$@" --url "http://127.0.0.1:$COORD_FWD" >"$S/e2e/what-if-$sc.txt" 2>&1
  "$CLI" what-if "$@" --json --url "http://127.0.0.1:$COORD_FWD" >"$S/e2e/what-if-$sc.json" 2>"$S/e2e/what-if-$sc.err"
}
# what_if_jobs SCENARIO SINCE: the Ganeti jobs with nodecare's reason trail received since SINCE
# (Unix seconds), in order, side by side with the prediction's: the same opcodes on the same
# targets in the same order, or a FAIL showing both.
what_if_jobs() {
  local sc=$1 since=$2 out
  rapi GET "/2/jobs?bulk=1&fields=id,ops,received_ts" >"$S/e2e/what-if-$sc.real.json"
  out=$(python3 - "$S/e2e/what-if-$sc.json" "$S/e2e/what-if-$sc.real.json" "$since" <<'PY'
import json, sys
predicted = json.load(open(sys.argv[1]))["jobs"]
real_jobs = json.load(open(sys.argv[2]))
since = float(sys.argv[3])
def ours(job):
    return any("nodecare" in (r[1] if isinstance(r, list) and len(r) > 1 else "")
               for op in job.get("ops") or [] for r in (op.get("reason") or []))
def target(op):
    return op.get("instance_name") or op.get("node_name") or op.get("name") or ""
real = []
for job in sorted(real_jobs, key=lambda j: int(j["id"])):
    if not ours(job) or (job.get("received_ts") or [0])[0] < since:
        continue
    for op in job.get("ops") or []:
        real.append((op.get("OP_ID"), target(op).split(".")[0]))
pred = [(j["opcode"], j["target"].split(".")[0]) for j in predicted]
width = max([len(f"{o} {t}") for o, t in pred + real] + [20])
print(f"  {'predicted (what-if)':<{width}}  ran on the cluster")
for i in range(max(len(pred), len(real))):
    a = " ".join(pred[i]) if i < len(pred) else "-"
    b = " ".join(real[i]) if i < len(real) else "-"
    print(f"  {a:<{width}}  {b}{'' if a == b else '   <- differs'}")
sys.exit(0 if pred == real and pred else 1)
PY
)
  local rc=$?
  echo "$out" >"$S/e2e/what-if-$sc.side-by-side.txt"
  if ((rc == 0)); then
    pass "$sc what-if: predicted the $(($(wc -l <<<"$out") - 1)) Ganeti jobs the cluster then ran, same opcodes, targets and order"
    echo "$out"
  else
    fail "$sc what-if" "prediction and cluster differ:
$out
$(head -c 600 "$S/e2e/what-if-$sc.err" 2>/dev/null)"
  fi
}

# what_if_wait SCENARIO NODE: the prediction said NODE's incident waits, with no job, and with the
# very blocked_by /1/status now shows for the real one.
what_if_wait() {
  local sc=$1 n=$2 real predicted
  real=$(coord /1/status | jq_py "print(next((i.get('blocked_by') or '') for i in d if i.get('node')=='$n'))" 2>/dev/null)
  predicted=$(jq_py "
w = [i for i in d['incidents'] if i['node'] == '$n']
jobs = [j for j in d['jobs'] if j['target'] == '$n' or j['target'].split('.')[0] == '$n'.split('.')[0]]
print((w[0].get('blocked_by') or '') if w and not jobs else 'jobs: %s' % jobs)" <"$S/e2e/what-if-$sc.json" 2>&1)
  if [[ -n $real && $real == "$predicted" ]]; then
    pass "$sc what-if: predicted that $n's incident waits, no job, blocked_by \"$real\""
  else
    fail "$sc what-if" "predicted '$predicted', the cluster: '$real'; $(head -c 400 "$S/e2e/what-if-$sc.err" 2>/dev/null)"
  fi
}

# ---- the master-candidate pool full (S1 to S10) ------------------------------------------------
# Ganeti drains or offlines a master candidate only with `auto_promote` when the pool is full
# (LUNodeSetParams: "Not enough master candidates"; `force` does not bypass it), the case of any
# cluster with more master-capable nodes than `candidate_pool_size` (10 by default). Here: a pool
# of 3 held by node1..3, so every drain of a candidate from S1 on needs auto-promote. A drain
# without it is refused; the operator's hand drains below ask for it (`gnt-node modify --drained
# yes --auto-promote`). candidate_pool_restore gives the pool back before S11, whose coordinators
# run on node1..3.
candidates() { rapi GET "/2/nodes?bulk=1" | jq_py "print(' '.join(sorted(n['name'].split('.')[0] for n in d if n.get('master_candidate') or n.get('role') == 'M')))"; }
candidate_pool_full() {
  local i name_var ans id st
  master_healthy pool
  log "pool: candidate_pool_size 3, node1..3 the candidates"
  # Once more after a moment when Ganeti's own promotions race it ("Configuration object
  # updated since it has been read", seen on a reused cluster).
  if ! ans=$("$GNT/node-exec.sh" 1 gnt-cluster modify --candidate-pool-size=3 2>&1) &&
    ! { sleep 3; ans=$("$GNT/node-exec.sh" 1 gnt-cluster modify --candidate-pool-size=3 2>&1); }; then
    fail "pool" "gnt-cluster modify --candidate-pool-size=3: $(tail -n 3 <<<"$ans" | tr '\n' ' ')"
    return
  fi
  for ((i = 4; i <= NODECARE_GNT_NODES; i++)); do
    name_var="NODECARE_GNT_NODE${i}_NAME"
    [[ $(node_json "${!name_var}" | jq_py "print(d['master_candidate'])") == True ]] || continue
    "$GNT/node-exec.sh" 1 gnt-node modify --master-candidate=no "${!name_var}" >/dev/null 2>&1 ||
      { fail "pool" "could not demote ${!name_var}"; return; }
  done
  if [[ $(candidates) != "node1 node2 node3" ]]; then
    fail "pool" "the candidates are '$(candidates)', not node1..3"
    return
  fi
  # The check bites: node3 drained as the role resource gets it without auto-promote.
  ans=$(rapi PUT "/2/nodes/$NODECARE_GNT_NODE3_NAME/role?force=1" '"drained"')
  id=$(job_of <<<"$ans")
  st=$(wait_job "$id")
  if [[ $st == error ]] && rapi GET "/2/jobs/$id" | grep -q "Not enough master candidates"; then
    pass "pool: candidate_pool_size 3 full (node1..3); a drain of $NODECARE_GNT_NODE3_NAME without auto-promote refused: Not enough master candidates"
  else
    fail "pool" "a drain of $NODECARE_GNT_NODE3_NAME without auto-promote: job $id $st: $(head -c 300 <<<"$ans")"
    return_to_service "$NODECARE_GNT_NODE3_NAME"
  fi
}
# pool_promoted SCENARIO NODE: NODE's drain and offline jobs asked for auto_promote, and another
# node took its place: the pool still holds 3 candidates.
pool_promoted() {
  local sc=$1 n=$2 asked now
  asked=$(rapi GET "/2/jobs?bulk=1&fields=id,ops,received_ts" | jq_py "
ops = [op for j in d if (j.get('received_ts') or [0])[0] >= $COORD_STARTED for op in j.get('ops') or []
       if op.get('OP_ID') == 'OP_NODE_SET_PARAMS' and op.get('node_name') == '$n'
       and (op.get('drained') is True or op.get('offline') is True)]
print(' '.join(str(op.get('auto_promote')) for op in ops))")
  now=$(candidates)
  if [[ -n $asked && $asked != *False* && $(wc -w <<<"$now") -eq 3 && " $now " != *" ${n%%.*} "* ]]; then
    pass "$sc pool: the drain and offline of $n asked for auto_promote ($asked); candidates now $now"
  else
    fail "$sc pool" "auto_promote of $n's drain/offline jobs: '$asked'; candidates: $now"
  fi
}
candidate_pool_restore() {
  local ans i name_var
  if ! ans=$("$GNT/node-exec.sh" 1 gnt-cluster modify --candidate-pool-size=10 2>&1); then
    fail "pool restore" "gnt-cluster modify --candidate-pool-size=10: $(tail -n 3 <<<"$ans" | tr '\n' ' ')"
    return
  fi
  # A larger pool is not filled by itself: node1..3 (S11's coordinators) are promoted again.
  for i in 1 2 3; do
    name_var="NODECARE_GNT_NODE${i}_NAME"
    [[ $(node_json "${!name_var}" | jq_py "print(d['master_candidate'])") == True ]] && continue
    ans=$("$GNT/node-exec.sh" 1 gnt-node modify --master-candidate=yes "${!name_var}" 2>&1) ||
      log "pool: promoting ${!name_var}: $(tail -n 2 <<<"$ans" | tr '\n' ' ')"
  done
  log "pool: candidate_pool_size 10 again, candidates $(candidates)"
}
candidate_pool_full

N1=$NODECARE_GNT_NODE1_NAME
N2=$NODECARE_GNT_NODE2_NAME
N3=$NODECARE_GNT_NODE3_NAME
# S1–S3 and S4 always run, but when only standalone scenarios are selected (base).
if base; then
# ---- S0b: the version nodecare shows ---------------------------------------------------------
# `nodecare status` names the Ganeti the round read (software_version of /2/info), and /1/status
# carries it in its Ganeti-Version header. The first round comes after the takeover, which waits
# out the old master's lease: on a slow machine that is most of a minute after the start.
version=${NODECARE_GNT_SOFTWARE_VERSION:-}
shown="" header=""
for _ in $(seq 1 150); do
  shown=$("$CLI" status --url "http://127.0.0.1:$COORD_FWD" 2>/dev/null | head -n 1)
  header=$(curl -s -m 10 -D - -o /dev/null "http://127.0.0.1:$COORD_FWD/1/status" | tr -d '\r' | sed -n 's/^[Gg]aneti-[Vv]ersion: //p')
  [[ -n $version && $shown == *"(Ganeti $version)"* && $header == "$version" ]] && break
  sleep 1
done
if [[ -n $version && $shown == *"(Ganeti $version)"* && $header == "$version" ]]; then
  pass "S0b version: nodecare status shows Ganeti $version, /1/status's Ganeti-Version header too"
else
  fail "S0b version" "expected Ganeti '$version': status '$shown', header '$header'"
fi
# ---- S1: evacuate -----------------------------------------------------------------------------
master_healthy S1
log "S1 evacuate $N2"
what_if S1 --verdict "$N2=evacuate"
S1_SINCE=$(date +%s)
echo '{"status":"evacuate","details":"e2e: disk controller dying"}' >"$S/e2e/diag-2"
if wait_status 180 "any(i.get('node')=='$N2' and i.get('repair-status')=='completed' for i in d)"; then
  nj=$(node_json "$N2")
  offline=$(jq_py "print(d['offline'])" <<<"$nj")
  pinst=$(jq_py "print(len(d['pinst_list']))" <<<"$nj")
  tagged=$(jq_py "print(any(t.startswith('maintd:repairready:') or 'repairready' in t for t in d['tags']))" <<<"$nj")
  if [[ $offline == True && $pinst == 0 && $tagged == True ]]; then
    pass "S1 evacuate: instances migrated away from $N2, node offline, repairready tag, incident completed"
    what_if_jobs S1 "$S1_SINCE"
    pool_promoted S1 "$N2"
  else
    fail "S1 evacuate" "offline=$offline primaries=$pinst repairready-tag=$tagged"
  fi
else
  fail "S1 evacuate" "no completed incident for $N2 within 180 s: $(coord /1/status | head -c 400)"
fi
echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-2"

# ---- S2: live repair --------------------------------------------------------------------------
master_healthy S2
log "S2 live-repair on $N1"
echo '{"status":"live-repair","command":"e2e-fix","details":"e2e: restart a daemon"}' >"$S/e2e/diag-1"
if wait_status 120 "any(i.get('node')=='$N1' and i.get('action')=='live-repair' and i.get('repair-status') in ('completed','failed') for i in d)"; then
  if [[ -s $S/e2e/repaired-1 ]] && wait_status 5 "any(i.get('node')=='$N1' and i.get('repair-status')=='completed' for i in d)"; then
    pass "S2 live-repair: e2e-fix ran through the agent on $N1, incident completed"
  else
    fail "S2 live-repair" "incident ended but marker=$(cat "$S/e2e/repaired-1" 2>/dev/null)"
  fi
else
  fail "S2 live-repair" "no finished live-repair incident within 120 s: $(coord /1/status | head -c 400)"
fi
echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-1"

# ---- S3: evacuation that must fail (file instance on node3) -----------------------------------
master_healthy S3
log "S3 failing evacuation of $N3"
echo '{"status":"evacuate","details":"e2e: must fail"}' >"$S/e2e/diag-3"
if wait_status 180 "any(i.get('node')=='$N3' and i.get('repair-status')=='failed' for i in d)"; then
  # The repairfailed tag is set by a job submitted when the incident fails: let it finish.
  tags=
  for _ in $(seq 30); do
    tags=$(node_json "$N3" | jq_py "print(' '.join(d['tags']))")
    [[ $tags == *repairfailed* ]] && break
    sleep 1
  done
  sleep 3
  jobs_before=$(rapi GET /2/jobs | jq_py "print(len(d))")
  sleep 8
  jobs_after=$(rapi GET /2/jobs | jq_py "print(len(d))")
  if [[ $tags == *repairfailed* && $jobs_before == "$jobs_after" ]]; then
    pass "S3 failing evacuation: incident failed, repairfailed tag on $N3, no further jobs"
  else
    fail "S3 failing evacuation" "tags='$tags' jobs $jobs_before -> $jobs_after"
  fi
else
  fail "S3 failing evacuation" "no failed incident for $N3 within 180 s: $(coord /1/status | head -c 400)"
fi

fi

# ---- S6: the budget holds a hand-drained node (issue 11, defect 1) ---------------------------
# Waits for a Ganeti job: prints its final status.
primaries_of() { node_json "$1" | jq_py "print(' '.join(sorted(d['pinst_list'])))"; }

# With max_disrupted_nodes = 1 and node2 still offline by S1's completed incident, node3 is
# drained by hand and its agent says evacuate: its incident must wait with blocked_by naming the
# budget, nothing of node3 moves; once the operator returns node2 to service, node3 is emptied.
scenario_budget_hand_drained() {
  local n2=$NODECARE_GNT_NODE2_NAME n3=$NODECARE_GNT_NODE3_NAME tag id st inst before after k answer
  master_healthy S6
  log "S6 hand-drained $n3 saying evacuate while $n2 uses the budget"
  if [[ $(node_json "$n2" | jq_py "print(d['offline'])") != True ]]; then
    fail "S6 budget" "precondition: $n2 is not offline after S1"
    return
  fi
  # Clear S3: node3 reports Ok again, its repairfailed tag is removed (acknowledged, forgotten).
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-3"
  for ((k = 0; k < 30; k++)); do
    coord /1/agents | jq_py "sys.exit(0 if any(a['node']=='$n3' and a.get('verdict')=='Ok' for a in d) else 1)" 2>/dev/null && break
    sleep 1
  done
  for tag in $(node_json "$n3" | jq_py "print(' '.join(t for t in d['tags'] if t.startswith('maintd:')))"); do
    id=$(rapi DELETE "/2/nodes/$n3/tags?tag=$tag" | job_of)
    st=$(wait_job "$id")
    [[ $st == success ]] || { fail "S6 budget" "removing tag $tag from $n3: job $id $st"; return; }
  done
  wait_status 30 "not any(i.get('node')=='$n3' for i in d)" ||
    { fail "S6 budget" "the acknowledged failed incident of $n3 was not forgotten: $(coord /1/status | head -c 400)"; return; }
  # The file instance would fail the evacuation before the budget is even asked: remove it.
  for inst in $(rapi GET /2/instances | jq_py "print(' '.join(i['id'] for i in d if i['id'].startswith('inst5.')))"); do
    id=$(rapi DELETE "/2/instances/$inst" | job_of)
    st=$(wait_job "$id" 180)
    [[ $st == success ]] || { fail "S6 budget" "removing the file instance $inst: job $id $st"; return; }
  done
  # node3 must hold something to move.
  if [[ -z $(primaries_of "$n3") ]]; then
    inst=$(rapi GET /2/instances?bulk=1 | jq_py "print(next(i['name'] for i in d if i['disk_template']=='diskless'))")
    id=$(rapi PUT "/2/instances/$inst/migrate" "{\"target_node\": \"$n3\"}" | job_of)
    st=$(wait_job "$id" 180)
    [[ $st == success ]] || { fail "S6 budget" "moving $inst to $n3: job $id $st"; return; }
  fi
  # The operator drains node3 by hand; then node3's agent says evacuate.
  # As `gnt-node modify --drained yes --auto-promote` (forced, like maintd's drain; the pool is
  # full).
  answer=$(rapi PUT "/2/nodes/$n3/role?force=1&auto-promote=1" '"drained"')
  id=$(job_of <<<"$answer")
  st=$(wait_job "$id")
  [[ $st == success ]] || { fail "S6 budget" "draining $n3 by hand: job $id $st: $(head -c 300 <<<"$answer")"; return; }
  before=$(primaries_of "$n3")
  what_if S6 --verdict "$n3=evacuate"
  echo '{"status":"evacuate","details":"e2e: hand-drained, disk failing"}' >"$S/e2e/diag-3"
  if ! wait_status 60 "any(i.get('node')=='$n3' and 'cap: cluster' in (i.get('blocked_by') or '') and '$n2' in (i.get('blocked_by') or '') for i in d)"; then
    fail "S6 budget" "no incident of $n3 blocked by the budget within 60 s: $(coord /1/status | head -c 600)"
    return
  fi
  # Several rounds (2 s each) later it still waits and nothing moved.
  sleep 10
  after=$(primaries_of "$n3")
  if ! coord /1/status | jq_py "
i = [i for i in d if i.get('node')=='$n3'][0]
sys.exit(0 if i['repair-status']=='noted' and not i['jobs'] and 'cap: cluster' in (i.get('blocked_by') or '') else 1)" 2>/dev/null ||
    [[ $before != "$after" ]]; then
    fail "S6 budget" "$n3 was acted on beyond the budget: primaries '$before' -> '$after': $(coord /1/status | head -c 600)"
    return
  fi
  explain_refused "S6 budget" "$n3"
  what_if_wait S6 "$n3"
  # The operator returns node2 to service (online, acknowledge): node3 is emptied now.
  answer=$(rapi POST "/2/nodes/$n2/modify" '{"offline": false}')
  id=$(job_of <<<"$answer")
  st=$(wait_job "$id")
  [[ $st == success ]] || { fail "S6 budget" "setting $n2 online: job $id $st: $(head -c 300 <<<"$answer")"; return; }
  for tag in $(node_json "$n2" | jq_py "print(' '.join(t for t in d['tags'] if t.startswith('maintd:')))"); do
    id=$(rapi DELETE "/2/nodes/$n2/tags?tag=$tag" | job_of)
    wait_job "$id" >/dev/null
  done
  if wait_status 180 "any(i.get('node')=='$n3' and i.get('repair-status')=='completed' for i in d)" &&
    [[ -z $(primaries_of "$n3") ]]; then
    pass "S6 budget: hand-drained $n3 saying evacuate waited (blocked_by names the budget and $n2, nothing moved) while $n2 was offline; emptied once $n2 returned"
  else
    fail "S6 budget" "$n3 not emptied after $n2 returned: primaries '$(primaries_of "$n3")': $(coord /1/status | head -c 600)"
  fi
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-3"
}
want budget && scenario_budget_hand_drained

# ---- S4: stopped agent ------------------------------------------------------------------------
if base; then
master_healthy S4
log "S4 stopped agent on $N1"
"$GNT/node-exec.sh" 1 --stop agent-1
before=$(node_json "$N1" | jq_py "print(d['drained'], sorted(d['tags']))")
unreachable=0
for _ in $(seq 30); do
  if coord /1/agents | jq_py "
a = d if isinstance(d, list) else d.get('agents', [])
sys.exit(0 if any(x.get('node') == '$N1' and x.get('state') == 'unreachable' for x in a) else 1)" 2>/dev/null; then
    unreachable=1
    break
  fi
  sleep 1
done
after=$(node_json "$N1" | jq_py "print(d['drained'], sorted(d['tags']))")
if [[ $unreachable -eq 1 && $before == "$after" ]]; then
  pass "S4 stopped agent: $N1 shown unreachable, node untouched"
else
  fail "S4 stopped agent" "unreachable=$unreachable before='$before' after='$after': $(coord /1/agents | head -c 300)"
fi
fi

# ---- S5: a replayed Ok of a stopped agent ---------------------------------------------------
# The agent of node 2 stops and a static server on its address serves the last envelope it
# signed (an Ok), byte for byte. Within one report lifetime (plus one round to notice) the node
# must read stale or unreachable, and never ok again; nothing may happen to the node.
agent_state() { # NODE-NAME: the coordinator's agent state of the node
  coord /1/agents | jq_py "
a = d if isinstance(d, list) else d.get('agents', [])
print(next((x.get('state') for x in a if x.get('node') == '$1'), 'missing'))" 2>/dev/null
}
scenario_replayed_ok() {
  local n=2 name ip body expires stopped deadline state seen_ok=0 first_bad= first_state= until_ms now before after
  name=$NODECARE_GNT_NODE2_NAME
  ip=$NODECARE_GNT_NODE2_IP
  master_healthy S5
  log "S5 replayed Ok of the stopped agent of $name"
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$n"
  for _ in $(seq 30); do [[ $(agent_state "$name") == ok ]] && break; sleep 1; done
  body=$("$GNT/node-exec.sh" "$n" curl -sf -m 5 "http://$ip:1815/1/report/node/diagnose/signed")
  expires=$(jq -r '.expires_at_ms' <<<"$body" 2>/dev/null)
  if [[ $(jq -r '.payload.verdict.status' <<<"$body" 2>/dev/null) != Ok || ! $expires =~ ^[0-9]+$ ]]; then
    fail "S5 replayed Ok" "no signed Ok from the agent of $name: $(head -c 300 <<<"$body")"
    return
  fi
  printf '%s' "$body" >"$S/e2e/replayed-$n.json"
  cat >"$S/e2e/replay.py" <<'PY'
import http.server, sys
body = open(sys.argv[1], "rb").read()
class Replay(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((sys.argv[2], int(sys.argv[3])), Replay).serve_forever()
PY
  before=$(node_json "$name" | jq_py "print(d['drained'], sorted(d['tags']))")
  "$GNT/node-exec.sh" "$n" --stop "agent-$n"
  stopped=$(date +%s%3N)
  "$GNT/node-exec.sh" "$n" --bg "replay-$n" python3 "$S/e2e/replay.py" "$S/e2e/replayed-$n.json" "$ip" 1815 >/dev/null ||
    { fail "S5 replayed Ok" "cannot start the replaying server"; start_agent "$n"; return; }
  # The report expired at $expires; the coordinator notices at its next round.
  until_ms=$((expires + (ROUND_INTERVAL + 2) * 1000))
  deadline=$((until_ms + 10000))
  while now=$(date +%s%3N); ((now < deadline)); do
    state=$(agent_state "$name")
    # unverifiable: the coordinator read a newer report of the agent between the capture and
    # the stop, and refuses the replayed one as a replay (sequence below the last accepted).
    if [[ $state == stale || $state == unreachable || $state == unverifiable ]]; then
      [[ -n $first_bad ]] || { first_bad=$((now - stopped)); first_state=$state; }
    elif ((now > until_ms)); then
      seen_ok=1
      log "S5: $name reads '$state' $((now - expires)) ms after the replayed report expired"
    fi
    sleep 0.5
  done
  after=$(node_json "$name" | jq_py "print(d['drained'], sorted(d['tags']))")
  "$GNT/node-exec.sh" "$n" --stop "replay-$n"
  start_agent "$n" || log "S5: agent $n did not restart"
  if [[ -n $first_bad && $seen_ok -eq 0 && $first_bad -le $(((REPORT_LIFETIME + ROUND_INTERVAL + 2) * 1000)) && $before == "$after" ]]; then
    pass "S5 replayed Ok: $name read $first_state ${first_bad} ms after its agent stopped (report lifetime ${REPORT_LIFETIME} s), never ok again, node untouched"
  else
    fail "S5 replayed Ok" "first stale/unreachable after ${first_bad:-never} ms, ok after expiry=$seen_ok, before='$before' after='$after': $(coord /1/agents | head -c 300)"
  fi
}
want replayed && scenario_replayed_ok

# ---- S7: the gate on the real cluster ------------------------------------------------------
# Writes to the coordinator's API as the e2e user: prints the body, then the HTTP code on the
# last line.
coordw() { # METHOD PATH [BODY]
  local m=$1 p=$2 data=()
  shift 2
  [[ $# -eq 0 ]] || data=(--data "$1")
  curl -s -m 10 -u e2e:e2e-secret -H 'Content-Type: application/json' -X "$m" "${data[@]}" \
    -w '\n%{http_code}' "http://127.0.0.1:$COORD_FWD$p"
}
# Returns a node to service: every maintd: and rack: tag removed, online and undrained.
scenario_gate() {
  local n1=$NODECARE_GNT_NODE1_NAME n2=$NODECARE_GNT_NODE2_NAME n3=$NODECARE_GNT_NODE3_NAME
  local ans code body id i k granted=""
  master_healthy S7
  log "S7 the gate: $n2 in rack:a, $n3 in rack:b, $n1 in rack:c"
  for i in 1 2 3; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  # S4 left node1's agent stopped.
  "$GNT/node-exec.sh" 1 --stop agent-1 >/dev/null 2>&1 || true
  start_agent 1 || log "S7: agent 1 did not restart"
  for n in "$n2" "$n3"; do return_to_service "$n"; done
  if ! wait_status 60 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S7 gate" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    return
  fi
  for pair in "$n1:rack:c" "$n2:rack:a" "$n3:rack:b"; do
    id=$(rapi PUT "/2/nodes/${pair%%:*}/tags?tag=${pair#*:}" | job_of)
    wait_job "$id" >/dev/null
  done
  # `nodecare check`: node1's agent runs its scripts at once; the new verdict is printed.
  if [[ -x $ROOT/target/release/nodecare ]]; then
    if ans=$(NODECARE_PASSWORD=e2e-secret "$ROOT/target/release/nodecare" check "$n1" --wait 10 \
      --user e2e --url "http://127.0.0.1:$COORD_FWD" 2>&1) && grep -q ": Ok" <<<"$ans"; then
      pass "S7 nodecare check: $(tr '\n' ' ' <<<"$ans")"
    else
      fail "S7 nodecare check" "$ans"
    fi
  fi
  # Both racks' nodes say evacuate at once: one proceeds, the other waits naming the busy rack
  # (whichever agent's verdict the coordinator saw first goes first).
  echo '{"status":"evacuate","details":"e2e: rack a disk"}' >"$S/e2e/diag-2"
  echo '{"status":"evacuate","details":"e2e: rack b disk"}' >"$S/e2e/diag-3"
  local first="" second="" first_rack="" second_rack=""
  for ((k = 0; k < 90; k++)); do
    for pair in "$n2:rack:a:$n3:rack:b" "$n3:rack:b:$n2:rack:a"; do
      IFS=: read -r f _ fr s _ sr <<<"$pair"
      if coord /1/status | jq_py "sys.exit(0 if any(i.get('node')=='$s' and i.get('repair-status')=='noted' and (i.get('blocked_by') or '').startswith('failure domain rack:$fr is disrupted ($f: incident') for i in d) and any(i.get('node')=='$f' and i.get('repair-status') in ('pending', 'completed') for i in d) else 1)" 2>/dev/null; then
        first=$f second=$s first_rack=rack:$fr second_rack=rack:$sr
        break 2
      fi
    done
    sleep 1
  done
  if [[ -n $first ]]; then
    pass "S7 one domain at a time: $first ($first_rack) evacuates, $second ($second_rack) waits: $(coord /1/status | jq_py "print(next(i['blocked_by'] for i in d if i.get('node')=='$second'))")"
    explain_refused "S7" "$second"
  else
    fail "S7 one domain at a time" "$(coord /1/status | head -c 600)"
    return
  fi
  # Another tool asks to reboot node1 (rack:c): refused while a rack is busy.
  ans=$(coordw POST /1/disruptions "{\"node\":\"$n1\",\"reason\":\"e2e: kernel update\",\"requester\":\"e2e-reboot\",\"ttl_s\":600}")
  code=$(tail -n 1 <<<"$ans")
  body=$(sed '$d' <<<"$ans")
  if [[ $code == 429 ]] && grep -q "failure domain $first_rack is disrupted" <<<"$body"; then
    pass "S7 admission refused: 429 $(head -c 200 <<<"$body")"
  else
    fail "S7 admission refused" "HTTP $code: $(head -c 300 <<<"$body")"
  fi
  # An operator override of the waiting rack lets its node start; it expires by itself.
  ans=$(coordw POST /1/overrides "{\"domain\":\"$second_rack\",\"duration_s\":30,\"reason\":\"e2e: it cannot wait\"}")
  code=$(tail -n 1 <<<"$ans")
  if [[ $code != 201 ]]; then
    fail "S7 override" "HTTP $code: $(sed '$d' <<<"$ans" | head -c 300)"
    return
  fi
  if wait_status 60 "any(i.get('node')=='$second' and i.get('repair-status') in ('pending', 'completed') for i in d)"; then
    id=$(coord /1/status | jq_py "print(next(i['id'] for i in d if i.get('node')=='$second'))")
    if coord "/1/incidents/$id" | grep -qE "operator override|under override"; then
      pass "S7 override: $second started under the override of $second_rack (its history says so)"
    else
      fail "S7 override" "no override in $second's history: $(coord "/1/incidents/$id" | head -c 400)"
    fi
  else
    fail "S7 override" "$second did not start: $(coord /1/status | head -c 600)"
  fi
  for ((k = 0; k < 60; k++)); do
    coord /1/overrides | jq_py "sys.exit(0 if d and not any(o.get('active') for o in d) else 1)" 2>/dev/null && break
    sleep 1
  done
  if ((k < 60)); then
    pass "S7 override expired after its 30 s"
  else
    fail "S7 override expiry" "$(coord /1/overrides | head -c 300)"
  fi
  # Both racks return to service: node1's admission is granted, then released.
  for i in 2 3; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  wait_status 120 "all(i.get('repair-status') in ('completed', 'failed') for i in d if i.get('node') in ('$n2', '$n3'))" || true
  for n in "$n2" "$n3"; do return_to_service "$n"; done
  for ((k = 0; k < 60; k++)); do
    ans=$(coordw POST /1/disruptions "{\"node\":\"$n1\",\"reason\":\"e2e: kernel update\",\"requester\":\"e2e-reboot\",\"ttl_s\":600}")
    code=$(tail -n 1 <<<"$ans")
    [[ $code == 201 ]] && { granted=$(sed '$d' <<<"$ans" | jq_py "print(d['id'])"); break; }
    sleep 1
  done
  if [[ -n $granted ]]; then
    ans=$(coordw DELETE "/1/disruptions/$granted")
    if [[ $(tail -n 1 <<<"$ans") == 200 ]]; then
      pass "S7 admission granted once the racks were free ($k s), and released"
    else
      fail "S7 admission release" "$(head -c 300 <<<"$ans")"
    fi
  else
    fail "S7 admission granted" "HTTP $code: $(sed '$d' <<<"$ans" | head -c 300)"
  fi
  for n in "$n1" "$n2" "$n3"; do return_to_service "$n"; done
  explain_jobs "S7"
}
want gate && scenario_gate

# Scenarios in their own files (sN-NAME.sh define scenario_NAME), in the order of N.
mapfile -t SCENARIO_FILES < <(find "$HERE" -maxdepth 1 -name 's[0-9]*-*.sh' | sort -V)
for f in "${SCENARIO_FILES[@]}"; do
  # shellcheck disable=SC1090
  . "$f"
  name=$(basename "$f" .sh)
  name=${name#s*-}
  # S11's coordinators run on node1..3: the pool holds every node again.
  [[ $name == failover ]] && want failover && candidate_pool_restore
  want "$name" && "scenario_$name"
done

# ---- the whole run replayed --------------------------------------------------------------------
# Every round recorded in node1's state over the run (S8–S11 included: its coordinator took the
# replicated state back after the failovers) replays to the decision it recorded.
[[ -d $S/e2e/coord-state ]] && replay_rounds "all scenarios"

# ---- summary ---------------------------------------------------------------------------------
echo "---- nodecare e2e on real Ganeti ${NODECARE_GNT_SOFTWARE_VERSION:-3.0.2} ($(( $(date +%s) - T0 )) s) ----"
printf '%s\n' "${RESULTS[@]}"
while IFS= read -r line; do REPAIRS+=("$line (during S0)"); done < <(grep -E '^(WARN|ERROR) ' "$S/logs/s0.log" 2>/dev/null | grep -v '^WARN cluster repair:')
[[ ${#REPAIRS[@]} -eq 0 ]] || printf '%s\n' "${REPAIRS[@]}"
if [[ $FAILED -ne 0 ]]; then
  echo "logs: $S/logs (bg-agent-*.log, bg-coordinator.log); rerun with --keep to inspect the cluster"
  [[ $KEEP -eq 1 ]] || cp -r "$S/logs" "/tmp/nodecare-e2e-logs.$$" 2>/dev/null && echo "logs copied to /tmp/nodecare-e2e-logs.$$"
  exit 1
fi
exit 0
