#!/usr/bin/env bash
# The boot test (scripts/test.d/systemd-boot.sh: install, the units and their sandbox, watchdog,
# limits, floods, the coordinator's takeover, upgrade from the previous release, remove and
# purge) on Debian 13 (trixie, systemd 257), as on Debian 12: the same packages on both.
set -euo pipefail
cd "$(dirname "$0")/../.."
NODECARE_SYSTEMD_SUITE=trixie exec bash scripts/test.d/systemd-boot.sh
