# shellcheck shell=bash
# Helpers shared by the end-to-end scripts on the real cluster (run.sh, its scenarios and
# tests/nemesis/run.sh). Sourced after the cluster's env file; they read at call time:
# NODECARE_GNT_RAPI_URL, NODECARE_GNT_RAPI_USER, RAPI_PW (RAPI), GNT, S, AGENT, AGENT_INTERVAL.

# One RAPI request as the cluster's RAPI user; prints the answer's body.
rapi() { # METHOD PATH [BODY]
  local m=$1 p=$2 data=()
  shift 2
  [[ $# -eq 0 ]] || data=(--data "$1")
  curl -sk -m 30 -u "$NODECARE_GNT_RAPI_USER:$RAPI_PW" -H 'Content-Type: application/json' -X "$m" \
    "${data[@]}" "$NODECARE_GNT_RAPI_URL$p"
}
jq_py() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }

# The agent of node IDX on <node-ip>:1815 (diagnose script e2e-state, state in $S/e2e).
start_agent() { # NODE-INDEX
  local ip_var="NODECARE_GNT_NODE${1}_IP" name_var="NODECARE_GNT_NODE${1}_NAME"
  "$GNT/node-exec.sh" "$1" --bg "agent-$1" "$AGENT" --listen "${!ip_var}:1815" --node-name "${!name_var}" \
    --hmac-key /var/lib/ganeti/hmac.key --state-dir "$S/e2e/agent-state-$1" \
    --diagnose-dir /etc/ganeti/node-diagnose-commands --diagnose-interval-secs "$AGENT_INTERVAL" \
    --boot-id-path "$S/e2e/boot_id-$1" --log info >/dev/null
}

node_json() { rapi GET "/2/nodes/$1"; }
wait_job() { # JOB-ID [SECONDS]
  local id=$1 secs=${2:-120} st k
  [[ -n $id ]] || { echo "not submitted"; return 0; }
  for ((k = 0; k < secs; k++)); do
    st=$(rapi GET "/2/jobs/$id" | jq_py "print(d.get('status', ''))" 2>/dev/null)
    case $st in success | error | canceled) echo "$st"; return 0 ;; esac
    sleep 1
  done
  echo "timeout"
}
job_of() { jq_py "print(d)" 2>/dev/null | tr -dc '0-9'; }

# Tags maintd:/rack: removed, then online and undrained (each job awaited).
return_to_service() { # NODE
  local n=$1 tag id
  for tag in $(node_json "$n" | jq_py "print(' '.join(t for t in d['tags'] if t.startswith(('maintd:', 'rack:'))))"); do
    id=$(rapi DELETE "/2/nodes/$n/tags?tag=$tag" | job_of)
    wait_job "$id" >/dev/null
  done
  if [[ $(node_json "$n" | jq_py "print(d['offline'])") == True ]]; then
    id=$(rapi POST "/2/nodes/$n/modify" '{"offline": false}' | job_of)
    wait_job "$id" 180 >/dev/null
  fi
  if [[ $(node_json "$n" | jq_py "print(d['drained'])") == True ]]; then
    id=$(rapi POST "/2/nodes/$n/modify" '{"drained": false}' | job_of)
    wait_job "$id" >/dev/null
  fi
}

# A dead master, as `gnt-cluster master-failover --no-voting` expects one: node IDX's Ganeti
# master daemons (rapi, luxid, wconfd) and noded killed (SIGKILL, only those in its network
# namespace; their pid files removed, as daemon-util refuses to start a daemon over a stale pid
# file of another user) and its cluster IP removed, as a dead host loses it.
gnt_kill_master() { # NODE-INDEX
  local r ns_var="NODECARE_GNT_NODE${1}_NETNS" root_var="NODECARE_GNT_NODE${1}_ROOT" d pid
  r=${!root_var}/run/ganeti
  for d in ganeti-rapi ganeti-luxid ganeti-wconfd ganeti-noded; do
    pid=$(cat "$r/$d.pid" 2>/dev/null)
    [[ -n $pid && $(ip netns identify "$pid" 2>/dev/null) == "${!ns_var}" ]] && kill -KILL "$pid"
    rm -f "$r/$d.pid"
  done
  "$GNT/node-exec.sh" "$1" ip addr del "$NODECARE_GNT_CLUSTER_IP/32" dev eth0 2>/dev/null || true
}
# `gnt-cluster master-failover --no-voting --yes-do-it` in node IDX; its output on stdout.
gnt_failover_no_voting() { # NODE-INDEX
  "$GNT/node-exec.sh" "$1" gnt-cluster master-failover --no-voting --yes-do-it 2>&1
}
# The old master of a --no-voting failover back as a working non-master node: its noded
# started, the configuration redistributed from the new master.
gnt_rejoin_old_master() { # OLD-INDEX MASTER-INDEX
  "$GNT/node-exec.sh" "$1" /usr/lib/ganeti/daemon-util start ganeti-noded >/dev/null 2>&1 || true
  "$GNT/node-exec.sh" "$2" gnt-cluster redist-conf >/dev/null 2>&1 || true
}
