#!/usr/bin/env bash
# Install Debian's Ganeti 3.0.2 and the tools the namespace cluster needs.
# Idempotent: returns at once when everything is already installed.
# Must run as root on Debian 12. Daemons are kept from starting in the root
# namespace by a temporary policy-rc.d.
set -euo pipefail

PACKAGES=(
  ganeti ganeti-3.0 ganeti-haskell-3.0 ganeti-htools-3.0 ganeti-testsuite
  python3-ganeti-rapi ganeti-os-noop
  openssh-server openssh-client iproute2 util-linux curl socat openssl
  libfaketime faketime
)

die() { echo "install-packages: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root"
command -v apt-get >/dev/null || die "apt-get not found (Debian 12 required)"

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-packages: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi
echo "install-packages: installing ${missing[*]}"

export DEBIAN_FRONTEND=noninteractive
APT_OPTS=(-o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

# A policy-rc.d that we created ourselves is removed on exit; an existing one
# belongs to someone else and is left alone.
POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() { if [[ $created_policy -eq 1 ]]; then rm -f "$POLICY"; fi; }
trap cleanup EXIT
if [[ ! -e $POLICY ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$POLICY"
  chmod 755 "$POLICY"
  created_policy=1
fi

install_missing() {
  apt-get "${APT_OPTS[@]}" install -y --no-install-recommends "${missing[@]}"
}
if ! install_missing; then
  echo "install-packages: install failed, refreshing package lists and retrying" >&2
  apt-get "${APT_OPTS[@]}" update
  install_missing || die "apt-get install failed"
fi

for p in "${missing[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ $status == installed ]] || die "package $p is still not installed"
done
echo "install-packages: done"
