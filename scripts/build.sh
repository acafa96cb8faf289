#!/usr/bin/env bash
# Configures and builds one tree. Usage: scripts/build.sh DIR [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
ninja -C "$dir" -j"$(nproc)"
