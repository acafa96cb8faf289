#include "core/hash.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tierkv {
namespace {

TEST(HashTest, IsXxh3AndDeterministic) {
  // Reference value of XXH3-64 for the empty input (xxHash's test vectors).
  EXPECT_EQ(hash64(""), 0x2D06800538D394C2ULL);
  EXPECT_EQ(hash64("key"), hash64(std::string("key")));
  EXPECT_NE(hash64("key"), hash64("kez"));
}

TEST(HashTest, BinarySafe) {
  std::string a("a\0b", 3), b("a\0c", 3);
  EXPECT_NE(hash64(a), hash64(b));
  EXPECT_NE(hash64(a), hash64("a"));
}

TEST(HashTest, SeedChangesHash) {
  EXPECT_EQ(hash64("key", 0), hash64("key"));
  EXPECT_NE(hash64("key", 1), hash64("key", 2));
}

TEST(HashTest, ChunkHashDistinctPerIndexAndKey) {
  std::set<uint64_t> seen;
  for (int k = 0; k < 100; ++k) {
    std::string key = "key";
    key += std::to_string(k);
    uint64_t h = hash64(key);
    for (uint32_t i = 0; i < 100; ++i) seen.insert(chunk_hash(h, i));
  }
  EXPECT_EQ(seen.size(), 100u * 100u);
  EXPECT_NE(chunk_hash(1, 0), 1u);  // mixed, not the raw key hash
}

TEST(HashTest, TopBitsSpreadEvenly) {
  // Shards are picked by the top bits; 32 shards should each get ~1/32.
  int buckets[32] = {};
  constexpr int kKeys = 32000;
  for (int i = 0; i < kKeys; ++i) {
    std::string key = "k";
    key += std::to_string(i);
    ++buckets[hash64(key) >> 59];
  }
  for (int b : buckets) {
    EXPECT_GT(b, kKeys / 32 * 8 / 10);
    EXPECT_LT(b, kKeys / 32 * 12 / 10);
  }
}

}  // namespace
}  // namespace tierkv
