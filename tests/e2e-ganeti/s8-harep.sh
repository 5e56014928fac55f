# shellcheck shell=bash
# S8: instance auto-repair (harep's duty in the coordinator, `[instance_repair] enabled = true`)
# on the real cluster. Sourced by run.sh after S7; uses its helpers (rapi, jq_py, wait_job,
# job_of, node_json, return_to_service, start_agent, coord, master_healthy, pass, fail, log).
#
# The namespace cluster has no DRBD or LVM, so the instances are diskless and sharedfile ones,
# which harep leaves alone and nodecare repairs (docs/harep.md, "What is repaired"):
#   A. inst1 (diskless, tagged `failover`) and inst2 (diskless, tagged `failover` and
#      `suspend:`) run on node2, which is then set offline: the coordinator fails inst1 over
#      (pending tag, then `result:failover:…:success:<job>`, the job an OP_INSTANCE_FAILOVER
#      carrying nodecare's reason trail); inst2 stays on node2 with its tags untouched. The
#      offline node is held by "someone" (Ganeti shows it offline, nodecare did not do it): the
#      failover takes that node over, disrupting nothing new, and is admitted.
#   B. inst3 (sharedfile, tagged `migrate`) runs on node3, which is then drained by hand: the
#      coordinator migrates it away (`result:migrate:…:success:<job>`, OP_INSTANCE_MIGRATE).
#   `nodecare harep --dry-run` then reads the repaired cluster through RAPI: nothing to do
#   (NODECARE_E2E_CLI: another nodecare binary than target/release/nodecare).
# The cluster is restored at the end: autorepair tags removed, nodes online and undrained.

harep_tags() { # INSTANCE: its autorepair tags, sorted, one line
  rapi GET "/2/instances/$1/tags" | jq_py "print(' '.join(sorted(t for t in d if t.startswith('ganeti:watcher:autorepair:'))))"
}
harep_pnode() { rapi GET "/2/instances/$1" | jq_py "print(d['pnode'])"; }
harep_place() { # INSTANCE NODE: migrate the instance onto NODE unless it is there
  local id st
  [[ $(harep_pnode "$1") == "$2" ]] && return 0
  id=$(rapi PUT "/2/instances/$1/migrate" "{\"target_node\": \"$2\"}" | job_of)
  st=$(wait_job "$id" 180)
  [[ $st == success ]] || { echo "moving $1 to $2: job $id $st"; return 1; }
}
harep_tag() { # INSTANCE TAG...
  local inst=$1 q="" t id st
  shift
  for t in "$@"; do q+="${q:+&}tag=ganeti:watcher:autorepair:$t"; done
  id=$(rapi PUT "/2/instances/$inst/tags?$q" | job_of)
  st=$(wait_job "$id")
  [[ $st == success ]] || { echo "tagging $inst: job $id $st"; return 1; }
}
# Removing a tag Ganeti no longer has fails the whole job: when the coordinator's own tag job
# (the removal of a pending tag once its result is written) ran in between, list and try again.
harep_untag_all() { # INSTANCE: remove every autorepair tag
  local inst=$1 q t id k
  for ((k = 0; k < 10; k++)); do
    q=""
    for t in $(harep_tags "$inst"); do q+="${q:+&}tag=$t"; done
    [[ -n $q ]] || return 0
    id=$(rapi DELETE "/2/instances/$inst/tags?$q" | job_of)
    [[ $(wait_job "$id") == success ]] && return 0
    sleep 1
  done
}
# Waits until INSTANCE has a result tag of TYPE and no pending tag; prints the tags seen
# (the pending ones first, if a poll caught them).
harep_wait_result() { # INSTANCE TYPE SECONDS
  local inst=$1 type=$2 secs=$3 k tags seen=""
  for ((k = 0; k < secs * 2; k++)); do
    tags=$(harep_tags "$inst")
    [[ $tags == *":pending:$type:"* && $seen != *":pending:"* ]] && seen="$tags"
    # Done as harep leaves it: the result written and the pending tag removed.
    if [[ $tags == *":result:$type:"* && $tags != *":pending:"* ]]; then
      echo "${seen:+$seen | }$tags"
      return 0
    fi
    if ((k > 0 && k % 40 == 0)); then master_healthy "S8 (after $((k / 2))s of waiting)"; fi
    sleep 0.5
  done
  echo "${seen:+$seen | }$tags"
  return 1
}
# The job ids in a result tag; checks each is a successful job running OP and carrying
# nodecare's reason trail with the repair uuid. Prints what is wrong, if anything.
harep_check_jobs() { # RESULT-TAG OP
  local tag=$1 op=$2 uuid jobs j info
  uuid=$(cut -d: -f6 <<<"$tag")
  jobs=$(awk -F: '{print $NF}' <<<"$tag")
  [[ -n $jobs ]] || { echo "no job in $tag"; return 1; }
  for j in ${jobs//+/ }; do
    info=$(rapi GET "/2/jobs/$j")
    jq_py "
ops = [o.get('OP_ID') for o in d.get('ops', [])]
trail = json.dumps(d.get('ops', []))
ok = d.get('status') == 'success' and '$op' in ops and 'nodecare incident=$uuid' in trail
print('' if ok else 'job $j: status %s, ops %s, nodecare reason %s' % (d.get('status'), ops, 'nodecare incident=$uuid' in trail))
sys.exit(0 if ok else 1)" <<<"$info" || return 1
  done
}

scenario_harep() {
  local n1=$NODECARE_GNT_NODE1_NAME n2=$NODECARE_GNT_NODE2_NAME n3=$NODECARE_GNT_NODE3_NAME
  local dom=${NODECARE_GNT_NODE1_NAME#*.} i1 i2 i3 why seen result id st out tags2_before
  local P=ganeti:watcher:autorepair
  i1=inst1.$dom i2=inst2.$dom i3=inst3.$dom
  master_healthy S8
  log "S8 instance auto-repair: failover off offline $n2, migrate off drained $n3, suspended instance left alone"
  for i in 1 2 3; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  # S4 leaves node1's agent stopped when S7 does not run.
  "$GNT/node-exec.sh" 1 --stop agent-1 >/dev/null 2>&1 || true
  start_agent 1 || log "S8: agent 1 did not restart"
  for n in "$n1" "$n2" "$n3"; do return_to_service "$n"; done
  if ! wait_status 90 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S8 harep" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    return
  fi
  for i in "$i1" "$i2" "$i3"; do harep_untag_all "$i"; done
  why=$(harep_place "$i1" "$n2") && why=$(harep_place "$i2" "$n2") && why=$(harep_place "$i3" "$n3") ||
    { fail "S8 harep" "precondition: $why"; return; }
  why=$(harep_tag "$i1" failover) && why=$(harep_tag "$i2" failover suspend:) && why=$(harep_tag "$i3" migrate) ||
    { fail "S8 harep" "precondition: $why"; return; }
  tags2_before=$(harep_tags "$i2")

  # ---- A: node2 offline: inst1 failed over, inst2 (suspended) left alone ----
  id=$(rapi PUT "/2/nodes/$n2/role?force=1&auto-promote=1" '"offline"' | job_of)
  st=$(wait_job "$id" 180)
  if [[ $st != success ]]; then
    fail "S8 harep" "setting $n2 offline: job $id $st"
  elif seen=$(harep_wait_result "$i1" failover 120); then
    result=${seen##* }
    if [[ $seen == *":pending:failover:"* ]]; then seen="pending tag seen"; else seen="pending tag not caught between polls"; fi
    if [[ $result == "$P:result:failover:"*":success:"* && $(harep_pnode "$i1") != "$n2" ]] &&
      why=$(harep_check_jobs "$result" OP_INSTANCE_FAILOVER); then
      pass "S8 harep failover: $i1 failed over off offline $n2 to $(harep_pnode "$i1") by the coordinator's duty, tagged as harep tags ($seen; $(sed -E 's/.*:result:/result:/' <<<"$result")), job OP_INSTANCE_FAILOVER with nodecare's reason trail"
    else
      fail "S8 harep failover" "tags '$result', primary $(harep_pnode "$i1"): $why; overview: $(coord /1/overview | jq_py "print(d.get('instance_repairs'))")"
    fi
  else
    fail "S8 harep failover" "no result tag on $i1 within 120 s (tags: $seen); overview: $(coord /1/overview | jq_py "print(d.get('instance_repairs'))")"
  fi
  # A few more rounds: the suspended instance stays as it is.
  sleep 6
  if [[ $(harep_pnode "$i2") == "$n2" && $(harep_tags "$i2") == "$tags2_before" ]]; then
    pass "S8 harep suspend: $i2 (tags $tags2_before) left on offline $n2, tags untouched"
  else
    fail "S8 harep suspend" "$i2 on $(harep_pnode "$i2") with tags '$(harep_tags "$i2")' (before: '$tags2_before')"
  fi
  for i in "$i1" "$i2"; do harep_untag_all "$i"; done
  return_to_service "$n2"

  # ---- B: node3 drained by hand: inst3 migrated away ----
  id=$(rapi PUT "/2/nodes/$n3/role?force=1&auto-promote=1" '"drained"' | job_of)
  st=$(wait_job "$id")
  if [[ $st != success ]]; then
    fail "S8 harep migrate" "draining $n3: job $id $st"
  elif seen=$(harep_wait_result "$i3" migrate 120); then
    result=${seen##* }
    if [[ $result == "$P:result:migrate:"*":success:"* && $(harep_pnode "$i3") != "$n3" ]] &&
      why=$(harep_check_jobs "$result" OP_INSTANCE_MIGRATE); then
      pass "S8 harep migrate: $i3 (sharedfile) migrated off drained $n3 to $(harep_pnode "$i3") ($(sed -E 's/.*:result:/result:/' <<<"$result")), job OP_INSTANCE_MIGRATE with nodecare's reason trail"
    else
      fail "S8 harep migrate" "tags '$result', primary $(harep_pnode "$i3"): $why"
    fi
  else
    fail "S8 harep migrate" "no result tag on $i3 within 120 s (tags: $seen); overview: $(coord /1/overview | jq_py "print(d.get('instance_repairs'))")"
  fi
  harep_untag_all "$i3"
  return_to_service "$n3"

  # ---- nodecare harep --dry-run through RAPI: the repaired cluster needs nothing ----
  local cli=${NODECARE_E2E_CLI:-$ROOT/target/release/nodecare}
  if [[ -x $cli ]]; then
    out=$("$cli" harep --dry-run -c /dev/null \
      -m "https://$NODECARE_GNT_RAPI_USER:$RAPI_PW@127.0.0.1:$NODECARE_GNT_RAPI_PORT" \
      --rapi-ca "$NODECARE_GNT_RAPI_CERT" --state-dir "$S/e2e/harep-dry" 2>&1)
    if [[ $(head -n 3 <<<"$out" | tr '\n' '|') == "---------------------|Instance status count|---------------------|" &&
      $(sed -n 4p <<<"$out") == Healthy:* && $(wc -l <<<"$out") -eq 4 ]]; then
      pass "S8 nodecare harep --dry-run: $(sed -n 4p <<<"$out"), nothing to do"
    else
      fail "S8 nodecare harep --dry-run" "$(head -c 400 <<<"$out")"
    fi
  fi
  # Restored: no autorepair tags, every node online and undrained.
  for i in "$i1" "$i2" "$i3"; do
    [[ -z $(harep_tags "$i") ]] || fail "S8 restore" "$i still has $(harep_tags "$i")"
  done
  for n in "$n1" "$n2" "$n3"; do
    [[ $(node_json "$n" | jq_py "print(d['offline'] or d['drained'])") == False ]] ||
      fail "S8 restore" "$n is still offline or drained"
  done
}
