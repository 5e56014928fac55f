#!/usr/bin/env bash
# The job filters of docs/ganeti-filters.md, and Ganeti's regular expressions in filters, on the
# running namespace cluster (NODECARE_GNT_STATE; Ganeti 3.0.2 or 3.1). Each filter is added
# with gnt-filter on the master, a tag job is submitted through RAPI with nodecare's reason (or
# an older build's), and the job's state is read 6 s later; the filter is then deleted (the
# held job runs). Ganeti 3.0.2 (Debian 12) is built with PCRE, 3.1 (Debian 13) with regex-tdfa
# (POSIX): a PCRE-only pattern matches on the first, matches nothing or is refused on the
# second; the documented filters use no regular expression and behave the same on both.
# Prints `N passed, N failed`; exit 1 when a check failed. Uses node1's tags only.
#   filters-compat.sh
# shellcheck disable=SC2153 # NODECARE_GNT_* come from cluster.env
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh"
require_root
[[ -s $ENV_FILE ]] || die "no cluster env file $ENV_FILE (run cluster-up.sh)"
# shellcheck disable=SC1090
. "$ENV_FILE"
PW=$(<"$NODECARE_GNT_RAPI_PASSWORD_FILE")
VERSION=${NODECARE_GNT_SOFTWARE_VERSION:-3.0.2}
MASTER=$(current_master_index)
NODE=$NODECARE_GNT_MASTER

PASS=0 FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok   - $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*"; }
rapi() { curl -sk -m 30 -u "$NODECARE_GNT_RAPI_USER:$PW" -H 'Content-Type: application/json' -X "$1" "$NODECARE_GNT_RAPI_URL$2"; }
job_status() { rapi GET "/2/jobs/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("status"))'; }

# filter_outcome ACTION PREDICATES REASON: prints "refused: MSG" when gnt-filter add refuses the
# rule, else the status of a tag job submitted with REASON 6 s after the rule was added.
filter_outcome() {
  local action=$1 preds=$2 reason=$3 uuid id st k
  uuid=$(in_node "$MASTER" gnt-filter add --priority=0 --action="$action" --predicates="$preds" \
    --reason="nodecare filters-compat" 2>&1 | tail -n 1)
  if [[ ! $uuid =~ ^[0-9a-f-]{36}$ ]]; then
    echo "refused: $uuid"
    return
  fi
  id=$(rapi PUT "/2/nodes/$NODE/tags?tag=filters-compat-$RANDOM&reason=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$reason")")
  sleep 6
  st=$(job_status "$id")
  in_node "$MASTER" gnt-filter delete "$uuid" >/dev/null
  # A held job runs once its rule is gone; wait for it, so the next check starts clean.
  for ((k = 0; k < 60; k++)); do
    case $(job_status "$id") in success | error | canceled) break ;; esac
    sleep 1
  done
  echo "$st"
}
expect() { # WHAT WANT GOT
  if [[ $3 == "$2"* ]]; then ok "$1: $3"; else bad "$1: want $2, got $3"; fi
}

OURS='gnt:daemon:maintd nodecare incident=00000000-0000-0000-0000-000000000000 intent=probe: filters-compat'
OLD='gnt:daemon:nodecare incident=00000000-0000-0000-0000-000000000000 intent=probe: filters-compat'
DOC='[["reason", ["&", [">=", "reason", "gnt:daemon:maintd "], ["<", "reason", "gnt:daemon:maintd!"]]]]'
DOC_OLD='[["reason", ["&", [">=", "reason", "gnt:daemon:nodecare "], ["<", "reason", "gnt:daemon:nodecare!"]]]]'

echo "# Ganeti $VERSION"
# docs/ganeti-filters.md, "Pausing nodecare", and its variants.
expect "documented PAUSE rule holds nodecare's job" queued "$(filter_outcome PAUSE "$DOC" "$OURS")"
expect "documented PAUSE rule leaves other jobs alone" success "$(filter_outcome PAUSE "$DOC" "operator: filters-compat")"
expect "PAUSE rule for older builds' source holds their job" queued "$(filter_outcome PAUSE "$DOC_OLD" "$OLD")"
expect "documented REJECT rule cancels nodecare's job" canceled "$(filter_outcome REJECT "$DOC" "$OURS")"
expect "documented RATE_LIMIT 1 rule lets nodecare's job run" success "$(filter_outcome 'RATE_LIMIT 1' "$DOC" "$OURS")"
# A regular expression in a reason predicate makes it false on both (docs/ganeti-filters.md).
expect "=~ in a reason predicate never matches" success "$(filter_outcome PAUSE '[["reason", ["=~", "reason", "^gnt:daemon:maintd "]]]' "$OURS")"
# Regular expressions in opcode predicates: POSIX ERE works on both engines.
expect "opcode =~ POSIX ERE holds the job" queued "$(filter_outcome PAUSE '[["opcode", ["=~", "OP_ID", "^OP_TAGS_[[:upper:]]+$"]]]' "$OURS")"
# PCRE-only syntax: \w matches on PCRE and is not a word class for regex-tdfa; (?:) is refused.
case $VERSION in
  3.0*) want_w=queued want_group=queued ;;
  *) want_w=success want_group=refused ;;
esac
expect "opcode =~ PCRE \\w (Ganeti $VERSION)" "$want_w" "$(filter_outcome PAUSE '[["opcode", ["=~", "OP_ID", "^OP_TAGS_\\w+$"]]]' "$OURS")"
expect "opcode =~ PCRE (?:) (Ganeti $VERSION)" "$want_group" "$(filter_outcome PAUSE '[["opcode", ["=~", "OP_ID", "^OP_(?:TAGS)_SET$"]]]' "$OURS")"

# Leave no probe tag behind.
tags=$(rapi GET "/2/nodes/$NODE/tags" | python3 -c 'import json,sys; print("&".join("tag=" + t for t in json.load(sys.stdin) if t.startswith("filters-compat-")))')
[[ -z $tags ]] || rapi DELETE "/2/nodes/$NODE/tags?$tags" >/dev/null
echo "$PASS passed, $FAIL failed"
[[ $FAIL -eq 0 ]]
