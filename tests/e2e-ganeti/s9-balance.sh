# shellcheck shell=bash
# S9 balancing (sourced by run.sh, which defines the helpers used here).
#
# node2 is evacuated by its incident (S1's, or one opened here) and left offline; the
# coordinator is restarted with [balancing] on (dynamic load from the agents' signed reports);
# node3 then holds an open incident (a slow live repair) while node2 is acknowledged and
# returned to service. The duty moves instances back until hbal finds no move above the
# threshold: no balancing job may touch node3 while its incident is open; the final score is
# what Ganeti's hbal reports on the cluster with the same options and load file (exactly on one
# RAPI snapshot, -m file://; within the drift of live free memory for hbal -L on the master),
# and neither finds a move left.
balance_scenario_body() {
  local n1=$NODECARE_GNT_NODE1_NAME n2=$NODECARE_GNT_NODE2_NAME n3=$NODECARE_GNT_NODE3_NAME
  local i k open_from open_to group moved bad
  master_healthy S9
  log "S9 balancing after $n2 returns to service, with an open incident on $n3"
  for i in 1 2 3; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  # S4 may have left node1's agent stopped.
  "$GNT/node-exec.sh" 1 --stop agent-1 >/dev/null 2>&1 || true
  start_agent 1 || log "S9: agent 1 did not restart"
  for n in "$n1" "$n3"; do return_to_service "$n"; done
  if ! wait_status 90 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S9 balance" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    return
  fi
  # node2 evacuated by nodecare (S1 did it unless later scenarios returned it).
  if [[ $(node_json "$n2" | jq_py "print(d['offline'] or d['drained'])") != True ]]; then
    echo '{"status":"evacuate","details":"e2e: S9 evacuation"}' >"$S/e2e/diag-2"
    if ! wait_status 180 "any(i.get('node')=='$n2' and i.get('action')=='evacuate' and i.get('repair-status')=='completed' for i in d)"; then
      fail "S9 balance" "evacuation of $n2 did not complete: $(coord /1/status | head -c 400)"
      return
    fi
    echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-2"
  fi
  if [[ -n $(primaries_of "$n2") ]]; then
    fail "S9 balance" "precondition: $n2 still holds $(primaries_of "$n2")"
    return
  fi
  # On a cluster of more than three nodes the earlier scenarios leave the instances spread so
  # evenly that hbal may find nothing to gain: the instances of nodes 4.. are migrated to node1
  # first, so the cluster is lopsided as after a maintenance.
  local inst id
  for ((i = 4; i <= NODECARE_GNT_NODES; i++)); do
    local ni=NODECARE_GNT_NODE${i}_NAME
    for inst in $(primaries_of "${!ni}"); do
      [[ $(rapi GET "/2/instances/$inst" | jq_py "print(d['disk_template'] in ('diskless', 'sharedfile') and d['oper_state'])") == True ]] || continue
      id=$(rapi PUT "/2/instances/$inst/migrate" "{\"target_node\": \"$n1\"}" | job_of)
      [[ -n $id ]] && wait_job "$id" 180 >/dev/null
    done
  done
  # Balancing on from here: the coordinator restarts with it (same state); off again at the end.
  cp "$S/e2e/coord.toml" "$S/e2e/coord.toml.before-s9"
  cat >>"$S/e2e/coord.toml" <<TOML
[balancing]
enabled = true
interval = 5.0
min_gain = 0.01
load = true
TOML
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1
  start_coordinator || { fail "S9 balance" "coordinator did not restart (see $S/logs/bg-coordinator.log)"; return; }
  for ((k = 0; k < 60; k++)); do coord /1/agents >/dev/null 2>&1 && break; sleep 1; done
  # node3 holds an open incident: a live repair that runs for a while.
  printf '#!/bin/sh\nsleep 45\necho "repaired by $0" > %s\necho done\n' "$S/e2e/slow-repaired-3" >"$NODECARE_GNT_NODE3_ROOT/etc/ganeti/node-repair-commands/e2e-slow"
  chmod 0755 "$NODECARE_GNT_NODE3_ROOT/etc/ganeti/node-repair-commands/e2e-slow"
  echo '{"status":"live-repair","command":"e2e-slow","details":"e2e: S9 slow repair"}' >"$S/e2e/diag-3"
  if ! wait_status 60 "any(i.get('node')=='$n3' and i.get('repair-status')=='pending' for i in d)"; then
    fail "S9 balance" "no pending live repair on $n3: $(coord /1/status | head -c 400)"
    return
  fi
  open_from=$(date +%s)
  # The operator acknowledges node2's incident and returns it to service.
  return_to_service "$n2"
  # While node3's incident is open: balancing proposes, leaves out what touches node3.
  local left_out_seen=""
  for ((k = 0; k < 120; k++)); do
    if coord /1/status | jq_py "sys.exit(0 if any(i.get('node')=='$n3' and i.get('repair-status') in ('noted', 'pending') for i in d) else 1)" 2>/dev/null; then
      [[ -n $left_out_seen ]] || left_out_seen=$(coord /1/balancing | jq_py "
lo = [f\"{l['job']['instance']}: {l['why']}\" for l in (d['status'] or {}).get('left_out', []) if '$n3' in l['why']]
print('; '.join(lo))" 2>/dev/null)
      sleep 1
    else
      break
    fi
  done
  open_to=$(date +%s)
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-3"
  log "S9: $n3's incident was open ${open_from}..${open_to}; left out meanwhile: ${left_out_seen:-none seen}"
  # Balancing until hbal finds no move: a run after the last move, nothing in flight, no job set.
  local done_=0 status
  for ((k = 0; k < 300; k++)); do
    status=$(coord /1/balancing)
    if jq_py "
s = d['status'] or {}
moves = d['moves']
last_end = max([m.get('finished_ms') or 0 for m in moves] or [0])
ok = (s.get('error') is None and s.get('groups') and all(g['jobsets'] == 0 for g in s['groups'])
      and (s.get('load') or '').startswith('cpu-avg-load of ')
      and not any(m['state'] in ('planned', 'submitted') for m in moves)
      and any(m['state'] == 'succeeded' for m in moves)
      and (s.get('last_run_ms') or 0) > last_end)
sys.exit(0 if ok else 1)" <<<"$status" 2>/dev/null; then
      done_=1
      break
    fi
    ((k % 20 == 19)) && master_healthy "S9 (after $((k + 1))s of balancing)"
    sleep 1
  done
  printf '%s' "$status" >"$S/e2e/balancing.json"
  if [[ $done_ -ne 1 ]]; then
    fail "S9 balance" "balancing did not reach hbal's fixpoint within 300 s: $(head -c 800 <<<"$status")"
    return
  fi
  moved=$(jq_py "print(', '.join(f\"{m['instance']} ({m['op']})\" for m in d['moves'] if m['state'] == 'succeeded'))" <<<"$status")
  pass "S9 balancing moved instances back after $n2 returned ($moved); hbal finds no move above the threshold; load: $(jq_py "print(d['status'].get('load'))" <<<"$status")"
  # No balancing job touched node3 while its incident was open (the jobs' reason trails).
  bad=$(rapi GET "/2/jobs?bulk=1" | jq_py "
bad = []
for j in d:
    text = json.dumps(j.get('ops', []))
    if 'gnt:daemon:maintd' not in text or 'balancing (' not in text:
        continue
    ts = (j.get('received_ts') or [0])[0]
    if $open_from <= ts <= $open_to and '$n3' in text:
        bad.append(str(j['id']))
print(' '.join(bad))")
  local balancing_jobs
  balancing_jobs=$(rapi GET "/2/jobs?bulk=1" | jq_py "
print(sum(1 for j in d if 'balancing (' in json.dumps(j.get('ops', [])) and 'gnt:daemon:maintd' in json.dumps(j.get('ops', []))))")
  if [[ -z $bad && $balancing_jobs -gt 0 ]]; then
    pass "S9 no balancing job touched $n3 while its incident was open ($balancing_jobs balancing jobs with nodecare's reason trail; left out meanwhile: ${left_out_seen:-none proposed})"
  else
    fail "S9 open incident" "balancing jobs touching $n3 while its incident was open: '${bad}' (of $balancing_jobs)"
  fi
  # The final score. On one snapshot of the cluster's RAPI answers, Ganeti's own hbal (its RAPI
  # backend, -m file://DIR) and the duty's path (nodecare's RAPI loader and htools text writer,
  # as `nodecare balance --dry-run`) with the same options and load file give the same score
  # and find no move. The live hbal -L (LUXI, on the master) reads the cluster at another moment
  # (the fake hypervisor reports the host's free memory and disk, which drift between reads) with
  # the same load file, so it must agree to 1e-3 and find no move either. The duty's last run
  # read an earlier load file (the agents' cpu-avg-load moves from round to round), so its score
  # is only shown; it must have found no move.
  local snap=$S/e2e/rapi-final cli=${NODECARE_E2E_CLI:-$ROOT/target/release/nodecare} opts p
  local duty_score hbal_m hbal_m_score ours ours_score live live_score
  group=$(jq_py "print(d['status']['groups'][0]['group'])" <<<"$status")
  duty_score=$(jq_py "print('%.8f' % d['status']['groups'][0]['initial_score'])" <<<"$status")
  local duty_jobsets
  duty_jobsets=$(jq_py "print(d['status']['groups'][0]['jobsets'])" <<<"$status")
  coord /1/balancing/mond-data >"$S/e2e/mond-data.json"
  mkdir -p "$snap"
  for p in info:/2/info groups:/2/groups?bulk=1 nodes:/2/nodes?bulk=1 instances:/2/instances?bulk=1; do
    rapi GET "${p#*:}" >"$snap/${p%%:*}.json"
  done
  opts=(-G "$group" -g 0.01 --min-gain-limit 0.1 --no-disk-moves --mond=yes --mond-data "$S/e2e/mond-data.json" --exit-on-missing-mond-data)
  hbal_m=$("$GNT/gnt-tool.sh" hbal -m "file://$snap" "${opts[@]}" 2>&1)
  live=$("$GNT/node-exec.sh" 1 hbal -L "${opts[@]}" 2>&1)
  ours=$("$cli" balance --dry-run -m "file://$snap" -G "$group" --min-gain 0.01 --mond-data "$S/e2e/mond-data.json" --json 2>&1)
  printf '%s\n' "$hbal_m" >"$S/e2e/hbal-m.out"
  printf '%s\n' "$live" >"$S/e2e/hbal-L.out"
  printf '%s\n' "$ours" >"$S/e2e/nodecare-balance.json"
  hbal_m_score=$(sed -n 's/^Initial score: \([0-9.]*\)$/\1/p' <<<"$hbal_m" | head -n 1)
  live_score=$(sed -n 's/^Initial score: \([0-9.]*\)$/\1/p' <<<"$live" | head -n 1)
  ours_score=$(jq_py "print('%.8f' % d[0]['initial_score'] if d[0]['jobsets'] == 0 else 'moves: ' + str(d[0]['jobsets']))" <<<"$ours" 2>/dev/null)
  log "S9 scores: duty's last run $duty_score, nodecare on the snapshot $ours_score, hbal -m on the snapshot $hbal_m_score, hbal -L live $live_score"
  log "S9: plain hbal -L (static resources only): $("$GNT/node-exec.sh" 1 hbal -L -G "$group" --no-disk-moves 2>&1 | grep -E 'score' | tr '\n' ' ')"
  local no_move='already well balanced|Solution length=0|No solution found'
  if [[ -n $hbal_m_score && $ours_score == "$hbal_m_score" ]] &&
    grep -qE "$no_move" <<<"$hbal_m" && ! grep -q 'gnt-instance' <<<"$hbal_m" &&
    grep -qE "$no_move" <<<"$live" && ! grep -q 'gnt-instance' <<<"$live" &&
    [[ $duty_jobsets == 0 ]] &&
    python3 -c "import sys; b, c = map(float, sys.argv[1:]); sys.exit(0 if abs(b - c) < 1e-3 else 1)" \
      "$live_score" "$hbal_m_score" 2>/dev/null; then
    pass "S9 final score: $hbal_m_score from both hbal -m and the duty's writer on one RAPI snapshot (same load file), no move left; hbal -L live $live_score; the duty's last run found no move (score $duty_score on its own load file)"
  else
    fail "S9 final score" "duty $duty_score ($duty_jobsets job sets), ours '$ours_score', hbal -m '$hbal_m_score', hbal -L '$live_score': $(tr '\n' ' ' <<<"$hbal_m$live" | head -c 800)"
  fi
  # hbal asking the nodes' mond API itself (the agents serve mond's unsigned cpu-avg-load on
  # :1815): it must accept every node's report. The load moves between reads, so the score is
  # only shown.
  local mond_live
  if mond_live=$("$GNT/node-exec.sh" 1 hbal -L -G "$group" -g 0.01 --min-gain-limit 0.1 --no-disk-moves \
    --mond=yes --exit-on-missing-mond-data 2>&1); then
    pass "S9 hbal -L --mond=yes reads every agent's mond cpu-avg-load itself: $(grep -E '^Initial score' <<<"$mond_live")"
  else
    fail "S9 hbal --mond=yes" "$(tr '\n' ' ' <<<"$mond_live" | head -c 600)"
  fi
  wait_status 90 "not any(i.get('node')=='$n3' and i.get('repair-status') in ('noted', 'pending') for i in d)" || true
  return_to_service "$n3"
}
scenario_balance() {
  local k
  balance_scenario_body
  # Balancing off again, however the scenario ended: later scenarios expect instances to stay
  # where they put them.
  if [[ -e $S/e2e/coord.toml.before-s9 ]]; then
    mv "$S/e2e/coord.toml.before-s9" "$S/e2e/coord.toml"
    "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1
    start_coordinator || log "S9: the coordinator did not start again"
    for ((k = 0; k < 60; k++)); do coord /1/agents >/dev/null 2>&1 && break; sleep 1; done
  fi
}
