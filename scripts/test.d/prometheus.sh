#!/usr/bin/env bash
# The Prometheus alerting rules (checked and unit-tested by promtool), the Grafana dashboard
# (valid JSON over metrics that exist), and `promtool check metrics` on the real /metrics output
# of the coordinator and the agent (written by their integration tests). Needs promtool (Debian
# package prometheus); CI installs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v promtool >/dev/null 2>&1; then
  if [ "${CI:-}" = true ] || [ "${NODECARE_REQUIRE_GANETI:-0}" = 1 ]; then
    echo "prometheus: promtool is missing (apt-get install prometheus)" >&2; exit 1
  fi
  echo "prometheus: skipped (no promtool; apt-get install prometheus)"; exit 0
fi
promtool check rules packaging/prometheus/nodecare.rules.yml
(cd packaging/prometheus && promtool test rules nodecare.rules.test.yml)

out="target/metrics"
rm -rf "$out"
# --workspace: the same build as the workspace's test run, nothing recompiled.
NODECARE_METRICS_OUT="$PWD/$out" cargo nextest run --workspace --locked --no-fail-fast \
  -E 'test(metrics_and_webhook_follow_an_evacuation) | test(metrics_show_script_runs)' >/dev/null
for scraped in coordinator agent; do
  [ -s "$out/$scraped.txt" ] || { echo "prometheus: no scraped $scraped metrics in $out" >&2; exit 1; }
  echo "promtool check metrics: $scraped"
  promtool check metrics <"$out/$scraped.txt"
done

# Every metric the rules and the dashboard use is exported by the coordinator or the agent.
python3 - "$out" <<'EOF'
import json, re, sys
out = sys.argv[1]
exported = set()
for name in ("coordinator", "agent"):
    for line in open(f"{out}/{name}.txt"):
        if line.startswith("# TYPE "):
            family = line.split()[2]
            exported.add(family)
            for suffix in ("_bucket", "_sum", "_count"):
                exported.add(family + suffix)
used = set()
rules = open("packaging/prometheus/nodecare.rules.yml").read()
dashboard = json.load(open("packaging/grafana/nodecare.json"))
exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
for text in [rules] + exprs:
    used.update(re.findall(r"\bnodecare_[a-z_]+", text))
missing = sorted(used - exported)
if missing:
    sys.exit(f"prometheus: rules or dashboard use metrics nobody exports: {missing}")
print(f"prometheus: {len(used)} metrics used by the rules and the dashboard, all exported")
EOF
