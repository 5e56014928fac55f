#!/usr/bin/env bash
# Bring up a real Ganeti cluster whose nodes are Linux namespaces on this
# machine: the machine's own Ganeti 3.0.2 (Debian 12), or, with
# NODECARE_GNT_VERSION=3.1 (or NODECARE_GNT_ROOT=<dir>), the Ganeti of another
# Debian root (make-root.sh: Debian 13's Ganeti 3.1) that every node mounts as
# its root. See README.md for the layout and the env file it writes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

usage() {
  cat >&2 <<EOF
usage: $0 [--nodes N] [--instances SPEC|none] [--mond|--no-mond] [--install]
  --nodes N         number of nodes (1..$MAX_NODES, default 3)
  --instances SPEC  comma-separated name:template:node-index
                    (templates diskless, file, sharedfile; default below)
  --no-mond         (default) stop ganeti-mond on every node, so port 1815 of
                    each node is free for another monitoring agent
  --mond            keep Ganeti's own ganeti-mond running on every node
  --install         run install-packages.sh first
Environment: NODECARE_GNT_STATE (default /tmp/nodecare-ganeti),
NODECARE_GNT_PREFIX (netns prefix, default ncg), NODECARE_GNT_RAPI_PORT (5080),
NODECARE_GNT_MOND_FWD_BASE (18150: node i's 1815 is on 127.0.0.1:base+i),
NODECARE_GNT_VERSION (3.0: the machine's packages; 3.1: Debian 13's, in a root
made by make-root.sh) or NODECARE_GNT_ROOT (a root of Ganeti packages to use).
EOF
  exit 2
}

NODES=3
INSTANCES=default
KEEP_MOND=0
INSTALL=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --nodes) [[ $# -ge 2 ]] || usage; NODES=$2; shift 2 ;;
    --nodes=*) NODES=${1#*=}; shift ;;
    --instances) [[ $# -ge 2 ]] || usage; INSTANCES=$2; shift 2 ;;
    --instances=*) INSTANCES=${1#*=}; shift ;;
    --mond) KEEP_MOND=1; shift ;;
    --no-mond) KEEP_MOND=0; shift ;;
    --install) INSTALL=1; shift ;;
    -h|--help) usage ;;
    *) echo "$0: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ $NODES =~ ^[0-9]+$ && $NODES -ge 1 && $NODES -le $MAX_NODES ]] || die "--nodes must be 1..$MAX_NODES (got '$NODES')"

# Default instance set: two diskless on node2 (migratable), one sharedfile on
# node2 (migratable), one file (not relocatable), and diskless elsewhere.
if [[ $INSTANCES == default ]]; then
  INSTANCES="inst1:diskless:1,inst2:diskless:2,inst3:diskless:2,inst4:sharedfile:2,inst5:file:3,inst6:diskless:3"
fi
INST_SPECS=()
if [[ $INSTANCES != none && -n $INSTANCES ]]; then
  IFS=, read -r -a INST_SPECS <<<"$INSTANCES"
fi
for spec in "${INST_SPECS[@]}"; do
  [[ $spec =~ ^[a-z][a-z0-9-]*:(diskless|file|sharedfile):[0-9]+$ ]] ||
    die "bad instance spec '$spec' (want name:diskless|file|sharedfile:node-index)"
done

require_root
T0=$(now_ms)
# GROOT: the Debian root whose Ganeti every node runs; empty for the machine's own.
GROOT=$NODECARE_GNT_ROOT
if [[ -z $GROOT ]]; then
  case ${NODECARE_GNT_VERSION:-3.0} in
    3.0 | 3.0.*) ;;
    3.1 | 3.1.*) GROOT=$("$HERE/make-root.sh" trixie) || die "could not make the Debian 13 root" ;;
    *) die "NODECARE_GNT_VERSION must be 3.0 or 3.1 (got '$NODECARE_GNT_VERSION')" ;;
  esac
fi
if [[ -n $GROOT ]]; then
  [[ $GROOT == /* && -d $GROOT ]] || die "NODECARE_GNT_ROOT '$GROOT' is not an absolute path to a directory"
  for bin in usr/sbin/gnt-cluster usr/sbin/ganeti-noded usr/sbin/sshd usr/bin/ssh usr/bin/python3; do
    [[ -x $GROOT/$bin ]] || die "$GROOT/$bin missing: make the root with $HERE/make-root.sh"
  done
  [[ -e $GROOT/usr/share/ganeti/os/noop ]] || die "ganeti-os-noop missing in $GROOT"
  for bin in socat nsenter unshare ip curl openssl ssh-keygen pivot_root; do
    command -v "$bin" >/dev/null || die "$bin not found: run $HERE/install-packages.sh (or pass --install)"
  done
else
  if [[ $INSTALL -eq 1 ]]; then "$HERE/install-packages.sh"; fi
  for bin in gnt-cluster gnt-node gnt-instance /usr/sbin/ganeti-noded /usr/sbin/sshd socat nsenter unshare ip curl openssl ssh-keygen; do
    command -v "$bin" >/dev/null || die "$bin not found: run $HERE/install-packages.sh (or pass --install)"
  done
  [[ -e /usr/share/ganeti/os/noop || -e /srv/ganeti/os/noop ]] || die "ganeti-os-noop missing: run install-packages.sh"
fi
check_state_dir

# Clean up any previous (possibly failed) run of the same state dir/prefix.
"$HERE/cluster-down.sh" --quiet

on_error() {
  local rc=$?
  log "FAILED (exit $rc) after $(( ($(now_ms) - T0) / 1000 )) s; logs are in $STATE/logs and $STATE/nodes/*/log"
  log "the partial cluster is left running for inspection; cluster-down.sh removes it"
  exit "$rc"
}
trap on_error ERR

step() { log "[$(( $(now_ms) - T0 ))ms] $*"; }

mkdir -p "$STATE"
touch "$STATE/$STATE_MARKER"
mkdir -p "$STATE/pids" "$STATE/logs" "$STATE/fwd" "$STATE/ssh" "$STATE/shared-file-storage"
chmod 700 "$STATE"

if [[ -n $GROOT ]]; then
  echo "$GROOT" >"$GNT_ROOT_FILE"
  # What the nodes see at the same paths as the machine: /tmp and /work (the binaries and
  # scripts run inside nodes), the state dir and this checkout, and NODECARE_GNT_SHARED_PATHS
  # (space-separated). Each is bound once, below none of the others.
  REPO=$(cd "$HERE/../.." && pwd)
  SHARED=()
  for p in /tmp /work "$STATE" "$REPO" ${NODECARE_GNT_SHARED_PATHS:-}; do
    [[ $p == /* && -d $p ]] || continue
    dup=0
    for q in "${SHARED[@]}"; do [[ $p == "$q" || $p == "$q"/* ]] && dup=1; done
    [[ $dup -eq 1 ]] || SHARED+=("$p")
  done
else
  # Mount points that must exist in the root filesystem for the private binds; the marker file
  # keeps every rmdir from removing them (and so from detaching the nodes' mounts): see lib.sh.
  for d in "${NODE_BIND_DIRS[@]}"; do
    mkdir -p "$d"
    [[ -e $d/$MOUNTPOINT_MARKER ]] || : >"$d/$MOUNTPOINT_MARKER"
  done
fi
[[ -f $GROOT/etc/default/ganeti ]] || die "$GROOT/etc/default/ganeti missing: is the ganeti package installed?"

step "keys"
ssh-keygen -q -t ed25519 -N '' -C "nodecare-test-host" -f "$STATE/ssh/ssh_host_ed25519_key"
ssh-keygen -q -t rsa -b 2048 -N '' -C "nodecare-test-host" -f "$STATE/ssh/ssh_host_rsa_key"
ssh-keygen -q -t rsa -b 2048 -N '' -C "root@nodecare-test" -f "$STATE/ssh/id_rsa"
RAPI_USER=nodecare
head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$STATE/rapi-password"
chmod 600 "$STATE/rapi-password"
RAPI_PASSWORD=$(<"$STATE/rapi-password")

# Hosts file shared by every node (and the client namespace).
{
  echo "127.0.0.1 localhost"
  echo "$CLUSTER_IP $(cluster_name) cluster"
  for ((i = 1; i <= NODES; i++)); do echo "$(node_ip "$i") $(node_name "$i") $(node_short "$i")"; done
  k=0
  for spec in "${INST_SPECS[@]}"; do
    echo "$NET_PREFIX.$((150 + k)) ${spec%%:*}.$DOMAIN"
    k=$((k + 1))
  done
} >"$STATE/hosts"
echo "options attempts:1 timeout:1" >"$STATE/resolv.conf"

step "network namespaces"
BR_NS=$(ns_bridge)
CL_NS=$(ns_client)
ip netns add "$BR_NS"
ip -n "$BR_NS" link set lo up
ip -n "$BR_NS" link add br0 type bridge
ip -n "$BR_NS" link set br0 up
ip netns add "$CL_NS"
ip -n "$CL_NS" link set lo up
ip -n "$BR_NS" link add vcl type veth peer name eth0 netns "$CL_NS"
ip -n "$BR_NS" link set vcl master br0 up
ip -n "$CL_NS" addr add "$CLIENT_IP/24" dev eth0
ip -n "$CL_NS" link set eth0 up
for ((i = 1; i <= NODES; i++)); do
  ns=$(ns_node "$i")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$BR_NS" link add "v$i" type veth peer name eth0 netns "$ns"
  ip -n "$BR_NS" link set "v$i" master br0 up
  ip -n "$ns" addr add "$(node_ip "$i")/24" dev eth0
  ip -n "$ns" link set eth0 up
  # Ganeti's default NIC link; instances of the fake hypervisor plug into it.
  ip -n "$ns" link add xen-br0 type bridge
  ip -n "$ns" link set xen-br0 up
done

step "node trees and holders"
for ((i = 1; i <= NODES; i++)); do
  nd=$(node_dir "$i")
  mkdir -p "$nd/log"
  for d in "${NODE_BIND_DIRS[@]}"; do mkdir -p "$nd/root$d"; done
  cp -a "$GROOT/etc/ganeti/." "$nd/root/etc/ganeti/"
  cp -a "$GROOT/var/lib/ganeti/." "$nd/root/var/lib/ganeti/" 2>/dev/null || true
  rm -f "$nd/root/etc/ganeti/$MOUNTPOINT_MARKER" "$nd/root/var/lib/ganeti/$MOUNTPOINT_MARKER"
  printf '%s\n' /srv/ganeti/file-storage /srv/ganeti/shared-file-storage >"$nd/root/etc/ganeti/file-storage-paths"
  mkdir -p "$nd/root/srv/ganeti/file-storage" "$nd/root/srv/ganeti/shared-file-storage"
  # sshd: Debian's config, shared host keys, our root key.
  cp "$GROOT/etc/ssh/sshd_config" "$GROOT/etc/ssh/ssh_config" "$nd/root/etc/ssh/"
  [[ -e $GROOT/etc/ssh/moduli ]] && cp "$GROOT/etc/ssh/moduli" "$nd/root/etc/ssh/"
  cp "$STATE"/ssh/ssh_host_* "$nd/root/etc/ssh/"
  chmod 600 "$nd"/root/etc/ssh/ssh_host_*_key
  cp "$STATE/ssh/id_rsa" "$STATE/ssh/id_rsa.pub" "$nd/root/root/.ssh/"
  cp "$STATE/ssh/id_rsa.pub" "$nd/root/root/.ssh/authorized_keys"
  chmod 700 "$nd/root/root/.ssh"
  chmod 600 "$nd/root/root/.ssh/id_rsa" "$nd/root/root/.ssh/authorized_keys"
  chmod 755 "$nd/root/run/sshd"
  chmod 1777 "$nd/root/run/lock"
  # Daemon arguments: RAPI on every address of the node, with authentication.
  sed -e 's/^RAPI_ARGS=.*/RAPI_ARGS="--require-authentication"/' "$GROOT/etc/default/ganeti" >"$nd/default-ganeti"
  grep -q '^RAPI_ARGS=' "$nd/default-ganeti" || echo 'RAPI_ARGS="--require-authentication"' >>"$nd/default-ganeti"

  if [[ -z $GROOT ]]; then
    {
      echo 'set -e'
      node_binds "$i" | while IFS=$'\t' read -r src dst; do echo "mount --bind '$src' '$dst'"; done
      echo "hostname '$(node_name "$i")'"
      echo "touch '$nd/ready'"
      echo 'exec sleep infinity'
    } >"$nd/holder.sh"
  else
    # The node's root: an overlay whose lower layer is GROOT (never written) and whose upper
    # layer is the node's own; /proc, /dev, the network namespace's /sys, the shared paths and
    # the node's private binds mounted in it; then pivot_root, so that every process entering
    # the mount namespace (nsenter -m) runs the root's programs and libraries.
    mkdir -p "$nd/upper" "$nd/ovl-work" "$nd/merged"
    {
      echo 'set -e'
      echo "r='$nd/merged'"
      echo "mount -t overlay overlay -o 'lowerdir=$GROOT,upperdir=$nd/upper,workdir=$nd/ovl-work' \"\$r\""
      echo 'mount -t proc proc "$r/proc"'
      echo 'mount --rbind /dev "$r/dev"'
      echo 'mount --rbind /sys "$r/sys"'
      for p in "${SHARED[@]}"; do echo "mkdir -p \"\$r$p\" && mount --bind '$p' \"\$r$p\""; done
      node_binds "$i" | while IFS=$'\t' read -r src dst; do
        if [[ -d $src ]]; then echo "mkdir -p \"\$r$dst\""; else echo "[ -e \"\$r$dst\" ] || : >\"\$r$dst\""; fi
        echo "mount --bind '$src' \"\$r$dst\""
      done
      echo 'mkdir -p "$r/.oldroot"'
      echo 'cd "$r"'
      echo 'pivot_root . .oldroot'
      echo 'cd /'
      echo 'umount -l /.oldroot'
      echo "hostname '$(node_name "$i")'"
      echo "touch '$nd/ready'"
      echo 'exec sleep infinity'
    } >"$nd/holder.sh"
  fi
  rm -f "$nd/ready"
  # ip netns exec gives the holder a sysfs of its network namespace; unshare
  # adds private mount and UTS namespaces (propagation private: nothing leaks).
  ip netns exec "$(ns_node "$i")" setsid unshare --mount --uts --propagation private \
    /bin/sh "$nd/holder.sh" </dev/null >"$nd/log/holder.log" 2>&1 &
  echo $! >"$nd/holder.pid"
done
for ((i = 1; i <= NODES; i++)); do
  nd=$(node_dir "$i")
  for _ in $(seq 100); do [[ -e $nd/ready ]] && break; sleep 0.05; done
  [[ -e $nd/ready ]] || die "holder of node $i did not start: $(cat "$nd/log/holder.log")"
  [[ $(in_node "$i" hostname) == "$(node_name "$i")" ]] || die "node $i has the wrong hostname"
done

step "sshd"
for ((i = 1; i <= NODES; i++)); do
  nd=$(node_dir "$i")
  nsenter -t "$(holder_pid "$i")" -n -m -u -- setsid /usr/sbin/sshd -D -E /var/log/ganeti/sshd.log \
    -o "ListenAddress=$(node_ip "$i")" -o PasswordAuthentication=no -o UseDNS=no \
    </dev/null >"$nd/log/sshd.out" 2>&1 &
  echo $! >"$nd/sshd.pid"
done
SSH_OPTS=(-o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 -o LogLevel=ERROR)
for ((i = 1; i <= NODES; i++)); do
  ok=0
  for _ in $(seq 50); do
    if in_node 1 ssh "${SSH_OPTS[@]}" "root@$(node_name "$i")" true 2>/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  [[ $ok -eq 1 ]] || die "ssh from node1 to node$i fails; see $(node_dir "$i")/root/var/log/ganeti/sshd.log"
done

step "ensure-dirs"
for ((i = 1; i <= NODES; i++)); do in_node "$i" /usr/lib/ganeti/ensure-dirs; done

step "gnt-cluster init"
in_node 1 gnt-cluster init --no-ssh-init --no-etc-hosts --master-netdev=eth0 \
  --enabled-hypervisors=fake --enabled-disk-templates=diskless,file,sharedfile \
  --ipolicy-disk-templates=diskless,file,sharedfile \
  --file-storage-dir=/srv/ganeti/file-storage \
  --shared-file-storage-dir=/srv/ganeti/shared-file-storage \
  "$(cluster_name)" >"$STATE/logs/cluster-init.log" 2>&1 ||
  die "gnt-cluster init failed: $(tail -20 "$STATE/logs/cluster-init.log")"

write_rapi_users() {
  local i=$1
  in_node "$i" sh -c "printf '%s %s write\n' '$RAPI_USER' '$RAPI_PASSWORD' >/var/lib/ganeti/rapi/users &&
    chown gnt-rapi:gnt-masterd /var/lib/ganeti/rapi/users && chmod 640 /var/lib/ganeti/rapi/users"
}
write_rapi_users 1

step "collectors"
in_node 1 gnt-cluster modify --enabled-data-collectors=diskstats=false,drbd=false \
  >"$STATE/logs/cluster-modify.log" 2>&1 || die "gnt-cluster modify failed: $(tail -20 "$STATE/logs/cluster-modify.log")"

for ((i = 2; i <= NODES; i++)); do
  step "gnt-node add node$i"
  in_node 1 gnt-node add --no-ssh-key-check "$(node_name "$i")" >"$STATE/logs/node-add-$i.log" 2>&1 ||
    die "gnt-node add node$i failed: $(tail -20 "$STATE/logs/node-add-$i.log")"
  in_node "$i" /usr/lib/ganeti/daemon-util start ganeti-confd
  write_rapi_users "$i"
done

if [[ ${#INST_SPECS[@]} -gt 0 ]]; then
  step "instances"
  # Submit all creations in parallel (each gnt-* start costs a Python start
  # up) and wait for the jobs together; the jobs themselves run concurrently.
  jobs_file="$STATE/logs/instance-jobs"
  : >"$jobs_file"
  submit_pids=()
  k=0
  for spec in "${INST_SPECS[@]}"; do
    IFS=: read -r iname tmpl nidx <<<"$spec"
    nidx=$(( (nidx - 1) % NODES + 1 ))
    disk_args=()
    if [[ $tmpl != diskless ]]; then disk_args=(--disk 0:size=1G); fi
    in_node 1 gnt-instance add --submit -t "$tmpl" "${disk_args[@]}" -o noop \
      -n "$(node_name "$nidx")" --no-name-check --no-ip-check \
      -B memory=128M,vcpus=1 "$iname.$DOMAIN" >"$STATE/logs/instance-add-$k.log" 2>&1 &
    submit_pids+=($!)
    k=$((k + 1))
  done
  k=0
  for spec in "${INST_SPECS[@]}"; do
    iname=${spec%%:*}
    wait "${submit_pids[$k]}" || die "gnt-instance add $iname failed: $(cat "$STATE/logs/instance-add-$k.log")"
    jid=$(grep -oE '[0-9]+' "$STATE/logs/instance-add-$k.log" | tail -1)
    [[ -n $jid ]] || die "gnt-instance add $iname printed no job id: $(cat "$STATE/logs/instance-add-$k.log")"
    echo "$jid $iname" >>"$jobs_file"
    k=$((k + 1))
  done
  mapfile -t jids < <(cut -d' ' -f1 "$jobs_file")
  for jid in "${jids[@]}"; do in_node 1 gnt-job wait "$jid" >/dev/null 2>&1 || true; done
  job_status=$(in_node 1 gnt-job list --no-headers -o id,status "${jids[@]}")
  while read -r jid iname; do
    st=$(awk -v j="$jid" '$1 == j {print $2}' <<<"$job_status")
    [[ $st == success ]] || die "creating instance $iname (job $jid) ended '$st': $(in_node 1 gnt-job info "$jid" 2>&1 | tail -20)"
  done <"$jobs_file"
fi

if [[ $KEEP_MOND -eq 0 ]]; then
  step "stopping ganeti-mond on every node (port 1815 left free)"
  for ((i = 1; i <= NODES; i++)); do
    pidf="$(node_dir "$i")/root/run/ganeti/ganeti-mond.pid"
    if [[ -s $pidf ]]; then
      mpid=$(<"$pidf")
      if [[ $(ip netns identify "$mpid" 2>/dev/null) == "$(ns_node "$i")" ]]; then kill "$mpid" 2>/dev/null || true; fi
      wait_gone "$mpid" 20 || kill -KILL "$mpid" 2>/dev/null || true
      rm -f "$pidf"
    fi
  done
fi

# The Ganeti release the nodes run, e.g. 3.0.2 or 3.1.0~rc2 (as RAPI's /2/info software_version).
GNT_SOFTWARE_VERSION=$(in_node 1 gnt-cluster --version 2>/dev/null | awk 'NR == 1 {print $NF}')

step "forwards and env file"
"$HERE/forward.sh" cluster 5080 "$NODECARE_GNT_RAPI_PORT" >/dev/null
for ((i = 1; i <= NODES; i++)); do
  "$HERE/forward.sh" "$i" 1815 "$((NODECARE_GNT_MOND_FWD_BASE + i))" >/dev/null
done
n1=$(node_dir 1)/root
openssl x509 -in "$n1/var/lib/ganeti/rapi.pem" -out "$STATE/rapi-cert.pem"
cp "$n1/var/lib/ganeti/hmac.key" "$STATE/hmac.key"
chmod 600 "$STATE/hmac.key"
# The cluster certificate has no subject alternative names; its CN is what a
# client must expect (curl --resolve CN:port:127.0.0.1) or it must pin the key.
RAPI_CERT_CN=$(openssl x509 -in "$STATE/rapi-cert.pem" -noout -subject -nameopt multiline | sed -n 's/^ *commonName *= *//p')
RAPI_CERT_SHA256=$(openssl x509 -in "$STATE/rapi-cert.pem" -noout -fingerprint -sha256 | sed 's/.*=//; s/://g' | tr 'A-F' 'a-f')
RAPI_PUBKEY_PIN=$(openssl x509 -in "$STATE/rapi-cert.pem" -noout -pubkey | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64)

{
  q() { printf '%s=%q\n' "$1" "$2"; }
  q NODECARE_GNT_STATE "$STATE"
  q NODECARE_GNT_PREFIX "$PFX"
  q NODECARE_GNT_DOMAIN "$DOMAIN"
  q NODECARE_GNT_NODES "$NODES"
  names=() ips=() pids=()
  for ((i = 1; i <= NODES; i++)); do
    names+=("$(node_name "$i")"); ips+=("$(node_ip "$i")"); pids+=("$(holder_pid "$i")")
    q "NODECARE_GNT_NODE${i}_NAME" "$(node_name "$i")"
    q "NODECARE_GNT_NODE${i}_IP" "$(node_ip "$i")"
    q "NODECARE_GNT_NODE${i}_PID" "$(holder_pid "$i")"
    q "NODECARE_GNT_NODE${i}_NETNS" "$(ns_node "$i")"
    q "NODECARE_GNT_NODE${i}_ROOT" "$(node_dir "$i")/root"
    q "NODECARE_GNT_NODE${i}_MOND_FWD" "127.0.0.1:$((NODECARE_GNT_MOND_FWD_BASE + i))"
  done
  q NODECARE_GNT_NODE_NAMES "${names[*]}"
  q NODECARE_GNT_NODE_IPS "${ips[*]}"
  q NODECARE_GNT_HOLDER_PIDS "${pids[*]}"
  q NODECARE_GNT_MASTER "$(node_name 1)"
  q NODECARE_GNT_MASTER_INDEX 1
  q NODECARE_GNT_CLUSTER_NAME "$(cluster_name)"
  q NODECARE_GNT_CLUSTER_IP "$CLUSTER_IP"
  q NODECARE_GNT_CLIENT_NETNS "$CL_NS"
  q NODECARE_GNT_RAPI_URL "https://127.0.0.1:$NODECARE_GNT_RAPI_PORT"
  q NODECARE_GNT_RAPI_USER "$RAPI_USER"
  q NODECARE_GNT_RAPI_PASSWORD_FILE "$STATE/rapi-password"
  q NODECARE_GNT_RAPI_CERT "$STATE/rapi-cert.pem"
  q NODECARE_GNT_RAPI_CERT_CN "$RAPI_CERT_CN"
  q NODECARE_GNT_RAPI_CERT_SHA256 "$RAPI_CERT_SHA256"
  q NODECARE_GNT_RAPI_PUBKEY_PIN "sha256//$RAPI_PUBKEY_PIN"
  q NODECARE_GNT_HMAC_KEY "$STATE/hmac.key"
  q NODECARE_GNT_LUXI_SOCKET "$(node_dir 1)/root/run/ganeti/socket/ganeti-query"
  q NODECARE_GNT_MOND_FWD_BASE "$NODECARE_GNT_MOND_FWD_BASE"
  q NODECARE_GNT_MOND_RUNNING "$KEEP_MOND"
  q NODECARE_GNT_ROOT "$GROOT"
  q NODECARE_GNT_SOFTWARE_VERSION "$GNT_SOFTWARE_VERSION"
  inames=()
  for spec in "${INST_SPECS[@]}"; do inames+=("${spec%%:*}.$DOMAIN"); done
  q NODECARE_GNT_INSTANCES "${inames[*]}"
} >"$ENV_FILE.tmp"
mv "$ENV_FILE.tmp" "$ENV_FILE"

step "checking RAPI from the root namespace"
ok=0
for _ in $(seq 50); do
  if curl -sf --cacert "$STATE/rapi-cert.pem" --resolve "$RAPI_CERT_CN:$NODECARE_GNT_RAPI_PORT:127.0.0.1" \
    -u "$RAPI_USER:$RAPI_PASSWORD" "https://$RAPI_CERT_CN:$NODECARE_GNT_RAPI_PORT/2/info" >/dev/null 2>&1; then
    ok=1
    break
  fi
  sleep 0.2
done
[[ $ok -eq 1 ]] || die "RAPI does not answer on 127.0.0.1:$NODECARE_GNT_RAPI_PORT"

trap - ERR
log "cluster up: $NODES nodes, ${#INST_SPECS[@]} instances in $(( ($(now_ms) - T0) / 1000 )).$(( ($(now_ms) - T0) % 1000 / 100 )) s; env file $ENV_FILE"
echo "$ENV_FILE"
