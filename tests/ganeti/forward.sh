#!/usr/bin/env bash
# Forward 127.0.0.1:<local-port> in the root namespace to <port> of node i
# (or of the cluster IP with "cluster"), without adding anything to the root
# network namespace: a socat in our client namespace listens on a unix socket
# under the state dir and connects to the node; a socat in the root namespace
# listens on loopback and connects to that socket.
#   forward.sh <node-index|cluster> <port> <local-port>
#   forward.sh --stop <local-port>
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() { echo "usage: $0 <node-index|cluster> <port> <local-port> | --stop <local-port>" >&2; exit 2; }

stop_forward() {
  local lport=$1 f pid
  for f in "$STATE"/pids/fwd-*-"$lport"-{out,in}.pid; do
    [[ -e $f ]] || continue
    pid=$(<"$f")
    if pid_is_ours "$pid"; then kill "$pid" 2>/dev/null || true; fi
    rm -f "$f"
  done
  rm -f "$STATE"/fwd/*-"$lport".sock
}

require_root
[[ $# -ge 1 ]] || usage
if [[ $1 == --stop ]]; then
  [[ $# -eq 2 && $2 =~ ^[0-9]+$ ]] || usage
  stop_forward "$2"
  exit 0
fi
[[ $# -eq 3 ]] || usage
target=$1 port=$2 lport=$3
[[ $port =~ ^[0-9]+$ && $port -ge 1 && $port -le 65535 ]] || die "bad port '$port'"
[[ $lport =~ ^[0-9]+$ && $lport -ge 1 && $lport -le 65535 ]] || die "bad local port '$lport'"
if [[ $target == cluster ]]; then
  ip=$CLUSTER_IP
elif [[ $target =~ ^[0-9]+$ && $target -ge 1 ]]; then
  [[ -d $(node_dir "$target") ]] || die "node $target does not exist in $STATE"
  ip=$(node_ip "$target")
else
  die "bad target '$target' (a node index or 'cluster')"
fi
ip netns list | grep -qw "^$(ns_client)" || die "client namespace $(ns_client) missing (is the cluster up?)"
command -v socat >/dev/null || die "socat not installed (run install-packages.sh)"

stop_forward "$lport"
if ss -Hltn "src 127.0.0.1:$lport" 2>/dev/null | grep -q .; then
  die "127.0.0.1:$lport is already in use by another program"
fi
mkdir -p "$STATE/fwd" "$STATE/pids" "$STATE/logs"
name="$target-$port-$lport"
sock="$STATE/fwd/$name.sock"
ip netns exec "$(ns_client)" setsid socat "UNIX-LISTEN:$sock,fork,unlink-early,mode=600" "TCP:$ip:$port" \
  </dev/null >>"$STATE/logs/fwd-$name.log" 2>&1 &
echo $! >"$STATE/pids/fwd-$name-in.pid"
for _ in $(seq 50); do [[ -S $sock ]] && break; sleep 0.05; done
[[ -S $sock ]] || die "inner forwarder for $ip:$port did not start (see $STATE/logs/fwd-$name.log)"
setsid socat "TCP-LISTEN:$lport,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$sock" \
  </dev/null >>"$STATE/logs/fwd-$name.log" 2>&1 &
outer=$!
echo "$outer" >"$STATE/pids/fwd-$name-out.pid"
for _ in $(seq 50); do
  ss -Hltn "src 127.0.0.1:$lport" 2>/dev/null | grep -q . && break
  pid_alive "$outer" || break
  sleep 0.05
done
if ! pid_alive "$outer" || ! ss -Hltn "src 127.0.0.1:$lport" | grep -q .; then
  stop_forward "$lport"
  die "could not listen on 127.0.0.1:$lport (see $STATE/logs/fwd-$name.log)"
fi
echo "127.0.0.1:$lport -> $ip:$port"
