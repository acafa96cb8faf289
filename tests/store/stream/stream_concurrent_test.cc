// StreamReader under concurrency (also run under ThreadSanitizer): 64
// streams at once stay within the memory budget and the use-once lane cap;
// streams racing overwrites and deletes see each value as one version,
// whole, or not at all; streams dropped mid-way release what they held.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "store/store_tiers.h"
#include "tests/store/stream/stream_test_util.h"

namespace tierkv {
namespace {

using testing::kChunk;
using testing::stream_config;
using testing::stream_key;
using testing::TempDir;
using testing::to_flash_only;
using testing::value_for;

std::unique_ptr<Store> open_store(const Config& c) {
  auto s = Store::open(c);
  EXPECT_TRUE(s) << s.status().to_string();
  return s ? std::move(*s) : nullptr;
}

std::vector<std::string> put_tiles(Store& store, int n, size_t size) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    keys.push_back(stream_key(i));
    EXPECT_TRUE(store.put(keys.back(), value_for(i, size)));
  }
  to_flash_only(store, keys);
  return keys;
}

TEST(StreamConcurrentTest, SixtyFourStreamsStayWithinTheBudget) {
  TempDir dir;
  Config c = stream_config(dir);
  c.stream_useonce_max_fraction = 0.25;
  auto store = open_store(c);
  const int n = 32;
  std::vector<std::string> keys = put_tiles(*store, n, kChunk);
  const int64_t budget = StoreTiers::memory(*store).budget_bytes();
  const int64_t lane_cap = budget / 4;
  std::atomic<bool> over{false};
  std::atomic<int64_t> lane_peak{0};
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    while (!stop.load()) {
      const int64_t lane = StoreTiers::memory(*store).use_once_bytes();
      if (StoreTiers::memory(*store).used_bytes() > budget || lane > lane_cap) over.store(true);
      if (lane > lane_peak.load()) lane_peak.store(lane);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  // 64 streams, 8 consumer threads taking turns over 8 streams each.
  std::atomic<int> bad{0};
  std::vector<std::thread> consumers;
  for (int t = 0; t < 8; ++t) {
    consumers.emplace_back([&, t] {
      std::vector<std::unique_ptr<StreamReader>> streams;
      for (int s = 0; s < 8; ++s) {
        std::vector<std::string> order = keys;
        std::rotate(order.begin(), order.begin() + (t * 8 + s) % n, order.end());
        streams.push_back(
            store->open_stream(order, StreamOptions{.depth = 6, .channels = 3, .use_once = true}));
      }
      for (int round = 0; round < n; ++round) {
        for (auto& st : streams) {
          Result<StreamValue> v = st->next();
          if (!v) {
            ++bad;
            continue;
          }
          std::string got;
          v->append_to(got);
          const int i = std::stoi(v->key().substr(5));
          if (got != value_for(i, kChunk)) ++bad;
        }
      }
    });
  }
  for (auto& th : consumers) th.join();
  stop.store(true);
  watcher.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_FALSE(over.load());
  EXPECT_GT(lane_peak.load(), 0);
  EXPECT_LE(lane_peak.load(), lane_cap);
  EXPECT_EQ(StoreTiers::memory(*store).use_once_bytes(), 0);
  EXPECT_EQ(store->stats().flash_read_buffer_used, 0);
}

// Generation `gen` of key i: the generation in text, then seeded bytes.
std::string generation(int i, int gen, size_t size) {
  std::string head = std::to_string(1000000 + gen);
  return head + value_for(static_cast<uint64_t>(i + 1000 * gen), size - head.size());
}

TEST(StreamConcurrentTest, OverwritesRacingStreamsNeverMixVersions) {
  TempDir dir;
  auto store = open_store(stream_config(dir));
  const int n = 24;
  const size_t size = 2 * kChunk + 11;
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    keys.push_back(stream_key(i));
    ASSERT_TRUE(store->put(keys.back(), generation(i, 0, size)));
  }
  to_flash_only(*store, keys);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::mt19937_64 rng(7);
    for (int gen = 1; gen < 200 && !stop.load(); ++gen) {
      const int i = static_cast<int>(rng() % n);
      if (rng() % 5 == 0)
        store->remove(keys[i]);
      else
        EXPECT_TRUE(store->put(keys[i], generation(i, gen, size)));
      if (gen % 20 == 0) {
        EXPECT_TRUE(store->persist_all().is_ok());
        for (const std::string& k : keys) StoreTiers::memory(*store).remove(k);
      }
    }
  });
  std::atomic<int> torn{0}, served{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (int pass = 0; pass < 6; ++pass) {
        auto st = store->open_stream(
            keys, StreamOptions{.depth = 4, .channels = 2, .use_once = (t + pass) % 2 == 0});
        for (int i = 0; i < n; ++i) {
          Result<StreamValue> v = st->next();
          if (!v) continue;  // deleted: absent is a valid answer
          std::string got;
          v->append_to(got);
          const int gen = got.size() == size ? std::stoi(got.substr(0, 7)) - 1000000 : -1;
          if (gen < 0 || gen >= 200 || got != generation(i, gen, size)) ++torn;
          ++served;
        }
      }
    });
  }
  for (auto& th : readers) th.join();
  stop.store(true);
  writer.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(served.load(), 0);
}

TEST(StreamConcurrentTest, StreamsDroppedMidWayReleaseEverything) {
  TempDir dir;
  Config c = stream_config(dir);
  c.backing_latency_ns = 200'000;
  auto store = open_store(c);
  std::vector<std::string> keys = put_tiles(*store, 32, kChunk);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 10; ++round) {
        auto st =
            store->open_stream(keys, StreamOptions{.depth = 8, .channels = 4, .use_once = true});
        for (int i = 0; i < (t + round) % 5; ++i) EXPECT_TRUE(st->next());
        if (round % 2 == 0) st->reset();
      }  // destroyed with reads in flight
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(testing::eventually([&] {
    return StoreTiers::memory(*store).use_once_bytes() == 0 &&
           store->stats().flash_read_buffer_used == 0;
  }));
  EXPECT_GT(store->metrics().counter("tierkv_stream_wasted_total", "").value(), 0u);
}

}  // namespace
}  // namespace tierkv
