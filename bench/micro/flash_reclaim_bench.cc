// What a writer's region reclaim costs the flash index as it grows: a walk
// of the whole index (drop_region, what a reclaim without a reclaimer list
// does) against dropping the chunks a reclaimer round listed (drop_listed).
// Single-chunk objects spread over 1024 regions, as a full device of small
// values holds them; each iteration reclaims another region. The listing
// itself (the round's walk, off the write lock) is not timed.
//
//   tierkv-micro --benchmark_filter=Reclaim
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "flash/flash_index.h"

namespace tierkv::flash {
namespace {

constexpr uint32_t kRegions = 1024;

std::unique_ptr<FlashIndex> filled_index(int64_t objects) {
  auto index = std::make_unique<FlashIndex>(16, static_cast<uint64_t>(objects));
  for (int64_t i = 0; i < objects; ++i) {
    const std::string key = "key:" + std::to_string(i);
    const auto region = static_cast<uint32_t>(i % kRegions);
    const uint64_t offset = 4096 + static_cast<uint64_t>(i / kRegions) * 256;
    index->add(key, index->key_hash(key), 0, 1, 200, location::pack(region, offset, 240), 1);
  }
  return index;
}

void BM_ReclaimByWalk(benchmark::State& state) {
  auto index = filled_index(state.range(0));
  uint32_t region = 0;
  for (auto _ : state) benchmark::DoNotOptimize(index->drop_region(region++ % kRegions));
}

void BM_ReclaimByList(benchmark::State& state) {
  auto index = filled_index(state.range(0));
  uint32_t region = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<ReinsertCandidate> hits;
    std::vector<RegionResident> residents;
    RegionYield yield;
    index->mark_for_reinsertion(region % kRegions, hits, yield, &residents);
    state.ResumeTiming();
    benchmark::DoNotOptimize(index->drop_listed(region++ % kRegions, residents));
  }
}

BENCHMARK(BM_ReclaimByWalk)
    ->Arg(1 << 20)
    ->Arg(8 << 20)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReclaimByList)
    ->Arg(1 << 20)
    ->Arg(8 << 20)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tierkv::flash
