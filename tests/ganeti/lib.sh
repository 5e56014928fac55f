# shellcheck shell=bash disable=SC2034
# Shared settings and helpers for the namespace Ganeti cluster scripts.
# Sourced, never executed. Every name that leaves this machine's root
# namespace untouched is derived from NODECARE_GNT_STATE and NODECARE_GNT_PREFIX.

NODECARE_GNT_STATE=${NODECARE_GNT_STATE:-/tmp/nodecare-ganeti}
# Prefix of every network namespace we create (ip netns list shows them).
NODECARE_GNT_PREFIX=${NODECARE_GNT_PREFIX:-ncg}
NODECARE_GNT_DOMAIN=${NODECARE_GNT_DOMAIN:-nodecare.test}
# Loopback ports in the root namespace: RAPI, and base+i for port 1815 of node i.
NODECARE_GNT_RAPI_PORT=${NODECARE_GNT_RAPI_PORT:-5080}
NODECARE_GNT_MOND_FWD_BASE=${NODECARE_GNT_MOND_FWD_BASE:-18150}

STATE=$NODECARE_GNT_STATE
PFX=$NODECARE_GNT_PREFIX
DOMAIN=$NODECARE_GNT_DOMAIN
STATE_MARKER=.nodecare-ganeti-state
ENV_FILE=$STATE/cluster.env

# 198.18.0.0/24 (RFC 2544 benchmark range) exists only inside our namespaces.
NET_PREFIX=198.18.0
CLIENT_IP=$NET_PREFIX.2
CLUSTER_IP=$NET_PREFIX.100
MAX_NODES=40

# Directories bind-mounted privately in every node, from $STATE/nodes/<i>/<name>.
# /run/lock (= /var/lock) holds Ganeti's ssconf lock, which must not be shared between nodes.
NODE_BIND_DIRS=(/var/lib/ganeti /run/ganeti /var/log/ganeti /etc/ganeti /etc/ssh /root/.ssh /srv /run/sshd /run/lock)

# A file left in each mount-point directory of the root namespace. Removing a directory that
# is a mount point in another mount namespace detaches that mount there (Linux >= 3.18): one
# `rmdir /run/ganeti` (another cluster's teardown, a package purge) would silently cut every
# node of every running cluster off its sockets, pid files and livelocks. rmdir fails on a
# directory that is not empty, so the marker keeps them in place; nothing removes them.
MOUNTPOINT_MARKER=.nodecare-ganeti-mountpoint

# Another Debian root whose Ganeti the nodes run instead of the machine's own 3.0.2 (each node
# mounts it as the lower layer of an overlay of its own and pivots into it; see cluster-up.sh):
# NODECARE_GNT_ROOT=<dir>, or NODECARE_GNT_VERSION=3.1 for tests/ganeti/make-root.sh's trixie root.
NODECARE_GNT_ROOT=${NODECARE_GNT_ROOT:-}
NODECARE_GNT_VERSION=${NODECARE_GNT_VERSION:-}
# Where cluster-up.sh records the root the running cluster's nodes use (absent: the machine's).
GNT_ROOT_FILE=$STATE/gnt-root

SCRIPT_NAME=${SCRIPT_NAME:-$(basename "$0")}

die() { echo "$SCRIPT_NAME: error: $*" >&2; exit 1; }
log() { echo "$SCRIPT_NAME: $*" >&2; }

require_root() { [[ $(id -u) -eq 0 ]] || die "must run as root (namespaces and mounts need it)"; }

ns_bridge() { echo "$PFX-br"; }
ns_client() { echo "$PFX-cl"; }
ns_node() { echo "$PFX-n$1"; }
node_name() { echo "node$1.$DOMAIN"; }
node_short() { echo "node$1"; }
node_ip() { echo "$NET_PREFIX.$((10 + $1))"; }
node_dir() { echo "$STATE/nodes/$1"; }
cluster_name() { echo "cluster.$DOMAIN"; }

# Holder PID of node i: the process whose namespaces are the node.
holder_pid() {
  local f
  f="$(node_dir "$1")/holder.pid"
  [[ -s $f ]] || die "node $1 has no holder (is the cluster up? state $STATE)"
  local pid
  pid=$(<"$f")
  [[ -d /proc/$pid ]] || die "holder $pid of node $1 is gone (run cluster-down.sh, then cluster-up.sh)"
  [[ $(ip netns identify "$pid" 2>/dev/null) == "$(ns_node "$1")" ]] ||
    die "pid $pid is not in namespace $(ns_node "$1") (stale state? run cluster-down.sh)"
  echo "$pid"
}

# The Debian root the running cluster's nodes use; empty for the machine's own.
cluster_gnt_root() { cat "$GNT_ROOT_FILE" 2>/dev/null || true; }

# Run a command inside node i's network, mount and UTS namespaces.
in_node() {
  local i=$1
  shift
  local pid
  pid=$(holder_pid "$i")
  nsenter -t "$pid" -n -m -u -- "$@"
}

# True while the process exists and is not a zombie (PID 1 of this machine
# reaps orphans only every second or so, and kill -0 succeeds on zombies).
pid_alive() {
  local st
  st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $st && $st != Z && $st != X ]]
}

# Wait up to $2 tenths of a second (default 20) for a process to end.
wait_gone() {
  local n=${2:-20} k
  for ((k = 0; k < n * 2; k++)); do pid_alive "$1" || return 0; sleep 0.05; done
  return 1
}

# True when the PID is alive and its command line mentions the state dir,
# so a recycled PID is never taken for one of ours.
pid_is_ours() {
  local pid=$1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  pid_alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE"
}

# Check that the state dir is ours (or absent/empty) before deleting in it.
check_state_dir() {
  [[ $STATE == /* ]] || die "NODECARE_GNT_STATE must be an absolute path (got '$STATE')"
  [[ $STATE != / ]] || die "NODECARE_GNT_STATE must not be /"
  if [[ -d $STATE && ! -e $STATE/$STATE_MARKER ]] && [[ -n $(ls -A "$STATE" 2>/dev/null) ]]; then
    die "$STATE exists, is not empty and was not made by these scripts; choose another NODECARE_GNT_STATE"
  fi
}

now_ms() { date +%s%3N; }

# Index of the current master: the node named by most nodes' ssconf_master_node (a node whose
# Ganeti daemons were killed keeps naming itself after a `master-failover --no-voting` elsewhere,
# so one file alone may be stale; Ganeti's own voting asks every node the same way). Falls back
# to node 1 when no node has the file yet (during cluster-up.sh).
current_master_index() {
  local i f name best="" count=0
  local -A votes=()
  for ((i = 1; i <= MAX_NODES; i++)); do
    [[ -d $(node_dir "$i") ]] || break
    f=$(node_dir "$i")/root/var/lib/ganeti/ssconf_master_node
    [[ -s $f ]] || continue
    name=$(<"$f")
    votes[$name]=$((${votes[$name]:-0} + 1))
    if ((votes[$name] > count)); then best=$name count=${votes[$name]}; fi
  done
  if [[ $best =~ ^node([0-9]+)\. ]]; then echo "${BASH_REMATCH[1]}"; else echo 1; fi
}

# The private mounts of node i, one "SOURCE<TAB>TARGET" line each, in mount order.
node_binds() {
  local nd d
  nd=$(node_dir "$1")
  for d in "${NODE_BIND_DIRS[@]}"; do printf '%s\t%s\n' "$nd/root$d" "$d"; done
  printf '%s\t%s\n' "$STATE/shared-file-storage" /srv/ganeti/shared-file-storage \
    "$nd/default-ganeti" /etc/default/ganeti "$STATE/hosts" /etc/hosts "$STATE/resolv.conf" /etc/resolv.conf
}

# Prints the targets of node i's private mounts that are not in place any more (the target
# inside the node is not the source file or directory), one per line.
node_binds_missing() {
  local i=$1 src dst
  local -a srcs=() dsts=()
  while IFS=$'\t' read -r src dst; do srcs+=("$src"); dsts+=("$dst"); done < <(node_binds "$i")
  local want have
  # One line per file, "-" when it cannot be seen, so both lists stay aligned.
  local each='for f; do stat -c %d:%i "$f" 2>/dev/null || echo -; done'
  want=$(sh -c "$each" sh "${srcs[@]}")
  have=$(in_node "$i" sh -c "$each" sh "${dsts[@]}") || true
  local -a w h
  mapfile -t w <<<"$want"
  mapfile -t h <<<"$have"
  local k
  for k in "${!dsts[@]}"; do
    [[ ${w[$k]:--} != - && ${w[$k]} == "${h[$k]:-}" ]] || echo "${dsts[$k]}"
  done
}
