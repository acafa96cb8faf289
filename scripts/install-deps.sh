#!/usr/bin/env bash
# Installs the Debian 12 packages tierkv needs to build, test and benchmark.
# Safe to run again: apt-get skips what is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang clang-format libclang-rt-14-dev
  liburing-dev libasio-dev libabsl-dev libxxhash-dev libcli11-dev libtomlplusplus-dev
  libspdlog-dev libfmt-dev libcurl4-openssl-dev libssl-dev libhiredis-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-redis python3-pytest python3-pytest-xdist python3-matplotlib ccache
  redis-server redis-tools memcached fio nginx-light etcd-server prometheus
  zstd xz-utils gzip procps libzstd-dev liblzma-dev zlib1g-dev linux-perf valgrind
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
