#!/usr/bin/env bash
# A nemesis on the real Ganeti cluster of the end-to-end tests: randomized faults against agents
# on every node and coordinators with replication on the master candidates, while a workload
# runs; then the faults stop, everything is healed, the run waits for quiescence and the
# independent checker (`nemesis-check`, tests/src/nemesis_check.rs) judges what happened.
#
#   tests/nemesis/run.sh --seed N [--faults K] [--short] [--reuse] [--keep] [--no-build]
#
#   --seed N     every choice (faults, targets, durations, workload) comes from N: the plan is
#                drawn from bash's RANDOM seeded with N before anything runs, so a seed replays
#                the same fault sequence (the timing of Ganeti and of the daemons does not replay)
#   --faults K   number of faults (default 20); --short is --faults 8 with short durations (CI)
#   --reuse      use the cluster already up in the state dir (else it is brought up)
#   --keep       leave the cluster up at the end (implied by --reuse)
#   --no-build   use the binaries already built (debug profile)
#
# Settings: NODECARE_NEMESIS_STATE, NODECARE_NEMESIS_PREFIX, NODECARE_NEMESIS_RAPI_PORT,
# NODECARE_NEMESIS_COORD_PORT, NODECARE_NEMESIS_MOND_FWD_BASE (defaults /tmp/nodecare-nemesis,
# ncnem, 16180, 16181, 26250); NODECARE_NEMESIS_BIN_DIR (default $CARGO_TARGET_DIR/debug or
# target/debug). Each run writes $STATE/nemesis/seed-N-<time>/: faults.jsonl (the fault log:
# one JSON line per fault start and end, workload action and phase, each with its UTC time and
# the seed), the inputs of the checker (jobs.json, coordinator-<k>.log, rapi-<k>.log,
# audit-<k>.jsonl) and check.txt (its figures). Exit 0 when the checker finds no violation.
#
# Faults: partition (a blackhole route between two nodes, both ways), isolate (a node's eth0
# down), failover (planned `gnt-cluster master-failover` to another of node1..3, only once
# Ganeti's job queue is empty: Ganeti 3.0.2 loses the changes of jobs running during one),
# coord-kill / agent-kill (SIGKILL, restarted 1-5 s later), coord-stop / agent-stop (SIGSTOP,
# SIGCONT later), disk-full (the coordinator's state directory is a 64 MiB tmpfs, filled),
# rapi-stop (the master's ganeti-rapi SIGSTOPped: RAPI hangs), rapi-refuse (the master's
# ganeti-rapi stopped: connections refused), rapi-lose (Ganeti's answers to the coordinators
# lost: each reaches its RAPI through rapi-lose-proxy.py, which drops what Ganeti sends back
# while the fault lasts; a write is carried out and its answer lost, a job-list read fails), verdict-flip (a node's diagnose verdict flips
# several times a second), clock-jump (one node's wall clock, as its agent and coordinator see
# it, moved forward or back by 30 s to 40 min, then back: every daemon runs under libfaketime,
# faketime-exec.sh), failover-nv (the master dies: its coordinator and Ganeti master daemons
# killed, `gnt-cluster master-failover --no-voting` in another of node1..3 once the queue is
# empty, the old master then back as a plain node with its coordinator started again),
# hook-away (a campaign over node4 or node5 whose hook is held undelivered, the node's repair
# lock taken by another tool so that its agent answers "busy"; its agent then stopped
# (SIGSTOP) past the hook timeout: the node fails at its hook; the operator returns it to
# service, then the agent goes on), owner-start (a campaign over node4 or node5 whose hook is
# held undelivered as above; the owner starts a stopped instance of theirs on the drained node;
# the lock is released once it has left the node).
# Workload before each fault, from the plan: an evacuation, a live repair, an admission grant,
# a cancel, a rolling maintenance campaign over node4 and/or node5 (hook e2e-roll, which says
# it did not reboot), an instance repair by the coordinator's harep duty (an instance tagged
# `migrate` on node4 or node5, the node drained by hand once admission granted it), or nothing.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GNT=$ROOT/tests/ganeti
E2E=$ROOT/tests/e2e-ganeti

SEED=""
FAULTS=20
SHORT=0
REUSE=0
KEEP=0
BUILD=1
usage() { sed -n '6,14p' "$0" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --seed) [[ ${2:-} =~ ^[0-9]+$ ]] || usage; SEED=$2; shift 2 ;;
    --faults) [[ ${2:-} =~ ^[0-9]+$ ]] || usage; FAULTS=$2; shift 2 ;;
    --short) SHORT=1; FAULTS=8; shift ;;
    --reuse) REUSE=1; KEEP=1; shift ;;
    --keep) KEEP=1; shift ;;
    --no-build) BUILD=0; shift ;;
    *) usage ;;
  esac
done
[[ -n $SEED ]] || usage
[[ $(id -u) -eq 0 ]] || { echo "nemesis: must run as root" >&2; exit 2; }

export NODECARE_GNT_STATE=${NODECARE_NEMESIS_STATE:-/tmp/nodecare-nemesis}
export NODECARE_GNT_PREFIX=${NODECARE_NEMESIS_PREFIX:-ncnem}
export NODECARE_GNT_RAPI_PORT=${NODECARE_NEMESIS_RAPI_PORT:-16180}
export NODECARE_GNT_MOND_FWD_BASE=${NODECARE_NEMESIS_MOND_FWD_BASE:-26250}
COORD_PORT=1817
COORD_FWD=${NODECARE_NEMESIS_COORD_PORT:-16181}
AGENT_INTERVAL=2
ROUND_INTERVAL=2
BIN=${NODECARE_NEMESIS_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}
AGENT=$BIN/nodecare-agent
COORD=$BIN/nodecare-coordinator
# libfaketime (Debian's libfaketime; tests/ganeti/install-packages.sh installs it), the
# multi-threaded build: the daemons run tokio.
LIBFAKETIME=${NODECARE_NEMESIS_LIBFAKETIME:-}
if [[ -z $LIBFAKETIME ]]; then
  for f in /usr/lib/*/faketime/libfaketimeMT.so.1; do [[ -e $f ]] && LIBFAKETIME=$f && break; done
fi
CHECK=$BIN/nemesis-check
T0=$(date +%s)
log() { echo "nemesis[$(($(date +%s) - T0))s]: $*" >&2; }

if [[ $BUILD -eq 1 ]]; then
  log "building (debug)"
  (cd "$ROOT" && cargo build -p nodecare-agent -p nodecare-coordinator -p nodecare-tests --bin nodecare-agent --bin nodecare-coordinator --bin nemesis-check) >&2 ||
    { echo "nemesis: build failed" >&2; exit 1; }
fi
for b in "$AGENT" "$COORD"; do [[ -x $b ]] || { echo "nemesis: $b missing" >&2; exit 1; }; done
[[ -n $LIBFAKETIME && -r $LIBFAKETIME ]] ||
  { echo "nemesis: libfaketime missing (apt-get install libfaketime, or tests/ganeti/install-packages.sh): clock jumps need it" >&2; exit 1; }

if [[ $REUSE -eq 0 || ! -s $NODECARE_GNT_STATE/cluster.env ]]; then
  log "cluster up"
  "$GNT/cluster-up.sh" --nodes 5 --no-mond \
    --instances "inst1:diskless:2,inst2:diskless:2,inst3:sharedfile:2,inst4:diskless:1,inst5:diskless:3,inst6:diskless:1" >&2 ||
    { echo "nemesis: cluster-up failed" >&2; exit 1; }
fi
# shellcheck disable=SC1091
. "$NODECARE_GNT_STATE/cluster.env"
S=$NODECARE_GNT_STATE
RAPI_PW=$(<"$NODECARE_GNT_RAPI_PASSWORD_FILE")
printf '%s:%s\n' "$NODECARE_GNT_RAPI_USER" "$RAPI_PW" >"$S/rapi-credentials"
chmod 600 "$S/rapi-credentials"
# shellcheck source=../e2e-ganeti/lib.sh
. "$E2E/lib.sh"
# The coordinators reach their node's RAPI through rapi-lose-proxy.py (port 5081 to 5080), which
# loses Ganeti's answers while the rapi-lose fault's flag file exists.
LOSE_FLAG=$S/nemesis/rapi-lose
LOSE_LOG=$S/nemesis/rapi-lost.log
export NODECARE_E2E_FAILOVER_RAPI_URL=https://127.0.0.1:5081
# fo_start, fo_get, fo_post, fo_busy_jobs (and the ports after COORD_FWD) of S11.
# shellcheck source=../e2e-ganeti/s11-failover.sh
. "$E2E/s11-failover.sh"
port_of() { echo $((COORD_FWD + $1 - 1)); }
# shellcheck disable=SC2317 # run by the trap
cleanup() { if [[ $KEEP -eq 0 ]]; then "$GNT/cluster-down.sh" --quiet || true; fi; }
trap cleanup EXIT

RUN=$S/nemesis/seed-$SEED-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$RUN" "$S/e2e"
# Every agent and coordinator runs under libfaketime with its node's clock file in $CLOCK
# (faketime-exec.sh); the coordinators' log lines carry the true time in front of their own.
CLOCK=$S/nemesis/clock
mkdir -p "$CLOCK"
for f in "$CLOCK"/*; do [[ -e $f ]] && echo "+0" >"$f"; done
REAL_AGENT=$AGENT REAL_COORD=$COORD
AGENT=$S/nemesis/agent-faketime COORD=$S/nemesis/coordinator-faketime
printf '#!/bin/sh\nexec %s %s %s --plain %s "$@"\n' "$HERE/faketime-exec.sh" "$LIBFAKETIME" "$CLOCK" "$REAL_AGENT" >"$AGENT"
printf '#!/bin/sh\nexec %s %s %s --stamp %s "$@"\n' "$HERE/faketime-exec.sh" "$LIBFAKETIME" "$CLOCK" "$REAL_COORD" >"$COORD"
chmod 0755 "$AGENT" "$COORD"
FLOG=$RUN/faults.jsonl
# One line of the fault log: KIND then KEY=VALUE pairs (values JSON when they parse as JSON).
event() { # KIND [KEY=VALUE...]
  local kind=$1
  shift
  python3 - "$FLOG" "$SEED" "$kind" "$@" <<'PY'
import datetime, json, sys, time
path, seed, kind, pairs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
now = time.time()
line = {"t_ms": int(now * 1000), "utc": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')[:-4] + 'Z',
        "seed": seed, "kind": kind}
for p in pairs:
    k, _, v = p.partition('=')
    try:
        line[k] = json.loads(v)
    except ValueError:
        line[k] = v
text = json.dumps(line, sort_keys=True)
open(path, 'a').write(text + '\n')
print(text, file=sys.stderr)
PY
}

# ---------------------------------------------------------------------------------------------
# The plan: every random choice, drawn before anything runs.
RANDOM=$SEED
KINDS=(partition isolate failover failover-nv coord-kill coord-stop agent-kill agent-stop disk-full rapi-stop rapi-refuse verdict-flip clock-jump hook-away owner-start rapi-lose)
# NODECARE_NEMESIS_KINDS="hook-away owner-start": draw the faults from these kinds only.
[[ -n ${NODECARE_NEMESIS_KINDS:-} ]] && read -r -a KINDS <<<"$NODECARE_NEMESIS_KINDS"
WORK=(evacuate live-repair grant cancel campaign harep none)
# A clock jump's size in seconds (forward or back, from the plan).
JUMPS=(30 45 90 300 600 1200 2400)
if [[ $SHORT -eq 1 ]]; then DMIN=3 DSPAN=6; else DMIN=5 DSPAN=16; fi
PLAN=()
for ((f = 1; f <= FAULTS; f++)); do
  kind=${KINDS[RANDOM % ${#KINDS[@]}]}
  a=$((RANDOM % NODECARE_GNT_NODES + 1))
  b=$((RANDOM % (NODECARE_GNT_NODES - 1) + 1))
  ((b >= a)) && b=$((b + 1))
  c=$((RANDOM % 3 + 1))
  dur=$((DMIN + RANDOM % DSPAN))
  work=${WORK[RANDOM % ${#WORK[@]}]}
  wnode=$((RANDOM % NODECARE_GNT_NODES + 1))
  gap=$((2 + RANDOM % 5))
  jump=$((JUMPS[RANDOM % ${#JUMPS[@]}] * (RANDOM % 2 * 2 - 1)))
  PLAN+=("$kind $a $b $c $dur $work $wnode $gap $jump")
done
log "seed $SEED, $FAULTS faults; plan:"
for ((f = 0; f < FAULTS; f++)); do echo "  $((f + 1)): ${PLAN[$f]}" >&2; done

# ---------------------------------------------------------------------------------------------
# Setup: fresh agents and coordinators (state of earlier runs removed), every node in service.
stop_all() {
  local i
  for i in 1 2 3; do "$GNT/node-exec.sh" "$i" --stop "nem-coord-$i" >/dev/null 2>&1 || true; done
  for i in 1 2 3; do "$GNT/node-exec.sh" "$i" --stop "rapi-proxy-$i" >/dev/null 2>&1 || true; done
  # The end-to-end test's coordinators, if it left any.
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1 || true
  for i in 2 3; do "$GNT/node-exec.sh" "$i" --stop "coordinator-$i" >/dev/null 2>&1 || true; done
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do "$GNT/node-exec.sh" "$i" --stop "agent-$i" >/dev/null 2>&1 || true; done
}
coord_pid() { cat "$S/pids/bg-nem-coord-$1.pid" 2>/dev/null; }
agent_pid() { cat "$S/pids/bg-agent-$1.pid" 2>/dev/null; }
coord_state() { echo "$S/e2e/nem-coord-state-$1"; }
start_coord() { fo_start "$1" "nem-coord-$1" "$(coord_state "$1")" >/dev/null 2>&1; }
rapi_pid() { cat "$(eval echo "\$NODECARE_GNT_NODE${1}_ROOT")/run/ganeti/ganeti-rapi.pid" 2>/dev/null; }
master_index() { "$GNT/master-daemons.sh" master 2>/dev/null || echo 1; }
ip_of() { local v="NODECARE_GNT_NODE${1}_IP"; echo "${!v}"; }
name_of() { local v="NODECARE_GNT_NODE${1}_NAME"; echo "${!v}"; }
diag() { echo "$2" >"$S/e2e/diag-$1"; }
# Lines in node IDX's agent audit as the checker reads it (the rotated file, then the current).
audit_lines() { cat "$S/e2e/agent-state-$1"/repair-audit.jsonl.1 "$S/e2e/agent-state-$1"/repair-audit.jsonl 2>/dev/null | wc -l; }
# Ganeti starts mond again on failovers; the agents own port 1815.
stop_mond() { local i; for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do "$GNT/node-exec.sh" "$i" /usr/lib/ganeti/daemon-util stop ganeti-mond >/dev/null 2>&1 || true; done; }

# Everything a fault may have left behind, undone (idempotent).
heal_all() {
  local i j pid m f
  release_lock
  rm -f "$LOSE_FLAG"
  for f in "$CLOCK"/*; do [[ -e $f ]] && echo "+0" >"$f"; done
  sleep 2
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    for ((j = 1; j <= NODECARE_GNT_NODES; j++)); do
      [[ $i == "$j" ]] || "$GNT/node-exec.sh" "$i" ip route del blackhole "$(ip_of "$j")/32" >/dev/null 2>&1 || true
    done
    "$GNT/node-exec.sh" "$i" ip link set eth0 up >/dev/null 2>&1 || true
    pid=$(agent_pid "$i")
    [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
    if [[ -z $pid ]] || ! pid_alive "$pid"; then start_agent "$i" >/dev/null 2>&1 || true; fi
  done
  for i in 1 2 3; do
    rm -f "$(coord_state "$i")/nemesis-fill"
    pid=$(coord_pid "$i")
    [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
    if [[ -z $pid ]] || ! pid_alive "$pid"; then start_coord "$i" || true; fi
  done
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    pid=$(rapi_pid "$i")
    [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
  done
  m=$(master_index)
  "$GNT/node-exec.sh" "$m" /usr/lib/ganeti/daemon-util start ganeti-rapi >/dev/null 2>&1 || true
}
pid_alive() { local st; st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1; [[ -n $st && $st != Z && $st != X ]]; }

log "setup"
stop_all
rm -f "$LOSE_FLAG"
: >>"$LOSE_LOG"
for i in 1 2 3; do
  "$GNT/node-exec.sh" "$i" --bg "rapi-proxy-$i" python3 "$HERE/rapi-lose-proxy.py" 5081 5080 "$LOSE_FLAG" "$LOSE_LOG" >/dev/null ||
    { echo "nemesis: the RAPI proxy of node $i did not start" >&2; exit 1; }
done
# Master back to node1..3 (the coordinators' nodes).
m=$(master_index)
if ((m > 3)); then "$GNT/node-exec.sh" 1 gnt-cluster master-failover >&2 || true; fi
stop_mond
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
  nroot_var="NODECARE_GNT_NODE${i}_ROOT"
  nroot=${!nroot_var}
  for d in node-diagnose-commands node-repair-commands; do install -d -o root -g root -m 0755 "$nroot/etc/ganeti/$d"; done
  diag "$i" '{"status":"Ok","details":"nemesis"}'
  [[ -s $S/e2e/boot_id-$i ]] || cat /proc/sys/kernel/random/uuid >"$S/e2e/boot_id-$i"
  printf '#!/bin/sh\ncat %s\n' "$S/e2e/diag-$i" >"$nroot/etc/ganeti/node-diagnose-commands/e2e-state"
  # shellcheck disable=SC2016 # expanded by the command
  printf '#!/bin/sh\necho "$(date +%%s%%3N) $0" >> %s\necho done\n' "$S/e2e/nem-repairs-$i" >"$nroot/etc/ganeti/node-repair-commands/e2e-fix"
  # A campaign's hook: counts its runs (with the campaign of its context and the instances the
  # node's fake hypervisor runs then) and says the node did not reboot.
  # shellcheck disable=SC2016 # expanded by the command
  printf '#!/bin/sh\nctx=$(cat | tr -d "\\n")\nrunning=$(ls /run/ganeti/fake-hypervisor 2>/dev/null | tr "\\n" " ")\necho "$(date +%%s%%3N) running=[$running] $ctx" >> %s\necho nodecare:no-reboot\n' \
    "$S/e2e/nem-roll-$i" >"$nroot/etc/ganeti/node-repair-commands/e2e-roll"
  chmod 0755 "$nroot/etc/ganeti/node-diagnose-commands/e2e-state" "$nroot/etc/ganeti/node-repair-commands/e2e-fix" \
    "$nroot/etc/ganeti/node-repair-commands/e2e-roll"
  rm -rf "$S/e2e/agent-state-$i" "$S/e2e/nem-roll-$i"
done
rts=()
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do return_to_service "$(name_of "$i")" & rts+=($!); done
wait "${rts[@]}"
printf 'e2e e2e-secret write\n' >"$S/e2e/users"
chmod 600 "$S/e2e/users"
cat >"$S/e2e/coord-fo.toml" <<TOML
job_chains = false
grace = 5.0
users = "$S/e2e/users"
[breaker]
max_incident_percent = 100.0
max_incident_nodes = 10
[replication]
enabled = true
[instance_repair]
enabled = true
TOML
# Each coordinator's state directory is a small tmpfs inside its node (disk-full fills it).
for i in 1 2 3; do
  d=$(coord_state "$i")
  mkdir -p "$d"
  "$GNT/node-exec.sh" "$i" mountpoint -q "$d" || "$GNT/node-exec.sh" "$i" mount -t tmpfs -o size=64m nemesis "$d"
  "$GNT/node-exec.sh" "$i" sh -c "rm -rf '$d'/* '$d'/.[!.]*" 2>/dev/null || true
done
# Tags of earlier runs' campaigns and instance repairs removed.
for n in $(rapi GET "/2/nodes?bulk=1" | jq_py "print(' '.join(x['name'] for x in d if 'nemesis:roll' in x.get('tags', [])))"); do
  wait_job "$(rapi DELETE "/2/nodes/$n/tags?tag=nemesis:roll" | job_of)" >/dev/null
done
for inst in $(rapi GET "/2/instances?bulk=1" | jq_py "print(' '.join(x['name'] for x in d if any(t.startswith('ganeti:watcher:autorepair:') for t in x.get('tags', []))))"); do
  q=$(rapi GET "/2/instances/$inst/tags" | jq_py "print('&'.join('tag=' + t for t in d if t.startswith('ganeti:watcher:autorepair:')))")
  wait_job "$(rapi DELETE "/2/instances/$inst/tags?$q" | job_of)" >/dev/null
done
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do start_agent "$i" || { echo "nemesis: agent $i did not start" >&2; exit 1; }; done
# libfaketime must move the daemons' wall clock: node5's clock two hours ahead, its agent's
# report must say so (its collectors' `timestamp`, ns, read from SystemTime::now()), then back.
probe_clock() { # NODE-INDEX
  "$GNT/node-exec.sh" "$1" curl -s -m 5 "http://$(ip_of "$1"):1815/1/report/all" | python3 -c "
import json, sys
best = 0
def walk(v):
    global best
    if isinstance(v, dict):
        for k, x in v.items():
            if k == 'timestamp' and isinstance(x, int): best = max(best, x // 1000000)
            walk(x)
    elif isinstance(v, list):
        for x in v: walk(x)
try:
    walk(json.load(sys.stdin))
except ValueError:
    pass
print(best // 1000)"
}
echo "+7200" >"$CLOCK/$(name_of "$NODECARE_GNT_NODES")"
ok=0
for ((k = 0; k < 30; k++)); do
  sleep 1
  t=$(probe_clock "$NODECARE_GNT_NODES")
  if [[ -n $t ]] && ((t > $(date +%s) + 7000 && t < $(date +%s) + 7400)); then ok=1; break; fi
done
echo "+0" >"$CLOCK/$(name_of "$NODECARE_GNT_NODES")"
if [[ $ok != 1 ]]; then
  echo "nemesis: libfaketime ($LIBFAKETIME) has no effect: node$NODECARE_GNT_NODES's agent reported time ${t:-none} with its clock 2 h ahead (now $(date +%s))" >&2
  exit 1
fi
log "libfaketime works: node$NODECARE_GNT_NODES's agent reported $((t - $(date +%s))) s ahead"
for ((k = 0; k < 30; k++)); do
  sleep 1
  t=$(probe_clock "$NODECARE_GNT_NODES")
  [[ -n $t ]] && ((t <= $(date +%s) + 5)) && break
done
declare -A LOG_OFF RAPI_OFF
for i in 1 2 3; do LOG_OFF[$i]=$(stat -c %s "$S/logs/bg-nem-coord-$i.log" 2>/dev/null || echo 0); done
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
  RAPI_OFF[$i]=$(stat -c %s "$(eval echo "\$NODECARE_GNT_NODE${i}_ROOT")/var/log/ganeti/rapi-daemon.log" 2>/dev/null || echo 0)
done
FIRST_JOB=$(rapi GET /2/jobs | jq_py "print(max([int(j['id']) for j in d] or [0]))")
for i in 1 2 3; do
  start_coord "$i" || { echo "nemesis: coordinator $i did not start" >&2; exit 1; }
  "$GNT/forward.sh" --stop "$(port_of "$i")" >/dev/null 2>&1 || true
  "$GNT/forward.sh" "$i" "$COORD_PORT" "$(port_of "$i")" >/dev/null || { echo "nemesis: cannot forward" >&2; exit 1; }
done
acting_port() { port_of "$(master_index)"; }
for ((k = 0; k < 90; k++)); do
  [[ $(fo_get "$(acting_port)" /1/replication | jq_py "print(d.get('generation') is not None)" 2>/dev/null) == True ]] && break
  sleep 1
done
event run-start faults="$FAULTS" first_job="$FIRST_JOB" max_disrupted_nodes=1 master="$(master_index)" \
  plan="$(printf '%s\n' "${PLAN[@]}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().split("\n")[:-1]))')"

# ---------------------------------------------------------------------------------------------
# Workload: what an operator and the nodes do meanwhile.
GRANTS=()
# The campaign running (its id), and the instance repair under way ("INSTANCE NODE-INDEX
# START"), if any.
CAMPAIGN=""
HAREP=""
campaign_state() { [[ -n $CAMPAIGN ]] && fo_get "$(acting_port)" "/1/maintenance/$CAMPAIGN" | jq_py "print(d.get('state', ''))" 2>/dev/null; }
# The failures of campaign ID as a JSON list of {node, step, at_ms}.
campaign_failures() { # ID
  fo_get "$(acting_port)" "/1/maintenance/$1" | jq_py "
fs = ([d['failure']] if d.get('failure') else []) + (d.get('failures') or [])
print(json.dumps([{k: f.get(k) for k in ('node', 'step', 'at_ms')} for f in fs]))" 2>/dev/null || echo '[]'
}
campaign_running() { [[ -n $CAMPAIGN ]] && [[ $(campaign_state) =~ ^(running|paused|aborting|)$ ]]; }
# Nodes whose drain is someone's: those a running campaign is taking through their steps, the
# one of an instance repair under way. (A campaign's node not in progress is the operator's as
# any other: an incident that finished there leaves it for the operator to return.)
busy_nodes() {
  if [[ -n $CAMPAIGN ]]; then
    fo_get "$(acting_port)" "/1/maintenance/$CAMPAIGN" | jq_py "
print('\\n'.join(n['node'] for g in d.get('groups', []) for n in g.get('nodes', []) if n.get('step') not in ('pending', 'done', 'failed', 'skipped')))" 2>/dev/null
  fi
  [[ -n $HAREP ]] && name_of "$(cut -d' ' -f2 <<<"$HAREP")"
}
harep_tags() { rapi GET "/2/instances/$1/tags" | jq_py "print(' '.join(sorted(t for t in d if t.startswith('ganeti:watcher:autorepair:'))))" 2>/dev/null; }
# An instance repair under way ends once its result tag is written (or after 150 s): the
# operator removes the tags and returns the node to service.
harep_pass() {
  [[ -n $HAREP ]] || return 0
  local inst i since tags q
  read -r inst i since <<<"$HAREP"
  tags=$(harep_tags "$inst")
  if [[ $tags != *":result:"* || $tags == *":pending:"* ]]; then
    (($(date +%s) - since >= 150)) || return 0
  fi
  event harep phase=end instance="$inst" node="$(name_of "$i")" tags="$tags" pnode="$(rapi GET "/2/instances/$inst" | jq_py "print(d['pnode'])" 2>/dev/null)"
  q=$(tr ' ' '\n' <<<"$tags" | sed -n 's/^\(.\+\)$/tag=\1/p' | paste -sd '&')
  [[ -z $q ]] || wait_job "$(rapi DELETE "/2/instances/$inst/tags?$q" | job_of)" >/dev/null
  HAREP=""
  return_to_service "$(name_of "$i")"
}
workload() { # WHAT NODE-INDEX
  local what=$1 i=$2 port ans code body id inc n inst st k
  port=$(acting_port)
  n=$(name_of "$i")
  case $what in
    evacuate)
      # Only node4 and node5 are evacuated (offline demotes a master candidate, and node1..3
      # keep the coordinators' state).
      ((i >= 4)) || i=$((4 + i % 2))
      diag "$i" '{"status":"evacuate","details":"nemesis"}'
      event work action=evacuate node="$(name_of "$i")"
      ;;
    live-repair)
      diag "$i" '{"status":"live-repair","command":"e2e-fix","details":"nemesis"}'
      event work action=live-repair node="$n"
      ;;
    grant)
      ans=$(curl -s -m 10 -u e2e:e2e-secret -H 'Content-Type: application/json' -w '\n%{http_code}' -X POST \
        --data "{\"node\":\"$n\",\"reason\":\"nemesis\",\"requester\":\"nemesis\",\"ttl_s\":60}" "http://127.0.0.1:$port/1/disruptions")
      code=$(tail -n 1 <<<"$ans")
      body=$(sed '$d' <<<"$ans")
      id=$(jq_py "print(d.get('id', ''))" <<<"$body" 2>/dev/null)
      event grant node="$n" code="$code" id="$id" expires_ms="$(jq_py "print(d.get('expires_ms', 0))" <<<"$body" 2>/dev/null || echo 0)" \
        answer="$(head -c 300 <<<"$body" | tr -d '\n')"
      [[ $code == 201 && -n $id ]] && GRANTS+=("$id:$(date +%s)")
      ;;
    campaign)
      # Over node4, node5 or both (tag nemesis:roll), one campaign at a time.
      if campaign_running || [[ -n $HAREP ]]; then
        event work action=campaign skipped="${CAMPAIGN:+campaign $CAMPAIGN still running}${HAREP:+ instance repair under way}"
      else
        local sel=()
        case $((i % 3)) in 0) sel=(4) ;; 1) sel=(5) ;; *) sel=(4 5) ;; esac
        for k in 4 5; do
          if [[ " ${sel[*]} " == *" $k "* ]]; then
            wait_job "$(rapi PUT "/2/nodes/$(name_of "$k")/tags?tag=nemesis:roll" | job_of)" >/dev/null
          else
            wait_job "$(rapi DELETE "/2/nodes/$(name_of "$k")/tags?tag=nemesis:roll" | job_of)" >/dev/null
          fi
        done
        ans=$(curl -s -m 20 -u e2e:e2e-secret -H 'Content-Type: application/json' -w '\n%{http_code}' -X POST \
          --data '{"hook":"e2e-roll","node_tags":["nemesis:roll"],"reason":"nemesis campaign","timeouts":{"drain_s":300,"move_s":300,"hook_s":120,"healthy_s":180,"undrain_s":300,"migrate_back_s":300}}' \
          "http://127.0.0.1:$port/1/maintenance")
        code=$(tail -n 1 <<<"$ans")
        body=$(sed '$d' <<<"$ans")
        id=$(jq_py "print(d.get('id', ''))" <<<"$body" 2>/dev/null)
        [[ $code == 201 && -n $id ]] && CAMPAIGN=$id
        event campaign phase=start code="$code" id="$id" nodes="$(printf '%s\n' "${sel[@]}" | while read -r k; do name_of "$k"; done | paste -sd ' ')" \
          answer="$(head -c 300 <<<"$body" | tr -d '\n')"
      fi
      ;;
    harep)
      # An instance on node4 or node5 tagged `migrate`, the node drained by hand: the
      # coordinator's harep duty migrates it away. The operator asks admission first (the
      # budget holds), drains, then releases the grant: a grant holds its node against every
      # repair, a node drained by someone is taken over by the instance repair.
      ((i >= 4)) || i=$((4 + i % 2))
      n=$(name_of "$i")
      inst=$(rapi GET "/2/instances?bulk=1" | jq_py "
c = sorted(x['name'] for x in d if x['disk_template'] == 'diskless' and x.get('admin_state') == 'up')
print(c[$i % len(c)] if c else '')" 2>/dev/null)
      if [[ -n $HAREP || -z $inst ]] || campaign_running; then
        event harep phase=skipped node="$n" why="${HAREP:+repair under way}$(campaign_running && echo " campaign running")"
      else
        ans=$(curl -s -m 10 -u e2e:e2e-secret -H 'Content-Type: application/json' -w '\n%{http_code}' -X POST \
          --data "{\"node\":\"$n\",\"reason\":\"nemesis harep\",\"requester\":\"nemesis-harep\",\"ttl_s\":300}" "http://127.0.0.1:$port/1/disruptions")
        code=$(tail -n 1 <<<"$ans")
        body=$(sed '$d' <<<"$ans")
        id=$(jq_py "print(d.get('id', ''))" <<<"$body" 2>/dev/null)
        event grant node="$n" code="$code" id="$id" expires_ms="$(jq_py "print(d.get('expires_ms', 0))" <<<"$body" 2>/dev/null || echo 0)" \
          answer="$(head -c 300 <<<"$body" | tr -d '\n')" for=harep
        if [[ $code == 201 && -n $id ]]; then
          st=success
          if [[ $(rapi GET "/2/instances/$inst" | jq_py "print(d['pnode'])") != "$n" ]]; then
            st=$(wait_job "$(rapi PUT "/2/instances/$inst/migrate" "{\"target_node\": \"$n\"}" | job_of)" 180)
          fi
          if [[ $st == success ]]; then
            wait_job "$(rapi PUT "/2/instances/$inst/tags?tag=ganeti:watcher:autorepair:migrate" | job_of)" >/dev/null
            st=$(wait_job "$(rapi PUT "/2/nodes/$n/role?force=1" '"drained"' | job_of)")
          fi
          code=$(curl -s -m 10 -u e2e:e2e-secret -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$(acting_port)/1/disruptions/$id")
          event release id="$id" code="$code"
          # Set up or not, the next operator pass closes it (then at once).
          HAREP="$inst $i $(($(date +%s) - $([[ $st == success ]] && echo 0 || echo 150)))"
          event harep phase=start instance="$inst" node="$n" grant="$id" setup="$st"
        fi
      fi
      ;;
    cancel)
      inc=$(fo_get "$port" /1/status | jq_py "
m = [i for i in d if i.get('repair-status') in ('noted', 'pending')]
print(m[0]['id'] if m else '')" 2>/dev/null)
      if [[ -n $inc ]]; then
        ans=$(fo_post "$port" "/1/incidents/$inc/cancel")
        code=$(tail -n 1 <<<"$ans")
        event cancel incident="$inc" code="$code" answer="$(sed '$d' <<<"$ans" | head -c 200 | tr -d '\n')"
      fi
      ;;
  esac
  # The operator: nodes an incident finished with go back to service, their verdict Ok.
  operator_pass
}
operator_pass() {
  local i n tags busy
  harep_pass
  busy=" $(busy_nodes | paste -sd ' ') "
  if [[ -n $CAMPAIGN ]] && ! campaign_running; then
    event campaign phase=end id="$CAMPAIGN" state="$(campaign_state)" failures="$(campaign_failures "$CAMPAIGN")"
    CAMPAIGN=""
  fi
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    n=$(name_of "$i")
    tags=$(node_json "$n" | jq_py "print(' '.join(t for t in d.get('tags', []) if t.startswith('maintd:')))" 2>/dev/null)
    [[ -n $tags ]] || continue
    diag "$i" '{"status":"Ok","details":"nemesis"}'
    event work action=return-to-service node="$n" tags="$tags"
    return_to_service "$n"
  done
  # A node left drained or offline by no active incident (a canceled one, or one whose verdict
  # went back to Ok) goes back to service too, as an operator would return it.
  local st
  st=$(fo_get "$(acting_port)" /1/status)
  if [[ -n $st ]] && jq_py "sys.exit(0 if isinstance(d, list) else 1)" <<<"$st" 2>/dev/null; then
    for n in $(rapi GET "/2/nodes?bulk=1" | python3 -c "
import json, sys
nodes = json.load(sys.stdin); st = json.loads(sys.argv[1])
busy = {i.get('node') for i in st if i.get('repair-status') in ('noted', 'pending')} | set(sys.argv[2].split())
print(' '.join(x['name'] for x in nodes if (x.get('drained') or x.get('offline')) and x['name'] not in busy))" "$st" "$busy" 2>/dev/null); do
      event work action=return-to-service node="$n" why="drained or offline without an active incident"
      return_to_service "$n"
    done
  fi
  # Grants older than 30 s are released (the others expire after their 60 s).
  local keep=() g code
  for g in ${GRANTS[@]+"${GRANTS[@]}"}; do
    if (($(date +%s) - ${g#*:} >= 30)); then
      code=$(curl -s -m 10 -u e2e:e2e-secret -o /dev/null -w '%{http_code}' -X DELETE "http://127.0.0.1:$(acting_port)/1/disruptions/${g%%:*}")
      event release id="${g%%:*}" code="$code"
    else
      keep+=("$g")
    fi
  done
  GRANTS=(${keep[@]+"${keep[@]}"})
}

# The acting coordinator's grants, once it has taken over (up to 60 s), as a `grants` line.
grants_snapshot() { # AFTER
  local port k g
  for ((k = 0; k < 60; k++)); do
    port=$(acting_port)
    [[ $(fo_get "$port" /1/replication | jq_py "print(d.get('generation') is not None)" 2>/dev/null) == True ]] && break
    sleep 1
  done
  g=$(curl -s -m 10 "http://127.0.0.1:$port/1/disruptions" | jq_py "print(json.dumps(d))" 2>/dev/null)
  [[ -n $g ]] && event grants after="$1" coordinator="$(name_of "$(master_index)")" grants="$g"
}

# ---------------------------------------------------------------------------------------------
# The faults.
# For a failover fault (KIND), in fault()'s scope: sets m (the master), target (another of
# node1..3, from c) and pid (the master's coordinator, frozen), then waits at most 120 s for
# Ganeti's job queue to run empty; if it does not, the coordinator is continued, the fault
# logged as skipped, and this returns 1.
freeze_master_until_idle() { # KIND
  m=$(master_index)
  target=$c
  [[ $target == "$m" ]] && target=$((c % 3 + 1))
  pid=$(coord_pid "$m")
  [[ -n $pid ]] && kill -STOP "$pid" 2>/dev/null
  for ((k = 0; k < 120; k++)); do busy=$(fo_busy_jobs); [[ -z $busy ]] && break; sleep 1; done
  if [[ -n $busy ]]; then
    [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
    event fault n="$n" fault="$1" phase=skipped why="jobs still running after 120 s: $busy"
    return 1
  fi
}

# Another tool holds node IDX's repair lock (one process, killed to release it): the agent
# answers a repair or hook "busy" meanwhile, and runs nothing.
LOCK_PID=""
hold_lock() { # NODE-INDEX
  local k
  rm -f "$S/e2e/nem-locked"
  python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").write("locked\n")
time.sleep(900)' "$S/e2e/agent-state-$1/repair.lock" "$S/e2e/nem-locked" &
  LOCK_PID=$!
  for ((k = 0; k < 50; k++)); do [[ -e $S/e2e/nem-locked ]] && return 0; sleep 0.1; done
  return 1
}
release_lock() {
  [[ -n $LOCK_PID ]] && kill "$LOCK_PID" 2>/dev/null && wait "$LOCK_PID" 2>/dev/null
  LOCK_PID=""
  rm -f "$S/e2e/nem-locked"
}
# A campaign over node IDX alone (tag nemesis:roll) with a hook timeout of HOOK-S: sets
# CAMPAIGN when it started.
campaign_over() { # NODE-INDEX HOOK-S
  local k ans code body id
  for k in 4 5; do
    if [[ $k == "$1" ]]; then
      wait_job "$(rapi PUT "/2/nodes/$(name_of "$k")/tags?tag=nemesis:roll" | job_of)" >/dev/null
    else
      wait_job "$(rapi DELETE "/2/nodes/$(name_of "$k")/tags?tag=nemesis:roll" | job_of)" >/dev/null
    fi
  done
  ans=$(curl -s -m 20 -u e2e:e2e-secret -H 'Content-Type: application/json' -w '\n%{http_code}' -X POST \
    --data "{\"hook\":\"e2e-roll\",\"node_tags\":[\"nemesis:roll\"],\"reason\":\"nemesis campaign\",\"timeouts\":{\"drain_s\":300,\"move_s\":300,\"hook_s\":$2,\"healthy_s\":180,\"undrain_s\":300,\"migrate_back_s\":300}}" \
    "http://127.0.0.1:$(acting_port)/1/maintenance")
  code=$(tail -n 1 <<<"$ans")
  body=$(sed '$d' <<<"$ans")
  id=$(jq_py "print(d.get('id', ''))" <<<"$body" 2>/dev/null)
  [[ $code == 201 && -n $id ]] && CAMPAIGN=$id
  event campaign phase=start code="$code" id="$id" nodes="$(name_of "$1")" answer="$(head -c 300 <<<"$body" | tr -d '\n')"
}
# The request id of the first hook node IDX's agent refused since SINCE-MS (waits up to
# SECONDS; empty when none).
hook_refused() { # NODE-INDEX SINCE-MS SECONDS
  local k req
  for ((k = 0; k < $3; k++)); do
    req=$(cat "$S/e2e/agent-state-$1"/repair-refused.jsonl.1 "$S/e2e/agent-state-$1"/repair-refused.jsonl 2>/dev/null | python3 -c "
import json, sys
for line in sys.stdin:
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get('command') == 'e2e-roll' and d.get('at', 0) >= $2 and d.get('incident_id'):
        print(d['incident_id'])
        break")
    [[ -n $req ]] && { echo "$req"; return 0; }
    sleep 1
  done
}
# NODE's step in the running campaign.
campaign_step() { # NODE
  fo_get "$(acting_port)" "/1/maintenance/$CAMPAIGN" | jq_py "
n = [n for g in d.get('groups', []) for n in g['nodes'] if n['node'] == '$1']
print(n[-1]['step'] if n else d.get('state', ''))" 2>/dev/null
}

fault() { # N KIND A B C DUR JUMP
  local n=$1 kind=$2 a=$3 b=$4 c=$5 dur=$6 jump=$7 pid m target busy k free d ans
  # A coordinator fault hits the acting one two times in three (C = 1 or 2), else the standby
  # after it (C = 3); a failover goes to node C (or the next one when C is the master).
  m=$(master_index)
  [[ $kind == coord-* || $kind == disk-full ]] && if ((c == 3)); then c=$((m % 3 + 1)); else c=$m; fi
  case $kind in
    partition)
      event fault n="$n" fault=partition phase=start nodes="[\"$(name_of "$a")\",\"$(name_of "$b")\"]" dur_s="$dur"
      "$GNT/node-exec.sh" "$a" ip route add blackhole "$(ip_of "$b")/32"
      "$GNT/node-exec.sh" "$b" ip route add blackhole "$(ip_of "$a")/32"
      sleep "$dur"
      "$GNT/node-exec.sh" "$a" ip route del blackhole "$(ip_of "$b")/32"
      "$GNT/node-exec.sh" "$b" ip route del blackhole "$(ip_of "$a")/32"
      event fault n="$n" fault=partition phase=end
      ;;
    isolate)
      event fault n="$n" fault=isolate phase=start node="$(name_of "$a")" dur_s="$dur"
      "$GNT/node-exec.sh" "$a" ip link set eth0 down
      sleep "$dur"
      "$GNT/node-exec.sh" "$a" ip link set eth0 up
      event fault n="$n" fault=isolate phase=end
      ;;
    failover)
      # As S11 does: the master's coordinator is frozen so that it submits nothing more, the
      # queue runs empty, the master moves, and the old coordinator is continued at once (it
      # wakes up superseded, racing the new master's takeover).
      freeze_master_until_idle failover || return 0
      event fault n="$n" fault=failover phase=start from="$(name_of "$m")" to="$(name_of "$target")" frozen="${pid:-0}"
      if ans=$("$GNT/node-exec.sh" "$target" gnt-cluster master-failover 2>&1); then
        [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
        event fault n="$n" fault=failover phase=end master="$(name_of "$(master_index)")"
      else
        [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
        event fault n="$n" fault=failover phase=end failed="$(tail -n 2 <<<"$ans" | tr '\n' ' ' | tr -d '"' | head -c 200)"
      fi
      stop_mond
      "$GNT/master-daemons.sh" check --timeout 5 >/dev/null 2>&1 || "$GNT/master-daemons.sh" heal --reason nemesis >&2 || true
      # The grants as the new master's coordinator shows them once it has taken over.
      grants_snapshot failover
      ;;
    coord-kill)
      pid=$(coord_pid "$c")
      event fault n="$n" fault=coord-kill phase=start coordinator="$(name_of "$c")" pid="${pid:-0}"
      [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
      sleep $((1 + dur % 5))
      start_coord "$c"
      event fault n="$n" fault=coord-kill phase=end pid="$(coord_pid "$c")"
      ;;
    coord-stop)
      pid=$(coord_pid "$c")
      event fault n="$n" fault=coord-stop phase=start coordinator="$(name_of "$c")" pid="${pid:-0}" dur_s="$dur"
      [[ -n $pid ]] && kill -STOP "$pid" 2>/dev/null
      sleep "$dur"
      [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
      event fault n="$n" fault=coord-stop phase=end
      ;;
    agent-kill)
      pid=$(agent_pid "$a")
      event fault n="$n" fault=agent-kill phase=start node="$(name_of "$a")" pid="${pid:-0}"
      [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
      sleep $((1 + dur % 5))
      rm -f "$S/pids/bg-agent-$a.pid"
      start_agent "$a" >/dev/null
      event fault n="$n" fault=agent-kill phase=end
      ;;
    agent-stop)
      pid=$(agent_pid "$a")
      event fault n="$n" fault=agent-stop phase=start node="$(name_of "$a")" pid="${pid:-0}" dur_s="$dur"
      [[ -n $pid ]] && kill -STOP "$pid" 2>/dev/null
      sleep "$dur"
      [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
      event fault n="$n" fault=agent-stop phase=end
      ;;
    disk-full)
      d=$(coord_state "$c")
      free=$("$GNT/node-exec.sh" "$c" df --output=avail -B1 "$d" | tail -n 1 | tr -dc '0-9')
      event fault n="$n" fault=disk-full phase=start coordinator="$(name_of "$c")" free_bytes="${free:-0}" dur_s="$dur"
      "$GNT/node-exec.sh" "$c" sh -c "fallocate -l ${free:-0} '$d/nemesis-fill' 2>/dev/null || dd if=/dev/zero of='$d/nemesis-fill' bs=1M 2>/dev/null" || true
      sleep "$dur"
      "$GNT/node-exec.sh" "$c" rm -f "$d/nemesis-fill"
      event fault n="$n" fault=disk-full phase=end
      ;;
    rapi-stop)
      m=$(master_index)
      pid=$(rapi_pid "$m")
      event fault n="$n" fault=rapi-stop phase=start node="$(name_of "$m")" pid="${pid:-0}" dur_s="$dur"
      [[ -n $pid ]] && kill -STOP "$pid" 2>/dev/null
      sleep "$dur"
      [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
      event fault n="$n" fault=rapi-stop phase=end
      ;;
    rapi-refuse)
      m=$(master_index)
      event fault n="$n" fault=rapi-refuse phase=start node="$(name_of "$m")" dur_s="$dur"
      "$GNT/node-exec.sh" "$m" /usr/lib/ganeti/daemon-util stop ganeti-rapi >/dev/null 2>&1 || true
      sleep "$dur"
      "$GNT/node-exec.sh" "$m" /usr/lib/ganeti/daemon-util start ganeti-rapi >/dev/null 2>&1 || true
      event fault n="$n" fault=rapi-refuse phase=end
      ;;
    rapi-lose)
      # Ganeti's answers to the coordinators are lost (requests carried out, answers dropped).
      k=$(wc -l <"$LOSE_LOG" 2>/dev/null || echo 0)
      event fault n="$n" fault=rapi-lose phase=start node="$(name_of "$(master_index)")" dur_s="$dur"
      touch "$LOSE_FLAG"
      sleep "$dur"
      rm -f "$LOSE_FLAG"
      event fault n="$n" fault=rapi-lose phase=end lost="$(($(wc -l <"$LOSE_LOG" 2>/dev/null || echo 0) - k))"
      ;;
    clock-jump)
      # The agent's audit lines written meanwhile carry the jumped time: the checker reads
      # those between the two counts as written during the fault (audit_lines).
      event fault n="$n" fault=clock-jump phase=start node="$(name_of "$a")" offset_s="$jump" dur_s="$dur" audit_lines="$(audit_lines "$a")"
      printf '%+d\n' "$jump" >"$CLOCK/$(name_of "$a")"
      sleep "$dur"
      echo "+0" >"$CLOCK/$(name_of "$a")"
      # libfaketime's cache: every daemon of the node reads the true time again within 1 s.
      sleep 2
      event fault n="$n" fault=clock-jump phase=end audit_lines="$(audit_lines "$a")"
      ;;
    failover-nv)
      # The master dies: once the queue is empty (its coordinator frozen meanwhile, as for a
      # planned failover), its coordinator and Ganeti master daemons are killed, another of
      # node1..3 takes over with --no-voting, then the old master's node comes back as a plain
      # node (noded, the configuration redistributed) and its coordinator is started again.
      freeze_master_until_idle failover-nv || return 0
      event fault n="$n" fault=failover-nv phase=start from="$(name_of "$m")" to="$(name_of "$target")" killed="${pid:-0}"
      [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
      rm -f "$S/pids/bg-nem-coord-$m.pid"
      gnt_kill_master "$m"
      if ans=$(gnt_failover_no_voting "$target"); then
        event fault n="$n" fault=failover-nv phase=failed-over master="$(name_of "$(master_index)")"
      else
        event fault n="$n" fault=failover-nv phase=failed-over failed="$(tail -n 2 <<<"$ans" | tr '\n' ' ' | tr -d '"' | head -c 200)"
      fi
      gnt_rejoin_old_master "$m" "$(master_index)"
      start_coord "$m"
      event fault n="$n" fault=failover-nv phase=end master="$(name_of "$(master_index)")" pid="$(coord_pid "$m")"
      stop_mond
      "$GNT/master-daemons.sh" check --timeout 5 >/dev/null 2>&1 || "$GNT/master-daemons.sh" heal --reason nemesis >&2 || true
      grants_snapshot failover-nv
      ;;
    hook-away | owner-start)
      # A campaign over node4 or node5 alone whose hook is held undelivered (its repair lock
      # held by another tool): the agent is then away past the hook timeout (hook-away), or
      # the owner starts an instance of theirs on the drained node (owner-start).
      ((a >= 4)) || a=$((4 + a % 2))
      local node since req inst="" pnode apid failures
      node=$(name_of "$a")
      if campaign_running || [[ -n $HAREP ]]; then
        event fault n="$n" fault="$kind" phase=skipped why="${CAMPAIGN:+campaign $CAMPAIGN running}${HAREP:+ instance repair under way}"
        return 0
      fi
      # Ganeti adds no instance on a drained node: the other of node4 and node5 then.
      if [[ $kind == owner-start && $(node_json "$node" | jq_py "print(d['drained'] or d['offline'])" 2>/dev/null) != False ]]; then
        a=$((9 - a))
        node=$(name_of "$a")
      fi
      since=$(date +%s%3N)
      if [[ $kind == owner-start ]]; then
        inst=nemown.$NODECARE_GNT_DOMAIN
        if ! ans=$("$GNT/node-exec.sh" "$(master_index)" gnt-instance add -t diskless -o noop -n "$node" --no-name-check \
          --no-ip-check --no-start -B memory=128M,vcpus=1 "$inst" 2>&1); then
          event fault n="$n" fault="$kind" phase=skipped why="adding $inst: $(tail -n 1 <<<"$ans" | tr -d '"' | head -c 200)"
          return 0
        fi
      fi
      hold_lock "$a"
      campaign_over "$a" "$([[ $kind == hook-away ]] && echo 20 || echo 120)"
      req=""
      [[ -n $CAMPAIGN ]] && req=$(hook_refused "$a" "$since" 90)
      event fault n="$n" fault="$kind" phase=start node="$node" campaign="$CAMPAIGN" hook_request="$req" instance="$inst"
      if [[ -z $req ]]; then
        # The campaign never reached the hook: it goes on as any other.
        release_lock
        event fault n="$n" fault="$kind" phase=end campaign="$CAMPAIGN" reached_hook=false step="$(campaign_step "$node")"
      elif [[ $kind == hook-away ]]; then
        apid=$(agent_pid "$a")
        [[ -n $apid ]] && kill -STOP "$apid" 2>/dev/null
        release_lock
        for ((k = 0; k < 60; k++)); do
          [[ $(campaign_step "$node") =~ ^(failed|completed|aborted|done)$ ]] && break
          sleep 1
        done
        failures=$(campaign_failures "$CAMPAIGN")
        event work action=return-to-service node="$node" why="failed at its hook, agent away"
        return_to_service "$node"
        [[ -n $apid ]] && kill -CONT "$apid" 2>/dev/null
        event fault n="$n" fault=hook-away phase=end campaign="$CAMPAIGN" step="$(campaign_step "$node")" failures="$failures"
      else
        st=$(wait_job "$(rapi PUT "/2/instances/$inst/startup" | job_of)")
        event work action=owner-start instance="$inst" node="$node" job="$st"
        for ((k = 0; k < 90; k++)); do
          pnode=$(rapi GET "/2/instances/$inst" | jq_py "print(d['pnode'])" 2>/dev/null)
          [[ -n $pnode && $pnode != "$node" ]] && break
          sleep 1
        done
        release_lock
        event fault n="$n" fault=owner-start phase=moved instance="$inst" pnode="$pnode" step="$(campaign_step "$node")"
        for ((k = 0; k < 180; k++)); do campaign_running || break; sleep 1; done
        campaign_running && fo_post "$(acting_port)" "/1/maintenance/$CAMPAIGN/abort" >/dev/null
        for ((k = 0; k < 60; k++)); do campaign_running || break; sleep 1; done
        event fault n="$n" fault=owner-start phase=end campaign="$CAMPAIGN" state="$(campaign_state)" failures="$(campaign_failures "$CAMPAIGN")"
      fi
      if [[ -n $inst ]]; then
        wait_job "$(rapi DELETE "/2/instances/$inst" | job_of)" 180 >/dev/null
        event work action=owner-remove instance="$inst"
      fi
      ;;
    verdict-flip)
      event fault n="$n" fault=verdict-flip phase=start node="$(name_of "$a")" flips=$((2 + dur % 4))
      local bad='{"status":"live-repair","command":"e2e-fix","details":"nemesis flip"}'
      ((a >= 4)) && bad='{"status":"evacuate","details":"nemesis flip"}'
      for ((k = 0; k < 2 + dur % 4; k++)); do
        diag "$a" "$bad"
        sleep 1
        diag "$a" '{"status":"Ok","details":"nemesis flip"}'
        sleep 1
      done
      ((dur % 2 == 0)) && diag "$a" "$bad"
      event fault n="$n" fault=verdict-flip phase=end final="$(tr -d '"' <"$S/e2e/diag-$a")"
      ;;
  esac
}

log "faults"
for ((f = 0; f < FAULTS; f++)); do
  read -r kind a b c dur work wnode gap jump <<<"${PLAN[$f]}"
  workload "$work" "$wnode"
  fault $((f + 1)) "$kind" "$a" "$b" "$c" "$dur" "$jump"
  sleep "$gap"
done
event faults-stopped
log "faults stopped: healing, waiting for quiescence"
heal_all
stop_mond
"$GNT/master-daemons.sh" check --timeout 5 >/dev/null 2>&1 || "$GNT/master-daemons.sh" heal --reason "nemesis end" >&2 || true

# Quiescence: no incident noted or pending in the acting coordinator, no job in Ganeti's queue.
quiet=false
for ((k = 0; k < 120; k++)); do
  operator_pass
  port=$(acting_port)
  # The storm breaker, opened by faults that made most agents unreachable, stays open until an
  # operator resets it (docs/ADMISSION.md): the operator does, once the agents answer again.
  if ((k % 5 == 2)) && fo_get "$port" /1/breaker | jq_py "sys.exit(0 if d.get('open') else 1)" 2>/dev/null &&
    [[ $(fo_get "$port" /1/agents | jq_py "print(all(a.get('state') == 'ok' for a in d))" 2>/dev/null) == True ]]; then
    why=$(fo_get "$port" /1/breaker | jq_py "print(d.get('why'))" 2>/dev/null)
    code=$(curl -s -m 10 -u e2e:e2e-secret -H 'Content-Type: application/json' -o /dev/null -w '%{http_code}' -X POST \
      --data '{"reason":"nemesis: faults stopped"}' "http://127.0.0.1:$port/1/breaker/reset")
    event breaker-reset code="$code" why="$why"
  fi
  st=$(fo_get "$port" /1/status)
  # Also the campaign finished and the instance repair closed.
  if [[ -n $st ]] && jq_py "sys.exit(0 if not any(i.get('repair-status') in ('noted', 'pending') for i in d) else 1)" <<<"$st" 2>/dev/null &&
    [[ -z $(fo_busy_jobs) && -z $CAMPAIGN && -z $HAREP ]]; then
    quiet=true
    break
  fi
  sleep 4
done
# Grants left are released by hand once the final state has been recorded.
port=$(acting_port)
event final quiesced="$quiet" master="$(name_of "$(master_index)")" \
  incidents="$(fo_get "$port" /1/status | jq_py "print(json.dumps([{k: i.get(k) for k in ('id', 'node', 'action', 'repair-status', 'acknowledged')} for i in d]))" 2>/dev/null || echo null)" \
  grants="$(curl -s -m 10 "http://127.0.0.1:$port/1/disruptions" | jq_py "print(json.dumps(d))" 2>/dev/null || echo null)" \
  campaigns="$(fo_get "$port" /1/maintenance | jq_py "print(json.dumps([{'id': c.get('id'), 'state': c.get('state'), 'failures': [{k: f.get(k) for k in ('node', 'step', 'at_ms')} for f in ([c['failure']] if c.get('failure') else []) + (c.get('failures') or [])]} for c in d['campaigns']]))" 2>/dev/null || echo null)" \
  replication="$(fo_get "$port" /1/replication | tr -d '\n' | head -c 2000)"
for g in ${GRANTS[@]+"${GRANTS[@]}"}; do curl -s -m 10 -u e2e:e2e-secret -o /dev/null -X DELETE "http://127.0.0.1:$port/1/disruptions/${g%%:*}"; done

# The checker's inputs.
rapi GET "/2/jobs?bulk=1" >"$RUN/jobs.json"
for i in 1 2 3; do tail -c +$((LOG_OFF[$i] + 1)) "$S/logs/bg-nem-coord-$i.log" >"$RUN/coordinator-$i.log"; done
args=()
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
  n=$(name_of "$i")
  tail -c +$((RAPI_OFF[$i] + 1)) "$(eval echo "\$NODECARE_GNT_NODE${i}_ROOT")/var/log/ganeti/rapi-daemon.log" >"$RUN/rapi-$i.log" 2>/dev/null
  cat "$S/e2e/agent-state-$i"/repair-audit.jsonl.1 "$S/e2e/agent-state-$i"/repair-audit.jsonl >"$RUN/audit-$i.jsonl" 2>/dev/null
  cp "$S/e2e/nem-roll-$i" "$RUN/hooks-$i.log" 2>/dev/null
  args+=(--rapi-log "$n=$RUN/rapi-$i.log" --audit "$n=$RUN/audit-$i.jsonl" --hook-log "$n=$RUN/hooks-$i.log" --node-ip "$n=$(ip_of "$i")")
  ((i <= 3)) && args+=(--coordinator-log "$n=$RUN/coordinator-$i.log")
done
log "checking $RUN"
[[ -x $CHECK ]] || { echo "nemesis: $CHECK missing: inputs kept in $RUN" >&2; exit 1; }
"$CHECK" --jobs "$RUN/jobs.json" --faults "$FLOG" --client-ip "198.18.0.2" --cluster-ip "$NODECARE_GNT_CLUSTER_IP" "${args[@]}" | tee "$RUN/check.txt"
rc=${PIPESTATUS[0]}
log "seed $SEED: $(($(date +%s) - T0)) s, checker exit $rc; replay: tests/nemesis/run.sh --seed $SEED --faults $FAULTS$([[ $SHORT == 1 ]] && echo ' --short')"
exit "$rc"
