# S10c (sourced by run.sh): the escalation ladder, an approval for large work, evacuation
# priorities and failback, on the real cluster (`NODECARE_E2E_ONLY=failback` runs it after the
# cluster, the agents and the coordinator only).
#
# The coordinator is restarted with `[repair_ladder] max_live_repairs = 1`, `[approvals]
# moves_above = 0`, `[failback] enabled = true, settle_secs = 6` and a maintenance window that
# is closed now (balancing, failback's moves, may start at any time).
# window: another tool's request is refused, naming the window.
# ladder: node4 (one instance) is live-repaired, acknowledged and healthy; its second
#   `live-repair` verdict opens an `evacuate` incident whose history says why, which waits for
#   an approval (it would move an instance) and is canceled with no job in Ganeti.
# approval: node5 holds two diskless instances, fb2 tagged `nodecare:priority:9`, and says
#   `evacuate`: its incident waits, `blocked_by` naming moves_above, and Ganeti gets no job for
#   it; `nodecare approval grant ID --ticket …` approves it, the evacuation runs, fb2 first, and
#   every one of its jobs carries the ticket in its reason trail.
# failback: the node is repaired (its verdict `Ok`) and returned to service by the operator:
#   after the settle period both instances migrate back to node5, fb2 first, each by one job
#   whose reason trail says failback, and the status lists them back.
# The coordinator is restarted as it was.

# Restarts the coordinator with coord.toml plus top-level keys put first and TOML tables
# appended (none: as it was).
failback_restart_coordinator() { # [TOML-KEYS TOML-TABLES]
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1 || true
  rm -f "$S/pids/bg-coordinator.pid"
  if [[ $# -gt 0 ]]; then
    cp "$S/e2e/coord.toml" "$S/e2e/coord.toml.before-failback"
    { printf '%s\n' "$1"; cat "$S/e2e/coord.toml.before-failback"; printf '%s\n' "$2"; } >"$S/e2e/coord.toml"
  elif [[ -e $S/e2e/coord.toml.before-failback ]]; then
    mv "$S/e2e/coord.toml.before-failback" "$S/e2e/coord.toml"
  fi
  start_coordinator || log "S10c: the coordinator did not start again"
  for _ in $(seq 30); do coord /1/agents >/dev/null 2>&1 && break; sleep 1; done
}

# The coordinator as it was, the scenario's instances removed, node5 back in service.
failback_cleanup() {
  local name full
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-5"
  failback_restart_coordinator
  return_to_service "$NODECARE_GNT_NODE5_NAME"
  for name in fb1 fb2 fb3; do
    full=$(rapi GET /2/instances | jq_py "print(next((i['id'] for i in d if i['id'].split('.')[0] == '$name'), ''))")
    [[ -z $full ]] || wait_job "$(rapi DELETE "/2/instances/$full" | job_of)" 180 >/dev/null
  done
}

scenario_failback() {
  local node=$NODECARE_GNT_NODE5_NAME url="http://127.0.0.1:$COORD_FWD" t0=$(date +%s)
  local uuid="" blocked="" k ans bad="" jobs missing status back="" home full order
  local n4=$NODECARE_GNT_NODE4_NAME first="" second="" history
  master_healthy S10c
  log "S10c the ladder on $n4; approval of a large evacuation of $node, then failback"
  for i in 4 5; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  return_to_service "$node"
  return_to_service "$n4"
  for name in fb1 fb2; do
    held_instance_on "$name" diskless "$node" || { fail "S10c failback" "cannot put $name on $node"; return; }
  done
  held_instance_on fb3 diskless "$n4" || { fail "S10c failback" "cannot put fb3 on $n4"; return; }
  full=$(rapi GET /2/instances | jq_py "print(next(i['id'] for i in d if i['id'].startswith('fb2.')))")
  wait_job "$(rapi PUT "/2/instances/$full/tags?tag=nodecare:priority:9" | job_of)" >/dev/null
  if ! wait_status 60 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S10c failback" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    return
  fi
  # A maintenance window closed now (two hours ahead, UTC): other tools' requests wait for it;
  # balancing (failback's moves) may start at any time.
  local h1 h2 window ans code
  h1=$(( (10#$(date -u +%H) + 2) % 24 ))
  h2=$(( (h1 + 1) % 24 ))
  window=$(printf 'daily %02d:00-%02d:00' "$h1" "$h2")
  # The campaigns of S10a and S10b rebooted node5 minutes ago: its verdicts are held for the
  # grace of that planned disruption (600 s by default); here, one second.
  failback_restart_coordinator "grace = 1.0" "[repair_ladder]
max_live_repairs = 1
[approvals]
moves_above = 0
[failback]
enabled = true
settle_secs = 6.0
[calendar]
time_zone = \"UTC\"
windows = [\"$window\"]
[calendar.rules]
balancing = \"any-time\""
  # The first round comes after the takeover's wait.
  for ((k = 0; k < 120; k++)); do
    coord /1/overview | jq_py "sys.exit(0 if d['round']['number'] >= 1 else 1)" 2>/dev/null && break
    sleep 1
  done
  # The window: another tool's request is refused outside it, naming it.
  ans=$(coordw POST /1/disruptions "{\"node\":\"$NODECARE_GNT_NODE3_NAME\",\"reason\":\"e2e: kernel update\",\"requester\":\"e2e-reboot\",\"ttl_s\":600}")
  code=$(tail -n 1 <<<"$ans")
  if [[ $code == 429 ]] && sed '$d' <<<"$ans" | grep -q "outside the maintenance window (next: "; then
    pass "S10c window: another tool's request outside '$window' UTC refused: $(sed '$d' <<<"$ans" | jq_py "print(d['blocked_by'])" 2>/dev/null | head -c 160)"
  else
    fail "S10c window" "the request outside '$window' got HTTP $code: $(sed '$d' <<<"$ans" | head -c 300)"
    [[ $code == 201 ]] && coordw DELETE "/1/disruptions/$(sed '$d' <<<"$ans" | jq_py "print(d['id'])")" >/dev/null
  fi
  # The ladder: a first live repair, acknowledged; the second is an evacuation.
  echo '{"status":"live-repair","command":"e2e-fix","details":"e2e: fan"}' >"$S/e2e/diag-4"
  if wait_status 90 "any(i.get('node')=='$n4' and i.get('action')=='live-repair' and i.get('repair-status')=='completed' for i in d)"; then
    echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-4"
    return_to_service "$n4"
    wait_status 60 "not any(i.get('node')=='$n4' for i in d)" || bad+=" the first incident of $n4 was not forgotten;"
    echo '{"status":"live-repair","command":"e2e-fix","details":"e2e: fan again"}' >"$S/e2e/diag-4"
    if wait_status 60 "any(i.get('node')=='$n4' and i.get('action')=='evacuate' and 'moves_above' in (i.get('blocked_by') or '') for i in d)"; then
      second=$(coord /1/status | jq_py "print(next(i['id'] for i in d if i.get('node')=='$n4'))")
      history=$(coord "/1/incidents/$second" | jq_py "print(' | '.join(h['event'] for h in d['history']))")
      [[ $history == *"2nd live repair of $n4 in 24 h"* ]] || bad+=" the escalated incident's history: $history;"
      history=$(grep -o "[^|]*2nd live repair of [^|]*" <<<"$history" | head -n 1)
      [[ $(node_json "$n4" | jq_py "print(d['drained'])") == False ]] || bad+=" $n4 drained while waiting for the approval;"
      coordw POST "/1/incidents/$second/cancel" >/dev/null
    else
      bad+=" the second live repair of $n4 was not escalated: $(coord /1/status | head -c 400);"
    fi
  else
    bad+=" the first live repair of $n4 did not complete: $(coord /1/status | head -c 400);"
  fi
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-4"
  if [[ -z $bad ]]; then
    pass "S10c ladder: $n4's second live repair within 24 h opened as evacuate ('${history# }'), waited for an approval, canceled with no job"
  else
    fail "S10c ladder" "$bad"
  fi
  bad=""
  echo '{"status":"evacuate","details":"e2e: large evacuation"}' >"$S/e2e/diag-5"
  for ((k = 0; k < 90; k++)); do
    ans=$(coord /1/status | jq_py "print(next((i['id'] + ' ' + (i.get('blocked_by') or '') for i in d if i.get('node')=='$node' and i.get('repair-status')=='noted'), ''))" 2>/dev/null)
    uuid=${ans%% *}
    blocked=${ans#* }
    [[ $blocked == *moves_above* ]] && break
    sleep 1
  done
  if [[ $blocked != *"moves 2 instances, more than approvals.moves_above = 0"* ]]; then
    fail "S10c approval" "the evacuation did not wait for an approval: '$ans' $(coord /1/status | head -c 400) $(coord /1/overview | jq_py "print(d.get('waiting'))" 2>/dev/null | head -c 300)"
    failback_cleanup
    return
  fi
  sleep 4
  [[ $(node_json "$node" | jq_py "print(d['drained'])") == False ]] || bad+=" $node drained before the approval;"
  ans=$(NODECARE_PASSWORD=e2e-secret "$CLI" approval grant "$uuid" --ticket CHG-E2E-7 --user e2e --url "$url" 2>&1) \
    || bad+=" nodecare approval grant: $ans;"
  if ! wait_status 240 "any(i.get('node')=='$node' and i.get('repair-status')=='completed' for i in d)"; then
    fail "S10c approval" "not evacuated after the approval: $bad $(coord /1/status | head -c 500)"
    failback_cleanup
    return
  fi
  # Every job of the incident carries the ticket.
  jobs=$(coord /1/status | jq_py "print(' '.join(str(j) for i in d if i['id']=='$uuid' for j in i.get('jobs', [])))")
  missing=""
  for j in $jobs; do
    rapi GET "/2/jobs/$j" | jq_py "sys.exit(0 if 'CHG-E2E-7' in json.dumps(d.get('ops', [])) else 1)" || missing+=" $j"
  done
  [[ -n $jobs && -z $missing ]] || bad+=" jobs without the ticket:$missing (of $jobs);"
  # The priority: fb2's migration before fb1's.
  order=""
  for j in $jobs; do
    order+=$(rapi GET "/2/jobs/$j" | jq_py "
t = json.dumps(d.get('ops', []))
print(' fb1' if 'fb1.' in t and 'MIGRATE' in t.upper() else ' fb2' if 'fb2.' in t and 'MIGRATE' in t.upper() else '')")
  done
  [[ $order == " fb2 fb1" ]] || bad+=" migrations in the order '$order', not fb2 (priority 9) first;"
  if [[ -z $bad ]]; then
    pass "S10c approval: $node's evacuation of 2 instances (fb2, priority 9, moved first) waited ('${blocked:0:80}…') with no job, approved by nodecare approval grant, its jobs ($jobs) carry CHG-E2E-7"
  else
    fail "S10c approval" "$bad"
  fi
  # Repaired and returned to service by the operator: the instances go back after settle_secs.
  bad=""
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-5"
  return_to_service "$node"
  for ((k = 0; k < 240; k++)); do
    home=$(primaries_of "$node")
    [[ $home == *fb1.* && $home == *fb2.* ]] && break
    ((k % 20 == 19)) && master_healthy "S10c (after $((k + 1))s of failback)"
    sleep 1
  done
  [[ $home == *fb1.* && $home == *fb2.* ]] || bad+=" not back on $node: '$home' $(coord /1/overview | jq_py "print(d.get('failback'))" 2>/dev/null | head -c 400);"
  for ((k = 0; k < 30; k++)); do
    back=$(coord /1/overview | jq_py "print(' '.join(sorted(b['instance'].split('.')[0] for h in d.get('failback', []) if h['incident']=='$uuid' for b in h['instances'] if b['state']=='back')))" 2>/dev/null)
    [[ $back == "fb1 fb2" ]] && break
    sleep 1
  done
  [[ $back == "fb1 fb2" ]] || bad+=" the status lists back: '$back';"
  jobs=$(rapi GET "/2/jobs?bulk=1" | jq_py "
print(' '.join(('fb1' if 'fb1.' in json.dumps(j['ops']) else 'fb2') for j in sorted(d, key=lambda j: j['id']) if 'balancing (failback ' in json.dumps(j.get('ops', [])) and 'gnt:daemon:maintd' in json.dumps(j.get('ops', [])) and j.get('status') == 'success'))")
  [[ $jobs == "fb2 fb1" ]] || bad+=" successful failback jobs '$jobs', not fb2 then fb1;"
  status=$("$CLI" status --url "$url" 2>/dev/null | grep -A3 "^failback")
  if [[ -z $bad ]]; then
    pass "S10c failback: fb2 (priority 9), then fb1 migrated back to $node after its return and 6 s healthy, one job each with the reason trail ($(($(date +%s) - t0)) s): $(tr '\n' ' ' <<<"$status" | head -c 200)"
  else
    fail "S10c failback" "$bad"
  fi
  failback_cleanup
}
