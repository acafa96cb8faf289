// Prefetch under concurrency (run under ThreadSanitizer in CI): probes with
// prefetch, demand kicks, reads, overwrites and removals race on a small key
// space through a small memory. Each key's writes carry the key and a
// generation, so a read can tell a torn or foreign value; removed keys that
// were never rewritten must stay absent, and the promotions in flight never
// pass the cap.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "store/store.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;

constexpr int kKeys = 64;  // 6 MiB through 4 MiB of memory: most reads miss it
constexpr size_t kValue = 96 << 10;

std::string key_of(int i) {
  return "pk" + std::to_string(i);
}

// kValue bytes naming the key and the generation in every 16-byte cell.
std::string value_of(int key, uint32_t gen) {
  std::string cell = fmt::format("{:06d}:{:08x}|", key, gen);
  std::string v;
  v.reserve(kValue);
  while (v.size() < kValue) v += cell;
  v.resize(kValue);
  return v;
}

bool well_formed(int key, std::string_view v) {
  if (v.size() != kValue) return false;
  std::string_view cell = v.substr(0, 16);
  if (cell.substr(0, 6) != fmt::format("{:06d}", key)) return false;
  for (size_t off = 0; off + 16 <= v.size(); off += 16)
    if (v.substr(off, 16) != cell) return false;
  return true;
}

TEST(PrefetchConcurrentTest, ProbesKicksReadsAndWritesRace) {
  TempDir dir;
  Config c;
  c.memory = 4 << 20;
  c.chunk_size = 32 << 10;
  c.memory_shards = 4;
  c.flash_path = dir.file("flash.dat");
  c.flash_size = 64 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  c.promotion_max_inflight = 6;
  c.demand_kick = true;
  c.prefetch_cooldown_ms = 20;
  c.prefetch_cooldown_max_ms = 80;
  c.prefetch_dedup_ttl_ms = 5;
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& store = **opened;
  for (int i = 0; i < kKeys; ++i) ASSERT_TRUE(store.put(key_of(i), value_of(i, 0)));

  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, max_inflight{0};
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  auto prober = [&](int seed) {
    std::mt19937 rng(seed);
    while (!stop.load()) {
      std::vector<std::string> names;
      for (int j = 0; j < 4; ++j) names.push_back(key_of(static_cast<int>(rng() % kKeys)));
      std::vector<std::string_view> keys(names.begin(), names.end());
      store.exist(keys, ExistOptions{.prefetch_to_memory = true});
      int now = static_cast<int>(store.metrics().gauge("tierkv_promotions_inflight", "").value());
      int seen = max_inflight.load();
      while (now > seen && !max_inflight.compare_exchange_weak(seen, now)) {
      }
    }
  };
  auto reader = [&](int seed) {
    std::mt19937 rng(seed);
    while (!stop.load()) {
      int k = static_cast<int>(rng() % kKeys);
      auto v = store.get(key_of(k));
      if (v && !well_formed(k, v->to_string())) bad.fetch_add(1);
    }
  };
  // Streaming reads: those that come while the key's promotion is in
  // flight take its chunks (one read, two consumers). Every read ends once;
  // the bytes of one that ends OK are one whole, well-formed value; some are
  // cancelled half-way, as a client that disconnects.
  std::atomic<int> streamed{0}, lost_reads{0};
  auto streaming_reader = [&](int seed) {
    std::mt19937 rng(seed);
    while (!stop.load()) {
      int k = static_cast<int>(rng() % kKeys);
      struct Got {
        std::mutex mu;
        std::string bytes;
        std::optional<Status> done;
      };
      auto got = std::make_shared<Got>();
      auto ended = std::make_shared<std::promise<void>>();
      FlashReadCallbacks cb{[got](ValuePiece p) {
                              std::lock_guard lock(got->mu);
                              got->bytes.append(p.bytes);
                            },
                            [got, ended](Status st) {
                              std::lock_guard lock(got->mu);
                              if (got->done) std::abort();  // on_done twice
                              got->done = st;
                              ended->set_value();
                            }};
      ReadStart r = store.read(key_of(k), 0, UINT64_MAX, std::move(cb));
      if (r.where == ReadStart::Where::kMemory) {
        if (!well_formed(k, r.view.to_string())) bad.fetch_add(1);
        continue;
      }
      if (r.where != ReadStart::Where::kFlash || !r.flash_read) continue;
      if (rng() % 4 == 0) r.flash_read->cancel();
      if (ended->get_future().wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        lost_reads.fetch_add(1);
        continue;
      }
      streamed.fetch_add(1);
      std::lock_guard lock(got->mu);
      if (got->done->is_ok() && !well_formed(k, got->bytes)) bad.fetch_add(1);
    }
  };
  auto writer = [&](int seed) {
    std::mt19937 rng(seed);
    uint32_t gen = 1;
    while (!stop.load()) {
      int k = static_cast<int>(rng() % kKeys);
      if (rng() % 4 == 0)
        store.remove(key_of(k));
      else
        (void)store.put(key_of(k), value_of(k, gen++));
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(prober, 1);
  threads.emplace_back(prober, 2);
  threads.emplace_back(reader, 3);
  threads.emplace_back(reader, 4);
  threads.emplace_back(writer, 5);
  threads.emplace_back(streaming_reader, 6);
  while (std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop.store(true);
  for (auto& t : threads) t.join();

  EXPECT_EQ(bad.load(), 0) << "a read returned a torn or foreign value";
  EXPECT_LE(max_inflight.load(), 6) << "promotions in flight passed promotion-max-inflight";
  EXPECT_EQ(lost_reads.load(), 0) << "a flash read never ended";
  std::printf("[attach] %d streamed reads, %llu served by a promotion in flight\n", streamed.load(),
              static_cast<unsigned long long>(
                  store.metrics().counter("tierkv_prefetch_reads_attached_total", "").value()));
  EXPECT_GT(store.metrics().counter("tierkv_prefetch_requested_total", "").value(), 0u);
  // Removed keys stay removed now that everything is quiet.
  std::vector<int> removed;
  for (int i = 0; i < kKeys; ++i) {
    if (!store.exists(key_of(i))) removed.push_back(i);
  }
  std::vector<std::string> names;
  for (int i = 0; i < kKeys; ++i) names.push_back(key_of(i));
  std::vector<std::string_view> keys(names.begin(), names.end());
  store.exist(keys, ExistOptions{.prefetch_to_memory = true});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i : removed) EXPECT_FALSE(store.exists(key_of(i))) << key_of(i) << " came back";
  for (int i = 0; i < kKeys; ++i) {
    auto v = store.get(key_of(i));
    if (v) {
      EXPECT_TRUE(well_formed(i, v->to_string())) << key_of(i);
    }
  }
}

}  // namespace
}  // namespace tierkv
