#!/usr/bin/env bash
# Tear down what cluster-up.sh started for this state dir and prefix:
# every process in our network namespaces, our root-namespace forwarders,
# the namespaces, the mount points we had to create, and the state dir.
# Idempotent; safe after a failed or partial run.
#   cluster-down.sh [--keep-state] [--quiet]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

KEEP_STATE=0
QUIET=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --keep-state) KEEP_STATE=1 ;;
    --quiet) QUIET=1 ;;
    *) echo "usage: $0 [--keep-state] [--quiet]" >&2; exit 2 ;;
  esac
  shift
done
require_root
check_state_dir
T0=$(now_ms)

our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PFX-(br|cl|n[0-9]+)\$" || true
}

# Processes in our namespaces, plus recorded root-namespace forwarders.
collect_pids() {
  local ns f pid
  for ns in $(our_namespaces); do ip netns pids "$ns" 2>/dev/null || true; done
  if [[ -d $STATE/pids ]]; then
    for f in "$STATE"/pids/*.pid; do
      [[ -e $f ]] || continue
      pid=$(<"$f")
      if pid_is_ours "$pid"; then echo "$pid"; fi
    done
  fi
}

killed=0
for sig in TERM KILL KILL; do
  pids=$(collect_pids | sort -u | grep -vx "$$" || true)
  [[ -n $pids ]] || break
  # shellcheck disable=SC2086
  kill "-$sig" $pids 2>/dev/null || true
  killed=1
  for _ in $(seq 10); do
    [[ -n $(collect_pids) ]] || break
    sleep 0.05
  done
done
left=$(collect_pids | sort -u || true)
[[ -z $left ]] || die "processes still alive after SIGKILL: $left"

for ns in $(our_namespaces); do
  ip netns del "$ns" || die "could not delete namespace $ns"
done

# The mount-point directories in the root namespace stay (with their marker, see lib.sh):
# removing one would detach that mount in every node of every other running cluster.

if [[ $KEEP_STATE -eq 0 && -e $STATE/$STATE_MARKER ]]; then
  rm -rf "$STATE"
elif [[ -d $STATE ]]; then
  rm -f "$STATE/cluster.env" "$STATE"/pids/*.pid "$STATE"/fwd/*.sock
fi

if [[ $QUIET -eq 0 || $killed -eq 1 ]]; then
  log "cluster down in $(( $(now_ms) - T0 )) ms"
fi
