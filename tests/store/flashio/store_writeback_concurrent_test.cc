// The Store's writeback thread at work while writers overwrite and remove
// their own keys, readers read, and another thread keeps changing
// dirty-max-fraction (off, aggressive, moderate). Afterwards every key holds
// exactly what its writer last left there, in memory or on flash. Run under
// ThreadSanitizer in CI (the name holds "concurrent").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "store/store.h"
#include "tests/store/store_test_util.h"

namespace tierkv {
namespace {

using testing::TempDir;
using testing::value_for;

constexpr int kWriters = 2;
constexpr int kKeysPerWriter = 24;
constexpr int kOps = 600;

std::string key_for(int writer, int k) {
  return "w" + std::to_string(writer) + ":" + std::to_string(k);
}

// Names its seed in its first 8 bytes, so any value read can be checked.
std::string value_of(uint64_t seed) {
  std::string v(8, '\0');
  std::memcpy(v.data(), &seed, 8);
  return v + value_for(seed, seed % (96 << 10));  // up to three 32 KiB chunks
}

bool whole(const std::string& bytes) {
  if (bytes.size() < 8) return false;
  uint64_t seed;
  std::memcpy(&seed, bytes.data(), 8);
  return bytes == value_of(seed);
}

TEST(StoreWritebackConcurrentTest, LastWritesSurviveWritebackAndFractionChanges) {
  TempDir dir;
  Config c;
  c.memory = 2 << 20;
  c.chunk_size = 32 << 10;
  c.memory_shards = 4;
  c.active_expire_hz = 0;
  c.flash_path = dir.file("flash.dat");
  c.flash_size = 64 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  c.dirty_max_fraction = 0.1;
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& store = **opened;

  // last[w][k]: the seed of the value writer w last wrote to key k; 0: removed.
  std::vector<std::vector<uint64_t>> last(kWriters, std::vector<uint64_t>(kKeysPerWriter, 0));
  std::atomic<int> writers_left{kWriters};
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w + 1);
      for (int op = 0; op < kOps; ++op) {
        int k = static_cast<int>(rng() % kKeysPerWriter);
        if (rng() % 8 == 0) {
          store.remove(key_for(w, k));
          last[w][k] = 0;
          continue;
        }
        uint64_t seed = rng() | 1;
        auto r = store.put(key_for(w, k), value_of(seed));
        if (r) {
          last[w][k] = seed;
        } else if (r.status().code() == StatusCode::kOutOfMemory) {
          // Refused before anything changed: the older value stays.
        } else {
          bad.fetch_add(1);
        }
      }
      writers_left.fetch_sub(1);
    });
  }
  threads.emplace_back([&] {  // reads: any value seen is whole
    std::mt19937_64 rng(50);
    for (int i = 0; i < 20000 && writers_left.load() > 0; ++i) {
      int w = static_cast<int>(rng() % kWriters), k = static_cast<int>(rng() % kKeysPerWriter);
      auto v = store.get(key_for(w, k));
      if (!v) continue;
      if (!whole(v->to_string())) bad.fetch_add(1);
    }
  });
  threads.emplace_back([&] {  // CONFIG SET dirty-max-fraction, over and over
    const double fractions[] = {1.0, 0.0, 0.3, 0.1};
    for (int i = 0; writers_left.load() > 0; ++i) {
      testing::set_dirty_fraction(store, fractions[i % 4]);
      (void)store.stats();
      std::this_thread::yield();
    }
    testing::set_dirty_fraction(store, 0.1);
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);

  for (int w = 0; w < kWriters; ++w) {
    for (int k = 0; k < kKeysPerWriter; ++k) {
      auto v = store.get(key_for(w, k));
      if (last[w][k] == 0) {
        EXPECT_FALSE(v) << key_for(w, k) << " was removed last";
        continue;
      }
      ASSERT_TRUE(v) << key_for(w, k) << ": " << v.status().to_string();
      EXPECT_EQ(v->to_string(), value_of(last[w][k])) << key_for(w, k);
    }
  }
  EXPECT_GT(store.metrics().counter("tierkv_writeback_objects_total", "").value(), 0u);
}

}  // namespace
}  // namespace tierkv
