// FlashIndex::drop_listed against drop_region: once a reinsertion walk has
// listed a region's chunks, dropping by the list must leave the index
// exactly as the full walk would, whatever happened to those chunks since
// (settled by the round, removed, superseded, given an expiry), and for
// keyed and compact entries alike, with hashes forced to collide or not.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
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
  // With `history`, a quarter of the keys first had a version whose
  // records newer ones superseded (left in their regions, indexed nowhere).
  void populate(FlashIndex& a, FlashIndex& b, bool history = false) {
    for (int i = 0; i < keys_; ++i) {
      const bool multi = pick(3) == 0;
      const uint32_t chunks = multi ? 3 : 1;
      const uint64_t size = multi ? 3 << 20 : 200;
      const uint64_t first = history && pick(4) == 0 ? 1 : 2;
      for (uint64_t version = first; version <= 2; ++version) {
        for (uint32_t c = 0; c < chunks; ++c) {
          const uint64_t l = next_location(static_cast<uint32_t>(pick(kRegions)));
          for (FlashIndex* x : {&a, &b})
            x->add(key_of(i), x->key_hash(key_of(i)), c, version, size, l, chunks);
          note_record(key_of(i), c, l, 0);
        }
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
        if (what == 1) x->add(key, hash, 0, 3, 200, to, 1);
        if (what == 2) x->set_expiry(key, hash, 2, 1'000'000 + n);
      }
    }
  }

  // Every record written to region kListed, in log order, with a tombstone
  // record among them now and then: what a parse of the region finds.
  const std::vector<ParsedRecord>& listed_records() const { return listed_records_; }

 private:
  void note_record(const std::string& key, uint32_t chunk, uint64_t location, uint16_t flags) {
    if (location::region(location) != kListed) return;
    ParsedRecord rec;
    rec.header.chunk_index = chunk;
    rec.header.flags = flags;
    rec.key = key;
    rec.location = location;
    listed_records_.push_back(rec);
    if (flags == 0 && pick(8) == 0) note_record(key, 0, next_location(kListed), kRecordTombstone);
  }
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  uint64_t next_location(uint32_t region) {
    return location::pack(region, (1 + next_block_[region]++) * location::kBlock, 200);
  }

  std::mt19937_64 rng_;
  const int keys_;
  uint64_t next_block_[kCopies + 1] = {};
  std::vector<ParsedRecord> listed_records_;
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

bool resident_less(const RegionResident& x, const RegionResident& y) {
  return std::tie(x.key_hash, x.chunk_index, x.location, x.compact) <
         std::tie(y.key_hash, y.chunk_index, y.location, y.compact);
}
bool hit_less(const ReinsertCandidate& x, const ReinsertCandidate& y) {
  return std::tie(x.key_hash, x.chunk_index, x.location) <
         std::tie(y.key_hash, y.chunk_index, y.location);
}

// mark_records, given every record of the region (superseded ones and
// tombstones among them), marks, counts and lists what the walk does, so
// that a reclaim by its list leaves the index as the walk's would.
TEST_P(RegionListTest, MarksByTheRegionsRecordsWhatTheWalkMarks) {
  const uint64_t mask = GetParam();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    constexpr int kKeys = 400;
    FlashIndex by_records(4, 0, mask);
    FlashIndex walked(4, 0, mask);
    Script script(seed, kKeys);
    script.populate(by_records, walked, /*history=*/true);

    std::vector<ReinsertCandidate> hits, walked_hits;
    std::vector<RegionResident> residents, walked_residents;
    RegionYield yield, walked_yield;
    const size_t marked =
        by_records.mark_records(kListed, script.listed_records(), &hits, &yield, residents);
    EXPECT_EQ(marked,
              walked.mark_for_reinsertion(kListed, walked_hits, walked_yield, &walked_residents));
    EXPECT_GT(marked, 0u);
    EXPECT_EQ(yield.fresh, walked_yield.fresh);
    EXPECT_EQ(yield.fresh_read, walked_yield.fresh_read);
    std::sort(residents.begin(), residents.end(), resident_less);
    std::sort(walked_residents.begin(), walked_residents.end(), resident_less);
    ASSERT_EQ(residents.size(), walked_residents.size());
    for (size_t i = 0; i < residents.size(); ++i) {
      EXPECT_FALSE(resident_less(residents[i], walked_residents[i]) ||
                   resident_less(walked_residents[i], residents[i]));
    }
    std::sort(hits.begin(), hits.end(), hit_less);
    std::sort(walked_hits.begin(), walked_hits.end(), hit_less);
    ASSERT_EQ(hits.size(), walked_hits.size());
    for (size_t i = 0; i < hits.size(); ++i) {
      EXPECT_EQ(hits[i].key, walked_hits[i].key);
      EXPECT_EQ(hits[i].key_hash, walked_hits[i].key_hash);
      EXPECT_EQ(hits[i].location, walked_hits[i].location);
      EXPECT_EQ(hits[i].version, walked_hits[i].version);
      EXPECT_EQ(hits[i].expire_at_ms, walked_hits[i].expire_at_ms);
    }
    script.churn(by_records, walked, hits);
    EXPECT_EQ(by_records.drop_listed(kListed, residents),
              walked.drop_listed(kListed, walked_residents));
    EXPECT_EQ(by_records.count_in_region(kListed), 0u);
    EXPECT_EQ(walked.count_in_region(kListed), 0u);
    expect_same(by_records, walked, kKeys);
  }
}

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
