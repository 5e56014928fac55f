# S10b (sourced by run.sh): maintenance freezes on the real cluster (`NODECARE_E2E_ONLY=freeze`
# runs it after the cluster, the agents, the coordinator and the full candidate pool only).
#
# `nodecare freeze --for 10m` holds planned work: another tool's request (curl, as the reboot
# script asks) is refused with 429 naming the freeze; a campaign on node5 is accepted and waits,
# its `blocked_by` naming the freeze, and Ganeti never sees a job of it (node5 is not drained);
# `nodecare freeze list` and `nodecare status` show it in force; `nodecare freeze lift` ends it,
# and the request is granted (then released). The campaign is aborted before it starts.

scenario_freeze() {
  local node=$NODECARE_GNT_NODE5_NAME ans code id freeze bad="" k t0=$(date +%s) blocked="" list
  local url="http://127.0.0.1:$COORD_FWD"
  master_healthy S10b
  return_to_service "$node"
  # The campaign is planned with the coordinator's failure domains (rack: tags).
  node_json "$node" | jq_py "sys.exit(0 if any(t.startswith('rack:') for t in d['tags']) else 1)" ||
    wait_job "$(rapi PUT "/2/nodes/$node/tags?tag=rack:c" | job_of)" >/dev/null
  wait_job "$(rapi PUT "/2/nodes/$node/tags?tag=e2e:freeze" | job_of)" >/dev/null
  # A coordinator started for this scenario alone acts after its takeover's wait.
  for ((k = 0; k < 120; k++)); do
    coord /1/overview | jq_py "sys.exit(0 if d['round']['number'] >= 1 else 1)" 2>/dev/null && break
    sleep 1
  done
  ans=$(NODECARE_PASSWORD=e2e-secret "$CLI" freeze --for 10m --reason "e2e change freeze" \
    --user e2e --url "$url" --json 2>&1)
  freeze=$(jq_py "print(d['id'])" <<<"$ans" 2>/dev/null)
  if [[ -z $freeze ]]; then
    fail "S10b freeze" "nodecare freeze: $ans"
    return
  fi
  # Another tool's request waits, naming the freeze.
  ans=$(coordw POST /1/disruptions "{\"node\":\"$node\",\"reason\":\"e2e: kernel update\",\"requester\":\"e2e-reboot\",\"ttl_s\":600}")
  code=$(tail -n 1 <<<"$ans")
  [[ $code == 429 ]] || bad+=" the request got HTTP $code: $(sed '$d' <<<"$ans" | head -c 200);"
  sed '$d' <<<"$ans" | grep -q "frozen until .*e2e change freeze (freeze $freeze)" \
    || bad+=" its refusal does not name the freeze: $(sed '$d' <<<"$ans" | head -c 200);"
  # A campaign is accepted and waits, naming the freeze; nothing reaches Ganeti.
  ans=$(coordw POST /1/maintenance "{\"hook\":\"reboot\",\"node_tags\":[\"e2e:freeze\"],\"reason\":\"e2e freeze\"}")
  code=$(tail -n 1 <<<"$ans")
  id=$(sed '$d' <<<"$ans" | jq_py "print(d['id'])" 2>/dev/null)
  if [[ $code != 201 || -z $id ]]; then
    bad+=" the campaign was not accepted: HTTP $code $(sed '$d' <<<"$ans" | head -c 200);"
  else
    for ((k = 0; k < 60; k++)); do
      blocked=$(coord "/1/maintenance/$id" | jq_py "print(d.get('blocked_by') or '')" 2>/dev/null)
      [[ $blocked == "frozen until "* ]] && break
      sleep 1
    done
    [[ $blocked == "frozen until "*"e2e change freeze"* ]] || bad+=" the campaign's blocked_by is '$blocked';"
    sleep 5
    [[ $(node_json "$node" | jq_py "print(d['drained'])") == False ]] || bad+=" $node was drained in a freeze;"
    [[ $(coord "/1/maintenance/$id" | jq_py "print(len(d['groups']))" 2>/dev/null) == 0 ]] \
      || bad+=" a group started: $(coord "/1/maintenance/$id" | head -c 300);"
    coordw POST "/1/maintenance/$id/abort" >/dev/null
  fi
  list=$("$CLI" freeze list --url "$url" 2>&1)
  grep -q "$freeze .*\[IN FORCE\] by e2e: e2e change freeze" <<<"$list" || bad+=" freeze list: $list;"
  "$CLI" status --url "$url" 2>/dev/null | grep -q "IN FORCE" || bad+=" nodecare status does not show the freeze;"
  # Lifted: the request is granted, then released.
  ans=$(NODECARE_PASSWORD=e2e-secret "$CLI" freeze lift "$freeze" --user e2e --url "$url" 2>&1) \
    || bad+=" nodecare freeze lift: $ans;"
  ans=$(coordw POST /1/disruptions "{\"node\":\"$node\",\"reason\":\"e2e: kernel update\",\"requester\":\"e2e-reboot\",\"ttl_s\":600}")
  code=$(tail -n 1 <<<"$ans")
  if [[ $code == 201 ]]; then
    coordw DELETE "/1/disruptions/$(sed '$d' <<<"$ans" | jq_py "print(d['id'])")" >/dev/null
  else
    bad+=" after the lift the request got HTTP $code: $(sed '$d' <<<"$ans" | head -c 200);"
  fi
  wait_job "$(rapi DELETE "/2/nodes/$node/tags?tag=e2e:freeze" | job_of)" >/dev/null
  if [[ -z $bad ]]; then
    pass "S10b freeze: a request refused naming the freeze, a campaign waiting ('${blocked:0:90}…') with no job, listed in force, lifted: granted ($(($(date +%s) - t0)) s)"
  else
    fail "S10b freeze" "$bad"
  fi
}
