# shellcheck shell=bash
# S7 filter: an operator pauses nodecare's jobs with a Ganeti job filter (docs/ganeti-filters.md).
# Sourced by run.sh after its S7 (the gate), before S8; uses its helpers (rapi, jq_py, wait_job,
# wait_status, node_json, return_to_service, start_agent, coord, master_healthy, pass, fail, log).
#
# On the master, `gnt-filter add --action=PAUSE` with the documented predicate (the reason text
# starts with nodecare's source, `gnt:daemon:maintd `); node1 then says `live-repair`: the
# command runs through the agent and the coordinator submits the repairready tag job, which
# must stay `queued` (and the incident not completed) while the filter is in force; once the
# filter is deleted the job runs, succeeds and the incident completes. Other jobs (a tag job
# submitted through RAPI without nodecare's reason) are not held.

FILTER_PREDICATES='[["reason", ["&", [">=", "reason", "gnt:daemon:maintd "], ["<", "reason", "gnt:daemon:maintd!"]]]]'

# The ids of queued jobs whose reason trail has an entry starting with nodecare's source.
filter_held_jobs() {
  rapi GET "/2/jobs?bulk=1" | jq_py "
ids = []
for j in d:
    texts = [e[1] for op in j.get('ops', []) for e in (op.get('reason') or []) if len(e) > 1]
    if j.get('status') == 'queued' and any(isinstance(t, str) and t.startswith('gnt:daemon:maintd ') for t in texts):
        ids.append(str(j['id']))
print(' '.join(ids))"
}

scenario_filter() {
  local n1=$NODECARE_GNT_NODE1_NAME uuid held k id st other
  master_healthy S7
  log "S7 filter: a PAUSE job filter on nodecare's reason holds its jobs on $n1"
  for i in 1 2 3; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  # S4 leaves node1's agent stopped when S7's gate does not run.
  "$GNT/node-exec.sh" 1 --stop agent-1 >/dev/null 2>&1 || true
  start_agent 1 || log "S7 filter: agent 1 did not restart"
  return_to_service "$n1"
  if ! wait_status 90 "not any(i.get('node')=='$n1' and i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S7 filter" "precondition: an incident of $n1 is still active: $(coord /1/status | head -c 400)"
    return
  fi
  rm -f "$S/e2e/repaired-1"
  uuid=$("$GNT/node-exec.sh" 1 gnt-filter add --priority=0 --action=PAUSE \
    --predicates="$FILTER_PREDICATES" --reason="nodecare e2e: pause nodecare" 2>&1 | tail -n 1)
  if [[ ! $uuid =~ ^[0-9a-f-]{36}$ ]]; then
    fail "S7 filter" "gnt-filter add did not print a uuid: $uuid"
    return
  fi
  log "S7 filter: filter $uuid added"
  # A new verdict (details differ from S2's): a new incident.
  echo '{"status":"live-repair","command":"e2e-fix","details":"e2e: S7 filter"}' >"$S/e2e/diag-1"
  held=""
  for ((k = 0; k < 120; k++)); do
    held=$(filter_held_jobs)
    [[ -n $held ]] && break
    sleep 1
  done
  if [[ -z $held ]]; then
    fail "S7 filter" "no queued job with nodecare's reason within 120 s (repair marker: $(cat "$S/e2e/repaired-1" 2>/dev/null)): $(coord /1/status | head -c 400)"
  else
    # Held, not merely slow: still queued 20 s later, the incident not completed.
    sleep 20
    st=$(rapi GET "/2/jobs/${held%% *}" | jq_py "print(d.get('status'))")
    # Jobs without nodecare's reason are not held.
    id=$(rapi PUT "/2/nodes/$n1/tags?tag=e2e-filter-probe" | job_of)
    other=$(wait_job "$id" 60)
    if [[ $st == queued && $other == success ]] &&
      ! wait_status 1 "any(i.get('node')=='$n1' and i.get('repair-status')=='completed' and 'S7 filter' in json.dumps(i.get('original')) for i in d)"; then
      pass "S7 filter: nodecare's job ${held%% *} held queued by the PAUSE filter for 20 s (a tag job without nodecare's reason ran: $other)"
    else
      fail "S7 filter" "job ${held%% *} is $st after 20 s under the filter; other job $id: $other"
    fi
  fi
  id=$(rapi DELETE "/2/nodes/$n1/tags?tag=e2e-filter-probe" | job_of)
  wait_job "$id" >/dev/null
  "$GNT/node-exec.sh" 1 gnt-filter delete "$uuid" >&2 || fail "S7 filter" "gnt-filter delete $uuid failed"
  if [[ -n $held ]]; then
    st=$(wait_job "${held%% *}" 120)
    if [[ $st == success ]] && wait_status 60 "any(i.get('node')=='$n1' and i.get('repair-status')=='completed' for i in d if 'S7 filter' in json.dumps(i.get('original')))"; then
      pass "S7 filter: once the filter was deleted the held job ran ($st) and the incident completed"
    else
      fail "S7 filter resume" "job ${held%% *}: $st; $(coord /1/status | head -c 400)"
    fi
  fi
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-1"
  return_to_service "$n1"
}
