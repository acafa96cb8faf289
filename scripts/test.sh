#!/usr/bin/env bash
# Installs what is needed, builds, and runs the tests. Three tiers:
#
#   ./scripts/test.sh          every test, as CI runs it (.ci/run); goal 25 min
#                              on a fresh 2-core clone:
#     format   clang-format: every C++ file is formatted.
#     locks    clang -Wthread-safety -Werror over src/ (the server, the CLIs
#              and every library): every access to a member marked
#              GUARDED_BY holds its mutex (core/mutex.h).
#     release  server, tools and benchmarks; packaging/tierkv.toml checked
#              against the key table; the unit tests that measure time
#              (ctest label "timing") and the allocator check ("allocator");
#              the over-the-wire tests (pytest, side
#              by side with redis-server) at CI sizes: the "timing" ones
#              alone, the rest on 2 workers.
#     asan     AddressSanitizer + UndefinedBehaviorSanitizer: every unit test
#              (the release stage does not build them again).
#     tsan     ThreadSanitizer: the concurrency tests (label "concurrent").
#     fuzz     libFuzzer (clang): the RESP parser for TIERKV_FUZZ_SECONDS.
#   ./scripts/test.sh quick    for iteration, at most 5 min on a warm tree: the
#                              locks stage, an incremental release build,
#                              every unit test, the over-the-wire tests not
#                              marked "slow".
#   ./scripts/test.sh torture  the "slow" over-the-wire tests at full size
#                              (1 GiB fills, 10 kill rounds, a 300 MiB
#                              value); not in CI. docs/testing.md says when.
#
# TIERKV_STAGES="release asan" picks stages of the full run.
# Extra arguments after the tier go to pytest (e.g. -k loading).
set -Eeuo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tier=full
if [[ $# -gt 0 && $1 != -* ]]; then
  tier=$1
  shift
fi
pytest_args=("$@")
case $tier in
  full) stages=${TIERKV_STAGES:-"format locks release asan tsan fuzz"} ;;
  quick) stages="locks quick" ;;
  torture) stages="torture" ;;
  *) echo "usage: $0 [quick|torture] [pytest args...]" >&2; exit 2 ;;
esac
fuzz_seconds=${TIERKV_FUZZ_SECONDS:-60}

timings=()
stage_name=""
stage_start=0
stage() {
  end_stage
  stage_name=$*
  stage_start=$(date +%s)
  printf '\n==== %s ====\n' "$*"
}
end_stage() {
  if [[ -n $stage_name ]]; then
    timings+=("$(printf '%5ds  %s' $(($(date +%s) - stage_start)) "$stage_name")")
  fi
  stage_name=""
}
report() {
  local code=$?
  end_stage
  printf '\n==== stage times (%s tier) ====\n' "$tier"
  printf '%s\n' "${timings[@]}"
  printf '%5ds  total\n' $(($(date +%s) - started))
  [[ $code -eq 0 ]] || printf 'FAILED in: %s\n' "${failed_in:-$stage_name}"
}
started=$(date +%s)
trap 'failed_in=$stage_name' ERR
trap report EXIT
has() { [[ " $stages " == *" $1 "* ]]; }

stage "install packages"
./scripts/install-deps.sh

# pytest over the wire against build/: the "timing" tests alone, the rest on
# 2 workers (most of their time is spent waiting on servers).
# $1: what to run (all, "not slow", slow); env comes from the caller.
integration() {
  local what=$1 select=""
  [[ $what == all ]] || select="($what) and "
  local env=(TIERKV_SERVER="$root/build/src/server/tierkv-server"
    TIERKV_TRACE="$root/build/src/cli/tierkv-trace")
  local pytest=(/usr/bin/python3 -m pytest -q tests/integration "${pytest_args[@]}")
  stage "integration tests ($what), 2 workers"
  no_tests_ok env "${env[@]}" "${pytest[@]}" -n 2 -m "${select}not timing"
  stage "integration tests ($what), the timing ones alone"
  no_tests_ok env "${env[@]}" "${pytest[@]}" -m "${select}timing"
}

# Runs a pytest command; "no tests collected" (exit 5) is not a failure,
# since a selection by -k may leave one group empty.
no_tests_ok() {
  local code=0
  "$@" || code=$?
  [[ $code -eq 0 || $code -eq 5 ]] || return "$code"
}

release_build() {
  stage "release build${*:+ ($*)}"
  ./scripts/build.sh build -DCMAKE_BUILD_TYPE=Release -DTIERKV_BENCH=ON -- "$@"
}

if has format; then
  stage "clang-format check"
  git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
fi

if has locks; then
  stage "lock annotations (clang -Wthread-safety, src/)"
  CC=clang CXX=clang++ ./scripts/build.sh build-locks -DCMAKE_BUILD_TYPE=Debug \
    -DTIERKV_THREAD_SAFETY=ON -DTIERKV_BENCH=OFF -- src/server/all src/cli/all
fi

if has release; then
  # The unit tests are built and run under the sanitizers; here only the
  # binaries whose tests need an unsanitized build: a timing test, and a
  # check of glibc's allocator (label "allocator").
  release_build src/server/all src/cli/all bench/all flash_tier_test object_test
  stage "packaging: example config in sync with the key table, systemd unit"
  ./scripts/check-packaging.sh build/src/server/tierkv-server
  stage "unit tests that measure time or check the allocator (release)"
  ctest --test-dir build --output-on-failure -L 'timing|allocator'
  integration all
fi

if has quick; then
  release_build
  stage "unit tests (release)"
  ctest --test-dir build --output-on-failure -j2
  integration "not slow"
fi

if has torture; then
  release_build src/server/all src/cli/all
  TIERKV_TORTURE=1 integration slow
fi

if has asan; then
  stage "address+undefined sanitizer build (unit tests)"
  ./scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTIERKV_SANITIZE=address,undefined -DTIERKV_BENCH=OFF -- tests/all
  stage "unit tests (asan+ubsan)"
  # Tests that measure time (label "timing") ran in the release stage:
  # sanitizers stretch microseconds.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j2 -L unit -LE 'timing|allocator'
fi

if has tsan; then
  stage "thread sanitizer build (concurrency tests)"
  # Only the concurrency tests run under TSan, so only they are built.
  concurrent_targets=$(find tests -name '*concurrent*_test.cc' | xargs -n1 basename | sed 's/\.cc$//')
  # shellcheck disable=SC2086
  ./scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTIERKV_SANITIZE=thread -DTIERKV_BENCH=OFF -- $concurrent_targets
  stage "concurrency tests (tsan)"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j1 -L concurrent
fi

if has fuzz; then
  stage "fuzz build (RESP parser)"
  CC=clang CXX=clang++ ./scripts/build.sh build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTIERKV_FUZZ=ON -DTIERKV_BENCH=OFF -- resp_parser_fuzz
  stage "fuzzing the RESP parser for ${fuzz_seconds}s"
  mkdir -p build-fuzz/corpus
  build-fuzz/tests/server/resp_parser_fuzz -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 \
    build-fuzz/corpus
fi

end_stage
echo
echo "all tests passed"
