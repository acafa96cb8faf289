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
launcher=()
# ccache makes a rebuild of an unchanged file a cache hit, also from another
# clone on the same machine: paths under the tree are hashed relative to it,
# and the working directory (in debug info) is not hashed.
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "${cmake_args[@]}" >/dev/null
ninja -C "$dir" -j"$(nproc)" "$@"
