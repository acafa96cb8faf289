// Concurrent writers and readers on a small flash that keeps wrapping, so
// reads race with reclaim and reinsertion. Every chunk served must be exactly
// the bytes written for its (key, version); races are misses, not corruption.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/hash.h"
#include "flash/flash_tier.h"
#include "flash/record.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::pattern;
using testing::TempDir;

std::string value_for(const std::string& key, uint64_t version) {
  const uint64_t seed = hash64(key) ^ version;
  return pattern(2000 + seed % 30'000, seed);
}

void run(IoBackend backend) {
  TempDir dir;
  FlashOptions o;
  o.path = dir.file("f");
  o.check_region_lists = true;
  o.size = 4 << 20;
  o.region_size = 256 << 10;
  o.write_buffer_size = 64 << 10;
  o.queue_depth = 8;
  o.reinsertion = true;
  o.io_backend = backend;
  auto opened = FlashTier::open(o);
  ASSERT_TRUE(opened.is_ok());
  FlashTier& tier = **opened;

  // Written once and read often: reclaim reinserts them while all runs.
  constexpr int kStaticKeys = 4;
  for (int i = 0; i < kStaticKeys; ++i) {
    const std::string key = "static" + std::to_string(i);
    ASSERT_TRUE(
        testing::write_sync(tier, {.key = key, .version = 1, .data = value_for(key, 1)}).is_ok());
  }
  constexpr int kWriters = 3;
  constexpr int kReaders = 3;
  constexpr int kKeys = 40;
  constexpr int kWritesPerWriter = 250;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::atomic<bool> writers_done{false};
  std::atomic<uint64_t> served{0}, misses{0}, wrong{0}, write_errors{0};

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kWritesPerWriter && std::chrono::steady_clock::now() < deadline; ++i) {
        // Writer w owns keys w, w + kWriters, ...; versions only grow.
        const std::string key = "key" + std::to_string(w + kWriters * (i % (kKeys / kWriters)));
        const uint64_t version = 1 + static_cast<uint64_t>(i);
        const std::string value = value_for(key, version);
        auto done = std::make_shared<std::promise<Status>>();
        Status st = tier.write_chunk({.key = key, .version = version, .data = value},
                                     [done](Status s) { done->set_value(std::move(s)); });
        if (st.code() == StatusCode::kBusy) {
          tier.flush();
          continue;
        }
        if (!st.is_ok() || !done->get_future().get().is_ok()) ++write_errors;
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      uint64_t n = static_cast<uint64_t>(r);
      while (!writers_done.load() && std::chrono::steady_clock::now() < deadline) {
        const uint64_t pick = n++;
        const std::string key = pick % 2 == 0 ? "static" + std::to_string(pick / 2 % kStaticKeys)
                                              : "key" + std::to_string(pick / 2 % kKeys);
        auto done = std::make_shared<std::promise<void>>();
        Status st = tier.read_chunk(key, 0, std::nullopt, [&, key, done](Result<FlashChunk> c) {
          if (!c.is_ok()) {
            ++misses;
          } else if (c->data() == value_for(key, c->version())) {
            ++served;
          } else {
            ++wrong;
          }
          done->set_value();
        });
        if (st.is_ok()) {
          done->get_future().get();
        } else {
          ++misses;
        }
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  writers_done = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();

  const FlashStats s = tier.stats();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(write_errors.load(), 0u);
  EXPECT_EQ(s.checksum_failures, 0u);
  EXPECT_GT(served.load(), 0u);
  EXPECT_GT(s.reclaims, 0u);
  std::printf("[concurrent] %s: served %llu, misses %llu, reclaims %llu, reinsertions %llu\n",
              std::string(tier.io_backend()).c_str(), (unsigned long long)served.load(),
              (unsigned long long)misses.load(), (unsigned long long)s.reclaims,
              (unsigned long long)s.reinsertions);
}

// Writers hand each accepted write to a remover, which removes it at once
// (mostly still in flight), while others iterate, sample and set expiries.
// No removed version may be indexed afterwards. With `lazy`, the removals
// are an overwrite's lazy tombstones under fsync everysec, whose tick
// releases them while writers append (the writers run past a tick).
void run_removals(IoBackend backend, bool lazy = false) {
  TempDir dir;
  FlashOptions o = testing::small_options(dir.file("f"));
  o.io_backend = backend;
  if (lazy) o.fsync = FsyncPolicy::kEverySec;
  auto opened = FlashTier::open(o);
  ASSERT_TRUE(opened.is_ok());
  FlashTier& tier = **opened;

  constexpr int kWriters = 2;
  constexpr int kWritesPerWriter = 300;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::seconds(10);
  const auto past_a_tick = start + std::chrono::milliseconds(lazy ? 1500 : 0);
  std::mutex mu;
  std::deque<std::pair<std::string, uint64_t>> accepted;
  std::vector<std::string> removed;
  std::atomic<int> writers_left{kWriters};
  std::atomic<uint64_t> conflicts{0}, iterated{0};

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; (i < kWritesPerWriter || std::chrono::steady_clock::now() < past_a_tick) &&
                      i < 100 * kWritesPerWriter && std::chrono::steady_clock::now() < deadline;
           ++i) {
        // Paced, so that a tick comes while the writers still append.
        if (lazy && i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const std::string key = "w" + std::to_string(w) + "-" + std::to_string(i);
        const uint64_t version = 1 + static_cast<uint64_t>(i);
        Status st = tier.write_chunk({.key = key, .version = version, .data = pattern(500, i)},
                                     [&](Status s) {
                                       if (s.code() == StatusCode::kConflict) ++conflicts;
                                     });
        if (!st.is_ok()) continue;  // Busy: skipped
        std::lock_guard lock(mu);
        accepted.emplace_back(key, version);
      }
      --writers_left;
    });
  }
  threads.emplace_back([&] {  // the remover: every other accepted write
    bool take = true;
    while (true) {
      std::pair<std::string, uint64_t> next;
      bool idle = false;
      {
        std::lock_guard lock(mu);
        if (accepted.empty() && writers_left.load() == 0) break;
        idle = accepted.empty();
        if (!idle) {
          next = std::move(accepted.front());
          accepted.pop_front();
        }
      }
      if (idle) {
        std::this_thread::yield();
        continue;
      }
      take = !take;
      if (take) {
        tier.remove(next.first, next.second, {.lazy = lazy, .durable = {}});
        std::lock_guard lock(mu);
        removed.push_back(next.first);
      } else {
        tier.set_expiry(next.first, next.second, 1'900'000'000'000);
      }
    }
  });
  threads.emplace_back([&] {  // the key-space user
    while (writers_left.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      for (size_t s = 0; s < tier.key_shard_count(); ++s) iterated += tier.keys_in_shard(s).size();
      if (auto k = tier.random_key()) tier.lookup(*k);
      tier.object_count();
    }
  });
  for (std::thread& t : threads) t.join();
  tier.flush();
  for (const std::string& key : removed) EXPECT_FALSE(tier.lookup(key)) << key;
  EXPECT_FALSE(removed.empty());
  std::printf("[concurrent] %s: %zu removed, %llu landed after their removal\n",
              std::string(tier.io_backend()).c_str(), removed.size(),
              (unsigned long long)conflicts.load());
}

TEST(FlashConcurrentTest, RemovalsRaceWritesUring) {
  run_removals(IoBackend::kUring);
}
TEST(FlashConcurrentTest, RemovalsRaceWritesThreadPool) {
  run_removals(IoBackend::kThreadPool);
}

TEST(FlashConcurrentTest, LazyTombstonesRaceWritesAndTheEverysecTick) {
  run_removals(IoBackend::kUring, /*lazy=*/true);
}

TEST(FlashConcurrentTest, ReadersAndWritersUring) {
  run(IoBackend::kUring);
}
TEST(FlashConcurrentTest, ReadersAndWritersThreadPool) {
  run(IoBackend::kThreadPool);
}

}  // namespace
}  // namespace tierkv::flash

namespace tierkv::flash {
namespace {

// Recovery reads and parses regions on several threads and applies them in
// log order; what it rebuilds must be what was written (run under TSan too).
TEST(FlashConcurrentTest, ParallelRecoveryScanRebuildsTheIndex) {
  TempDir dir;
  FlashOptions o = testing::small_options(dir.file("f"));
  o.region_size = 1 << 20;
  o.size = layout_size(24, o.region_size);
  std::map<std::string, uint64_t> written;
  {
    auto t = testing::open_or_die(o);
    ASSERT_TRUE(t);
    for (int i = 0; i < 300; ++i) {
      const std::string key = "k" + std::to_string(i % 120);
      const uint64_t version = static_cast<uint64_t>(i) + 1;
      ASSERT_TRUE(testing::write_sync(
                      *t, {.key = key, .version = version, .data = pattern(60'000, version)})
                      .is_ok());
      written[key] = version;
    }
  }  // no snapshot: the next open scans
  auto t = testing::open_or_die(o);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->recovery().from_snapshot);
  EXPECT_GT(t->recovery().regions_scanned, 4u);
  for (const auto& [key, version] : written) {
    std::optional<FlashObjectInfo> info = t->lookup(key);
    ASSERT_TRUE(info) << key;
    EXPECT_EQ(info->version, version) << key;
    EXPECT_EQ(*testing::read_sync(*t, key, 0), pattern(60'000, version)) << key;
  }
}

}  // namespace
}  // namespace tierkv::flash
