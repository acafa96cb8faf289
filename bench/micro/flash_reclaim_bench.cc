// What a writer's region reclaim costs the flash index as it grows: a walk
// of the whole index (drop_region, what a reclaim without a reclaimer list
// does) against dropping the chunks a reclaimer round listed (drop_listed).
// Single-chunk objects spread over 1024 regions, as a full device of small
// values holds them; each iteration reclaims another region. The listing
// itself (the round's walk, off the write lock) is not timed there.
//
// And the reclaimer round that makes the list: a walk of the whole index
// (BM_RoundByWalk) against a lookup of each record of the region
// (BM_RoundByRecords; the read of the region from the device is not in it).
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

uint64_t location_of(int64_t i) {
  const auto region = static_cast<uint32_t>(i % kRegions);
  return location::pack(region, 4096 + static_cast<uint64_t>(i / kRegions) * 256, 240);
}

std::unique_ptr<FlashIndex> filled_index(int64_t objects) {
  auto index = std::make_unique<FlashIndex>(16, static_cast<uint64_t>(objects));
  for (int64_t i = 0; i < objects; ++i) {
    const std::string key = "key:" + std::to_string(i);
    index->add(key, index->key_hash(key), 0, 1, 200, location_of(i), 1);
  }
  return index;
}

// The records a parse of `region` finds, in log order.
std::vector<ParsedRecord> records_of(uint32_t region, int64_t objects) {
  std::vector<ParsedRecord> records;
  for (int64_t i = region; i < objects; i += kRegions) {
    ParsedRecord rec;
    rec.key = "key:" + std::to_string(i);
    rec.location = location_of(i);
    records.push_back(std::move(rec));
  }
  return records;
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

void BM_RoundByWalk(benchmark::State& state) {
  auto index = filled_index(state.range(0));
  uint32_t region = 0;
  for (auto _ : state) {
    std::vector<RegionResident> residents;
    index->list_region(region++ % kRegions, residents);
    benchmark::DoNotOptimize(residents.data());
  }
}

void BM_RoundByRecords(benchmark::State& state) {
  auto index = filled_index(state.range(0));
  uint32_t region = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<ParsedRecord> records = records_of(region % kRegions, state.range(0));
    std::vector<RegionResident> residents;
    state.ResumeTiming();
    index->mark_records(region++ % kRegions, records, nullptr, nullptr, residents);
    benchmark::DoNotOptimize(residents.data());
  }
}

BENCHMARK(BM_RoundByWalk)
    ->Arg(1 << 20)
    ->Arg(8 << 20)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RoundByRecords)
    ->Arg(1 << 20)
    ->Arg(8 << 20)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
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
