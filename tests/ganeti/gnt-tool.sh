#!/usr/bin/env bash
# Run a Ganeti program (hroller, harep, hbal, gnt-*, python3 with Ganeti's modules, …) of the
# running cluster's release: the machine's own (Ganeti 3.0.2), or, for a cluster whose nodes run
# another Debian root (cluster-up.sh with NODECARE_GNT_VERSION=3.1), that root's, inside node 1
# (which sees /tmp, /work, the state dir and this checkout at the same paths as the machine).
#   gnt-tool.sh CMD [ARGS...]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
[[ $# -ge 1 ]] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
if [[ -n $(cluster_gnt_root) ]]; then exec "$HERE/node-exec.sh" 1 "$@"; fi
exec "$@"
