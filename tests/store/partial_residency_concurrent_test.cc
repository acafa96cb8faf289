// Objects held in part (the chunk is the unit of memory residency) under
// eviction, overwrites, promotions and readers at once. The contract: every
// read, whole or ranged, returns bytes of one version, each chunk taken from
// memory or from flash; memory stays within its budget; at the end every key
// reads as its last acknowledged write. Run under ThreadSanitizer in CI.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "store/store.h"
#include "store/store_tiers.h"

namespace tierkv {
namespace {

constexpr uint32_t kKeys = 12;
constexpr uint64_t kChunk = 32 << 10;
constexpr uint64_t kSize = 24 * kChunk - 300;  // 24 chunks, a short last one

// The first 8 bytes name key and generation; the rest repeat a byte derived
// from both, so bytes of two versions in one read are detected.
char fill_of(uint32_t key, uint32_t gen) {
  return static_cast<char>('a' + (key * 31 + gen) % 26);
}

std::string make_value(uint32_t key, uint32_t gen) {
  std::string v(kSize, fill_of(key, gen));
  std::memcpy(v.data(), &key, 4);
  std::memcpy(v.data() + 4, &gen, 4);
  return v;
}

std::string key_name(uint32_t k) {
  return "p" + std::to_string(k);
}

// A range [off, off + bytes.size()) of some version of `key`: past the
// header every byte is that version's fill.
bool one_version(const std::string& bytes, uint64_t off) {
  const uint64_t from = off < 8 ? 8 - off : 0;
  for (uint64_t i = from + 1; i < bytes.size(); ++i)
    if (bytes[i] != bytes[from]) return false;
  return true;
}

TEST(PartialResidencyConcurrentTest, ReadsAreWholeVersionsWhileChunksComeAndGo) {
  std::string dir = "/tmp/tierkv-partial-conc-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  Config c;
  c.memory = 4 << 20;
  c.chunk_size = kChunk;
  c.memory_shards = 4;
  c.active_expire_hz = 0;
  c.flash_path = dir + "/flash.dat";
  c.flash_size = 64 << 20;
  c.region_size = 1 << 20;
  c.flash_preallocate = false;
  c.offload_policy = OffloadPolicy::kWriteThrough;  // clean at once: evicted by chunk
  c.promotion_threshold = 2;
  auto opened = Store::open(c);
  ASSERT_TRUE(opened) << opened.status().to_string();
  Store& store = **opened;

  std::vector<uint32_t> last_gen(kKeys, 0);
  for (uint32_t k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(store.put(key_name(k), make_value(k, 1)));
    last_gen[k] = 1;
  }

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, bad{0}, partial_seen{0}, over_budget{0};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {  // the one writer: overwrites, in order per key
    std::mt19937 rng(1);
    for (uint32_t gen = 2; gen < 160 && !stop; ++gen) {
      const uint32_t k = rng() % kKeys;
      if (store.put(key_name(k), make_value(k, gen))) last_gen[k] = gen;
      if (StoreTiers::memory(store).used_bytes() > StoreTiers::memory(store).budget_bytes())
        over_budget.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    stop = true;
  });
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(100 + r);
      while (!stop && reads.load() < 4000) {
        const uint32_t k = rng() % kKeys;
        const bool whole = rng() % 3 == 0;
        const uint64_t off = whole ? 0 : rng() % kSize;
        const uint64_t len = whole ? kSize : 1 + rng() % (5 * kChunk);
        auto v = store.get(key_name(k), off, len);
        reads.fetch_add(1);
        if (!v) {
          ADD_FAILURE() << "read " << key_name(k) << " " << off << "+" << len << ": "
                        << v.status().to_string();
          bad.fetch_add(1);
          continue;
        }
        std::string bytes;
        v->append_to(bytes);
        uint32_t got_key = k;
        if (off == 0 && bytes.size() >= 4) std::memcpy(&got_key, bytes.data(), 4);
        if (bytes.size() != std::min(len, kSize - off) || got_key != k ||
            !one_version(bytes, off)) {
          ADD_FAILURE() << "read " << key_name(k) << " " << off << "+" << len << ": "
                        << bytes.size() << " bytes, key " << got_key << ", one version "
                        << one_version(bytes, off);
          bad.fetch_add(1);
        }
      }
    });
  }
  threads.emplace_back([&] {  // watches residency: objects held in part must occur
    std::mt19937 rng(7);
    while (!stop) {
      std::optional<ObjectResidency> res = store.residency(key_name(rng() % kKeys));
      if (res && res->in_memory) {
        size_t held = 0;
        for (const ChunkResidency& ch : res->chunks) held += ch.in_memory ? 1 : 0;
        if (held < res->chunks.size()) partial_seen.fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(over_budget.load(), 0u);
  EXPECT_GT(reads.load(), 100u);
  EXPECT_GT(partial_seen.load(), 0u);
  // Key by key: the last acknowledged write.
  for (uint32_t k = 0; k < kKeys; ++k) {
    auto v = store.get(key_name(k));
    ASSERT_TRUE(v) << k;
    EXPECT_TRUE(v->to_string() == make_value(k, last_gen[k])) << "key " << k;
  }
  opened->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierkv
