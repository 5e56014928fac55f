#!/usr/bin/env bash
# Run Debian's real ganeti-mond 3.0.2 on 127.0.0.1:PORT without a cluster,
# in a scratch tree (GANETI_ROOTDIR), for field-by-field comparisons.
#
#   mond-loopback.sh start PORT [--confd-stub[=NAME,NAME...]] [--warm]
#   mond-loopback.sh stop PORT
#   mond-loopback.sh status PORT
#
# Without --confd-stub, mond has no confd to ask (empty master-candidate
# list): it fails open and serves all six collectors, and /1/report/all is a
# 500 (see README.md for the per-collector results).
# With --confd-stub, a small signed confd responder (confd-stub.py) on a
# private loopback address tells mond which collectors are active (default
# cpu-avg-load,xen-cpu-avg-load,lv): /1/report/all then answers 200.
# --warm waits (about 5 s) until cpu-avg-load has real data.
# Prints "MOND_URL=http://127.0.0.1:PORT" and "MOND_ROOT=<scratch tree>".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SCRIPT_NAME=mond-loopback.sh
# shellcheck source=lib.sh
. "$HERE/lib.sh"

MOND_STATE=${NODECARE_GNT_MOND_STATE:-/tmp/nodecare-ganeti-mond}
# So pid_is_ours recognises processes by their scratch-tree paths.
STATE=$MOND_STATE

usage() {
  echo "usage: $0 start PORT [--confd-stub[=NAME,...]] [--warm] | stop PORT | status PORT" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
action=$1 port=$2
shift 2
[[ $port =~ ^[0-9]+$ && $port -ge 1024 && $port -le 65535 ]] || die "bad port '$port' (1024..65535)"
ROOT=$MOND_STATE/$port

stop_one() {
  local f pid
  for f in "$ROOT/mond.pid" "$ROOT/confd-stub.pid"; do
    [[ -s $f ]] || continue
    pid=$(<"$f")
    if pid_alive "$pid" && grep -qE 'ganeti-mond|confd-stub' "/proc/$pid/cmdline" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait_gone "$pid" 30 || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

case $action in
  stop)
    [[ $# -eq 0 ]] || usage
    stop_one
    [[ -d $ROOT && -e $ROOT/.nodecare-mond-root ]] && rm -rf "$ROOT"
    rmdir "$MOND_STATE" 2>/dev/null || true
    exit 0
    ;;
  status)
    if [[ -s $ROOT/mond.pid ]] && pid_alive "$(<"$ROOT/mond.pid")"; then
      echo "running (pid $(<"$ROOT/mond.pid"))"
      exit 0
    fi
    echo "not running"
    exit 1
    ;;
  start) ;;
  *) usage ;;
esac

STUB=0
WARM=0
ACTIVE=cpu-avg-load,xen-cpu-avg-load,lv
while [[ $# -gt 0 ]]; do
  case $1 in
    --confd-stub) STUB=1 ;;
    --confd-stub=*) STUB=1; ACTIVE=${1#*=} ;;
    --warm) WARM=1 ;;
    *) usage ;;
  esac
  shift
done
[[ $ACTIVE =~ ^[a-z-]+(,[a-z-]+)*$ ]] || die "bad collector list '$ACTIVE'"

[[ -x /usr/sbin/ganeti-mond ]] || die "/usr/sbin/ganeti-mond missing: run $HERE/install-packages.sh"
command -v curl >/dev/null || die "curl missing: run $HERE/install-packages.sh"
[[ $MOND_STATE == /* ]] || die "NODECARE_GNT_MOND_STATE must be an absolute path"

# Restart cleanly if a previous instance on this port is around.
stop_one
if ss -Hltn "src 127.0.0.1:$port" 2>/dev/null | grep -q .; then
  die "127.0.0.1:$port is already in use by another program"
fi
[[ ! -e $ROOT || -e $ROOT/.nodecare-mond-root ]] || die "$ROOT exists and was not made by this script"
rm -rf "$ROOT"
mkdir -p "$ROOT/var/log/ganeti" "$ROOT/var/run/ganeti" "$ROOT/var/lib/ganeti" "$ROOT/etc/ganeti"
touch "$ROOT/.nodecare-mond-root"
# mond refuses to start without a cluster HMAC key and a master-candidate list.
(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo) >"$ROOT/var/lib/ganeti/hmac.key"
chmod 600 "$ROOT/var/lib/ganeti/hmac.key"

if [[ $STUB -eq 1 ]]; then
  # A loopback address of its own per port (lo owns all of 127.0.0.0/8), so
  # the stub's UDP 1814 never collides with anything else on this machine.
  stub_ip="127.18.$(((port >> 8) & 255)).$((port & 255))"
  echo "$stub_ip" >"$ROOT/var/lib/ganeti/ssconf_master_candidates_ips"
  setsid /usr/bin/python3 "$HERE/confd-stub.py" --key "$ROOT/var/lib/ganeti/hmac.key" \
    --bind "$stub_ip" --active "$ACTIVE" </dev/null >"$ROOT/confd-stub.log" 2>&1 &
  echo $! >"$ROOT/confd-stub.pid"
  for _ in $(seq 100); do grep -q '^confd stub on' "$ROOT/confd-stub.log" 2>/dev/null && break; sleep 0.05; done
  grep -q '^confd stub on' "$ROOT/confd-stub.log" || die "confd stub did not start: $(cat "$ROOT/confd-stub.log")"
else
  : >"$ROOT/var/lib/ganeti/ssconf_master_candidates_ips"
fi

GANETI_ROOTDIR=$ROOT setsid /usr/sbin/ganeti-mond -f -p "$port" -b 127.0.0.1 </dev/null >"$ROOT/mond.log" 2>&1 &
echo $! >"$ROOT/mond.pid"
mpid=$(<"$ROOT/mond.pid")
ok=0
for _ in $(seq 100); do
  if curl -sf -m 2 "http://127.0.0.1:$port/" >/dev/null 2>&1; then ok=1; break; fi
  pid_alive "$mpid" || break
  sleep 0.1
done
if [[ $ok -eq 0 ]]; then
  stop_one
  die "ganeti-mond did not come up on 127.0.0.1:$port: $(tail -5 "$ROOT/mond.log")"
fi
if [[ $STUB -eq 1 ]]; then
  # mond asks confd at start and then every 15 s; wait until the list shows
  # exactly the configured collectors.
  want=$(tr ',' '\n' <<<"$ACTIVE" | sort | tr '\n' ' ')
  ok=0
  for _ in $(seq 60); do
    got=$(curl -sf -m 12 "http://127.0.0.1:$port/1/list/collectors" | grep -oE '\["[a-z-]+"' | tr -d '["' | sort | tr '\n' ' ' || true)
    if [[ $got == "$want" ]]; then ok=1; break; fi
    sleep 0.5
  done
  [[ $ok -eq 1 ]] || die "mond did not take the stub's collector configuration (lists: $got; see $ROOT/confd-stub.log)"
fi
if [[ $WARM -eq 1 ]]; then
  # cpu-avg-load reports an "error" object until its second sample (~5 s).
  for _ in $(seq 150); do
    curl -sf -m 2 "http://127.0.0.1:$port/1/report/default/cpu-avg-load" | grep -q '"cpu_number"' && break
    sleep 0.1
  done
fi
echo "MOND_URL=http://127.0.0.1:$port"
echo "MOND_ROOT=$ROOT"
