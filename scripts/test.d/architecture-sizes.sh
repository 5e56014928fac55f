#!/usr/bin/env bash
# The size tables of docs/ARCHITECTURE.md are those of the code (scripts/architecture-sizes).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/architecture-sizes --check docs/ARCHITECTURE.md
echo "architecture-sizes: the tables of docs/ARCHITECTURE.md are current"
