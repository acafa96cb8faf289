// MemoryTier: lazy and active expiry, TTL bookkeeping, and SCAN.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "core/clock.h"
#include "memory/memory_tier.h"
#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

using testing::key_of;

MemoryTierOptions opts(uint32_t shards = 4) {
  MemoryTierOptions o;
  o.budget_bytes = 64 << 20;
  o.chunk_size = 4096;
  o.shards = shards;
  return o;
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST(ExpiryTest, LazyExpiryOnAccess) {
  MemoryTier t(opts());
  // Margins are wide: this also runs under sanitizers on a loaded machine.
  ASSERT_TRUE(t.put("k", "v", WriteOptions{.expire_at_ms = unix_time_ms() + 300}));
  EXPECT_TRUE(t.contains("k"));
  EXPECT_GT(t.stat("k")->expire_at_ms, 0);
  sleep_ms(350);
  EXPECT_EQ(t.object_count(), 1u) << "nothing removed it yet";
  EXPECT_EQ(t.get("k").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.object_count(), 0u);
  EXPECT_EQ(t.stats().expired_objects, 1u);
  EXPECT_EQ(t.used_bytes(), t.stats().index_bytes) << "bytes returned";
}

TEST(ExpiryTest, PastExpiryIsInvisibleAtOnce) {
  MemoryTier t(opts());
  ASSERT_TRUE(t.put("k", "v", WriteOptions{.expire_at_ms = unix_time_ms() - 1}));
  EXPECT_FALSE(t.contains("k"));
  EXPECT_FALSE(t.stat("k"));
  EXPECT_FALSE(t.remove("k"));
}

TEST(ExpiryTest, SetAndClearExpiry) {
  MemoryTier t(opts());
  ASSERT_TRUE(t.put("k", "v"));
  EXPECT_FALSE(t.set_expiry("absent", unix_time_ms() + 10));
  ASSERT_TRUE(t.set_expiry("k", unix_time_ms() + 300));
  ASSERT_TRUE(t.set_expiry("k", 0));  // PERSIST
  EXPECT_EQ(t.stat("k")->expire_at_ms, 0);
  sleep_ms(350);
  EXPECT_TRUE(t.contains("k"));
  EXPECT_EQ(t.expire_cycle(unix_time_ms()), 0u);
  ASSERT_TRUE(t.set_expiry("k", unix_time_ms() + 20));
  sleep_ms(40);
  EXPECT_FALSE(t.contains("k"));
}

TEST(ExpiryTest, OverwriteDropsOrKeepsTtl) {
  MemoryTier t(opts());
  int64_t at = unix_time_ms() + 100000;
  ASSERT_TRUE(t.put("k", "a", WriteOptions{.expire_at_ms = at}));
  ASSERT_TRUE(t.put("k", "b", WriteOptions{.keep_ttl = true}));
  EXPECT_EQ(t.stat("k")->expire_at_ms, at);
  ASSERT_TRUE(t.put("k", "c"));  // a plain SET clears the TTL
  EXPECT_EQ(t.stat("k")->expire_at_ms, 0);
  EXPECT_EQ(t.expire_cycle(at + 1), 0u) << "the TTL list must not keep the old version";
  EXPECT_TRUE(t.contains("k"));
}

TEST(ExpiryTest, ActiveCycleRemovesExpiredKeysOnly) {
  MemoryTier t(opts(1));
  int64_t now = unix_time_ms();
  for (int i = 0; i < 200; ++i) {
    int64_t at = i < 100 ? now + 300 : now + 3600000;
    ASSERT_TRUE(t.put(key_of(i), "v", WriteOptions{.expire_at_ms = at}));
  }
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(t.set_expiry(key_of(i), 0));  // keep 0..9
  for (int i = 10; i < 20; ++i) ASSERT_TRUE(t.remove(key_of(i)));        // gone anyway
  for (int i = 200; i < 220; ++i) ASSERT_TRUE(t.put(key_of(i), "v"));    // never expire
  sleep_ms(350);
  // Sampling stops early when few sampled keys are expired; repeat cycles.
  size_t expired = 0;
  for (int round = 0; round < 500 && t.object_count() > 130; ++round)
    expired += t.expire_cycle(unix_time_ms());
  EXPECT_EQ(expired, 80u);
  EXPECT_EQ(t.object_count(), 130u);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(t.contains(key_of(i))) << i;
  for (int i = 20; i < 100; ++i) EXPECT_FALSE(t.contains(key_of(i))) << i;
  for (int i = 100; i < 220; ++i) EXPECT_TRUE(t.contains(key_of(i))) << i;
}

TEST(ExpiryTest, BackgroundThreadExpiresWithoutAccess) {
  MemoryTier t(opts());
  int64_t now = unix_time_ms();
  for (int i = 0; i < 300; ++i)
    ASSERT_TRUE(t.put(key_of(i), "v", WriteOptions{.expire_at_ms = now + 30}));
  int64_t base = t.stats().index_bytes;
  t.start_active_expiry(100);
  for (int i = 0; i < 200 && t.object_count() > 0; ++i) sleep_ms(10);
  t.stop_active_expiry();
  EXPECT_EQ(t.object_count(), 0u);
  EXPECT_EQ(t.stats().expired_objects, 300u);
  EXPECT_EQ(t.used_bytes(), base);
}

TEST(ExpiryTest, RateChangesWhileTheThreadRuns) {
  MemoryTier t(opts());
  t.start_active_expiry(0);  // the thread runs, but expires nothing
  int64_t now = unix_time_ms();
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(t.put(key_of(i), "v", WriteOptions{.expire_at_ms = now + 20}));
  sleep_ms(300);
  EXPECT_EQ(t.object_count(), 100u) << "hz 0: lazy expiry only";
  t.start_active_expiry(100);  // as CONFIG SET active-expire-hz does
  for (int i = 0; i < 200 && t.object_count() > 0; ++i) sleep_ms(10);
  EXPECT_EQ(t.object_count(), 0u);
  t.start_active_expiry(0);
  sleep_ms(50);  // let a cycle under way finish
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(t.put(key_of(i), "v", WriteOptions{.expire_at_ms = unix_time_ms() + 20}));
  sleep_ms(300);
  EXPECT_EQ(t.object_count(), 100u) << "back to 0: the thread stopped expiring";
  t.stop_active_expiry();
}

TEST(ExpiryTest, LeaseCapChangesAtRunTime) {
  MemoryTier t(opts());
  ASSERT_TRUE(t.put("a", std::string(8192, 'a')));
  ASSERT_TRUE(t.put("b", std::string(8192, 'b')));
  t.set_lease_max_fraction(0);
  EXPECT_EQ(t.grant_lease("a", 60000).code(), StatusCode::kBusy);
  EXPECT_EQ(t.stats().leased_bytes, 0);
  t.set_lease_max_fraction(0.5);
  EXPECT_TRUE(t.grant_lease("a", 60000).is_ok());
  EXPECT_GT(t.stats().leased_bytes, 0);
  t.set_lease_max_fraction(0);  // granted leases stay; new ones are refused
  EXPECT_EQ(t.grant_lease("b", 60000).code(), StatusCode::kBusy);
  EXPECT_TRUE(t.stat("a")->chunks[0].leased);
}

TEST(ExpiryTest, ExpiryOfAPinnedObjectKeepsTheView) {
  MemoryTier t(opts());
  ASSERT_TRUE(t.put("k", "value", WriteOptions{.expire_at_ms = unix_time_ms() + 200}));
  auto view = t.get("k");
  ASSERT_TRUE(view);
  sleep_ms(250);
  EXPECT_EQ(t.expire_cycle(unix_time_ms()), 1u);
  EXPECT_EQ(view->to_string(), "value");
}

std::map<std::string, int> scan_all(MemoryTier& t, size_t count) {
  std::map<std::string, int> seen;
  uint64_t cursor = 0;
  int pages = 0;
  do {
    ScanPage page = t.scan(cursor, count);
    EXPECT_LE(page.keys.size(), count);
    for (auto& k : page.keys) ++seen[k];
    cursor = page.next_cursor;
  } while (cursor != 0 && ++pages < 100000);
  return seen;
}

TEST(ScanTest, FullIterationReturnsEveryKeyOnce) {
  for (uint32_t shards : {1u, 8u}) {
    for (size_t count : {1ul, 7ul, 10ul, 5000ul}) {
      MemoryTier t(opts(shards));
      for (int i = 0; i < 1000; ++i) ASSERT_TRUE(t.put(key_of(i), "v"));
      auto seen = scan_all(t, count);
      ASSERT_EQ(seen.size(), 1000u) << shards << "/" << count;
      for (auto& [k, n] : seen) ASSERT_EQ(n, 1) << k;
    }
  }
}

TEST(ScanTest, EmptyAndExpired) {
  MemoryTier t(opts());
  ScanPage p = t.scan(0, 10);
  EXPECT_TRUE(p.keys.empty());
  EXPECT_EQ(p.next_cursor, 0u);
  ASSERT_TRUE(t.put("live", "v"));
  ASSERT_TRUE(t.put("dead", "v", WriteOptions{.expire_at_ms = unix_time_ms() - 1}));
  auto seen = scan_all(t, 10);
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen.count("live"), 1u);
}

TEST(ScanTest, StableKeysAreReturnedUnderConcurrentWrites) {
  MemoryTier t(opts(8));
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(t.put(key_of(i), "v"));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load() && i < 1000000; ++i) {
      std::string k = "tmp:" + std::to_string(i % 3000);
      if (i % 2 == 0)
        (void)t.put(k, "x");
      else
        t.remove(k);
    }
  });
  for (int round = 0; round < 5; ++round) {
    auto seen = scan_all(t, 13);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(seen[key_of(i)], 1) << key_of(i);
  }
  stop = true;
  writer.join();
}

}  // namespace
}  // namespace tierkv::memory
