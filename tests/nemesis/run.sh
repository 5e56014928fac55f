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
# ganeti-rapi stopped: connections refused), verdict-flip (a node's diagnose verdict flips
# several times a second). Not injected: clock jumps (the namespaces share the kernel's wall
# clock and the daemons have no time source to shift) and `--no-voting` failovers (S11 covers
# one; here Ganeti's daemons on the old master would have to be killed and rebuilt each time).
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
CHECK=$BIN/nemesis-check
T0=$(date +%s)
log() { echo "nemesis[$(($(date +%s) - T0))s]: $*" >&2; }

if [[ $BUILD -eq 1 ]]; then
  log "building (debug)"
  (cd "$ROOT" && cargo build -p nodecare-agent -p nodecare-coordinator -p nodecare-tests --bin nodecare-agent --bin nodecare-coordinator --bin nemesis-check) >&2 ||
    { echo "nemesis: build failed" >&2; exit 1; }
fi
for b in "$AGENT" "$COORD"; do [[ -x $b ]] || { echo "nemesis: $b missing" >&2; exit 1; }; done

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
# fo_start, fo_get, fo_post, fo_busy_jobs (and the ports after COORD_FWD) of S11.
# shellcheck source=../e2e-ganeti/s11-failover.sh
. "$E2E/s11-failover.sh"
port_of() { echo $((COORD_FWD + $1 - 1)); }
cleanup() { if [[ $KEEP -eq 0 ]]; then "$GNT/cluster-down.sh" --quiet || true; fi; }
trap cleanup EXIT

RUN=$S/nemesis/seed-$SEED-$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$RUN" "$S/e2e"
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
KINDS=(partition isolate failover coord-kill coord-stop agent-kill agent-stop disk-full rapi-stop rapi-refuse verdict-flip)
WORK=(evacuate live-repair grant cancel none)
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
  PLAN+=("$kind $a $b $c $dur $work $wnode $gap")
done
log "seed $SEED, $FAULTS faults; plan:"
for ((f = 0; f < FAULTS; f++)); do echo "  $((f + 1)): ${PLAN[$f]}" >&2; done

# ---------------------------------------------------------------------------------------------
# Setup: fresh agents and coordinators (state of earlier runs removed), every node in service.
stop_all() {
  local i
  for i in 1 2 3; do "$GNT/node-exec.sh" "$i" --stop "nem-coord-$i" >/dev/null 2>&1 || true; done
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
# Ganeti starts mond again on failovers; the agents own port 1815.
stop_mond() { local i; for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do "$GNT/node-exec.sh" "$i" /usr/lib/ganeti/daemon-util stop ganeti-mond >/dev/null 2>&1 || true; done; }

# Everything a fault may have left behind, undone (idempotent).
heal_all() {
  local i j pid m
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
  chmod 0755 "$nroot/etc/ganeti/node-diagnose-commands/e2e-state" "$nroot/etc/ganeti/node-repair-commands/e2e-fix"
  rm -rf "$S/e2e/agent-state-$i"
done
rts=()
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do return_to_service "$(name_of "$i")" & rts+=($!); done
wait "${rts[@]}"
printf 'e2e e2e-secret write\n' >"$S/e2e/users"
chmod 600 "$S/e2e/users"
cat >"$S/e2e/coord-fo.toml" <<TOML
job_chains = false
grace = 5.0
failure_domains = "rack:"
users = "$S/e2e/users"
[breaker]
max_incident_percent = 100.0
max_incident_nodes = 10
[replication]
enabled = true
TOML
# Each coordinator's state directory is a small tmpfs inside its node (disk-full fills it).
for i in 1 2 3; do
  d=$(coord_state "$i")
  mkdir -p "$d"
  "$GNT/node-exec.sh" "$i" mountpoint -q "$d" || "$GNT/node-exec.sh" "$i" mount -t tmpfs -o size=64m nemesis "$d"
  "$GNT/node-exec.sh" "$i" sh -c "rm -rf '$d'/* '$d'/.[!.]*" 2>/dev/null || true
done
for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do start_agent "$i" || { echo "nemesis: agent $i did not start" >&2; exit 1; }; done
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
workload() { # WHAT NODE-INDEX
  local what=$1 i=$2 port ans code body id inc n
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
  local i n tags
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
busy = {i.get('node') for i in st if i.get('repair-status') in ('noted', 'pending')}
print(' '.join(x['name'] for x in nodes if (x.get('drained') or x.get('offline')) and x['name'] not in busy))" "$st" 2>/dev/null); do
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
fault() { # N KIND A B C DUR
  local n=$1 kind=$2 a=$3 b=$4 c=$5 dur=$6 pid m target busy k free d
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
      m=$(master_index)
      target=$c
      [[ $target == "$m" ]] && target=$((c % 3 + 1))
      # As S11 does: the master's coordinator is frozen so that it submits nothing more, the
      # queue runs empty, the master moves, and the old coordinator is continued at once (it
      # wakes up superseded, racing the new master's takeover).
      pid=$(coord_pid "$m")
      [[ -n $pid ]] && kill -STOP "$pid" 2>/dev/null
      for ((k = 0; k < 120; k++)); do busy=$(fo_busy_jobs); [[ -z $busy ]] && break; sleep 1; done
      if [[ -n $busy ]]; then
        [[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
        event fault n="$n" fault=failover phase=skipped why="jobs still running after 120 s: $busy"
        return
      fi
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
      event fault n="$n" fault=verdict-flip phase=end final="$(cat "$S/e2e/diag-$a" | tr -d '"')"
      ;;
  esac
}

log "faults"
for ((f = 0; f < FAULTS; f++)); do
  read -r kind a b c dur work wnode gap <<<"${PLAN[$f]}"
  workload "$work" "$wnode"
  fault $((f + 1)) "$kind" "$a" "$b" "$c" "$dur"
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
  if [[ -n $st ]] && jq_py "sys.exit(0 if not any(i.get('repair-status') in ('noted', 'pending') for i in d) else 1)" <<<"$st" 2>/dev/null &&
    [[ -z $(fo_busy_jobs) ]]; then
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
  args+=(--rapi-log "$n=$RUN/rapi-$i.log" --audit "$n=$RUN/audit-$i.jsonl" --node-ip "$n=$(ip_of "$i")")
  ((i <= 3)) && args+=(--coordinator-log "$n=$RUN/coordinator-$i.log")
done
log "checking $RUN"
[[ -x $CHECK ]] || { echo "nemesis: $CHECK missing: inputs kept in $RUN" >&2; exit 1; }
"$CHECK" --jobs "$RUN/jobs.json" --faults "$FLOG" --client-ip "198.18.0.2" --cluster-ip "$NODECARE_GNT_CLUSTER_IP" "${args[@]}" | tee "$RUN/check.txt"
rc=${PIPESTATUS[0]}
log "seed $SEED: $(($(date +%s) - T0)) s, checker exit $rc; replay: tests/nemesis/run.sh --seed $SEED --faults $FAULTS$([[ $SHORT == 1 ]] && echo ' --short')"
exit "$rc"
