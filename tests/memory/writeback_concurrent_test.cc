// Background writeback racing writers, readers, evictions and a lower tier
// that lands (or fails, or refuses) writes on its own thread. Afterwards the
// per-state counters must be exact: once every object has been copied down,
// the dirty bytes are zero while the objects are still there, and a cleared
// tier counts nothing. A missed flash-state transition anywhere leaves a
// count behind. Run under TSan (the name holds "concurrent").
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "memory/memory_tier.h"
#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

constexpr int kKeys = 64;
constexpr uint32_t kChunk = 4096;
constexpr int kOpsPerWriter = 3000;

std::string value_for(const std::string& key, uint64_t seed) {
  std::string v(8, '\0');
  std::memcpy(v.data(), &seed, 8);
  v += testing::make_value(key, seed, seed % (3 * kChunk));  // 1..3 chunks
  return v;
}

bool value_ok(const std::string& key, const std::string& bytes) {
  if (bytes.size() < 8) return false;
  uint64_t seed;
  std::memcpy(&seed, bytes.data(), 8);
  return bytes == value_for(key, seed);
}

// Writes queued by the tier (offloads) or by the test (writeback copies),
// landed by one thread in arrival order. 1 in 8 fails; 1 in 8 offloads is
// refused outright.
class AsyncLower final : public LowerTier {
 public:
  bool holds(std::string_view key, uint64_t, uint64_t version, uint32_t) override {
    std::lock_guard lock(mu_);
    return held_.contains({std::string(key), version});
  }
  OffloadAnswer offload(OffloadItem& item) override {
    std::lock_guard lock(mu_);
    if (rng_() % 8 == 0) return OffloadAnswer::kBusy;
    queue_.push_back(std::move(item));
    cv_.notify_one();
    return OffloadAnswer::kQueued;
  }
  void reconcile_expiry(std::string_view, uint64_t, int64_t) override {}

  void push(OffloadItem&& item) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
    cv_.notify_one();
  }
  // Lands queued writes until close() and an empty queue.
  void run(MemoryTier& tier) {
    for (;;) {
      OffloadItem item;
      bool ok;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        ok = rng_() % 8 != 0;
        if (ok) held_.insert({item.key, item.version});
      }
      tier.finish_flash_write(item.key, item.version, item.evicted, ok, item.expire_at_ms);
    }  // the item's pins go here, after the tier was told
  }
  void close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OffloadItem> queue_;
  std::set<std::pair<std::string, uint64_t>> held_;
  std::mt19937_64 rng_{7};
  bool closed_ = false;
};

// Copies every dirty object down, landing each at once, until a whole pass
// finds none.
void copy_everything_down(MemoryTier& tier) {
  for (int empty_calls = 0, calls = 0; empty_calls < 2 && calls < 10000; ++calls) {
    std::vector<OffloadItem> items = tier.take_cold_dirty(INT64_MAX, 1 << 20);
    empty_calls = items.empty() ? empty_calls + 1 : 0;
    for (const OffloadItem& i : items)
      tier.finish_flash_write(i.key, i.version, false, true, i.expire_at_ms);
  }
}

void run(PolicyKind policy) {
  MemoryTierOptions o;
  o.budget_bytes = 512 << 10;  // ~64 objects of ~8 KiB would need 512 KiB: constant eviction
  o.chunk_size = kChunk;
  o.shards = 4;
  o.policy = policy;
  o.expected_objects = 4 * kKeys;
  o.offload_wait_ms = 200;
  AsyncLower lower;  // outlives the tier, which calls it
  MemoryTier tier(o);
  tier.set_lower_tier(&lower);
  std::thread lander([&] { lower.run(tier); });

  std::atomic<int> writers_left{2};
  std::atomic<bool> failed{false};
  auto writer = [&](int id) {
    std::mt19937_64 rng(id);
    for (int op = 0; op < kOpsPerWriter && !failed; ++op) {
      std::string key = testing::key_of(static_cast<int>(rng() % kKeys));
      if (rng() % 6 == 0) {
        tier.remove(key);
        continue;
      }
      Result<WriteResult> r = tier.put(key, value_for(key, rng()));
      if (!r && r.status().code() != StatusCode::kOutOfMemory) failed = true;
    }
    writers_left.fetch_sub(1);
  };
  auto reader = [&] {
    std::mt19937_64 rng(99);
    while (writers_left.load() > 0 && !failed) {
      std::string key = testing::key_of(static_cast<int>(rng() % kKeys));
      if (Result<ObjectView> v = tier.get(key); v && !value_ok(key, v->to_string())) failed = true;
      if (tier.stats().dirty_bytes < 0) failed = true;
    }
  };
  auto writeback = [&] {
    while (writers_left.load() > 0 && !failed) {
      for (OffloadItem& i : tier.take_cold_dirty(64 << 10, 32)) lower.push(std::move(i));
      std::this_thread::yield();
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(writer, 1);
  threads.emplace_back(writer, 2);
  threads.emplace_back(reader);
  threads.emplace_back(writeback);
  for (std::thread& t : threads) t.join();
  lower.close();  // lands (or fails) what is queued, then stops
  lander.join();
  ASSERT_FALSE(failed) << "a write failed or a read saw a wrong value";

  copy_everything_down(tier);
  MemoryTierStats st = tier.stats();
  EXPECT_GT(st.objects, 0u);
  EXPECT_EQ(st.dirty_bytes, 0) << "dirty bytes counted for objects that are all clean";
  EXPECT_EQ(st.offloading_bytes, 0);
  EXPECT_EQ(st.clean_objects, st.objects);
  tier.clear();
  st = tier.stats();
  EXPECT_EQ(st.dirty_bytes, 0);
  EXPECT_EQ(st.clean_objects, 0u);
}

class WritebackConcurrentTest : public ::testing::TestWithParam<PolicyKind> {};

TEST_P(WritebackConcurrentTest, CountsStayExact) {
  run(GetParam());
}

INSTANTIATE_TEST_SUITE_P(All, WritebackConcurrentTest, ::testing::ValuesIn(kAllPolicies),
                         [](const auto& info) { return std::string(policy_name(info.param)); });

}  // namespace
}  // namespace tierkv::memory
