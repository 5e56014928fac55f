# shellcheck shell=bash
# S11 (sourced by run.sh, last): Ganeti master failovers under a running coordinator.
#
# Three coordinators run with one configuration (`job_chains = false`, so an evacuation takes
# one step per round and the new master has steps left to take; `[replication] enabled = true`
# when the coordinator knows it): A in node1 (the master; run.sh's coordinator, restarted with
# that configuration and its state), B in node2 and C in node3 (standby, each with its own state
# dir). Each talks to its own node's RAPI (`https://127.0.0.1:5080`, the package's default;
# NODECARE_E2E_FAILOVER_RAPI_URL for another), which answers only on the master.
#   a. B and C stand by while node1 is the master: their logs say so, they send RAPI no write.
#   d. (before the failover) node3's live repair completes and is acknowledged (its tag removed
#      while node3 still reports it); node5's evacuation, blocked by node4's, is canceled.
#   b. node4 says evacuate; once the first migration job of its incident is in Ganeti's queue, A
#      is frozen (SIGSTOP), the queue runs empty, `gnt-cluster master-failover` runs in node2: B
#      finishes the evacuation of the same incident (node4 offline, no primary, repairready
#      tag). A is continued (SIGCONT): it stands by and sends RAPI no write.
#   d. (after) node5's incident is still the canceled one, node3's still the acknowledged one
#      (its repair command ran once), no job for either.
#   e. node4 returned to service, node3 reports Ok; B and node2's Ganeti daemons are killed
#      (SIGKILL; its cluster IP removed as a dead host loses it), `gnt-cluster master-failover
#      --no-voting --yes-do-it` runs in node1: A acts again, a new live repair of node3
#      completes, node5 stays canceled.
#   c. every (incident, intent) of nodecare's reason trail in Ganeti's job list (RAPI
#      /2/jobs?bulk=1) is at most one job; node4 drained once, each of its instances migrated
#      once.
# Writes to RAPI are attributed to a coordinator by the client address in each node's
# rapi-daemon.log (the test's own requests come from the client namespace, 198.18.0.2).
#
# The failover waits for Ganeti's job queue to be empty: Ganeti 3.0.2 loses the configuration
# changes of jobs that run during `gnt-cluster master-failover` (the old master's wconfd can no
# longer write config.data once the new master has distributed its own: "Can't write the master
# configuration file ... it has been modified since last written"; the jobs end in success, the
# instances are then recorded on their old node and shown ERROR_down).

FO_RAPI_URL=${NODECARE_E2E_FAILOVER_RAPI_URL:-https://127.0.0.1:5080}
FO_PORT_B=$((COORD_FWD + 1))
FO_PORT_C=$((COORD_FWD + 2))

# GET on the coordinator forwarded to PORT.
fo_get() { curl -s -m 10 "http://127.0.0.1:$1$2"; }
# POST as the e2e user on the coordinator forwarded to PORT; prints the body, then the HTTP code.
fo_post() { curl -s -m 10 -u e2e:e2e-secret -X POST -w '\n%{http_code}' "http://127.0.0.1:$1$2"; }
# Polls PORT's /1/status until the Python condition on it (d) holds.
fo_wait() { # PORT SECONDS CONDITION
  local port=$1 secs=$2 cond=$3 k
  for ((k = 1; k <= secs; k++)); do
    fo_get "$port" /1/status | jq_py "sys.exit(0 if ($cond) else 1)" 2>/dev/null && return 0
    if ((k % 20 == 0)); then master_healthy "$CURRENT (after ${k}s of waiting)"; fi
    sleep 1
  done
  return 1
}
# Prints a field of the one incident of NODE in PORT's status matching the condition (empty if none).
# Copies the logs of the cluster and of nodecare's daemons to a directory that outlives the
# cluster (the cluster's state directory goes with it), for a failure to be read afterwards.
fo_keep_logs() { # SCENARIO
  local dir
  dir=${NODECARE_E2E_KEEP_LOGS:-/var/tmp/nodecare-e2e-failures}/$1-$(date -u +%Y%m%dT%H%M%S)
  mkdir -p "$dir" && cp -r "$S/logs/." "$dir/" 2>/dev/null
  echo "$dir"
}
fo_incident() { # PORT NODE FIELD [CONDITION]
  fo_get "$1" /1/status | jq_py "
m = [i for i in d if i.get('node') == '$2' and (${4:-True})]
print(m[-1].get('$3', '') if m else '')" 2>/dev/null
}

# Starts the coordinator of node IDX (bg name NAME, state dir STATE), listening on port 1817 of
# the node's address.
fo_start() { # IDX NAME STATE
  local ip_var="NODECARE_GNT_NODE${1}_IP" name_var="NODECARE_GNT_NODE${1}_NAME"
  "$GNT/node-exec.sh" "$1" --bg "$2" "$COORD" --config "$S/e2e/coord-fo.toml" --node-name "${!name_var}" \
    --state-dir "$3" --listen "${!ip_var}:$COORD_PORT" --round-interval "$ROUND_INTERVAL" \
    --hmac-key /var/lib/ganeti/hmac.key --rapi-url "$FO_RAPI_URL" --rapi-certificate /var/lib/ganeti/rapi.pem \
    --rapi-credentials "$S/rapi-credentials" --max-disrupted-nodes 1 --min-healthy-nodes 1 >/dev/null
}

# Writes to RAPI (PUT, POST, DELETE) logged by any node's ganeti-rapi at or after SINCE
# ("YYYY-MM-DD HH:MM:SS,mmm"), one "node<k> METHOD PATH" line each, node<k> being the node the
# request came from (127.0.0.1 and the cluster IP: the node that logged it); the test's own
# requests (from the client namespace) are left out.
fo_rapi_writes() { # SINCE
  python3 - "$S" "$NODECARE_GNT_NODES" "$1" <<'PY'
import re, sys
state, nodes, since = sys.argv[1], int(sys.argv[2]), sys.argv[3]
line_re = re.compile(r'^(\S+ \S+): ganeti-rapi .* INFO (\S+):\d+ (PUT|POST|DELETE) (\S+) HTTP')
for k in range(1, nodes + 1):
    try:
        lines = open(f'{state}/nodes/{k}/root/var/log/ganeti/rapi-daemon.log', errors='replace')
    except OSError:
        continue
    for line in lines:
        m = line_re.match(line)
        if not m or m.group(1) < since:
            continue
        ip = m.group(2)
        if ip == '198.18.0.2':
            continue
        if ip in ('127.0.0.1', '198.18.0.100'):
            src = k
        elif ip.startswith('198.18.0.'):
            src = int(ip.rsplit('.', 1)[1]) - 10
        else:
            src = ip
        print(f'node{src} {m.group(3)} {m.group(4)}')
PY
}

# Ganeti's jobs after job FIRST with nodecare's reason trail: prints one JSON object with
# "twice" (intents submitted as more than one job), "incidents" (incident -> job count),
# "drains" (node -> drain jobs), "migrations" (instance -> migration jobs of the incidents that
# drained or offlined NODE: an instance may move again later for another node's evacuation),
# "nodes" (incident -> the nodes its jobs name), "last" (incident -> its last job).
fo_jobs() { # FIRST NODE
  rapi GET "/2/jobs?bulk=1" | jq_py "
import collections, re
marker = re.compile(r'nodecare incident=([0-9a-f-]{36}) intent=([^:\s\"]+)')
per_intent = collections.Counter(); incidents = collections.Counter(); last = {}
drains = collections.Counter(); migrations = collections.Counter(); nodes = collections.defaultdict(set)
moves = []
for j in d:
    if int(j['id']) <= $1: continue
    keys = set()
    for op in j.get('ops', []):
        for entry in op.get('reason', []):
            m = marker.search(str(entry[1]))
            if m: keys.add((m.group(1), m.group(2)))
    if not keys: continue
    for k in keys: per_intent[k] += 1
    for inc in {k[0] for k in keys}:
        incidents[inc] += 1
        last[inc] = max(last.get(inc, 0), int(j['id']))
        for op in j.get('ops', []):
            for f in ('node_name', 'target_node'):
                if op.get(f): nodes[inc].add(op[f])
    for op in j.get('ops', []):
        if op.get('OP_ID') == 'OP_NODE_SET_PARAMS' and op.get('drained') is True: drains[op.get('node_name')] += 1
        if op.get('OP_ID') in ('OP_INSTANCE_MIGRATE', 'OP_INSTANCE_FAILOVER'): moves.append((keys, op.get('instance_name')))
of_node = {inc for inc, ns in nodes.items() if '$2' in ns}
for keys, inst in moves:
    if any(k[0] in of_node for k in keys): migrations[inst] += 1
print(json.dumps({'last': last, 'twice': ['%s/%s x%d' % (k[0], k[1], n) for k, n in per_intent.items() if n > 1],
                  'intents': len(per_intent), 'jobs': sum(incidents.values()),
                  'incidents': dict(incidents), 'drains': dict(drains), 'migrations': dict(migrations),
                  'nodes': {k: sorted(v) for k, v in nodes.items()}}))"
}

# Job ids of the incident UUID's jobs after FIRST whose ops include OP.
fo_jobs_of() { # FIRST UUID OP
  rapi GET "/2/jobs?bulk=1" | jq_py "
print(' '.join(str(j['id']) for j in d if int(j['id']) > $1 and 'nodecare incident=$2' in json.dumps(j.get('ops', []))
               and any(op.get('OP_ID') == '$3' for op in j.get('ops', []))))" 2>/dev/null
}

# One line on PORT's replication (`/1/replication`): "taken over <generation>, restored from
# <node> <generation>", "standby", or "off" (also for a coordinator without that endpoint).
fo_replication() { # PORT
  fo_get "$1" /1/replication | jq_py "
if not isinstance(d, dict) or not d.get('enabled'):
    print('off')
elif d.get('generation') is None:
    print('standby (nothing taken over)')
else:
    g = lambda x: '%s.%s' % (x.get('epoch'), x.get('number')) if isinstance(x, dict) else str(x)
    r = d.get('restored_from')
    print('taken over, generation', g(d['generation']) + (', restored from %s %s' % (r[0], g(r[1])) if r else ', nothing restored'),
          '; kept by', len(d.get('kept_by') or []), 'of', len(d.get('candidates') or []))" 2>/dev/null || echo off
}

# How often node3's repair command ran.
fo_repairs() { if [[ -e $S/e2e/fo-repairs-3 ]]; then wc -l <"$S/e2e/fo-repairs-3"; else echo 0; fi; }

# Jobs not finished yet.
fo_busy_jobs() {
  rapi GET "/2/jobs?bulk=1" | jq_py "print(' '.join(str(j['id']) for j in d if j.get('status') in ('queued', 'waiting', 'running', 'canceling')))" 2>/dev/null
}

scenario_failover() {
  local i n id st k ans code why t0 t_cont t_fo secs first_job since rts=()
  local n1=$NODECARE_GNT_NODE1_NAME n2=$NODECARE_GNT_NODE2_NAME n3=$NODECARE_GNT_NODE3_NAME
  local n4=${NODECARE_GNT_NODE4_NAME:-} n5=${NODECARE_GNT_NODE5_NAME:-}
  local inc4="" inc5="" inc3="" inc3b="" moved repl="" counts writes done_job="" pid tag
  master_healthy S11
  CURRENT=S11
  t0=$(date +%s)
  log "S11 master failover: coordinators in node1 (acting), node2 and node3 (standby)"
  if [[ -z $n5 ]]; then
    skip "S11 failover" "needs 5 nodes"
    return
  fi
  # Every node in service and Ok, no incident active.
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"
    # Started again where a scenario before stopped it (S4 stops node1's).
    start_agent "$i" 2>/dev/null || true
    n=NODECARE_GNT_NODE${i}_NAME
    # Ganeti runs the nodes' jobs side by side.
    return_to_service "${!n}" &
    rts+=($!)
  done
  wait "${rts[@]}"
  # Three master candidates at least: node1 (the master), node2, node3 (a node set online again
  # promotes itself while the pool is not full).
  if ! why=$(rapi GET "/2/nodes?bulk=1" | jq_py "
c = sorted(n['name'] for n in d if n.get('master_candidate') or n.get('role') == 'M')
need = {'$n1', '$n2', '$n3'}
print(len(c), ' '.join(x.split('.')[0] for x in c)); sys.exit(0 if need <= set(c) else 1)"); then
    fail "S11 failover" "precondition: node1..3 are not all master candidates: $why"
    return
  fi
  pass "S11 master candidates: $why"

  # node3's repair command counts its runs.
  # shellcheck disable=SC2016 # expanded by the command, not here
  printf '#!/bin/sh\necho "$(date +%%s) $0" >> %s\necho done\n' "$S/e2e/fo-repairs-3" \
    >"$NODECARE_GNT_NODE3_ROOT/etc/ganeti/node-repair-commands/e2e-count"
  chmod 0755 "$NODECARE_GNT_NODE3_ROOT/etc/ganeti/node-repair-commands/e2e-count"
  rm -f "$S/e2e/fo-repairs-3"

  # The configuration of all three: run.sh's, one step per round, replication on (added when
  # run.sh's has no [replication] and the coordinator knows it). Top-level keys go first. A
  # short grace: S10's last reboot put its rack in the grace of a planned disruption (600 s by
  # default), which would hold node3's live repair back for the rest of the default grace.
  { echo "job_chains = false"; echo "grace = 20.0"; cat "$S/e2e/coord.toml"; } >"$S/e2e/coord-fo.toml"
  if ! grep -q '^\[replication\]' "$S/e2e/coord-fo.toml"; then
    { cat "$S/e2e/coord-fo.toml"; printf '[replication]\nenabled = true\n'; } >"$S/e2e/coord-fo-repl.toml"
    if "$COORD" --check-config --config "$S/e2e/coord-fo-repl.toml" --hmac-key "$S/hmac.key" \
      --rapi-certificate "$NODECARE_GNT_RAPI_CERT" --rapi-credentials "$S/rapi-credentials" >"$S/e2e/fo-check-config.log" 2>&1; then
      mv "$S/e2e/coord-fo-repl.toml" "$S/e2e/coord-fo.toml"
    else
      repl="replication unknown to this coordinator ($(grep -m1 -iE 'error|unknown' "$S/e2e/fo-check-config.log" | head -c 160))"
    fi
  fi
  [[ -n $repl ]] || repl="replication $(grep -A3 '^\[replication\]' "$S/e2e/coord-fo.toml" | grep -m1 '^enabled' | tr -d ' ')"
  log "S11: $repl"
  "$GNT/node-exec.sh" 1 --stop coordinator >/dev/null 2>&1 || true
  fo_start 1 coordinator "$S/e2e/coord-state" || { fail "S11 failover" "coordinator A did not start again"; return; }
  for i in 2 3; do "$GNT/node-exec.sh" "$i" --stop "coordinator-$i" >/dev/null 2>&1 || true; done
  rm -rf "$S/e2e/coord-state-2" "$S/e2e/coord-state-3"
  # What B and C log from now on (a rerun with --keep appends to the same files).
  local log_b=$S/logs/bg-coordinator-2.log log_c=$S/logs/bg-coordinator-3.log off_b off_c
  off_b=$(stat -c %s "$log_b" 2>/dev/null || echo 0)
  off_c=$(stat -c %s "$log_c" 2>/dev/null || echo 0)
  fo_start 2 coordinator-2 "$S/e2e/coord-state-2" || { fail "S11 failover" "coordinator B did not start"; return; }
  fo_start 3 coordinator-3 "$S/e2e/coord-state-3" || { fail "S11 failover" "coordinator C did not start"; return; }
  "$GNT/forward.sh" 2 "$COORD_PORT" "$FO_PORT_B" >/dev/null || { fail "S11 failover" "cannot forward B's port"; return; }
  "$GNT/forward.sh" 3 "$COORD_PORT" "$FO_PORT_C" >/dev/null || { fail "S11 failover" "cannot forward C's port"; return; }
  for ((k = 0; k < 60; k++)); do
    fo_get "$COORD_FWD" /1/status >/dev/null 2>&1 && fo_get "$FO_PORT_B" /1/status >/dev/null 2>&1 &&
      fo_get "$FO_PORT_C" /1/status >/dev/null 2>&1 && break
    sleep 1
  done
  # A storm breaker left open (every agent stopped at once before) would block every repair.
  if fo_get "$COORD_FWD" /1/breaker | jq_py "sys.exit(0 if d.get('open') else 1)" 2>/dev/null; then
    log "S11: storm breaker open ($(fo_get "$COORD_FWD" /1/breaker | jq_py "print(d.get('why'))")): reset"
    sleep $((2 * AGENT_INTERVAL))
    fo_post "$COORD_FWD" /1/breaker/reset >/dev/null
  fi
  if ! fo_wait "$COORD_FWD" 90 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S11 failover" "precondition: incidents still active: $(fo_get "$COORD_FWD" /1/status | head -c 400)"
    return
  fi
  since=$(date -u '+%F %T,%3N')
  first_job=$(rapi GET /2/jobs | jq_py "print(max([int(j['id']) for j in d] or [0]))")

  # node4 holds three migratable instances.
  moved=$(rapi GET "/2/instances?bulk=1" | jq_py "
c = sorted(i['name'] for i in d if i['disk_template'] in ('diskless', 'sharedfile') and i['admin_state'] == 'up')
print(' '.join(c[:3]))")
  local ids=()
  for n in $moved; do
    [[ $(rapi GET "/2/instances/$n" | jq_py "print(d['pnode'])") == "$n4" ]] && continue
    ids+=("$(rapi PUT "/2/instances/$n/migrate" "{\"target_node\": \"$n4\"}" | job_of)")
  done
  for id in "${ids[@]}"; do
    st=$(wait_job "$id" 180)
    [[ $st == success ]] || { fail "S11 failover" "precondition: moving an instance to $n4: job $id $st"; return; }
  done
  first_job=$(rapi GET /2/jobs | jq_py "print(max([int(j['id']) for j in d] or [0]))")

  log "S11: setup done; node3's live repair"
  # ---- d (before): node3's live repair, acknowledged while still reported ----
  echo '{"status":"live-repair","command":"e2e-count","details":"e2e: failover"}' >"$S/e2e/diag-3"
  if ! fo_wait "$COORD_FWD" 90 "any(i.get('node')=='$n3' and i.get('repair-status')=='completed' and i.get('tag_applied') for i in d)"; then
    fail "S11 failover" "precondition: node3's live repair did not complete: $(fo_get "$COORD_FWD" /1/status | head -c 400)"
    return
  fi
  inc3=$(fo_incident "$COORD_FWD" "$n3" id "i.get('repair-status')=='completed'")
  for tag in $(node_json "$n3" | jq_py "print(' '.join(t for t in d['tags'] if t.startswith('maintd:')))"); do
    wait_job "$(rapi DELETE "/2/nodes/$n3/tags?tag=$tag" | job_of)" >/dev/null
  done
  if ! fo_wait "$COORD_FWD" 30 "any(i.get('id')=='$inc3' and i.get('acknowledged') for i in d)"; then
    fail "S11 failover" "precondition: node3's incident $inc3 not acknowledged: $(fo_get "$COORD_FWD" /1/status | head -c 400)"
    return
  fi

  log "S11: node3's incident $inc3 acknowledged; node4 evacuates"
  # ---- b: node4 evacuates; d (before): node5's evacuation, blocked, is canceled ----
  echo '{"status":"evacuate","details":"e2e: failover mid-evacuation"}' >"$S/e2e/diag-4"
  if ! fo_wait "$COORD_FWD" 60 "any(i.get('node')=='$n4' and i.get('repair-status')=='pending' for i in d)"; then
    fail "S11 failover" "node4's evacuation did not start: $(fo_get "$COORD_FWD" /1/status | head -c 400)"
    return
  fi
  inc4=$(fo_incident "$COORD_FWD" "$n4" id "i.get('repair-status')=='pending'")
  echo '{"status":"evacuate","details":"e2e: to be canceled"}' >"$S/e2e/diag-5"
  if fo_wait "$COORD_FWD" 30 "any(i.get('node')=='$n5' and i.get('repair-status')=='noted' and i.get('blocked_by') for i in d)"; then
    inc5=$(fo_incident "$COORD_FWD" "$n5" id "i.get('repair-status')=='noted'")
    ans=$(fo_post "$COORD_FWD" "/1/incidents/$inc5/cancel")
    code=$(tail -n 1 <<<"$ans")
    [[ $code == 200 ]] || log "S11: cancel of $inc5 answered HTTP $code: $(sed '$d' <<<"$ans" | head -c 200)"
  fi
  if [[ -z ${inc5:-} ]] || ! fo_wait "$COORD_FWD" 20 "any(i.get('id')=='$inc5' and i.get('repair-status')=='canceled' for i in d)"; then
    fail "S11 failover" "precondition: node5's blocked incident was not canceled: $(fo_get "$COORD_FWD" /1/status | head -c 400)"
    return
  fi
  # The first migration job of node4's incident: then A is frozen.
  for ((k = 0; k < 240; k++)); do
    [[ -n $(fo_jobs_of "$first_job" "$inc4" OP_INSTANCE_MIGRATE) ]] && break
    sleep 0.25
  done
  if ((k >= 240)); then
    fail "S11 failover" "no migration job of node4's incident $inc4 within 60 s: $(fo_get "$COORD_FWD" /1/status | head -c 400)"
    return
  fi
  local repl_a
  repl_a=$(fo_replication "$COORD_FWD")
  kill -STOP "$(<"$S/pids/bg-coordinator.pid")"
  log "S11: A frozen after job(s) $(fo_jobs_of "$first_job" "$inc4" OP_INSTANCE_MIGRATE) of $inc4"
  # (a) while node1 was the master: B and C stood by and wrote nothing.
  writes=$(fo_rapi_writes "$since" | grep -vE '^node1 ' | sort | uniq -c)
  local new_b new_c standby_repl
  # With replication, a standby has taken nothing over (/1/replication: no generation yet).
  standby_repl=$(for p in "$FO_PORT_B" "$FO_PORT_C"; do fo_replication "$p"; done)
  new_b=$(tail -c +$((off_b + 1)) "$log_b")
  new_c=$(tail -c +$((off_c + 1)) "$log_c")
  if [[ -z $writes ]] && grep -q "standing by until this node is the master" <<<"$new_b" &&
    grep -q "standing by until this node is the master" <<<"$new_c" &&
    ! grep -q "this node is the master: acting" <<<"$new_b$new_c" && ! grep -q "^taken over" <<<"$standby_repl"; then
    pass "S11a standby: B (node2) and C (node3) stood by while node1 was the master ($(fo_rapi_writes "$since" | grep -c '^node1 ') RAPI writes, all from A in node1; replication: A $repl_a; B and C $(tr '\n' ' ' <<<"$standby_repl" | sed 's/ $//'))"
  else
    fail "S11a standby" "writes from other nodes: ${writes:-none}; replication: $(tr '\n' ' ' <<<"$standby_repl"); B: $(grep -E 'standing by|acting' <<<"$new_b" | tail -n 1); C: $(grep -E 'standing by|acting' <<<"$new_c" | tail -n 1)"
  fi
  # Ganeti loses what jobs running during a failover write: let the queue run empty.
  for ((k = 0; k < 120; k++)); do
    [[ -z $(fo_busy_jobs) ]] && break
    sleep 1
  done
  local steps_before
  steps_before=$(rapi GET "/2/jobs?bulk=1" | jq_py "print(sum(1 for j in d if int(j['id']) > $first_job and 'nodecare incident=$inc4' in json.dumps(j.get('ops', []))))")
  t_fo=$(date +%s%3N)
  if ! ans=$("$GNT/node-exec.sh" 2 gnt-cluster master-failover 2>&1); then
    fail "S11b failover" "gnt-cluster master-failover in node2 failed: $(tail -n 3 <<<"$ans" | tr '\n' ' ')"
    kill -CONT "$(<"$S/pids/bg-coordinator.pid")"
    return
  fi
  secs=$(( ($(date +%s%3N) - t_fo) / 100 ))
  log "S11: master-failover to node2 took $((secs / 10)).$((secs % 10)) s; master now node$("$GNT/master-daemons.sh" master)"
  master_healthy "S11 (after the failover to node2)"
  if fo_wait "$FO_PORT_B" 180 "any(i.get('node')=='$n4' and i.get('repair-status') in ('completed', 'failed') for i in d)"; then
    local nj offline pinst tagged uuid_b
    uuid_b=$(fo_incident "$FO_PORT_B" "$n4" id "i.get('repair-status') in ('completed', 'failed')")
    done_job=$(rapi GET /2/jobs | jq_py "print(max([int(j['id']) for j in d] or [0]))")
    log "S11: B finished node4's evacuation ($uuid_b)"
    nj=$(node_json "$n4")
    offline=$(jq_py "print(d['offline'])" <<<"$nj")
    pinst=$(jq_py "print(len(d['pinst_list']))" <<<"$nj")
    tagged=$(jq_py "print(any(t == 'maintd:repairready:$inc4' for t in d['tags']))" <<<"$nj")
    if [[ $uuid_b == "$inc4" && $(fo_incident "$FO_PORT_B" "$n4" repair-status "i.get('id')=='$inc4'") == completed &&
      $offline == True && $pinst == 0 && $tagged == True ]]; then
      pass "S11b failover: B in node2 finished A's evacuation of node4 (incident $inc4; $steps_before of its jobs by A, $(($(fo_jobs "$first_job" "$n4" | jq_py "print(d['incidents'].get('$inc4', 0))") - steps_before)) by B): offline, no primary, repairready tag; master-failover $((secs / 10)).$((secs % 10)) s; B's replication: $(fo_replication "$FO_PORT_B")"
    else
      fail "S11b failover" "node4: incident in B $uuid_b (A's: $inc4) $(fo_incident "$FO_PORT_B" "$n4" repair-status), offline=$offline primaries=$pinst tag=$tagged"
    fi
  else
    local kept
    kept=$(fo_keep_logs S11b)
    fail "S11b failover" "B did not finish node4's evacuation within 180 s: B's incident of node4: $(fo_get "$FO_PORT_B" /1/status | jq_py "
m = [i for i in d if i.get('node') == '$n4']
i = m[-1] if m else {}
print({k: i.get(k) for k in ('id', 'repair-status', 'state', 'action', 'blocked_by', 'warning')}, [h.get('event', h) if isinstance(h, dict) else h for h in i.get('history', [])][-4:])" 2>&1 | head -c 900); B's replication: $(fo_replication "$FO_PORT_B"); B's last log lines: $(tail -n 4 "$S/logs/bg-coordinator-2.log" 2>/dev/null | cut -c1-300 | tr '\n' ' '); logs kept in $kept"
  fi
  # A continues: it must stand by and write nothing.
  t_cont=$(date -u '+%F %T,%3N')
  kill -CONT "$(<"$S/pids/bg-coordinator.pid")"
  sleep $((3 * ROUND_INTERVAL + 2))
  writes=$(fo_rapi_writes "$t_cont" | grep -E '^node1 ' | sort | uniq -c)
  if [[ -z $writes ]] && tail -n 50 "$S/logs/bg-coordinator.log" | grep -q "no longer the master: standing by"; then
    pass "S11b old master: A, continued after the failover, stands by and sent RAPI no write"
  else
    fail "S11b old master" "writes from node1 after SIGCONT: ${writes:-none}; A's log: $(grep -E 'master|standing' "$S/logs/bg-coordinator.log" | tail -n 2 | tr '\n' ' ')"
  fi

  # ---- d (after): canceled and acknowledged stay so ----
  counts=$(fo_jobs "$first_job" "$n4")
  why=""
  [[ $(fo_incident "$FO_PORT_B" "$n5" id) == "$inc5" && $(fo_incident "$FO_PORT_B" "$n5" repair-status) == canceled ]] ||
    why+=" node5 in B: $(fo_get "$FO_PORT_B" /1/status | jq_py "print([(i['id'], i['repair-status']) for i in d if i['node']=='$n5'])");"
  [[ $(fo_incident "$FO_PORT_B" "$n3" id) == "$inc3" && $(fo_incident "$FO_PORT_B" "$n3" acknowledged) == True ]] ||
    why+=" node3 in B: $(fo_get "$FO_PORT_B" /1/status | jq_py "print([(i['id'], i['repair-status'], i['acknowledged']) for i in d if i['node']=='$n3'])");"
  [[ $(fo_repairs) == 1 ]] || why+=" node3's repair command ran $(fo_repairs) times;"
  why+=$(jq_py "
bad = [f'{k}: {v}' for k, v in d['nodes'].items() if k not in ('$inc4', '$inc3')]
print(' jobs of other incidents: ' + '; '.join(bad) if bad else '')" <<<"$counts")
  if [[ -z $why ]]; then
    pass "S11d canceled and acknowledged: node5's incident $inc5 still canceled, node3's $inc3 still acknowledged (its repair ran once), no job for either after the failover"
  else
    fail "S11d canceled and acknowledged" "$why"
  fi

  log "S11: --no-voting case"
  # ---- e: the master dies; master-failover --no-voting in node1 ----
  local ok_forgotten=0
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-3"
  echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-4"
  fo_wait "$FO_PORT_B" 30 "not any(i.get('node')=='$n3' for i in d)" && ok_forgotten=1
  return_to_service "$n4"
  fo_wait "$FO_PORT_B" 30 "all(i.get('acknowledged') for i in d if i.get('node')=='$n4')" ||
    log "S11: node4's incident not acknowledged in B: $(fo_get "$FO_PORT_B" /1/status | head -c 300)"
  for ((k = 0; k < 30; k++)); do [[ -z $(fo_busy_jobs) ]] && break; sleep 1; done
  pid=$(cat "$S/pids/bg-coordinator-2.pid" 2>/dev/null)
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
  rm -f "$S/pids/bg-coordinator-2.pid"
  gnt_kill_master 2
  t_fo=$(date +%s%3N)
  if ! ans=$(gnt_failover_no_voting 1); then
    fail "S11e no-voting" "master-failover --no-voting in node1 failed: $(tail -n 3 <<<"$ans" | tr '\n' ' ')"
    return
  fi
  secs=$(( ($(date +%s%3N) - t_fo) / 100 ))
  log "S11: master-failover --no-voting to node1 took $((secs / 10)).$((secs % 10)) s; master now node$("$GNT/master-daemons.sh" master)"
  master_healthy "S11 (after the --no-voting failover to node1)"
  echo '{"status":"live-repair","command":"e2e-count","details":"e2e: after no-voting"}' >"$S/e2e/diag-3"
  if fo_wait "$COORD_FWD" 120 "any(i.get('node')=='$n3' and i.get('id')!='$inc3' and i.get('repair-status')=='completed' and i.get('tag_applied') for i in d)"; then
    inc3b=$(fo_incident "$COORD_FWD" "$n3" id "i.get('repair-status')=='completed' and i.get('id')!='$inc3'")
    why=""
    [[ $ok_forgotten == 1 ]] || why+=" node3's first incident was not forgotten in B once Ok;"
    [[ $(fo_repairs) == 2 ]] || why+=" node3's repair command ran $(fo_repairs) times (want 2);"
    [[ $(fo_incident "$COORD_FWD" "$n5" id) == "$inc5" && $(fo_incident "$COORD_FWD" "$n5" repair-status) == canceled ]] ||
      why+=" node5 in A: $(fo_get "$COORD_FWD" /1/status | jq_py "print([(i['id'], i['repair-status']) for i in d if i['node']=='$n5'])");"
    if [[ -z $why ]]; then
      pass "S11e no-voting: B and node2's Ganeti daemons killed, master-failover --no-voting in node1 ($((secs / 10)).$((secs % 10)) s): A acts again ($(fo_replication "$COORD_FWD")), node3's new live repair $inc3b completed, node5 still canceled"
    else
      fail "S11e no-voting" "$why"
    fi
  else
    fail "S11e no-voting" "A did not complete a new live repair of node3 within 120 s: $(fo_get "$COORD_FWD" /1/status | head -c 500)"
  fi

  # ---- c: no job twice ----
  counts=$(fo_jobs "$first_job" "$n4")
  why=$(jq_py "
bad = list(d['twice'])
bad += [f'{n} drained {c} times' for n, c in d['drains'].items() if c > 1]
bad += [f'{n} migrated {c} times' for n, c in d['migrations'].items() if c > 1]
if '${done_job:-}' and d['last'].get('$inc4', 0) > int('${done_job:-0}'):
    bad.append('a job of node4\'s incident $inc4 after it completed (job %d)' % d['last']['$inc4'])
print('; '.join(bad))" <<<"$counts")
  if [[ -z $why ]]; then
    pass "S11c no job twice: $(jq_py "print(d['jobs'], 'nodecare jobs,', d['intents'], 'intents, each one job; drains', d['drains'], 'migrations', d['migrations'])" <<<"$counts")"
  else
    fail "S11c no job twice" "$why"
  fi
  writes=$(fo_rapi_writes "$since" | grep -E '^node3 ')
  [[ -z $writes ]] || fail "S11a standby C" "C in node3 wrote to RAPI: $(head -n 3 <<<"$writes" | tr '\n' ' ')"

  # Leave node2 a working non-master node and every node Ok.
  gnt_rejoin_old_master 2 1
  for i in 3 4 5; do echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"; done
  "$GNT/node-exec.sh" 3 --stop coordinator-3 >/dev/null 2>&1 || true
  log "S11 took $(($(date +%s) - t0)) s ($repl)"
}
