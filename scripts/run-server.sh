#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running tierkv-server with
# the embedded defaults (127.0.0.1:6380, 1 GiB memory, metrics on :9380).
# Extra arguments are passed to the server, e.g. --memory 4gb.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DTIERKV_BENCH=OFF
exec ./build/src/server/tierkv-server "$@"
