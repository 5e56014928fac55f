#!/usr/bin/env bash
# Runs a nodecare daemon of the nemesis (tests/nemesis/run.sh) under libfaketime, with the clock
# file of its node: a clock jump writes an offset there ("+600", "-90": seconds), "+0" is the
# true time. Only CLOCK_REALTIME moves (DONT_FAKE_MONOTONIC=1, as a real NTP step: the daemons'
# timers run on the monotonic clock); each daemon reads the file again after 1 s at most
# (FAKETIME_CACHE_DURATION). The process keeps this script's PID (exec).
#
#   faketime-exec.sh LIBFAKETIME CLOCK-DIR --plain|--stamp BIN ARGS...   (ARGS hold --node-name N)
#
# --stamp: each line the daemon writes (stdout and stderr) is prefixed with the true UTC time
# ("@2026-11-27T03:17:12.512Z "), so that its log's times stay usable whatever its clock says.
set -euo pipefail
[[ $# -ge 4 ]] || { echo "usage: $0 LIBFAKETIME CLOCK-DIR --plain|--stamp BIN ARGS..." >&2; exit 2; }
lib=$1 dir=$2 mode=$3
shift 3
[[ -r $lib ]] || { echo "faketime-exec: $lib missing" >&2; exit 2; }
node="" prev=""
for a in "$@"; do
  [[ $prev == --node-name ]] && node=$a
  prev=$a
done
[[ -n $node ]] || { echo "faketime-exec: no --node-name in: $*" >&2; exit 2; }
mkdir -p "$dir"
[[ -s $dir/$node ]] || echo "+0" >"$dir/$node"
case $mode in
  --plain) ;;
  --stamp)
    # Not under libfaketime: started before LD_PRELOAD is set.
    exec > >(exec python3 -u -c '
import sys, time
while True:
    line = sys.stdin.readline()
    if not line:
        break
    t = time.time()
    sys.stdout.write("@%s.%03dZ %s" % (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)), int(t * 1000) % 1000, line))
    sys.stdout.flush()
') 2>&1
    ;;
  *) echo "faketime-exec: bad mode $mode" >&2; exit 2 ;;
esac
export LD_PRELOAD=$lib FAKETIME_TIMESTAMP_FILE=$dir/$node FAKETIME_CACHE_DURATION=1 DONT_FAKE_MONOTONIC=1
exec "$@"
