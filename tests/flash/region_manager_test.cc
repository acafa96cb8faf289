// RegionManager's contract: a region is free, written (FIFO, oldest first)
// or draining, and the last pin of a draining region frees it. Checked
// against a model over seeded random operations, then case by case.
#include "flash/region_manager.h"

#include "flash/reinsertion_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
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
  ASSERT_EQ(regions.take_victim(), r);
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
          ASSERT_EQ(regions.next_victim(), r);
          ASSERT_EQ(regions.take_victim(), r);
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

TEST_F(RegionManagerTest, TheVictimIsTheOldestOnceItsWritesLanded) {
  regions.reset(8);
  regions.finish_restore();
  for (uint64_t seq = 1; seq <= 3; ++seq) regions.start_written(*regions.take_free(), seq);
  const uint32_t oldest = regions.written().front();
  regions.state(oldest).pending_writes = 1;
  EXPECT_FALSE(regions.next_victim());
  regions.state(oldest).pending_writes = 0;
  EXPECT_EQ(regions.next_victim(), oldest);
  EXPECT_EQ(regions.take_victim(), oldest);
  EXPECT_EQ(regions.written().size(), 2u);
}

// The reclaimer copies from the two oldest written regions, oldest first and
// each once, only when fewer than two regions are free, never from one with
// writes in flight, and never from the newest (the log is filling it).
TEST_F(RegionManagerTest, CopiesFromTheOldestRegionsOnceEachWhenFewAreFree) {
  regions.reset(8);
  regions.finish_restore();
  for (uint64_t seq = 1; seq <= 6; ++seq) regions.start_written(*regions.take_free(), seq);
  const std::deque<uint32_t> fifo = regions.written();
  EXPECT_FALSE(regions.next_to_copy());  // two free
  regions.take_free();
  regions.state(fifo[0]).pending_writes = 1;
  EXPECT_FALSE(regions.next_to_copy());
  regions.state(fifo[0]).pending_writes = 0;
  ASSERT_EQ(regions.next_to_copy(), fifo[0]);
  regions.mark_copied(fifo[0]);
  ASSERT_EQ(regions.next_to_copy(), fifo[1]);
  regions.mark_copied(fifo[1]);
  EXPECT_FALSE(regions.next_to_copy());  // the third oldest waits its turn
  // A writer reclaims the oldest: the third oldest becomes the second.
  regions.take_victim();
  ASSERT_EQ(regions.next_to_copy(), fifo[2]);
  regions.mark_copied(fifo[2]);
  while (regions.written().size() > 1) regions.take_victim();
  EXPECT_FALSE(regions.next_to_copy());  // only the newest is left
}

TEST_F(RegionManagerTest, ATablePersistedIsRestoredAsItWas) {
  regions.reset(6);
  regions.finish_restore();
  for (uint64_t seq = 5; seq <= 8; ++seq) {
    const uint32_t r = *regions.take_free();
    regions.start_written(r, seq);
    regions.add_fill(r, seq * 1000);
  }
  (void)regions.take_victim();  // a hole in the FIFO's order of regions
  std::string image;
  ASSERT_TRUE(regions.persist([&](const void* p, size_t n) {
    image.append(static_cast<const char*>(p), n);
    return true;
  }));
  auto restore_from = [&](std::string bytes, uint32_t written) {
    RegionManager other{draining};
    other.reset(6);
    size_t at = 0;
    const char* why = other.restore(
        [&](void* p, size_t n) {
          if (bytes.size() - at < n) return false;
          std::memcpy(p, bytes.data() + at, n);
          at += n;
          return true;
        },
        written, 1 << 20);
    if (!why) other.finish_restore();
    return std::make_pair(why ? std::string(why) : std::string(),
                          why ? std::deque<uint32_t>{} : other.written());
  };
  auto [why, fifo] = restore_from(image, 3);
  EXPECT_EQ(why, "");
  EXPECT_EQ(fifo, regions.written());
  EXPECT_EQ(restore_from(image.substr(0, image.size() - 1), 3).first, "bad region order");
  EXPECT_EQ(restore_from(image.substr(0, 40), 3).first, "truncated region table");
  std::string repeated = image;
  std::memcpy(repeated.data() + repeated.size() - 4, repeated.data() + repeated.size() - 8, 4);
  EXPECT_EQ(restore_from(repeated, 3).first, "bad region order");
  std::string overfull = image;
  const uint64_t too_much = (1 << 20) + 1;
  std::memcpy(overfull.data() + 8, &too_much, 8);
  EXPECT_EQ(restore_from(overfull, 3).first, "implausible region fill");
}

TEST(HitsReinsertionPolicyTest, CopiesUpToItsShareOfEachRegion) {
  HitsReinsertionPolicy policy(1000, 0.2);
  ReinsertCandidate c;
  policy.begin_region({});
  EXPECT_TRUE(policy.admit(c, 150));
  policy.copied(150);
  EXPECT_FALSE(policy.admit(c, 51));
  EXPECT_TRUE(policy.admit(c, 50));
  policy.copied(50);
  EXPECT_FALSE(policy.admit(c, 1));
  policy.begin_region({});  // the next region has its own share
  EXPECT_TRUE(policy.admit(c, 200));
  // The first copy of a region fits whatever its size; the next must fit.
  policy.begin_region({});
  EXPECT_TRUE(policy.admit(c, 900));
  policy.copied(900);
  EXPECT_FALSE(policy.admit(c, 1));
}

// Copies read less often than fresh chunks get only the probe share, and
// the full share comes back once copies are read more often again.
TEST(HitsReinsertionPolicyTest, CopiesItsFullShareOnlyWhileCopiesAreReadMore) {
  HitsReinsertionPolicy policy(10000, 0.2);
  ReinsertCandidate c;
  const RegionYield unread_copies{.fresh = 100, .fresh_read = 30, .copies = 40, .copies_read = 4};
  policy.begin_region(unread_copies);
  EXPECT_FALSE(policy.evidence().copying);
  EXPECT_NEAR(policy.evidence().fresh_read_share, 0.3, 1e-6);
  EXPECT_NEAR(policy.evidence().copies_read_share, 0.1, 1e-6);
  EXPECT_TRUE(policy.admit(c, 150));  // the probe share: 2 % of the region
  policy.copied(150);
  EXPECT_FALSE(policy.admit(c, 51));
  for (int i = 0; i < 10; ++i) {
    policy.begin_region({.fresh = 100, .fresh_read = 10, .copies = 40, .copies_read = 30});
  }
  EXPECT_TRUE(policy.evidence().copying);
  EXPECT_TRUE(policy.admit(c, 1500));
  policy.copied(1500);
  EXPECT_FALSE(policy.admit(c, 501));
}

// Too few copies to judge: the full share, so that evidence comes in.
TEST(HitsReinsertionPolicyTest, CopiesItsFullShareUntilItHasSeenEnoughCopies) {
  HitsReinsertionPolicy policy(10000, 0.2);
  ReinsertCandidate c;
  policy.begin_region({.fresh = 100, .fresh_read = 50, .copies = 10, .copies_read = 0});
  EXPECT_TRUE(policy.evidence().copying);
  EXPECT_TRUE(policy.admit(c, 2000));
}

}  // namespace
}  // namespace tierkv::flash
