#!/usr/bin/env bash
# Configures and builds one tree.
# Usage: scripts/build.sh DIR [cmake args...] [-- targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
cmake_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmake_args+=("$1"); shift; done
[ $# -gt 0 ] && shift
cmake -S . -B "$dir" -G Ninja "${cmake_args[@]}" >/dev/null
ninja -C "$dir" -j"$(nproc)" "$@"
