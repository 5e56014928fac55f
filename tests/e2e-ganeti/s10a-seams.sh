# S10a (sourced by run.sh): campaigns at the seams, on node5 alone (`NODECARE_E2E_ONLY=seams`
# runs it after the cluster, the agents, the coordinator and the full candidate pool only).
#
# A campaign's hook is recorded once the node's agent has reported its boot id, and sent in the
# same round. To hold it recorded but undelivered while the agent still reports, another tool
# holds the node's repair lock (the agent's `repair.lock`, an flock): the agent answers the hook
# "busy" (a transient refusal, the coordinator asks again each round) and nothing runs.
#
# Seam 1, an instance started on a drained node before its hook: while the hook waits, the owner
# starts a stopped instance on the drained node (RAPI startup). The instance must be moved away
# before the hook runs (its primary changes while the hook still waits), then the lock is
# released, the hook runs once with no instance running on the node (the hook lists the fake
# hypervisor's running instances of its node, /run/ganeti/fake-hypervisor), and the campaign
# completes.
#
# Seam 2, an agent away at its hook beyond the hook timeout: with the hook recorded and refused
# busy, the agent is stopped (SIGSTOP: its listening socket still takes connections, so the
# requests sent meanwhile queue in it), the lock released; the hook step times out, the node
# fails, the campaign fails, and the hook's ledger entry is canceled. The operator returns the
# node to service, then the agent is continued: the hook must never run (no line in the hook's
# log, no `accepted` line for its request in the agent's audit), the node stays in service and
# the ledger entry stays canceled.

SEAM_I=5
SEAM_TAG=e2e:seam

# The hook: a line per run (Unix ms, the instances the fake hypervisor runs on the node, the
# context), then says it did not reboot the node.
seam_hook_install() { # NODE-INDEX
  local root_var="NODECARE_GNT_NODE${1}_ROOT"
  # shellcheck disable=SC2016 # expanded by the hook
  printf '#!/bin/sh\nctx=$(cat | tr -d "\\n")\nrunning=$(ls /run/ganeti/fake-hypervisor 2>/dev/null | tr "\\n" " ")\necho "$(date +%%s%%3N) running=[$running] $ctx" >> %s\necho nodecare:no-reboot\n' \
    "$S/e2e/seam-hook-$1" >"${!root_var}/etc/ganeti/node-repair-commands/e2e-seam"
  chmod 0755 "${!root_var}/etc/ganeti/node-repair-commands/e2e-seam"
}
# Lines of the hook's log of CAMPAIGN.
seam_hook_runs() { # NODE-INDEX CAMPAIGN
  grep -F "\"campaign\":\"$2\"" "$S/e2e/seam-hook-$1" 2>/dev/null
}

# Another tool holds node IDX's repair lock (one process, killed to release it).
seam_lock() { # NODE-INDEX
  python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").write("locked\n")
time.sleep(900)' "$S/e2e/agent-state-$1/repair.lock" "$S/e2e/seam-locked-$1" &
  SEAM_LOCK_PID=$!
  local k
  for ((k = 0; k < 50; k++)); do [[ -e $S/e2e/seam-locked-$1 ]] && return 0; sleep 0.1; done
  return 1
}
seam_unlock() {
  [[ -n ${SEAM_LOCK_PID:-} ]] && kill "$SEAM_LOCK_PID" 2>/dev/null && wait "$SEAM_LOCK_PID" 2>/dev/null
  SEAM_LOCK_PID=""
  rm -f "$S"/e2e/seam-locked-*
}

# The campaign's hook entry in the coordinator's ledger: "STATE REQUEST-ID WHY".
seam_ledger_hook() { # CAMPAIGN
  sqlite3 -readonly "$S/e2e/coord-state/state.db" \
    "SELECT record FROM ledger WHERE holder = 'campaign:$1' AND key LIKE '%-hook'" 2>/dev/null | jq_py "
def find(v):
    if isinstance(v, dict):
        if isinstance(v.get('request_id'), str):
            return v['request_id']
        return next((r for r in map(find, v.values()) if r), None)
    return None
kind = json.loads((d.get('about') or {}).get('operation') or 'null')
print(d.get('state'), find(kind) or '-', d.get('why') or '')" 2>/dev/null
}
# Audit lines of node IDX's agent for request ID with OUTCOME.
seam_audit() { # NODE-INDEX REQUEST-ID OUTCOME
  cat "$S/e2e/agent-state-$1"/repair-audit.jsonl* "$S/e2e/agent-state-$1"/repair-refused.jsonl* 2>/dev/null | jq_py_lines "
if d.get('incident_id') == '$2' and d.get('outcome') == '$3': print(d.get('at'))"
}
jq_py_lines() { python3 -c "
import json, sys
for line in sys.stdin:
    try:
        d = json.loads(line)
    except ValueError:
        continue
    $1"; }

seam_campaign_start() { # HOOK-S
  local ans code
  ans=$(coordw POST /1/maintenance "{\"hook\":\"e2e-seam\",\"node_tags\":[\"$SEAM_TAG\"],\"reason\":\"e2e seams\",\"timeouts\":{\"drain_s\":120,\"move_s\":120,\"hook_s\":$1,\"healthy_s\":120,\"undrain_s\":120,\"migrate_back_s\":120}}")
  code=$(tail -n 1 <<<"$ans")
  [[ $code == 201 ]] || { echo "HTTP $code: $(sed '$d' <<<"$ans" | head -c 300)" >&2; return 1; }
  sed '$d' <<<"$ans" | jq_py "print(d['id'])"
}
# "STATE STEP WAITING-FOR" of node N in campaign ID.
seam_step() { # ID NODE
  coord "/1/maintenance/$1" | jq_py "
n = [n for g in d['groups'] for n in g['nodes'] if n['node'] == '$2']
print(d['state'], n[-1]['step'] if n else '-', (n[-1].get('waiting_for') or '') if n else '')" 2>/dev/null
}
# Waits until the hook of ID on node N is recorded and refused busy by the agent; prints its
# request id.
seam_wait_refused_hook() { # ID NODE
  local k led req
  for ((k = 0; k < 120; k++)); do
    led=$(seam_ledger_hook "$1")
    req=$(awk '{print $2}' <<<"$led")
    if [[ ${led%% *} == recorded && $req != - && -n $(seam_audit "$SEAM_I" "$req" refused) ]]; then
      echo "$req"
      return 0
    fi
    sleep 1
  done
  log "S10a: hook of $1 not refused busy: ledger '$led', campaign $(seam_step "$1" "$2")"
  return 1
}

scenario_seams() {
  local i n id id2 req req2 inst ans st k step t_moved t_hook line bad="" t0 pnode led boot_before
  local node=$NODECARE_GNT_NODE5_NAME
  master_healthy S10a
  log "S10a campaigns at the seams on $node"
  t0=$(date +%s)
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"
    n=NODECARE_GNT_NODE${i}_NAME
    return_to_service "${!n}"
  done
  "$GNT/node-exec.sh" "$SEAM_I" --stop "agent-$SEAM_I" >/dev/null 2>&1 || true
  start_agent "$SEAM_I" || log "S10a: agent $SEAM_I did not start"
  seam_hook_install "$SEAM_I"
  rm -f "$S/e2e/seam-hook-$SEAM_I"
  for t in "$SEAM_TAG" rack:c; do wait_job "$(rapi PUT "/2/nodes/$node/tags?tag=$t" | job_of)" >/dev/null; done
  # A stopped instance of the owner's on node5.
  inst=inst7.$NODECARE_GNT_DOMAIN
  # One left by an interrupted run (--reuse) goes first.
  rapi GET /2/instances | grep -q "\"$inst\"" && wait_job "$(rapi DELETE "/2/instances/$inst" | job_of)" 180 >/dev/null
  ans=$("$GNT/node-exec.sh" 1 gnt-instance add -t diskless -o noop -n "$node" --no-name-check --no-ip-check \
    --no-start -B memory=128M,vcpus=1 "$inst" 2>&1) || { fail "S10a seams" "adding $inst: $(tail -n 3 <<<"$ans" | tr '\n' ' ')"; return; }
  if ! wait_status 90 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S10a seams" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    seam_cleanup "$inst"
    return
  fi
  log "S10a: set up in $(($(date +%s) - t0)) s"

  # ---- seam 1: an instance started on the drained node before its hook ----
  t0=$(date +%s)
  seam_lock "$SEAM_I" || { fail "S10a started instance" "could not hold $node's repair lock"; seam_cleanup "$inst"; return; }
  id=$(seam_campaign_start 90) || { fail "S10a started instance" "campaign not started"; seam_unlock; seam_cleanup "$inst"; return; }
  if ! req=$(seam_wait_refused_hook "$id" "$node"); then
    fail "S10a started instance" "the hook never waited refused busy: $(seam_step "$id" "$node"), ledger '$(seam_ledger_hook "$id")'"
    seam_unlock
    seam_cleanup "$inst" "$id"
    return
  fi
  [[ $(node_json "$node" | jq_py "print(d['drained'])") == True ]] || bad+=" $node not drained at its hook;"
  # The owner starts the instance on the drained node.
  st=$(wait_job "$(rapi PUT "/2/instances/$inst/startup" | job_of)")
  [[ $st == success ]] || bad+=" starting $inst on drained $node: $st;"
  log "S10a: $inst started on drained $node; campaign: $(seam_step "$id" "$node")"
  # It must leave the node while the hook still waits.
  t_moved=""
  for ((k = 0; k < 120; k++)); do
    pnode=$(rapi GET "/2/instances/$inst" | jq_py "print(d['pnode'], d['status'])")
    if [[ ${pnode%% *} != "$node" && ${pnode#* } == running ]]; then t_moved=$(date +%s%3N); break; fi
    [[ -z $(seam_hook_runs "$SEAM_I" "$id") ]] || break
    sleep 1
  done
  step=$(seam_step "$id" "$node")
  if [[ -z $t_moved ]]; then
    bad+=" $inst not moved off $node (at '$pnode'; campaign: $step);"
  elif [[ -n $(seam_hook_runs "$SEAM_I" "$id") ]]; then
    bad+=" the hook ran before $inst left $node;"
  fi
  seam_unlock
  # The hook runs now; the campaign completes.
  for ((k = 0; k < 180; k++)); do
    step=$(seam_step "$id" "$node")
    [[ $step == completed* || $step == failed* || $step == aborted* ]] && break
    ((k % 20 == 19)) && master_healthy "S10a (after ${k}s of waiting)"
    sleep 1
  done
  line=$(seam_hook_runs "$SEAM_I" "$id")
  t_hook=${line%% *}
  if [[ $step != completed* ]]; then
    bad+=" campaign $id ended '$step';"
  elif [[ $(grep -c . <<<"$line") != 1 ]]; then
    bad+=" the hook ran $(grep -c . <<<"$line") times;"
  elif [[ $line != *"running=[]"* ]]; then
    bad+=" the hook ran with instances running on $node: ${line:0:200};"
  elif [[ -n $t_moved ]] && ((t_hook < t_moved - 1000)); then
    bad+=" the hook ran at $t_hook, before $inst was seen moved at $t_moved;"
  fi
  # Never reset: the instance ran throughout (the owner's start) and still runs.
  [[ $(rapi GET "/2/instances/$inst" | jq_py "print(d['status'])") == running ]] || bad+=" $inst not running at the end;"
  if [[ -z $bad ]]; then
    pass "S10a started instance: $inst started on drained $node while its hook waited was moved off first (hook recorded, refused busy), then the hook ran once with nothing running there, campaign $id completed ($(($(date +%s) - t0)) s)"
  else
    fail "S10a started instance" "$bad"
  fi

  # ---- seam 2: the agent away at its hook beyond the hook timeout ----
  bad=""
  t0=$(date +%s)
  st=$(wait_job "$(rapi PUT "/2/instances/$inst/shutdown" | job_of)")
  [[ $st == success ]] || log "S10a: stopping $inst: $st"
  boot_before=$(<"$S/e2e/boot_id-$SEAM_I")
  seam_lock "$SEAM_I" || { fail "S10a agent away" "could not hold $node's repair lock"; seam_cleanup "$inst"; return; }
  id2=$(seam_campaign_start 20) || { fail "S10a agent away" "campaign not started"; seam_unlock; seam_cleanup "$inst"; return; }
  if ! req2=$(seam_wait_refused_hook "$id2" "$node"); then
    fail "S10a agent away" "the hook never waited refused busy: $(seam_step "$id2" "$node"), ledger '$(seam_ledger_hook "$id2")'"
    seam_unlock
    seam_cleanup "$inst" "$id2"
    return
  fi
  local apid
  apid=$(cat "$S/pids/bg-agent-$SEAM_I.pid" 2>/dev/null)
  kill -STOP "$apid"
  seam_unlock
  log "S10a: agent of $node stopped (pid $apid) with hook $req2 recorded; waiting for the hook timeout"
  for ((k = 0; k < 90; k++)); do
    step=$(seam_step "$id2" "$node")
    led=$(seam_ledger_hook "$id2")
    [[ $step == failed\ failed* && ${led%% *} == canceled ]] && break
    sleep 1
  done
  local failure
  failure=$(coord "/1/maintenance/$id2" | jq_py "f = d.get('failure') or {}; print(f.get('step'), '-', f.get('why'))" 2>/dev/null)
  [[ $step == failed\ failed* ]] || bad+=" campaign $id2 / $node at '$step' after the hook timeout;"
  [[ $failure == hook* ]] || bad+=" failure '$failure' is not at the hook;"
  [[ ${led%% *} == canceled ]] || bad+=" the hook's ledger entry is '$led', not canceled;"
  # The operator returns the node to service, then the agent goes on.
  return_to_service "$node"
  kill -CONT "$apid"
  log "S10a: $node returned to service, agent continued; ledger: $led"
  for ((k = 0; k < 40; k++)); do
    [[ $(agent_state "$node") == ok ]] && ((k >= 10)) && break
    sleep 1
  done
  # Several rounds with the agent back.
  sleep 6
  [[ -z $(seam_hook_runs "$SEAM_I" "$id2") ]] || bad+=" the hook ran after all: $(seam_hook_runs "$SEAM_I" "$id2" | head -c 200);"
  [[ -z $(seam_audit "$SEAM_I" "$req2" accepted) ]] || bad+=" the agent accepted hook $req2 at $(seam_audit "$SEAM_I" "$req2" accepted | head -n 1);"
  [[ $(seam_ledger_hook "$id2" | cut -d' ' -f1) == canceled ]] || bad+=" the ledger entry is now '$(seam_ledger_hook "$id2")';"
  [[ $(<"$S/e2e/boot_id-$SEAM_I") == "$boot_before" ]] || bad+=" $node rebooted;"
  [[ $(node_json "$node" | jq_py "print(d['drained'], d['offline'])") == "False False" ]] || bad+=" $node not in service: $(node_json "$node" | jq_py "print(d['drained'], d['offline'], d['tags'])");"
  if [[ -z $bad ]]; then
    pass "S10a agent away: hook $req2 recorded, its agent stopped past the 20 s hook timeout: $node failed at its hook ($failure), the ledger entry canceled; returned to service and the agent continued: the hook never ran ($(seam_audit "$SEAM_I" "$req2" refused | wc -l) busy refusals, no acceptance), no reboot ($(($(date +%s) - t0)) s)"
  else
    fail "S10a agent away" "$bad"
  fi
  seam_cleanup "$inst"
}

# Leaves node5 as the other scenarios expect it: inst7 removed, tags off, in service.
seam_cleanup() { # INSTANCE [CAMPAIGN]
  local node=$NODECARE_GNT_NODE5_NAME t
  seam_unlock
  [[ -n ${2:-} ]] && coordw POST "/1/maintenance/$2/abort" >/dev/null
  wait_job "$(rapi DELETE "/2/instances/$1" | job_of)" 180 >/dev/null
  wait_job "$(rapi DELETE "/2/nodes/$node/tags?tag=$SEAM_TAG" | job_of)" >/dev/null
  return_to_service "$node"
}
