#!/usr/bin/env bash
# Health of a running cluster's private mounts and of the master's job daemons
# (ganeti-luxid, ganeti-wconfd), and repair when they fail.
#   master-daemons.sh check [--timeout S]   exit 0 when every node's private mounts are in place
#                                           and LUXI and wconfd answer inside the master node
#                                           within S seconds (default 5); otherwise says what is
#                                           wrong
#   master-daemons.sh diagnose              mounts, locks, lock waiters, job processes, stacks
#   master-daemons.sh heal [--reason TEXT]  mount detached private mounts again; then, if LUXI
#                                           or wconfd still do not answer, restart luxid (and
#                                           wconfd when it does not answer). Prints a WARN line
#                                           for each repair; exit 0 when healthy afterwards
#   master-daemons.sh master                print the index of the current master node
# Uses the cluster of NODECARE_GNT_STATE / NODECARE_GNT_PREFIX. The master is the node most
# nodes' ssconf_master_node names (it follows `gnt-cluster master-failover`, also one with
# --no-voting after the old master's daemons died).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

MASTER=$(current_master_index)
UDS=$HERE/uds-call.py

node_count() {
  local n=0
  while [[ -s $(node_dir $((n + 1)))/holder.pid ]]; do n=$((n + 1)); done
  echo "$n"
}

# Asked from inside the master node, through its own /run/ganeti, as Ganeti's clients do.
luxi_ok() { in_node "$MASTER" python3 "$UDS" --timeout "$1" /run/ganeti/socket/ganeti-query QueryClusterInfo >/dev/null; }
wconfd_ok() { in_node "$MASTER" python3 "$UDS" --timeout "$1" /run/ganeti/socket/ganeti-wconfd echo '["ping"]' >/dev/null; }

daemon_pid() { # NAME: PID from the master's pid file, if that process is alive in the master node
  local f pid
  f=$(node_dir "$MASTER")/root/run/ganeti/$1.pid
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  pid_alive "$pid" || return 1
  [[ $(ip netns identify "$pid" 2>/dev/null) == "$(ns_node "$MASTER")" ]] || return 1
  echo "$pid"
}

mounts_report() { # prints "node<i>: TARGET..." for every node with detached mounts
  local i missing
  for ((i = 1; i <= $(node_count); i++)); do
    missing=$(node_binds_missing "$i" | tr '\n' ' ')
    [[ -z $missing ]] || echo "node$i: ${missing% }"
  done
}

check() {
  local tmo=$1 rc=0 m
  m=$(mounts_report)
  [[ -z $m ]] || { echo "private mounts detached: ${m//$'\n'/; }"; rc=1; }
  local err
  err=$(luxi_ok "$tmo" 2>&1) || { echo "ganeti-luxid (LUXI) in node$MASTER: ${err:-no answer}"; rc=1; }
  err=$(wconfd_ok "$tmo" 2>&1) || { echo "ganeti-wconfd in node$MASTER: ${err:-no answer}"; rc=1; }
  return $rc
}

diagnose() {
  local name pid p cmdline mroot
  mroot=$(node_dir "$MASTER")/root
  echo "== $(date -u +%FT%TZ) cluster $STATE, master node$MASTER"
  echo "-- detached private mounts: $(mounts_report | tr '\n' ' ')"
  for name in ganeti-luxid ganeti-wconfd; do
    if pid=$(daemon_pid "$name"); then
      echo "-- $name pid $pid: $(ls "/proc/$pid/task" | wc -l) thread(s), state $(awk '{print $3}' "/proc/$pid/stat")"
      cat "/proc/$pid/stack" 2>/dev/null | head -4 || true
      ls -l "/proc/$pid/fd" 2>/dev/null | sed -n 's/.* \([0-9]* -> .*\)/   fd \1/p' || true
    else
      echo "-- $name: not running"
    fi
  done
  echo "-- listen queues (Recv-Q = connections not accepted yet)"
  in_node "$MASTER" ss -xl 2>/dev/null | grep -E 'ganeti-(query|wconfd)' || true
  echo "-- lock owners and waiters (wconfd)"
  in_node "$MASTER" python3 "$UDS" --timeout 3 /run/ganeti/socket/ganeti-wconfd listLocksWaitingStatus 2>&1 || true
  echo "-- job processes"
  for p in $(ip netns pids "$(ns_node "$MASTER")" 2>/dev/null); do
    cmdline=$({ tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null) || continue
    if [[ $cmdline == *jqueue/exec.py* ]]; then
      echo "pid $p age $(ps -o etimes= -p "$p" | tr -d ' ')s: $cmdline"
    fi
  done
  echo "-- last lines of luxi-daemon.log, wconf-daemon.log, jobs.log"
  tail -n 8 "$mroot/var/log/ganeti/luxi-daemon.log" "$mroot/var/log/ganeti/wconf-daemon.log" \
    "$mroot/var/log/ganeti/jobs.log" 2>/dev/null || true
}

remount() { # mounts every detached private mount of every node again
  local i dst src hpid
  local -a missing
  for ((i = 1; i <= $(node_count); i++)); do
    mapfile -t missing < <(node_binds_missing "$i")
    [[ ${#missing[@]} -gt 0 ]] || continue
    hpid=$(holder_pid "$i")
    while IFS=$'\t' read -r src dst; do
      [[ " ${missing[*]} " == *" $dst "* ]] || continue
      # The mount point in the root filesystem may be gone too (that is what detaches a mount).
      if [[ -d $src ]]; then
        mkdir -p "$dst"
        [[ -e $dst/$MOUNTPOINT_MARKER ]] || : >"$dst/$MOUNTPOINT_MARKER"
      fi
      nsenter -t "$hpid" -m -- mount --bind "$src" "$dst"
    done < <(node_binds "$i")
    echo "WARN private mounts of node$i were detached and are mounted again: ${missing[*]} (a mount-point directory was removed in the root namespace)" >&2
  done
}

# Stops the daemon if it runs and removes its pid file either way: daemon-util refuses to start
# a daemon over a stale pid file of another user ("start-stop-daemon: matching only on non-root
# pidfile ... is insecure"), which a daemon killed with SIGKILL leaves behind.
stop_daemon() {
  local name=$1 pid
  if pid=$(daemon_pid "$name"); then
    kill "$pid" 2>/dev/null || true
    wait_gone "$pid" 100 || { kill -KILL "$pid" 2>/dev/null || true; wait_gone "$pid" 20 || true; }
  fi
  rm -f "$(node_dir "$MASTER")/root/run/ganeti/$name.pid"
}

heal() {
  local reason=$1 log k
  mkdir -p "$STATE/logs"
  log=$STATE/logs/master-heal-$(date +%s).log
  diagnose >"$log" 2>&1 || true
  if [[ -n $(mounts_report) ]]; then
    remount
    # Clients retry their connections: give them a moment before judging the daemons.
    for ((k = 0; k < 20; k++)); do check 2 >/dev/null && break; sleep 0.5; done
  fi
  if ! check 5 >/dev/null; then
    local restart_wconfd=0
    wconfd_ok 5 2>/dev/null || restart_wconfd=1
    echo "WARN ganeti master daemons restarted (Ganeti 3.0.2 luxid stopped answering): $reason; state before in $log" >&2
    stop_daemon ganeti-luxid
    if [[ $restart_wconfd -eq 1 ]]; then
      stop_daemon ganeti-wconfd
      in_node "$MASTER" /usr/lib/ganeti/daemon-util start ganeti-wconfd >>"$log" 2>&1
    fi
    in_node "$MASTER" /usr/lib/ganeti/daemon-util start ganeti-luxid >>"$log" 2>&1
  fi
  for ((k = 0; k < 50; k++)); do
    if check 2 >/dev/null; then
      echo "-- healthy at $(date -u +%FT%TZ)" >>"$log"
      return 0
    fi
    sleep 0.2
  done
  echo "ERROR cluster still unhealthy after repair: $(check 2 | tr '\n' ' ')(see $log)" >&2
  return 1
}

usage() { sed -n '2,16p' "$0" >&2; exit 2; }
require_root
[[ $# -ge 1 ]] || usage
cmd=$1
shift
case $cmd in
  check)
    tmo=5
    if [[ ${1:-} == --timeout ]]; then [[ ${2:-} =~ ^[0-9]+$ ]] || usage; tmo=$2; fi
    check "$tmo"
    ;;
  diagnose) diagnose ;;
  master) echo "$MASTER" ;;
  heal)
    reason=unhealthy
    if [[ ${1:-} == --reason ]]; then [[ -n ${2:-} ]] || usage; reason=$2; fi
    heal "$reason"
    ;;
  *) usage ;;
esac
