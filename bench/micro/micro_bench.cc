// Microbenchmarks of the memory tier through the embedded Store API:
// 4 KiB get hits and 4 KiB overwrites of a fixed key set, from 1 and 2
// threads; and the ExecGate that every server command passes (its own
// slot per I/O thread; all slots for EXEC and MSET). items_per_second is the total over threads;
// Time is per op and per thread.
//
//   tierkv-micro --benchmark_min_time=1
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "server/commands/exec_gate.h"
#include "store/store.h"

namespace {

constexpr size_t kValueSize = 4096;
constexpr int kKeys = 16384;  // 64 MiB of values: past the CPU caches

struct Fixture {
  std::unique_ptr<tierkv::Store> store;
  std::vector<std::string> keys;
  std::string value = std::string(kValueSize, 'v');

  Fixture() {
    tierkv::Config c;
    c.memory = int64_t{512} << 20;  // everything fits: no eviction
    c.active_expire_hz = 0;
    c.flash_size = 0;  // the memory path alone
    store = std::move(*tierkv::Store::open(c));
    for (int i = 0; i < kKeys; ++i) {
      keys.push_back("bench:key:" + std::to_string(i));
      if (!store->put(keys.back(), value)) std::abort();
    }
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// Each thread walks the first `working_set` keys with its own offset so
// threads do not move in lock step over the same shard.
size_t next_key(size_t i, int thread, int64_t working_set) {
  return (i * 7919 + size_t(thread) * 4099) % static_cast<size_t>(working_set);
}

void BM_GetHit4K(benchmark::State& state) {
  Fixture& f = fixture();
  size_t i = 0;
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto view = f.store->get(f.keys[next_key(i++, state.thread_index(), state.range(0))]);
    if (!view) {
      state.SkipWithError("miss");
      break;
    }
    // Look at the bytes the way a sender would (no copy).
    view->for_each_segment([&](std::string_view s) {
      bytes += s.size();
      benchmark::DoNotOptimize(s.data()[s.size() - 1]);
    });
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}

void BM_Put4K(benchmark::State& state) {
  Fixture& f = fixture();
  size_t i = 0;
  for (auto _ : state) {
    auto r = f.store->put(f.keys[next_key(i++, state.thread_index(), state.range(0))], f.value);
    if (!r) {
      state.SkipWithError(r.status().to_string().c_str());
      break;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kValueSize));
}

// Working sets: 16384 keys (64 MiB, DRAM-bound like a real cache) and 256
// keys (1 MiB, cache-resident: the tier's own instruction cost).
// What an ordinary command pays for isolation: its thread's slot.
void BM_ExecGateShared(benchmark::State& state) {
  static tierkv::server::ExecGate gate(2);
  size_t slot = static_cast<size_t>(state.thread_index());
  for (auto _ : state) {
    tierkv::server::ExecGate::Guard g = gate.shared(slot);
    benchmark::DoNotOptimize(&g);
  }
  state.SetItemsProcessed(state.iterations());
}

// What an exclusive command pays with no one else running (2 I/O threads).
void BM_ExecGateExclusive(benchmark::State& state) {
  static tierkv::server::ExecGate gate(2);
  for (auto _ : state) {
    tierkv::server::ExecGate::Guard g = gate.exclusive();
    benchmark::DoNotOptimize(&g);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_GetHit4K)->Arg(kKeys)->Arg(256)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_Put4K)->Arg(kKeys)->Arg(256)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_ExecGateShared)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_ExecGateExclusive);

}  // namespace

BENCHMARK_MAIN();
