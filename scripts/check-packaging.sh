#!/usr/bin/env bash
# Checks packaging/: tierkv.toml is what the key table generates, and the
# systemd unit passes `systemd-analyze verify` (with ExecStart pointed at
# this build's server).
# Usage: scripts/check-packaging.sh [path/to/tierkv-server]
# To update the example: tierkv-server --print-example-config > packaging/tierkv.toml
set -euo pipefail
cd "$(dirname "$0")/.."
server=$(realpath "${1:-build/src/server/tierkv-server}")
if ! diff -u packaging/tierkv.toml <("$server" --print-example-config); then
  echo "packaging/tierkv.toml is out of date: run '$server --print-example-config > packaging/tierkv.toml'" >&2
  exit 1
fi
echo "packaging/tierkv.toml matches the key table"
if ! command -v systemd-analyze >/dev/null; then
  echo "NOT CHECKED: packaging/tierkv.service (systemd-analyze is not installed)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#/usr/bin/tierkv-server#$server#g" packaging/tierkv.service >"$tmp/tierkv.service"
# verify prints problems but exits 0 for some of them: any output fails.
out=$(systemd-analyze verify "$tmp/tierkv.service" 2>&1 || echo "systemd-analyze failed")
if [ -n "$out" ]; then
  echo "packaging/tierkv.service: $out" >&2
  exit 1
fi
echo "packaging/tierkv.service passes systemd-analyze verify"
