#!/usr/bin/env bash
# One command that installs what is needed, builds, and runs every test:
#   0. clang-format: every C++ file is formatted.
#   1. Release build: packaging/tierkv.toml checked against the key table,
#      all unit tests (ctest) and the over-the-wire tests (pytest; they
#      start their own redis-server and tierkv-server).
#   2. AddressSanitizer + UndefinedBehaviorSanitizer build: all unit tests.
#   3. ThreadSanitizer build: the concurrency tests (label "concurrent").
#   4. libFuzzer (clang): the RESP parser fuzzer for a fixed time.
# Stages can be chosen with TIERKV_STAGES="release asan tsan fuzz".
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
stages=${TIERKV_STAGES:-"format release asan tsan fuzz"}
fuzz_seconds=${TIERKV_FUZZ_SECONDS:-60}
./scripts/install-deps.sh

stage() { printf '\n==== %s ====\n' "$*"; }
has() { [[ " $stages " == *" $1 "* ]]; }

if has format; then
  stage "clang-format check"
  git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
fi

if has release; then
  stage "release build"
  ./scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DTIERKV_BENCH=ON
  stage "packaging: example config in sync with the key table, systemd unit"
  ./scripts/check-packaging.sh build/src/server/tierkv-server
  stage "unit tests (release)"
  ctest --test-dir build --output-on-failure -j2
  stage "integration tests (side by side with redis-server)"
  TIERKV_SERVER="$root/build/src/server/tierkv-server" \
  TIERKV_TRACE="$root/build/src/cli/tierkv-trace" \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration
fi

if has asan; then
  stage "address+undefined sanitizer build"
  ./scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTIERKV_SANITIZE=address,undefined -DTIERKV_BENCH=OFF
  stage "unit tests (asan+ubsan)"
  # The backing-latency precision test (ctest entry flash_backing_latency)
  # measures microseconds; sanitizers stretch them, so it runs in the release
  # stage only.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  GTEST_FILTER='-*BackingLatency*' \
    ctest --test-dir build-asan --output-on-failure -j2 -L unit -E flash_backing_latency
fi

if has tsan; then
  stage "thread sanitizer build"
  # Only the concurrency tests run under TSan, so only they are built.
  concurrent_targets=$(ls tests/*/*concurrent*_test.cc | xargs -n1 basename | sed 's/\.cc$//')
  # shellcheck disable=SC2086
  ./scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTIERKV_SANITIZE=thread -DTIERKV_BENCH=OFF -- $concurrent_targets
  stage "concurrency tests (tsan)"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j1 -L concurrent
fi

if has fuzz; then
  stage "fuzzing the RESP parser for ${fuzz_seconds}s"
  CC=clang CXX=clang++ ./scripts/build.sh build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTIERKV_FUZZ=ON -DTIERKV_BENCH=OFF -- resp_parser_fuzz
  mkdir -p build-fuzz/corpus
  build-fuzz/tests/server/resp_parser_fuzz -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 \
    build-fuzz/corpus
fi

stage "all tests passed"
