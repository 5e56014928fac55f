# S10 (sourced by run.sh): a rolling maintenance campaign over every node of the real cluster.
#
# `nodecare roll --execute --hook e2e-reboot` starts a campaign on the coordinator. The hook, a
# whitelisted repair command on every node, only leaves a reboot request (the agent kills what a
# repair command leaves running, and a namespace node cannot really reboot); a watcher here acts
# on it as a reboot would: it stops the node's agent, stops and starts the node's Ganeti daemons
# (noded, confd), writes a new boot id to the file the node's agent reports
# (`--boot-id-path`), and starts the agent again. Meanwhile every instance running at the start
# is polled through RAPI. Once the first group is in its hook or later, the coordinator is
# killed with SIGKILL and started again.
#
# The nodes sit in three racks (`rack:` tags; the coordinator's failure_domains = "rack:") and
# the campaign is started without --failure-domains: it is planned with the coordinator's
# domains, so every reboot group lies within one rack.
#
# Checks: the campaign completes (`nodecare roll status ID --wait` exits 0 across the restart);
# each node's hook ran exactly once; every instance is back on its original primary; no
# instance that ran at the start was seen not running except during one of its own migration
# jobs (the fake hypervisor's gap, see campaign_downtime); no instance was migrated more than
# twice (away and back) and no node drained more than once (no job twice after the kill).

# The "reboot" of node i: agent down, Ganeti node daemons restarted, new boot id, agent up.
campaign_reboot_node() { # NODE-INDEX
  local i=$1 d
  "$GNT/node-exec.sh" "$i" --stop "agent-$i" >/dev/null 2>&1 || true
  for d in ganeti-confd ganeti-noded; do
    "$GNT/node-exec.sh" "$i" /usr/lib/ganeti/daemon-util stop "$d" >>"$S/e2e/campaign-reboots.log" 2>&1 || true
  done
  cat /proc/sys/kernel/random/uuid >"$S/e2e/boot_id-$i"
  for d in ganeti-noded ganeti-confd; do
    "$GNT/node-exec.sh" "$i" /usr/lib/ganeti/daemon-util start "$d" >>"$S/e2e/campaign-reboots.log" 2>&1 || true
  done
  start_agent "$i" || log "S10: agent $i did not start again"
}

# Acts on the hooks' reboot requests until $S/e2e/campaign-stop exists.
campaign_reboot_watcher() {
  local f i
  while [[ ! -e $S/e2e/campaign-stop ]]; do
    for f in "$S"/e2e/reboot-request-*; do
      [[ -e $f ]] || continue
      i=${f##*-}
      # As a real hook schedules the reboot a few seconds after it exits.
      sleep 2
      mv "$f" "$S/e2e/reboot-done-$i.$(date +%s%N)"
      echo "$(date +%T) reboot node $i" >>"$S/e2e/campaign-reboots.log"
      campaign_reboot_node "$i"
    done
    sleep 0.5
  done
}

# Polls every instance running at the start once a second; logs each one seen not running
# ("T0 T1 NAME STATUS PNODE", T0..T1 the Unix times around the read). `ERROR_wrongnode` is
# running: found on the node it migrates to before Ganeti's configuration says so.
campaign_instance_watcher() { # INSTANCES...
  local want=" $* " t0 t1 answer
  while [[ ! -e $S/e2e/campaign-stop ]]; do
    t0=$(date +%s.%N)
    answer=$(rapi GET "/2/instances?bulk=1")
    t1=$(date +%s.%N)
    jq_py "
want = set('''$want'''.split())
for i in d:
    if i['name'] in want and i.get('status') not in ('running', 'ERROR_wrongnode'):
        print('$t0', '$t1', i['name'], i.get('status'), i.get('pnode'))" <<<"$answer" 2>/dev/null >>"$S/e2e/campaign-down.log"
    sleep 1
  done
}

# The instances seen not running outside one of their own migration jobs. Ganeti's fake
# hypervisor marks a migrating instance down on the source before it marks it up on the target
# (FinalizeMigrationSource, then FinalizeMigrationDst), so a read during the job may see it
# down: that is the fake hypervisor, not an outage. Prints "OUTSIDE ..." lines and a summary.
campaign_downtime() { # FIRST-JOB-ID
  rapi GET "/2/jobs?bulk=1" | jq_py "
jobs = []
for j in d:
    if int(j['id']) <= $1: continue
    ts = lambda t: t[0] + t[1] / 1e6 if t else None
    for op in j.get('ops', []):
        if op.get('OP_ID') == 'OP_INSTANCE_MIGRATE':
            jobs.append((op.get('instance_name'), ts(j.get('start_ts')), ts(j.get('end_ts'))))
during = outside = 0
for line in open('$S/e2e/campaign-down.log'):
    t0, t1, name, status, pnode = line.split()
    t0, t1 = float(t0), float(t1)
    if any(n == name and s is not None and s <= t1 and (e is None or t0 <= e) for n, s, e in jobs):
        during += 1
    else:
        outside += 1
        print('OUTSIDE', name, status, pnode)
print(f'{during} read(s) during a migration job of the instance, {outside} outside')"
}

scenario_campaign() {
  local i n id ans code state k running_instances before after hooks bad killed=0 waitpid rc
  master_healthy S10
  log "S10 rolling maintenance campaign over every node"
  rm -f "$S"/e2e/reboot-request-* "$S"/e2e/reboot-done-* "$S/e2e/campaign-stop" \
    "$S/e2e/campaign-down.log" "$S/e2e/campaign-reboots.log"
  # Every node in service, every agent up and Ok, no incident active.
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    echo '{"status":"Ok","details":"e2e"}' >"$S/e2e/diag-$i"
    "$GNT/node-exec.sh" "$i" --stop "agent-$i" >/dev/null 2>&1 || true
    start_agent "$i" || log "S10: agent $i did not start"
    n=NODECARE_GNT_NODE${i}_NAME
    return_to_service "${!n}"
    root_var="NODECARE_GNT_NODE${i}_ROOT"
    # The hook: leaves a reboot request with the campaign context it got, exits at once.
    printf '#!/bin/sh\ncat > %s.tmp && mv %s.tmp %s\necho "reboot requested"\n' \
      "$S/e2e/reboot-context-$i" "$S/e2e/reboot-context-$i" "$S/e2e/reboot-request-$i" \
      >"${!root_var}/etc/ganeti/node-repair-commands/e2e-reboot"
    chmod 0755 "${!root_var}/etc/ganeti/node-repair-commands/e2e-reboot"
  done
  # Three racks: node1 and node2 in rack:a, node3 in rack:b, node4 and node5 in rack:c.
  local racks=(x rack:a rack:a rack:b rack:c rack:c)
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    n=NODECARE_GNT_NODE${i}_NAME
    wait_job "$(rapi PUT "/2/nodes/${!n}/tags?tag=${racks[i]:-rack:c}" | job_of)" >/dev/null
  done
  # A file instance cannot move: it is stopped for the campaign (a stopped instance stays where
  # it is), and started again at the end.
  local stopped
  stopped=$(rapi GET "/2/instances?bulk=1" | jq_py "print(' '.join(i['name'] for i in d if i['disk_template'] in ('file', 'plain') and i['admin_state'] == 'up'))")
  for n in $stopped; do
    wait_job "$(rapi PUT "/2/instances/$n/shutdown" | job_of)" >/dev/null
  done
  if ! wait_status 90 "not any(i.get('repair-status') in ('noted', 'pending') for i in d)"; then
    fail "S10 campaign" "precondition: incidents still active: $(coord /1/status | head -c 400)"
    return
  fi
  running_instances=$(rapi GET "/2/instances?bulk=1" | jq_py "print(' '.join(sorted(i['name'] for i in d if i['status'] == 'running')))")
  before=$(rapi GET "/2/instances?bulk=1" | jq_py "print(' '.join(sorted(i['name'] + '=' + i['pnode'] for i in d)))")
  local last_job
  last_job=$(rapi GET /2/jobs | jq_py "print(max([int(j['id']) for j in d] or [0]))")

  campaign_reboot_watcher &
  local reboot_pid=$!
  campaign_instance_watcher $running_instances &
  local watch_pid=$!

  ans=$(NODECARE_PASSWORD=e2e-secret "${NODECARE_E2E_CLI:-$ROOT/target/release/nodecare}" roll --execute --hook e2e-reboot \
    --healthy-timeout 5m --hook-timeout 2m --reason "e2e campaign" --user e2e \
    --url "http://127.0.0.1:$COORD_FWD" --json 2>&1)
  id=$(jq_py "print(d['id'])" <<<"$ans" 2>/dev/null)
  if [[ -z $id ]]; then
    fail "S10 campaign" "not started: $(head -c 400 <<<"$ans")"
    touch "$S/e2e/campaign-stop"
    wait "$reboot_pid" "$watch_pid" 2>/dev/null
    return
  fi
  log "S10 campaign $id: $(jq_py "print(len(d['groups']) + len(d['planned']), 'groups:', d['planned'])" <<<"$ans")"
  # The CLI follows it through the restart, and exits 0 only if it completes.
  "${NODECARE_E2E_CLI:-$ROOT/target/release/nodecare}" roll status "$id" --wait --interval 2 --url "http://127.0.0.1:$COORD_FWD" \
    >"$S/e2e/campaign-status.log" 2>&1 &
  waitpid=$!

  # Mid-group: once a node of the first group is in its hook or later, kill -9 the coordinator.
  for ((k = 0; k < 300; k++)); do
    state=$(coord "/1/maintenance/$id" | jq_py "
g = d['groups'][0]['nodes'] if d['groups'] else []
print(d['state'], ' '.join(n['step'] for n in g))" 2>/dev/null)
    if [[ $state =~ (hook|wait-healthy|undrain|migrate-back) ]]; then
      kill -KILL "$(<"$S/pids/bg-coordinator.pid")" 2>/dev/null && killed=1
      log "S10: coordinator killed (-9) while the first group was at: $state"
      sleep 1
      rm -f "$S/pids/bg-coordinator.pid"
      start_coordinator || log "S10: the coordinator did not start again"
      break
    fi
    [[ $state == running* || -z $state ]] || break
    sleep 0.5
  done

  # Up to 15 minutes for the whole campaign.
  for ((k = 0; k < 900; k++)); do
    kill -0 "$waitpid" 2>/dev/null || break
    if ((k % 20 == 19)); then master_healthy "S10 (after ${k}s of waiting)"; fi
    sleep 1
  done
  kill "$waitpid" 2>/dev/null
  wait "$waitpid"
  rc=$?
  touch "$S/e2e/campaign-stop"
  wait "$reboot_pid" "$watch_pid" 2>/dev/null

  state=$(coord "/1/maintenance/$id" | jq_py "print(d['state'])" 2>/dev/null)
  after=$(rapi GET "/2/instances?bulk=1" | jq_py "print(' '.join(sorted(i['name'] + '=' + i['pnode'] for i in d)))")
  hooks=""
  bad=""
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    n=$(find "$S/e2e" -maxdepth 1 -name "reboot-done-$i.*" | wc -l)
    hooks+=" node$i:$n"
    [[ $n == 1 ]] || bad+=" node$i ran its hook $n times;"
  done
  # Jobs since the campaign started: migrations per instance, drains per node.
  local counts
  counts=$(rapi GET "/2/jobs?bulk=1" | jq_py "
import collections
m = collections.Counter(); dr = collections.Counter()
for j in d:
    if int(j['id']) <= $last_job: continue
    for op in j.get('ops', []):
        if op.get('OP_ID') == 'OP_INSTANCE_MIGRATE': m[op.get('instance_name')] += 1
        if op.get('OP_ID') == 'OP_NODE_SET_PARAMS' and op.get('drained') is True: dr[op.get('node_name')] += 1
print('migrations', dict(m), 'drains', dict(dr))
print('TWICE' if any(v > 2 for v in m.values()) or any(v > 1 for v in dr.values()) else 'ok')" 2>&1)
  [[ $(tail -n 1 <<<"$counts") == ok ]] || bad+=" a job ran twice: $(head -n 1 <<<"$counts");"
  [[ $before == "$after" ]] || bad+=" primaries before '$before' after '$after';"
  local downtime
  touch "$S/e2e/campaign-down.log"
  downtime=$(campaign_downtime "$last_job" 2>&1)
  ! grep -q OUTSIDE <<<"$downtime" || bad+=" instances seen down outside their migrations: $(grep OUTSIDE <<<"$downtime" | head -n 3 | tr '\n' ' ');"
  [[ $killed == 1 ]] || bad+=" the coordinator was never killed mid-group;"
  [[ $state == completed && $rc == 0 ]] || bad+=" campaign $state, roll status --wait exit $rc: $(tail -n 5 "$S/e2e/campaign-status.log" | tr '\n' ' ');"
  # Every reboot group within one rack (planned with the coordinator's failure domains).
  local spans
  local rackmap=""
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    n=NODECARE_GNT_NODE${i}_NAME
    rackmap+=" ${!n}=${racks[i]:-rack:c}"
  done
  spans=$(coord "/1/maintenance/$id" | jq_py "
rack = dict(p.split('=', 1) for p in '$rackmap'.split())
groups = [[n['node'] for n in g['nodes']] for g in d['groups']]
bad = [g for g in groups if len({rack.get(n, '?') for n in g}) > 1]
print('groups', groups, 'SPANS' if bad or not groups else 'ok')" 2>&1)
  [[ $spans == *" ok" ]] || bad+=" a reboot group spans several racks (or none was read): $spans;"
  for n in $stopped; do
    wait_job "$(rapi PUT "/2/instances/$n/startup" | job_of)" >/dev/null
  done
  for ((i = 1; i <= NODECARE_GNT_NODES; i++)); do
    n=NODECARE_GNT_NODE${i}_NAME
    wait_job "$(rapi DELETE "/2/nodes/${!n}/tags?tag=${racks[i]:-rack:c}" | job_of)" >/dev/null
  done
  if [[ -z $bad ]]; then
    pass "S10 campaign $id over $NODECARE_GNT_NODES nodes completed across a kill -9 of the coordinator: reboot groups within one rack each (${spans% ok}), hooks ran once each ($hooks ), instances back on their primaries, none down but inside its own migration job (${running_instances// /,}: $(tail -n 1 <<<"$downtime")), $(head -n 1 <<<"$counts")"
  else
    fail "S10 campaign" "$bad"
  fi
}
