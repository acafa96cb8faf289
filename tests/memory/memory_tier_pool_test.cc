// The memory tier's chunk buffers: full chunks live in pooled buffers that
// eviction hands to the next write, values are never corrupted by the reuse,
// and the tier's used bytes plus the idle buffers stay within the budget.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "memory/memory_tier.h"
#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

using testing::key_of;
using testing::make_value;

constexpr uint32_t kChunk = 64 << 10;

MemoryTierOptions small_tier(int64_t budget) {
  MemoryTierOptions o;
  o.budget_bytes = budget;
  o.chunk_size = kChunk;
  o.shards = 4;
  return o;
}

// The model: what each live key must read back as. Seeded random puts
// (whole chunks and ragged tails), overwrites and removes under eviction
// pressure; after every step the tier stays within its budget counting the
// idle buffers, and every key the tier still holds reads back exactly.
TEST(MemoryTierPoolTest, RandomChurnReusesBuffersWithinBudgetAndKeepsValues) {
  const int64_t budget = 4 << 20;
  MemoryTier t(small_tier(budget));
  std::mt19937_64 rng(20261204);
  std::map<std::string, std::pair<uint64_t, size_t>> model;  // key -> (seed, size)
  for (int step = 0; step < 3000; ++step) {
    std::string key = key_of(static_cast<int>(rng() % 96));
    if (rng() % 5 == 0) {
      t.remove(key);
      model.erase(key);
      continue;
    }
    size_t chunks = 1 + rng() % 6;
    size_t size = chunks * kChunk - (rng() % 3 == 0 ? rng() % kChunk : 0);
    uint64_t seed = rng();
    ASSERT_TRUE(t.put(key, make_value(key, seed, size))) << "step " << step;
    model[key] = {seed, size};
    MemoryTierStats st = t.stats();
    ASSERT_LE(st.used_bytes + st.buffer_pool.idle_bytes, budget) << "step " << step;
  }
  size_t checked = 0;
  for (const auto& [key, value] : model) {
    auto v = t.get(key);
    if (!v) continue;  // evicted: allowed, memory is a cache
    ASSERT_EQ(v->to_string(), make_value(key, value.first, value.second)) << key;
    ++checked;
  }
  EXPECT_GT(checked, 0u);
  BufferPoolStats pool = t.stats().buffer_pool;
  // Eviction freed full chunks and the next puts took them: most full
  // chunks must come from the pool, not from the allocator.
  EXPECT_GT(pool.reused, 4 * pool.fresh) << "reused " << pool.reused << " fresh " << pool.fresh;
}

TEST(MemoryTierPoolTest, BudgetCutGivesIdleBuffersBack) {
  MemoryTier t(small_tier(8 << 20));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(t.put(key_of(i), std::string(4 * kChunk, 'v')));
  t.clear();
  ASSERT_GT(t.stats().buffer_pool.idle_bytes, 0);
  ASSERT_TRUE(t.set_budget(1 << 20).is_ok());
  EXPECT_LE(t.stats().buffer_pool.idle_bytes + t.stats().used_bytes, 1 << 20);
}

TEST(MemoryTierPoolTest, AWriterAdoptsAReadBufferInsteadOfCopying) {
  MemoryTier t(small_tier(8 << 20));
  const std::string value = make_value("k", 7, 2 * kChunk);
  Result<ObjectWriter> w = t.prepare("k", value.size());
  ASSERT_TRUE(w);
  // As a flash read hands it over: a record header block, then the bytes.
  for (size_t i = 0; i < 2; ++i) {
    AlignedBuffer read = t.buffer_pool().take(kChunk + kBlockSize);
    std::memcpy(read.data() + 100, value.data() + i * kChunk, kChunk);
    const char* bytes = read.data() + 100;
    ASSERT_TRUE(w->adopt(i, read, 100));
    EXPECT_TRUE(read.empty());
    EXPECT_EQ(w->chunk_data(i), bytes);  // the same bytes, not a copy
  }
  // A buffer larger than the chunk is charged is refused (the caller copies).
  AlignedBuffer too_big(2 * kChunk);
  EXPECT_FALSE(w->adopt(0, too_big, 0));
  ChunkPin kept = w->pin(1);
  ASSERT_TRUE(t.publish(std::move(*w)));
  EXPECT_EQ(t.get("k")->to_string(), value);
  EXPECT_EQ(kept.bytes(), std::string_view(value).substr(kChunk));
}

// A value from Chunk::kPooledMin to kLargeAllocation keeps its bytes in a
// pooled buffer of its whole 1 KiB granules (a 16 KiB value costs 16 KiB
// and its headers, no granule more), which the next value of its size
// reuses; a smaller one stays on the heap.
TEST(MemoryTierPoolTest, AMiddlingValueTakesAPooledBufferOfItsWholeGranules) {
  MemoryTierOptions o = small_tier(8 << 20);
  o.chunk_size = 1 << 20;
  MemoryTier t(o);
  constexpr int64_t kHeaders = 512;  // object, chunk header, policy entry
  auto used = [&] { return t.stats().used_bytes; };
  struct Case {
    const char* key;
    size_t size;
    int64_t buffer;
  };
  for (const Case& c : {Case{"a", 16 << 10, 16 << 10}, Case{"b", 50000, 50176},
                        Case{"c", (128 << 10) - 1, 128 << 10}}) {
    const int64_t before = used();
    ASSERT_TRUE(t.put(c.key, make_value(c.key, 1, c.size)));
    EXPECT_GE(used() - before, c.buffer) << c.key;
    EXPECT_LT(used() - before, c.buffer + kHeaders) << c.key;
  }
  const BufferPoolStats after_puts = t.stats().buffer_pool;
  EXPECT_EQ(after_puts.fresh, 3u);
  t.remove("a");
  ASSERT_TRUE(t.put("d", make_value("d", 2, 16 << 10)));
  EXPECT_EQ(t.stats().buffer_pool.reused, after_puts.reused + 1) << "a's buffer is d's";
  ASSERT_TRUE(t.put("small", make_value("small", 3, (16 << 10) - 1)));
  EXPECT_EQ(t.stats().buffer_pool.fresh, 3u) << "under kPooledMin: a heap block";
  EXPECT_EQ(t.get("b")->to_string(), make_value("b", 1, 50000));
  EXPECT_EQ(t.get("d")->to_string(), make_value("d", 2, 16 << 10));
  EXPECT_EQ(t.get("small")->to_string(), make_value("small", 3, (16 << 10) - 1));
}

// A value shorter than a chunk but of at least kLargeAllocation bytes (a
// 256 KiB KV-cache block in 1 MiB chunks) has a buffer of its own, so a
// promotion keeps the read's buffer for it too; a small one is inline and
// is copied.
TEST(MemoryTierPoolTest, AShortChunkOfWholePagesAdoptsTooAndASmallOneDoesNot) {
  MemoryTierOptions o = small_tier(8 << 20);
  o.chunk_size = 1 << 20;
  MemoryTier t(o);
  const std::string value = make_value("short", 3, 256 << 10);
  Result<ObjectWriter> w = t.prepare("short", value.size());
  ASSERT_TRUE(w);
  AlignedBuffer read(value.size() + kBlockSize, AlignedBuffer::Uninitialized{});
  std::memcpy(read.data() + 200, value.data(), value.size());
  ASSERT_TRUE(w->adopt(0, read, 200));
  ASSERT_TRUE(t.publish(std::move(*w)));
  EXPECT_EQ(t.get("short")->to_string(), value);

  Result<ObjectWriter> small = t.prepare("small", 4096);
  ASSERT_TRUE(small);
  AlignedBuffer page(2 * kBlockSize);
  EXPECT_FALSE(small->adopt(0, page, 0)) << "an inline chunk keeps its bytes";
}

}  // namespace
}  // namespace tierkv::memory
