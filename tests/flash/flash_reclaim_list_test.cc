// A writer's reclaim drops its region's chunks by the list the reclaimer's
// round made of them (FlashIndex::drop_listed), not by walking the whole
// index: with the reclaimer kept ahead, no reclaim walks. The tier checks
// every list-driven reclaim against a full walk (check_region_lists) and
// aborts on a chunk the list missed; what a client reads is checked against
// a model here.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "flash/flash_tier.h"
#include "flash/record.h"
#include "tests/flash/flash_test_util.h"

namespace tierkv::flash {
namespace {

using testing::pattern;
using testing::read_sync;
using testing::small_options;
using testing::TempDir;
using testing::write_sync;

// 16 regions of 256 KiB: records of 2-6 KiB, a few dozen a region.
FlashOptions list_options(const std::string& path, bool reinsertion, bool read_regions) {
  FlashOptions o = small_options(path);
  // A round finds its region's chunks by reading the region, or by a walk.
  o.round_read_min_chunks = read_regions ? 0 : UINT64_MAX;
  o.region_size = 256 << 10;
  o.size = layout_size(16, o.region_size);
  o.write_buffer_size = 64 << 10;
  o.reinsertion = reinsertion;
  return o;
}

// With and without reinsertion (without, the reclaimer's rounds only
// list), and rounds that read their region or walk the index.
class FlashReclaimListTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(FlashReclaimListTest, WritersReclaimByTheReclaimersListsAndKeepWhatIsLive) {
  const auto [reinsertion, read_regions] = GetParam();
  TempDir dir;
  auto tier = testing::open_or_die(list_options(dir.file("f"), reinsertion, read_regions));
  ASSERT_TRUE(tier);
  FlashTier& t = *tier;
  std::map<std::string, uint64_t> versions;  // key -> the last version written
  std::map<std::string, uint32_t> live;      // key -> its chunk count, if not removed
  constexpr int kKeys = 300;
  for (int i = 0; i < 3000; ++i) {
    const std::string key = "k" + std::to_string((i * 7919) % kKeys);
    const uint64_t version = ++versions[key];
    const size_t size = 2048 + (i % 5) * 1024;
    // Every tenth key has two chunks: a keyed index entry, not a compact one.
    const uint32_t chunks = key.back() == '0' ? 2 : 1;
    for (uint32_t c = 0; c < chunks; ++c) {
      ASSERT_TRUE(write_sync(t, {.key = key,
                                 .chunk_index = c,
                                 .version = version,
                                 .object_size = size * chunks,
                                 .chunk_count = chunks,
                                 .data = pattern(size, i * 2 + c)})
                      .is_ok());
    }
    live[key] = chunks;
    if (i % 3 == 0) (void)read_sync(t, key, 0);
    if (i % 17 == 0) {
      t.remove(key, version);
      live.erase(key);
    }
    // The reclaimer keeps ahead of the writers, as at a real writer's pace.
    ASSERT_TRUE(t.wait_for_reclaimer());
  }
  const FlashStats s = t.stats();
  EXPECT_GT(s.reclaims, 20u);
  EXPECT_EQ(s.reclaim_index_walks, 0u);
  if (!reinsertion) {
    EXPECT_EQ(s.reinsertions, 0u);
  }
  if (read_regions) {
    EXPECT_GT(s.reclaim_region_reads, 20u);
  } else {
    EXPECT_EQ(s.reclaim_region_reads, 0u);
  }
  // Whatever reclaim left is the last version written of a live key, and
  // no removed key is back.
  int present = 0;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "k" + std::to_string(k);
    if (!t.contains(key, 0)) continue;
    ASSERT_TRUE(live.contains(key)) << key << " was removed";
    EXPECT_TRUE(t.contains(key, 0, versions[key])) << key << " holds an older version";
    present += t.contains_object(key, versions[key], live[key]) ? 1 : 0;
  }
  EXPECT_GT(present, 0);
}

INSTANTIATE_TEST_SUITE_P(Rounds, FlashReclaimListTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Reinsert" : "List") +
                                  (std::get<1>(info.param) ? "ByRegionRead" : "ByIndexWalk");
                         });

}  // namespace
}  // namespace tierkv::flash
