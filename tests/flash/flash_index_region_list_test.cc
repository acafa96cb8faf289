// FlashIndex::drop_listed against drop_region: once a reinsertion walk has
// listed a region's chunks, dropping by the list must leave the index
// exactly as the full walk would, whatever happened to those chunks since
// (settled by the round, removed, superseded, given an expiry), and for
// keyed and compact entries alike, with hashes forced to collide or not.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "flash/flash_index.h"

namespace tierkv::flash {
namespace {

constexpr uint32_t kRegions = 6;
constexpr uint32_t kListed = 2;  // the region the walk lists
constexpr uint32_t kCopies = 7;  // where relocations and new versions go

std::string key_of(int i) {
  return "key:" + std::to_string(i);
}

// Applies the same seeded operations to every index it is given.
class Script {
 public:
  Script(uint64_t seed, int keys) : rng_(seed), keys_(keys) {}

  // Objects of 1 chunk (compact) or 3 chunks (keyed), chunks spread over
  // the regions at distinct blocks; a third of the chunks read.
  void populate(FlashIndex& a, FlashIndex& b) {
    for (int i = 0; i < keys_; ++i) {
      const bool multi = pick(3) == 0;
      const uint32_t chunks = multi ? 3 : 1;
      const uint64_t size = multi ? 3 << 20 : 200;
      for (uint32_t c = 0; c < chunks; ++c) {
        const uint64_t l = next_location(static_cast<uint32_t>(pick(kRegions)));
        for (FlashIndex* x : {&a, &b})
          x->add(key_of(i), x->key_hash(key_of(i)), c, 1, size, l, chunks);
      }
      for (uint32_t c = 0; c < chunks; ++c) {
        if (pick(3) != 0) continue;
        for (FlashIndex* x : {&a, &b})
          x->lookup(key_of(i), x->key_hash(key_of(i)), c, std::nullopt, true);
      }
    }
  }

  // What may happen between the walk and the reclaim: the round settles
  // each marked chunk; clients remove keys, write new versions elsewhere,
  // and change expiries.
  void churn(FlashIndex& a, FlashIndex& b, const std::vector<ReinsertCandidate>& hits) {
    for (const ReinsertCandidate& h : hits) {
      const int what = pick(3);
      const uint64_t to = next_location(kCopies);
      for (FlashIndex* x : {&a, &b}) {
        if (what == 0) x->relocate(h.key, h.key_hash, h.chunk_index, h.version, to);
        if (what == 1) x->keep_in_place(h.key, h.key_hash, h.chunk_index, h.location);
        if (what == 2) x->drop_chunk(h.key, h.key_hash, h.chunk_index, h.location);
      }
    }
    for (int n = 0; n < keys_ / 2; ++n) {
      const std::string key = key_of(pick(keys_));
      const int what = pick(3);
      const uint64_t to = next_location(kCopies);
      for (FlashIndex* x : {&a, &b}) {
        const uint64_t hash = x->key_hash(key);
        if (what == 0) x->remove(key, hash);
        if (what == 1) x->add(key, hash, 0, 2, 200, to, 1);
        if (what == 2) x->set_expiry(key, hash, 1, 1'000'000 + n);
      }
    }
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  uint64_t next_location(uint32_t region) {
    return location::pack(region, (1 + next_block_[region]++) * location::kBlock, 200);
  }

  std::mt19937_64 rng_;
  const int keys_;
  uint64_t next_block_[kCopies + 1] = {};
};

void expect_same(const FlashIndex& a, const FlashIndex& b, int keys) {
  EXPECT_EQ(a.object_count(), b.object_count());
  EXPECT_EQ(a.compact_count(), b.compact_count());
  EXPECT_EQ(a.chunk_count(), b.chunk_count());
  for (int i = 0; i < keys; ++i) {
    const std::string key = key_of(i);
    const std::optional<FlashObjectInfo> x = a.object(key, a.key_hash(key));
    const std::optional<FlashObjectInfo> y = b.object(key, b.key_hash(key));
    ASSERT_EQ(x.has_value(), y.has_value()) << key;
    if (!x) continue;
    EXPECT_EQ(x->version, y->version) << key;
    EXPECT_EQ(x->chunks, y->chunks) << key;
    EXPECT_EQ(x->expire_at_ms, y->expire_at_ms) << key;
  }
}

class RegionListTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RegionListTest, DropsByTheListWhatTheFullWalkDrops) {
  const uint64_t mask = GetParam();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    constexpr int kKeys = 400;
    FlashIndex listed(4, 0, mask);
    FlashIndex walked(4, 0, mask);
    Script script(seed, kKeys);
    script.populate(listed, walked);

    std::vector<ReinsertCandidate> hits, walked_hits;
    std::vector<RegionResident> residents;
    RegionYield yield, walked_yield;
    listed.mark_for_reinsertion(kListed, hits, yield, &residents);
    walked.mark_for_reinsertion(kListed, walked_hits, walked_yield);
    ASSERT_EQ(hits.size(), walked_hits.size());
    EXPECT_EQ(residents.size(), yield.fresh + yield.copies);
    EXPECT_GT(residents.size(), 0u);
    script.churn(listed, walked, hits);

    const size_t in_region = walked.count_in_region(kListed);
    EXPECT_EQ(listed.count_in_region(kListed), in_region);
    EXPECT_EQ(listed.drop_listed(kListed, residents), walked.drop_region(kListed));
    EXPECT_EQ(listed.count_in_region(kListed), 0u);
    EXPECT_EQ(walked.count_in_region(kListed), 0u);
    expect_same(listed, walked, kKeys);
  }
}

// Unmasked hashes, and hashes cut to 10 bits: keys then share keyed slots
// and compact idents, and replace each other.
INSTANTIATE_TEST_SUITE_P(Hashes, RegionListTest,
                         ::testing::Values(~uint64_t{0}, uint64_t{0x3ff} << 54 | 0x3));

// A list names each chunk by its key and place: a key whose entry points
// elsewhere now (a newer version, written after the walk) keeps it.
TEST(RegionListTest, LeavesAChunkThatMovedSinceTheList) {
  FlashIndex index;
  const uint64_t h = index.key_hash("k");
  const uint64_t first = location::pack(kListed, 4096, 200);
  ASSERT_TRUE(index.add("k", h, 0, 1, 200, first, 1));
  std::vector<ReinsertCandidate> hits;
  std::vector<RegionResident> residents;
  RegionYield yield;
  index.mark_for_reinsertion(kListed, hits, yield, &residents);
  ASSERT_EQ(residents.size(), 1u);
  ASSERT_TRUE(index.add("k", h, 0, 2, 200, location::pack(kCopies, 4096, 200), 1));
  EXPECT_EQ(index.drop_listed(kListed, residents), 0u);
  ASSERT_TRUE(index.lookup("k", h, 0, std::nullopt, false));
  EXPECT_EQ(index.lookup("k", h, 0, std::nullopt, false)->version, 2u);
}

// A table sized for millions of objects is walked a slice of buckets per
// hold of a shard's lock: the walk still finds every chunk of the region,
// and marks every read one, in every slice.
TEST(RegionListTest, ASlicedWalkFindsEveryChunkOfItsRegion) {
  FlashIndex index(4, uint64_t{1} << 22);  // 16 K buckets a shard: 16 slices
  int read_in_region = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string key = key_of(i);
    const auto region = static_cast<uint32_t>(i % 4);
    const uint64_t l = location::pack(region, (1 + i / 4) * location::kBlock, 200);
    ASSERT_TRUE(index.add(key, index.key_hash(key), 0, 1, 200, l, 1));
    if (i % 3 != 0) continue;
    index.lookup(key, index.key_hash(key), 0, std::nullopt, true);
    read_in_region += region == kListed ? 1 : 0;
  }
  ASSERT_EQ(index.compact_count(), 20000u);
  std::vector<ReinsertCandidate> hits;
  std::vector<RegionResident> residents;
  RegionYield yield;
  EXPECT_EQ(index.mark_for_reinsertion(kListed, hits, yield, &residents),
            static_cast<size_t>(read_in_region));
  EXPECT_EQ(yield.fresh, 5000u);
  EXPECT_EQ(residents.size(), 5000u);
  EXPECT_EQ(index.count_in_region(kListed), 5000u - read_in_region);  // marked: relocating
  EXPECT_EQ(index.drop_listed(kListed, residents), 5000u - read_in_region);
  EXPECT_EQ(index.count_in_region(kListed), 0u);
}

}  // namespace
}  // namespace tierkv::flash
