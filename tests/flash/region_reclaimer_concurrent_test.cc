// RegionManager's reclaimer thread: it copies from the oldest written
// regions ahead of the writers, oldest first and each once, never from one
// with writes in flight and never from the newest, runs each round's steps
// in order with the device read and the submit outside the write lock, and
// stops. A writer thread takes, reclaims and fills regions meanwhile (TSan).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "flash/region_manager.h"
#include "flash/region_reclaimer.h"
#include "flash/reinsertion_policy.h"

namespace tierkv::flash {
namespace {

// Copies as FlashTier does with no chunk to keep: the region stays written,
// pinned from the mark to the append.
class ModelCopier : public RegionCopier {
 public:
  ModelCopier(Mutex& mu, RegionManager& regions) : mu_(mu), regions_(regions) {}
  bool may_copy() const override { return allowed.load(); }
  void mark_kept(uint32_t region) override {
    EXPECT_EQ(step_, 0);
    step_ = 1;
    EXPECT_GT(regions_.state(region).seq, last_seq_) << "oldest first, each once";
    last_seq_ = regions_.state(region).seq;
    EXPECT_EQ(regions_.state(region).pending_writes, 0u);
    EXPECT_NE(regions_.written().back(), region) << "never the region being filled";
    MutexLock pins(regions_.pin_mutex());
    regions_.pin_locked(region);
    region_ = region;
  }
  void read_kept() override {
    EXPECT_EQ(step_, 1);
    step_ = 2;
    // The write lock is free while the device is read: it can be taken
    // here. Other threads (the test's waits, a writer) hold it only for
    // moments, so it is tried until a generous deadline.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!mu_.try_lock()) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "read_kept() under the write lock";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    mu_.unlock();
  }
  void append_kept() override {
    EXPECT_EQ(step_, 2);
    step_ = 3;
    for (uint32_t r : regions_.unpin({&region_, 1})) regions_.unpin_last(r);
  }
  void submit() override {
    EXPECT_EQ(step_, 3);
    step_ = 0;
    rounds.fetch_add(1);
  }

  std::atomic<bool> allowed{true};
  std::atomic<int> rounds{0};

 private:
  Mutex& mu_;
  RegionManager& regions_;
  int step_ = 0;
  uint64_t last_seq_ = 0;
  uint32_t region_ = 0;
};

class RegionReclaimerTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kRegions = 10;
  void SetUp() override {
    MutexLock lock(mu);
    regions.reset(kRegions);
    regions.finish_restore();
  }
  // The copier goes before the manager: its thread must stop first.
  void TearDown() override { regions.stop_reclaimer(); }
  // Takes a free region and writes it (write lock held).
  bool write_one() {
    std::optional<uint32_t> r = regions.take_free();
    if (!r) return false;
    regions.start_written(*r, ++seq);
    regions.add_fill(*r, 4096);
    return true;
  }
  void start() {
    regions.start_reclaimer(mu, copier, std::make_unique<HitsReinsertionPolicy>(1 << 20));
  }

  MetricsRegistry registry;
  Gauge& draining = registry.gauge("test_regions_draining", "draining regions");
  Mutex mu;
  RegionManager regions{draining};
  ModelCopier copier{mu, regions};
  uint64_t seq = 0;
};

TEST_F(RegionReclaimerTest, CopiesFromTheTwoOldestRegionsAndFreesNone) {
  {
    MutexLock lock(mu);
    while (write_one()) {
    }
  }
  start();
  ASSERT_TRUE(regions.wait_for_reclaimer(std::chrono::seconds(30)));
  MutexLock lock(mu);
  EXPECT_EQ(regions.free_count(), 0u);
  EXPECT_EQ(regions.written().size(), kRegions);
  EXPECT_EQ(copier.rounds.load(), 2);
  EXPECT_FALSE(regions.next_to_copy());
}

TEST_F(RegionReclaimerTest, NeverCopiesFromARegionWithWritesInFlight) {
  {
    MutexLock lock(mu);
    while (write_one()) {
    }
    regions.state(regions.written().front()).pending_writes = 1;
  }
  start();
  // Nothing can go: the oldest is still being written.
  ASSERT_TRUE(regions.wait_for_reclaimer(std::chrono::seconds(30)));
  {
    MutexLock lock(mu);
    EXPECT_EQ(copier.rounds.load(), 0);
    regions.state(regions.written().front()).pending_writes = 0;
  }
  regions.wake_reclaimer();
  ASSERT_TRUE(regions.wait_for_reclaimer(std::chrono::seconds(30)));
  EXPECT_EQ(copier.rounds.load(), 2);
}

TEST_F(RegionReclaimerTest, WaitsWhileTheCopierRefusesAndStopsWhenAsked) {
  copier.allowed = false;
  {
    MutexLock lock(mu);
    while (write_one()) {
    }
  }
  start();
  EXPECT_TRUE(regions.wait_for_reclaimer(std::chrono::seconds(30)));
  EXPECT_EQ(copier.rounds.load(), 0);
  regions.stop_reclaimer();
  copier.allowed = true;
  regions.wake_reclaimer();  // stopped: nothing happens
  EXPECT_EQ(copier.rounds.load(), 0);
  regions.stop_reclaimer();  // idempotent
}

TEST_F(RegionReclaimerTest, AWriterReclaimingRegionsNeverSeesThemLost) {
  start();
  std::thread writer([&] {
    for (int i = 0; i < 5000; ++i) {
      MutexLock lock(mu);
      // The writers' own reclaim: the oldest goes, and is written again at
      // once unless the reclaimer still reads it (it drains until unpinned).
      while (!write_one() && regions.next_victim()) {
        const uint32_t r = regions.take_victim();
        bool writable = false;
        {
          MutexLock pins(regions.pin_mutex());
          writable = regions.reclaim_locked(r, /*self_pin=*/false).writable;
        }
        regions.empty(r);
        if (!writable) continue;
        regions.start_written(r, ++seq);
        regions.add_fill(r, 4096);
        break;
      }
      regions.wake_reclaimer();
    }
  });
  writer.join();
  ASSERT_TRUE(regions.wait_for_reclaimer(std::chrono::seconds(30)));
  regions.stop_reclaimer();
  MutexLock lock(mu);
  EXPECT_GT(copier.rounds.load(), 0);
  EXPECT_EQ(regions.draining_count(), 0u);  // every round unpinned its region
  EXPECT_EQ(regions.free_count() + regions.written().size(), kRegions);
  EXPECT_EQ(regions.used_bytes(), regions.written().size() * 4096);
}

}  // namespace
}  // namespace tierkv::flash
