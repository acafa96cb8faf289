// Key slots as Redis Cluster computes them (the cluster specification's
// reference values and hash-tag rules). tests/integration checks the same
// keys against a redis-server in cluster mode.
#include "cluster/key_slot.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace tierkv::cluster {
namespace {

TEST(KeySlotTest, Crc16IsXmodem) {
  EXPECT_EQ(crc16("123456789"), 0x31C3);  // the spec's check value
  EXPECT_EQ(crc16(""), 0);
}

TEST(KeySlotTest, SlicedCrcMatchesTheBytewiseOne) {
  std::mt19937 rng(16);
  for (size_t length = 0; length <= 70; ++length) {
    for (int round = 0; round < 50; ++round) {
      std::string s(length, '\0');
      for (char& c : s) c = static_cast<char>(rng());
      ASSERT_EQ(crc16(s), crc16_bytewise(s)) << length;
    }
  }
}

TEST(KeySlotTest, KnownSlots) {
  EXPECT_EQ(key_slot("foo"), 12182);
  EXPECT_EQ(key_slot("bar"), 5061);
  EXPECT_EQ(key_slot(""), 0);
}

TEST(KeySlotTest, HashTagsFollowTheSpec) {
  EXPECT_EQ(hashed_part("{user1000}.following"), "user1000");
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(hashed_part("foo{}{bar}"), "foo{}{bar}");  // empty tag: the whole key
  EXPECT_EQ(hashed_part("foo{{bar}}zap"), "{bar");     // first '{' to the next '}'
  EXPECT_EQ(hashed_part("foo{bar}{zap}"), "bar");      // the first tag only
  EXPECT_EQ(hashed_part("foo{bar"), "foo{bar");        // unclosed: the whole key
  EXPECT_EQ(hashed_part("}foo{bar}"), "bar");
}

TEST(KeySlotTest, KvCachePairsShareASlot) {
  EXPECT_EQ(key_slot("{chunk-8f3a}:metadata"), key_slot("{chunk-8f3a}:kv_bytes"));
  EXPECT_EQ(key_slot("{chunk-8f3a}:metadata"), key_slot("chunk-8f3a"));
}

TEST(KeySlotTest, SlotsSpreadEvenly) {
  std::vector<int> hits(kSlotCount / 1024, 0);
  for (int i = 0; i < 160000; ++i) ++hits[key_slot("key:" + std::to_string(i)) / 1024];
  for (int h : hits) {
    EXPECT_GT(h, 9000);
    EXPECT_LT(h, 11000);
  }
}

}  // namespace
}  // namespace tierkv::cluster
