// The compact index (flash_index.h) at the tier: the contract.
// * A single-chunk object is indexed without its key; an object of more
//   chunks is keyed; a later chunk of a compact object's version widens it.
// * Hashes forced to collide (index_hash_mask_for_test): keys that share an
//   entry read their own value or miss, never another key's value; the last
//   writer of each shared entry reads; the same after a crash scan and
//   after a snapshot restart; key walks name only keys that are there.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/hash.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::open_or_die;
using testing::pattern;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

TEST(FlashCompactIndexTest, SingleChunksAreCompactAndALaterChunkWidensThem) {
  TempDir dir;
  auto tier = open_or_die(small_options(dir.file("f")));
  ASSERT_TRUE(tier);
  for (int i = 0; i < 50; ++i) {
    const std::string key = "one-" + std::to_string(i);
    ASSERT_TRUE(
        write_sync(*tier,
                   {.key = key, .version = 1u + i, .object_size = 300, .data = pattern(300, i)})
            .is_ok());
  }
  const std::string a = pattern(1000, 1), b = pattern(700, 2);
  ASSERT_TRUE(write_sync(*tier, {.key = "two",
                                 .chunk_index = 0,
                                 .version = 100,
                                 .object_size = 1700,
                                 .chunk_count = 2,
                                 .data = a})
                  .is_ok());
  ASSERT_TRUE(write_sync(*tier, {.key = "two",
                                 .chunk_index = 1,
                                 .version = 100,
                                 .object_size = 1700,
                                 .chunk_count = 2,
                                 .data = b})
                  .is_ok());
  // A writer that took its object for one chunk, then wrote a second.
  ASSERT_TRUE(write_sync(*tier, {.key = "grown",
                                 .chunk_index = 0,
                                 .version = 101,
                                 .object_size = 10,
                                 .chunk_count = 1,
                                 .data = "0123456789"})
                  .is_ok());
  EXPECT_EQ(tier->stats().compact_objects, 51u);
  ASSERT_TRUE(write_sync(*tier, {.key = "grown",
                                 .chunk_index = 1,
                                 .version = 101,
                                 .object_size = 20,
                                 .chunk_count = 2,
                                 .data = "abcdefghij"})
                  .is_ok());
  const FlashStats s = tier->stats();
  EXPECT_EQ(s.objects, 52u);
  EXPECT_EQ(s.compact_objects, 50u);
  EXPECT_EQ(*read_sync(*tier, "grown", 0), "0123456789");
  EXPECT_EQ(*read_sync(*tier, "grown", 1), "abcdefghij");
  EXPECT_EQ(tier->lookup("grown")->chunks, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(*read_sync(*tier, "two", 1), b);
  for (int i = 0; i < 50; ++i) {
    const std::string key = "one-" + std::to_string(i);
    EXPECT_EQ(*read_sync(*tier, key, 0), pattern(300, i)) << key;
    EXPECT_EQ(tier->summary(key)->object_size, 300u);
  }
}

// Keys written in order; the index keeps 4 bits of each hash, so 200 keys
// share 16 entries.
class ForcedCollisions {
 public:
  static constexpr uint64_t kMask = 0xF000000000000000ULL;
  static constexpr int kKeys = 200;

  static std::string key(int i) { return "collide-" + std::to_string(i); }
  static std::string value(int i) { return pattern(100 + i, 1000 + i); }

  // Every read is the key's own value or a miss; the last key written into
  // each entry reads. Returns the number of keys that read.
  static int check(FlashTier& tier) {
    std::map<uint64_t, int> last;  // shared hash -> last key written there
    for (int i = 0; i < kKeys; ++i) last[hash64(key(i)) & kMask] = i;
    int hits = 0;
    for (int i = 0; i < kKeys; ++i) {
      Result<std::string> got = read_sync(tier, key(i), 0);
      if (got.is_ok()) {
        EXPECT_EQ(*got, value(i)) << key(i) << " was served another key's value";
        ++hits;
      }
      if (last[hash64(key(i)) & kMask] == i) {
        EXPECT_TRUE(got.is_ok()) << key(i) << " was written last to its entry";
      }
    }
    // Walks name keys that read, each once.
    std::set<std::string> named;
    for (size_t s = 0; s < tier.key_shard_count(); ++s) {
      for (std::string& k : tier.keys_in_shard(s)) {
        EXPECT_TRUE(read_sync(tier, k, 0).is_ok()) << k;
        EXPECT_TRUE(named.insert(std::move(k)).second);
      }
    }
    EXPECT_EQ(named.size(), last.size());
    return hits;
  }
};

TEST(FlashCompactIndexTest, ForcedCollisionsNeverServeAnotherKeysValue) {
  TempDir dir;
  FlashOptions o = small_options(dir.file("f"));
  o.index_hash_mask_for_test = ForcedCollisions::kMask;
  {
    auto tier = open_or_die(o);
    ASSERT_TRUE(tier);
    for (int i = 0; i < ForcedCollisions::kKeys; ++i) {
      ASSERT_TRUE(write_sync(*tier, {.key = ForcedCollisions::key(i),
                                     .version = 1u + i,
                                     .data = ForcedCollisions::value(i)})
                      .is_ok());
    }
    EXPECT_LE(tier->stats().objects, 16u);
    EXPECT_EQ(ForcedCollisions::check(*tier), static_cast<int>(tier->stats().objects));
    // The losers' reads found another key's record.
    EXPECT_GT(tier->stats().key_collisions, 0u);
    EXPECT_EQ(tier->stats().checksum_failures, 0u);
  }  // no snapshot: the next open scans the log
  {
    auto tier = open_or_die(o);
    ASSERT_TRUE(tier);
    EXPECT_FALSE(tier->recovery().from_snapshot);
    ForcedCollisions::check(*tier);
    ASSERT_TRUE(tier->write_snapshot().is_ok());
  }
  auto tier = open_or_die(o);
  ASSERT_TRUE(tier);
  EXPECT_TRUE(tier->recovery().from_snapshot);
  ForcedCollisions::check(*tier);
}

}  // namespace
}  // namespace tierkv::flash
