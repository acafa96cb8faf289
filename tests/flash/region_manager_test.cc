// RegionManager's contract: a region is free, written (FIFO, oldest first)
// or draining, and the last pin of a draining region frees it. Checked
// against a model over seeded random operations, then case by case.
#include "flash/region_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

namespace tierkv::flash {
namespace {

class RegionManagerTest : public ::testing::Test {
 protected:
  MetricsRegistry registry;
  Gauge& draining = registry.gauge("test_regions_draining", "draining regions");
  RegionManager regions{draining};
};

TEST_F(RegionManagerTest, RecoveryRestoresTheFifoAndFreesTheRest) {
  regions.reset(6);
  regions.restore_written(4, 10, 4096);
  regions.restore_written(1, 12, 8192);
  regions.finish_restore();
  EXPECT_EQ(regions.written(), (std::deque<uint32_t>{4, 1}));
  EXPECT_EQ(regions.used_bytes(), 12288u);
  EXPECT_EQ(regions.free_count(), 4u);
  EXPECT_TRUE(regions.state(4).header_landed);
  EXPECT_EQ(regions.state(1).seq, 12u);
  std::set<uint32_t> free;
  while (auto r = regions.take_free()) free.insert(*r);
  EXPECT_EQ(free, (std::set<uint32_t>{0, 2, 3, 5}));
}

TEST_F(RegionManagerTest, ReclaimOfAPinnedRegionDrainsUntilTheLastUnpin) {
  regions.reset(2);
  regions.finish_restore();
  const uint32_t r = *regions.take_free();
  regions.start_written(r, 1);
  regions.add_fill(r, 4096);
  {
    MutexLock pins(regions.pin_mutex());
    regions.pin_locked(r);
    regions.pin_locked(r);
  }
  regions.pop_oldest();
  RegionManager::ReclaimPins reclaimed;
  {
    MutexLock pins(regions.pin_mutex());
    reclaimed = regions.reclaim_locked(r, /*self_pin=*/false);
  }
  regions.empty(r);
  EXPECT_TRUE(reclaimed.read_by_others);
  EXPECT_FALSE(reclaimed.writable);
  EXPECT_EQ(regions.used_bytes(), 0u);
  EXPECT_EQ(regions.draining_count(), 1u);
  EXPECT_EQ(draining.value(), 1);
  EXPECT_EQ(regions.free_count(), 1u);  // the other region only

  const uint32_t one[] = {r};
  EXPECT_TRUE(regions.unpin(one).empty());  // not the last pin
  const auto last = regions.unpin(one);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(regions.free_count(), 1u);  // not free until unpin_last()
  regions.unpin_last(r);
  EXPECT_EQ(regions.free_count(), 2u);
  EXPECT_EQ(regions.draining_count(), 0u);
  EXPECT_EQ(draining.value(), 0);
}

TEST_F(RegionManagerTest, UnpinnedReclaimIsWritableAtOnceAndSelfPinDrains) {
  regions.reset(2);
  RegionManager::ReclaimPins unpinned;
  RegionManager::ReclaimPins self;
  {
    MutexLock pins(regions.pin_mutex());
    unpinned = regions.reclaim_locked(0, false);
    self = regions.reclaim_locked(1, true);
  }
  EXPECT_TRUE(unpinned.writable);
  EXPECT_FALSE(unpinned.read_by_others);
  EXPECT_FALSE(self.writable);
  EXPECT_FALSE(self.read_by_others);
  regions.unpin_last(1);  // the reclaimer's own pin
  EXPECT_EQ(regions.take_free(), 1u);
}

TEST_F(RegionManagerTest, FreeAllKeepsPinsCountedButDrainsNothing) {
  regions.reset(3);
  regions.finish_restore();
  const uint32_t r = *regions.take_free();
  regions.start_written(r, 5);
  regions.add_fill(r, 4096);
  {
    MutexLock pins(regions.pin_mutex());
    regions.pin_locked(r);
    (void)regions.reclaim_locked(r, false);
  }
  regions.free_all();
  EXPECT_EQ(regions.free_count(), 3u);
  EXPECT_EQ(regions.used_bytes(), 0u);
  EXPECT_TRUE(regions.written().empty());
  EXPECT_EQ(regions.draining_count(), 0u);
  // The reader's late unpin does not free the region a second time.
  const uint32_t one[] = {r};
  EXPECT_TRUE(regions.unpin(one).empty());
  EXPECT_EQ(regions.free_count(), 3u);
}

// Seeded random life: take, fill, pin, reclaim oldest, unpin. The model
// says where each region is; free + written + draining always partition
// the regions, and used bytes equal the written regions' fills.
TEST_F(RegionManagerTest, RandomLifeMatchesTheModel) {
  constexpr uint32_t kRegions = 8;
  std::mt19937 rng(20261204);
  regions.reset(kRegions);
  regions.finish_restore();
  std::deque<uint32_t> fifo;
  std::map<uint32_t, uint64_t> fill;
  std::map<uint32_t, uint32_t> pins;
  std::set<uint32_t> draining_model;
  uint64_t seq = 0;
  for (int step = 0; step < 20000; ++step) {
    switch (rng() % 4) {
      case 0:
        if (auto r = regions.take_free()) {
          ASSERT_FALSE(draining_model.count(*r));
          ASSERT_EQ(std::count(fifo.begin(), fifo.end(), *r), 0);
          regions.start_written(*r, ++seq);
          const uint64_t bytes = 4096 * (1 + rng() % 8);
          regions.add_fill(*r, bytes);
          fifo.push_back(*r);
          fill[*r] = bytes;
        }
        break;
      case 1:
        if (!fifo.empty()) {
          const uint32_t r = fifo[rng() % fifo.size()];
          MutexLock lock(regions.pin_mutex());
          regions.pin_locked(r);
          ++pins[r];
        }
        break;
      case 2:
        if (!fifo.empty()) {
          const uint32_t r = fifo.front();
          ASSERT_EQ(regions.oldest(), r);
          regions.pop_oldest();
          fifo.pop_front();
          RegionManager::ReclaimPins got;
          {
            MutexLock lock(regions.pin_mutex());
            got = regions.reclaim_locked(r, false);
          }
          regions.empty(r);
          fill.erase(r);
          ASSERT_EQ(got.writable, pins[r] == 0);
          if (got.writable) {
            // Reused at once, as a writer that reclaims for itself does.
            regions.start_written(r, ++seq);
            regions.add_fill(r, 4096);
            fifo.push_back(r);
            fill[r] = 4096;
          } else {
            draining_model.insert(r);
          }
        }
        break;
      case 3: {
        std::vector<uint32_t> pinned;
        for (auto& [r, n] : pins)
          if (n > 0) pinned.push_back(r);
        if (pinned.empty()) break;
        const uint32_t r = pinned[rng() % pinned.size()];
        const uint32_t one[] = {r};
        auto last = regions.unpin(one);
        if (!last.empty()) {
          ASSERT_TRUE(draining_model.count(r));
          ASSERT_EQ(pins[r], 1u);
          regions.unpin_last(r);
          draining_model.erase(r);
        }
        --pins[r];
        break;
      }
    }
    uint64_t used = 0;
    for (auto& [r, b] : fill) used += b;
    ASSERT_EQ(regions.used_bytes(), used);
    ASSERT_EQ(regions.written(), fifo);
    ASSERT_EQ(regions.draining_count(), draining_model.size());
    ASSERT_EQ(regions.free_count() + fifo.size() + draining_model.size(), kRegions);
  }
}

}  // namespace
}  // namespace tierkv::flash
