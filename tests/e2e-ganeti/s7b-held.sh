# S7b (sourced by run.sh, after S7 and before S8): evacuations the gate holds back and a cancel
# during a job chain, on the real cluster.
#
# held: with `immovable_instances = "shutdown"` and `failure_domains = "rack:"`, node2 (rack:a)
#   evacuates; node4 (rack:b), holding a `file` instance, then says `evacuate`. Its incident
#   must wait, `noted` with `blocked_by`, for several rounds: never failed, never tagged
#   repairfailed (the refused judgement follows the configured policy). Once node2 is back in
#   service, node4 is evacuated: the file instance shut down, the node offline and tagged
#   repairready, the incident completed with a warning naming the instance.
# cancel: node5 (no node-local instance) holds three instances and says `evacuate`; as soon as its incident's job chain
#   is in Ganeti's queue the incident is canceled through the API. The chain's jobs that had not
#   started end `canceled` in Ganeti, the repairready tag is never set, the incident is
#   canceled and its history says what ran and what was canceled.

# Restarts the coordinator with coord.toml plus the given lines (none: as it was).
held_restart_coordinator() { # [TOML-LINES]
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1 || true
  rm -f "$S/pids/bg-coordinator.pid"
  if [[ $# -gt 0 ]]; then
    cp "$S/e2e/coord.toml" "$S/e2e/coord.toml.before-held"
    # Top-level keys must come before the first table.
    { printf '%s\n' "$1"; cat "$S/e2e/coord.toml.before-held"; } >"$S/e2e/coord.toml"
  elif [[ -e $S/e2e/coord.toml.before-held ]]; then
    mv "$S/e2e/coord.toml.before-held" "$S/e2e/coord.toml"
  fi
  start_coordinator || log "S7b: the coordinator did not start again"
  for _ in $(seq 30); do coord /1/agents >/dev/null 2>&1 && break; sleep 1; done
}

# Puts instance NAME (diskless, or created as TEMPLATE) on node NODE.
held_instance_on() { # NAME TEMPLATE NODE
  local name=$1 tmpl=$2 node=$3 full id st disk=()
  full=$(rapi GET /2/instances | jq_py "print(next((i['id'] for i in d if i['id'].split('.')[0] == '$name'), ''))")
  if [[ -z $full ]]; then
    [[ $tmpl == diskless ]] || disk=(--disk 0:size=1G)
    "$GNT/node-exec.sh" 1 gnt-instance add -t "$tmpl" "${disk[@]}" -o noop -n "$node" --no-name-check \
      --no-ip-check -B memory=128M,vcpus=1 "$name.$NODECARE_GNT_DOMAIN" >>"$S/logs/s7b-instances.log" 2>&1 ||
      return 1
    return 0
  fi
  [[ $(rapi GET "/2/instances/$full" | jq_py "print(d['pnode'])") == "$node" ]] && return 0
  [[ $tmpl == diskless ]] || return 1
  id=$(rapi PUT "/2/instances/$full/migrate" "{\"target_node\": \"$node\"}" | job_of)
  st=$(wait_job "$id" 180)
  [[ $st == success ]]
}

scenario_held() {
  local n2=$NODECARE_GNT_NODE2_NAME n4=$NODECARE_GNT_NODE4_NAME id k st tags inst bad=""
  master_healthy S7b
  log "S7b held: immovable_instances = shutdown; $n2 (rack:a) evacuates, $n4 (rack:b, a file instance) waits"
  for i in 2 4; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  for n in "$n2" "$n4"; do return_to_service "$n"; done
  held_restart_coordinator 'immovable_instances = "shutdown"'
  wait_job "$(rapi PUT "/2/nodes/$n2/tags?tag=rack:a" | job_of)" >/dev/null
  wait_job "$(rapi PUT "/2/nodes/$n4/tags?tag=rack:b" | job_of)" >/dev/null
  if ! held_instance_on heldfile file "$n4"; then
    fail "S7b held" "cannot create a file instance on $n4: $(tail -n 5 "$S/logs/s7b-instances.log")"
    held_restart_coordinator
    return
  fi
  inst=$(rapi GET /2/instances | jq_py "print(next(i['id'] for i in d if i['id'].startswith('heldfile.')))")
  if ! wait_status 60 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S7b held" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    held_restart_coordinator
    return
  fi
  echo '{"status":"evacuate","details":"e2e: rack a disk"}' >"$S/e2e/diag-2"
  if ! wait_status 120 "any(i.get('node')=='$n2' and i.get('repair-status') in ('pending', 'completed') for i in d)"; then
    fail "S7b held" "$n2 did not start evacuating: $(coord /1/status | head -c 400)"
  fi
  echo '{"status":"evacuate","details":"e2e: rack b disk, file instance"}' >"$S/e2e/diag-4"
  if ! wait_status 60 "any(i.get('node')=='$n4' and i.get('repair-status')=='noted' and i.get('blocked_by') for i in d)"; then
    bad+=" $n4's incident never waited with blocked_by: $(coord /1/status | head -c 500);"
  fi
  # Ten rounds (2 s each): still waiting, never failed, no tag on node4.
  for ((k = 0; k < 20; k++)); do
    if coord /1/status | jq_py "sys.exit(0 if any(i.get('node')=='$n4' and i.get('repair-status')=='failed' for i in d) else 1)" 2>/dev/null; then
      bad+=" $n4's held evacuation failed: $(coord /1/status | jq_py "print([i.get('failure') for i in d if i.get('node')=='$n4'])");"
      break
    fi
    sleep 1
  done
  tags=$(node_json "$n4" | jq_py "print(' '.join(d['tags']))")
  [[ $tags != *repairfailed* ]] || bad+=" $n4 tagged repairfailed while held: $tags;"
  if [[ -n $bad ]]; then
    fail "S7b held" "$bad"
  else
    pass "S7b held: $n4's evacuation (file instance, immovable_instances = shutdown) waited while rack:a was busy: $(coord /1/status | jq_py "print(next(i.get('blocked_by') for i in d if i.get('node')=='$n4'))")"
  fi
  # node2 done and returned to service (acknowledged): node4 goes now.
  wait_status 180 "any(i.get('node')=='$n2' and i.get('repair-status')=='completed' for i in d)" || true
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-2"
  return_to_service "$n2"
  if wait_status 240 "any(i.get('node')=='$n4' and i.get('repair-status') in ('completed', 'failed') for i in d)"; then
    local nj warning
    nj=$(node_json "$n4")
    warning=$(coord /1/status | jq_py "print(next((i.get('warning') or '') for i in d if i.get('node')=='$n4'))")
    if coord /1/status | jq_py "sys.exit(0 if any(i.get('node')=='$n4' and i.get('repair-status')=='completed' for i in d) else 1)" 2>/dev/null &&
      [[ $(jq_py "print(d['offline'])" <<<"$nj") == True ]] &&
      [[ $(jq_py "print(any(t.startswith('maintd:repairready:') for t in d['tags']))" <<<"$nj") == True ]] &&
      [[ $(rapi GET "/2/instances/$inst" | jq_py "print(d['admin_state'])") == down ]] &&
      [[ $warning == *heldfile* ]]; then
      pass "S7b held, then acted: $n4 evacuated, $inst shut down, node offline and tagged repairready ($warning)"
    else
      fail "S7b held, then acted" "offline=$(jq_py "print(d['offline'])" <<<"$nj") tags=$(jq_py "print(d['tags'])" <<<"$nj") admin_state=$(rapi GET "/2/instances/$inst" | jq_py "print(d['admin_state'])") warning='$warning': $(coord /1/status | head -c 500)"
    fi
  else
    fail "S7b held, then acted" "$n4 not evacuated once rack:a was free: $(coord /1/status | head -c 500)"
  fi
  # Clean up: node4 back, the file instance removed, racks untagged, the coordinator as before.
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-4"
  return_to_service "$n4"
  id=$(rapi DELETE "/2/instances/$inst" | job_of)
  wait_job "$id" 180 >/dev/null
  held_restart_coordinator
  scenario_cancel_chain
}

scenario_cancel_chain() {
  local n3=$NODECARE_GNT_NODE5_NAME uuid jobs k st ran=0 canceled=0 other="" tags detail name
  master_healthy "S7b cancel"
  log "S7b cancel during the job chain of $n3's evacuation"
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-5"
  return_to_service "$n3"
  # Three diskless instances on node5: a chain of a drain, three migrations, an offline, a tag.
  for name in inst1 inst2 inst4; do
    held_instance_on "$name" diskless "$n3" || { fail "S7b cancel" "cannot move $name to $n3"; return; }
  done
  if ! wait_status 60 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S7b cancel" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    return
  fi
  echo '{"status":"evacuate","details":"e2e: cancel me"}' >"$S/e2e/diag-5"
  uuid=""
  for ((k = 0; k < 600; k++)); do
    uuid=$(coord /1/status | jq_py "print(next((i['id'] for i in d if i.get('node')=='$n3' and i.get('jobs')), ''))" 2>/dev/null)
    [[ -n $uuid ]] && break
    sleep 0.1
  done
  if [[ -z $uuid ]]; then
    fail "S7b cancel" "$n3's evacuation never submitted a job: $(coord /1/status | head -c 400)"
    echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-5"
    return
  fi
  coordw POST "/1/incidents/$uuid/cancel" '{}' >"$S/e2e/cancel-answer.txt"
  log "S7b cancel: HTTP $(tail -n 1 "$S/e2e/cancel-answer.txt") for incident $uuid"
  # The verdict stays `evacuate` until the checks below: a canceled incident is forgotten once
  # its node no longer reports it.
  # Every job of the incident ends; none after the cancel may start.
  sleep 5
  jobs=$(rapi GET "/2/jobs?bulk=1" | jq_py "
for j in d:
    if any('incident=$uuid' in str(r) for op in j.get('ops', []) for r in op.get('reason', [])):
        print(j['id'], j['status'])")
  for ((k = 0; k < 120; k++)); do
    grep -qE ' (queued|waiting|running|canceling)$' <<<"$jobs" || break
    sleep 1
    jobs=$(rapi GET "/2/jobs?bulk=1" | jq_py "
for j in d:
    if any('incident=$uuid' in str(r) for op in j.get('ops', []) for r in op.get('reason', [])):
        print(j['id'], j['status'])")
  done
  while read -r _ st; do
    case $st in
      success | error) ran=$((ran + 1)) ;;
      canceled) canceled=$((canceled + 1)) ;;
      *) other+=" $st" ;;
    esac
  done <<<"$jobs"
  tags=$(node_json "$n3" | jq_py "print(' '.join(d['tags']))")
  detail=$(coord "/1/incidents/$uuid")
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-5"
  if [[ $canceled -ge 1 && -z $other && $tags != *"maintd:repairready:$uuid"* ]] &&
    jq_py "sys.exit(0 if d.get('repair-status', d.get('repair_status'))=='canceled' else 1)" <<<"$detail" 2>/dev/null &&
    grep -qi "cancel" <<<"$(jq_py "print(' '.join(h.get('event', '') for h in d.get('history', [])))" <<<"$detail")"; then
    pass "S7b cancel during a chain: $ran job(s) had run, $canceled canceled in Ganeti, no repairready tag, incident canceled ($(jq_py "print(d.get('warning') or '')" <<<"$detail"))"
  else
    fail "S7b cancel during a chain" "ran=$ran canceled=$canceled other='$other' tags='$tags': $(head -c 600 <<<"$detail")"
  fi
  wait_status 60 "not any(i.get('node')=='$n3' and i.get('repair-status') in ('noted', 'pending') for i in d)" || true
  return_to_service "$n3"
}
