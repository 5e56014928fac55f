#!/usr/bin/env bash
# Run a command inside node i's network, mount and UTS namespaces.
#   node-exec.sh <node-index> CMD [ARGS...]
#       foreground; exit status and stdio are the command's
#   node-exec.sh <node-index> --bg NAME CMD [ARGS...]
#       background, detached; stdout+stderr go to $STATE/logs/bg-NAME.log,
#       the PID is written to $STATE/pids/bg-NAME.pid and printed.
#       cluster-down.sh kills it (it lives in the node's network namespace).
#   node-exec.sh <node-index> --stop NAME
#       stop a background command started with --bg NAME (TERM, then KILL).
# The working directory is kept (paths are the same inside a node, except the
# privately mounted Ganeti directories listed in README.md).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() { echo "usage: $0 <node-index> [--bg NAME | --stop NAME] CMD [ARGS...]" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
idx=$1
shift
[[ $idx =~ ^[0-9]+$ && $idx -ge 1 ]] || die "bad node index '$idx'"
require_root
hpid=$(holder_pid "$idx")
# The command starts in the current directory when the node sees it (a node running another
# Debian root sees only the paths cluster-up.sh shares with it), else in /.
wd=$PWD
[[ -d /proc/$hpid/root$PWD ]] || wd=/

case $1 in
  --bg)
    [[ $# -ge 3 ]] || usage
    name=$2
    shift 2
    [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad name '$name' (letters, digits, . _ -)"
    mkdir -p "$STATE/logs" "$STATE/pids"
    pidf="$STATE/pids/bg-$name.pid"
    if [[ -s $pidf ]] && pid_alive "$(<"$pidf")"; then
      die "a background command named '$name' is already running (pid $(<"$pidf"))"
    fi
    # nsenter and setsid exec the command, so $! is the command's own PID.
    nsenter -t "$hpid" -n -m -u --wd="$wd" -- setsid "$@" </dev/null >>"$STATE/logs/bg-$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$pidf"
    sleep 0.05
    pid_alive "$pid" || die "'$*' exited at once; see $STATE/logs/bg-$name.log"
    echo "$pid"
    ;;
  --stop)
    [[ $# -eq 2 ]] || usage
    pidf="$STATE/pids/bg-$2.pid"
    [[ -s $pidf ]] || die "no background command named '$2'"
    pid=$(<"$pidf")
    if [[ $(ip netns identify "$pid" 2>/dev/null) == "$(ns_node "$idx")" ]]; then
      kill "$pid" 2>/dev/null || true
      wait_gone "$pid" 20 || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidf"
    ;;
  *)
    exec nsenter -t "$hpid" -n -m -u --wd="$wd" -- "$@"
    ;;
esac
