#!/usr/bin/env bash
# End-to-end check of the namespace cluster: up, RAPI over HTTPS with auth
# from the root namespace, nodes/instances, confd, LUXI, a program of ours in
# a node reached through the forward, one live migration, down. Prints timings.
#   smoke.sh [--keep] [cluster-up.sh options...]
#     --keep  leave the cluster running (cluster-down.sh removes it)
# shellcheck disable=SC2153 # NODECARE_GNT_* come from cluster.env
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"

KEEP=0
UP_ARGS=()
for a in "$@"; do
  if [[ $a == --keep ]]; then KEEP=1; else UP_ARGS+=("$a"); fi
done
require_root

PASS=0 FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

on_exit() {
  local rc=$?
  if [[ $rc -ne 0 && $KEEP -eq 0 ]]; then
    echo "smoke: failed (exit $rc); tearing down, logs kept in $NODECARE_GNT_STATE" >&2
    "$HERE/cluster-down.sh" --keep-state --quiet || true
  fi
}
trap on_exit EXIT

T_ALL=$(now_ms)
T=$(now_ms)
"$HERE/cluster-up.sh" "${UP_ARGS[@]}" >/dev/null
UP_MS=$(( $(now_ms) - T ))
echo "cluster-up: ${UP_MS} ms"

# shellcheck disable=SC1090,SC1091
. "$NODECARE_GNT_STATE/cluster.env"
N=$NODECARE_GNT_NODES
PW=$(<"$NODECARE_GNT_RAPI_PASSWORD_FILE")
CN=$NODECARE_GNT_RAPI_CERT_CN
PORT=${NODECARE_GNT_RAPI_URL##*:}
BASE="https://$CN:$PORT"
# Verify against the cluster certificate itself: resolve its CN to 127.0.0.1.
rapi() {
  local method=$1 path=$2
  shift 2
  curl -sS --fail-with-body -m 30 --cacert "$NODECARE_GNT_RAPI_CERT" --resolve "$CN:$PORT:127.0.0.1" \
    -u "$NODECARE_GNT_RAPI_USER:$PW" -X "$method" -H 'Content-Type: application/json' "$@" "$BASE$path"
}
json() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

T=$(now_ms)
info=$(rapi GET /2/info)
check "RAPI /2/info with --cacert (name $(json 'd["name"]' <<<"$info"))" \
  test "$(json 'd["name"]' <<<"$info")" = "$NODECARE_GNT_CLUSTER_NAME"
check "RAPI with -k and pinned public key" \
  curl -sSf -m 10 -k --pinnedpubkey "$NODECARE_GNT_RAPI_PUBKEY_PIN" -u "$NODECARE_GNT_RAPI_USER:$PW" \
  -o /dev/null "$NODECARE_GNT_RAPI_URL/2/info"
code=$(curl -s -m 10 -k -o /dev/null -w '%{http_code}' "$NODECARE_GNT_RAPI_URL/2/nodes")
check "RAPI without credentials is 401 (got $code)" test "$code" = 401
nodes=$(rapi GET /2/nodes | json 'len(d)')
check "RAPI lists $nodes nodes (want $N)" test "$nodes" = "$N"
want_inst=$(wc -w <<<"$NODECARE_GNT_INSTANCES")
insts=$(rapi GET '/2/instances?bulk=1')
ninst=$(json 'len(d)' <<<"$insts")
check "RAPI lists $ninst instances (want $want_inst)" test "$ninst" = "$want_inst"
running=$(json 'sum(1 for i in d if i["status"] == "running")' <<<"$insts")
check "all instances running ($running)" test "$running" = "$want_inst"
echo "rapi checks: $(( $(now_ms) - T )) ms"

T=$(now_ms)
ips=()
for ((i = 1; i <= N; i++)); do v="NODECARE_GNT_NODE${i}_IP"; ips+=("${!v}"); done
check "confd answers a signed ping on every node" \
  ip netns exec "$NODECARE_GNT_CLIENT_NETNS" /usr/bin/python3 "$HERE/confd-query.py" \
  --key "$NODECARE_GNT_HMAC_KEY" --type 0 "${ips[@]}" >/dev/null
master=$(ip netns exec "$NODECARE_GNT_CLIENT_NETNS" /usr/bin/python3 "$HERE/confd-query.py" \
  --key "$NODECARE_GNT_HMAC_KEY" --type 3 "${ips[$((N - 1))]}" | json 'd["reply"]["answer"]')
check "confd of node$N names the master ($master)" test "$master" = "$NODECARE_GNT_MASTER"
gm=$("$HERE/node-exec.sh" "$N" gnt-cluster getmaster)
check "gnt-cluster getmaster in node$N ($gm)" test "$gm" = "$NODECARE_GNT_MASTER"
[[ $N -lt 2 ]] || check "hroller over LUXI from the root namespace" bash -c "'$HERE/gnt-tool.sh' hroller -L'$NODECARE_GNT_LUXI_SOCKET' >/dev/null 2>&1"
echo "confd/luxi checks: $(( $(now_ms) - T )) ms"

if [[ $NODECARE_GNT_MOND_RUNNING == 0 ]]; then
  T=$(now_ms)
  # A program of ours on node N's IP, port 1815, reached via the forward.
  ipv="NODECARE_GNT_NODE${N}_IP"
  fwd="NODECARE_GNT_NODE${N}_MOND_FWD"
  "$HERE/node-exec.sh" "$N" --bg smoke-agent socat "TCP-LISTEN:1815,bind=${!ipv},fork,reuseaddr" \
    SYSTEM:"echo hello-from-\$(hostname)" >/dev/null
  got=""
  for _ in $(seq 40); do
    got=$(timeout 2 bash -c "cat </dev/tcp/${!fwd%:*}/${!fwd##*:}" 2>/dev/null || true)
    [[ -n $got ]] && break
    sleep 0.05
  done
  check "our listener in node$N answers through ${!fwd} ($got)" test "$got" = "hello-from-node$N.$NODECARE_GNT_DOMAIN"
  "$HERE/node-exec.sh" "$N" --stop smoke-agent
  echo "agent forward check: $(( $(now_ms) - T )) ms"
fi

if [[ $N -ge 2 ]]; then
  T=$(now_ms)
  # First diskless instance: live-migrate it to the next node.
  read -r inst pnode < <(json '" ".join(next([i["name"], i["pnode"]] for i in d if i["disk_template"] == "diskless"))' <<<"$insts")
  target=""
  for ((i = 1; i <= N; i++)); do
    v="NODECARE_GNT_NODE${i}_NAME"
    if [[ ${!v} != "$pnode" ]]; then target=${!v}; break; fi
  done
  jid=$(rapi PUT "/2/instances/$inst/migrate" -d "{\"mode\":\"live\",\"target_node\":\"$target\"}")
  status=""
  for _ in $(seq 300); do
    status=$(rapi GET "/2/jobs/$jid" | json 'd["status"]')
    [[ $status == success || $status == error || $status == canceled ]] && break
    sleep 0.2
  done
  check "migrate job $jid of $inst ended $status" test "$status" = success
  now=$(rapi GET "/2/instances/$inst" | json 'd["pnode"]')
  check "$inst moved $pnode -> $now" test "$now" = "$target"
  echo "migration: $(( $(now_ms) - T )) ms"
fi

DOWN_MS=0
if [[ $KEEP -eq 0 ]]; then
  T=$(now_ms)
  "$HERE/cluster-down.sh" --quiet
  DOWN_MS=$(( $(now_ms) - T ))
  echo "cluster-down: ${DOWN_MS} ms"
  left=$(ip netns list | awk '{print $1}' | grep -cE "^$NODECARE_GNT_PREFIX-(br|cl|n[0-9]+)\$" || true)
  check "no namespaces left ($left)" test "$left" = 0
  check "state dir removed" test ! -e "$NODECARE_GNT_STATE"
  check "nothing listens on the RAPI forward" bash -c "! ss -Hltn 'src 127.0.0.1:$PORT' | grep -q ."
fi

echo "timings: up ${UP_MS} ms, down ${DOWN_MS} ms, total $(( $(now_ms) - T_ALL )) ms"
echo "$PASS passed, $FAIL failed"
[[ $FAIL -eq 0 ]]
