// The prefetch throttle's state machine, on a clock the test drives:
// deduplication with a TTL, in-flight entries that never expire, the
// table's cap (also with TTL 0), the saturation cooldown and its early
// exit, exponential backoff while prefetches fail or go unread and its
// reset, and the demand kick's bypass limit. A seeded random run checks
// the table never passes its cap whatever the order of events.
#include "store/prefetch/prefetch_throttle.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "core/hash.h"

namespace tierkv {
namespace {

PrefetchThrottleOptions options() {
  PrefetchThrottleOptions o;
  o.dedup_ttl_ms = 1000;
  o.max_entries = 16 * PrefetchThrottle::kShards;
  o.cooldown_ms = 100;
  o.max_cooldown_ms = 800;
  o.kick_max_failures = 2;
  return o;
}

ThrottleVerdict admit(PrefetchThrottle& t, const std::string& key, int64_t now) {
  return t.admit(key, hash64(key), now);
}

void finish(PrefetchThrottle& t, const std::string& key, ThrottleOutcome o, int64_t now) {
  t.finish(key, hash64(key), o, now);
}

TEST(PrefetchThrottleTest, DeduplicatesWithinTheTtl) {
  PrefetchThrottle t(options());
  EXPECT_EQ(admit(t, "a", 0), ThrottleVerdict::kGo);
  EXPECT_EQ(admit(t, "a", 10), ThrottleVerdict::kDuplicate) << "in flight";
  finish(t, "a", ThrottleOutcome::kSaturated, 20);
  EXPECT_EQ(admit(t, "a", 500), ThrottleVerdict::kDuplicate) << "failed within the TTL";
  EXPECT_EQ(admit(t, "a", 1019), ThrottleVerdict::kDuplicate);
  EXPECT_EQ(admit(t, "a", 1020), ThrottleVerdict::kGo) << "TTL over: prefetch again";
  EXPECT_EQ(admit(t, "b", 1020), ThrottleVerdict::kGo) << "another key is independent";
  // A promoted key leaves the table at once: evicted later, it may come back.
  finish(t, "b", ThrottleOutcome::kPromoted, 1030);
  EXPECT_EQ(admit(t, "b", 1031), ThrottleVerdict::kGo);
}

TEST(PrefetchThrottleTest, InFlightEntriesNeverExpire) {
  PrefetchThrottle t(options());
  ASSERT_EQ(admit(t, "slow", 0), ThrottleVerdict::kGo);
  // Far past the TTL, and with a full shard swept: still a duplicate.
  EXPECT_EQ(admit(t, "slow", 1'000'000), ThrottleVerdict::kDuplicate);
  for (int i = 0; i < 2000; ++i) (void)admit(t, "k" + std::to_string(i), 2'000'000);
  EXPECT_EQ(admit(t, "slow", 3'000'000), ThrottleVerdict::kDuplicate);
}

TEST(PrefetchThrottleTest, TableHasAHardCap) {
  PrefetchThrottleOptions o = options();
  PrefetchThrottle t(o);
  int full = 0;
  for (int i = 0; i < 5000; ++i)
    if (admit(t, "k" + std::to_string(i), 0) == ThrottleVerdict::kTableFull) ++full;
  EXPECT_LE(t.entries(), static_cast<size_t>(o.max_entries));
  EXPECT_GT(full, 0) << "5000 in-flight keys cannot fit a table of " << o.max_entries;
  // Settled entries past their TTL make room again.
  for (int i = 0; i < 5000; ++i) finish(t, "k" + std::to_string(i), ThrottleOutcome::kFailed, 0);
  EXPECT_EQ(admit(t, "fresh", 5000), ThrottleVerdict::kGo);
}

TEST(PrefetchThrottleTest, TtlZeroInsertsNothing) {
  PrefetchThrottleOptions o = options();
  o.dedup_ttl_ms = 0;
  PrefetchThrottle t(o);
  for (int i = 0; i < 10000; ++i)
    EXPECT_EQ(admit(t, "k" + std::to_string(i), i), ThrottleVerdict::kGo);
  EXPECT_EQ(t.entries(), 0u) << "TTL 0 must not grow a table";
  EXPECT_EQ(admit(t, "k1", 20000), ThrottleVerdict::kGo) << "no dedup memory at TTL 0";
}

TEST(PrefetchThrottleTest, FirstSaturationStartsACooldown) {
  PrefetchThrottle t(options());
  ASSERT_EQ(admit(t, "a", 0), ThrottleVerdict::kGo);
  ASSERT_EQ(admit(t, "b", 0), ThrottleVerdict::kGo);
  finish(t, "a", ThrottleOutcome::kSaturated, 10);
  EXPECT_EQ(t.cooldowns_entered(), 1u);
  EXPECT_TRUE(t.cooling_down(10));
  EXPECT_EQ(t.cooldown_remaining_ms(10), 100);
  EXPECT_EQ(admit(t, "c", 50), ThrottleVerdict::kCoolingDown) << "the batch stops here";
  // A second failure during the cooldown does not start another one.
  finish(t, "b", ThrottleOutcome::kSaturated, 60);
  EXPECT_EQ(t.cooldowns_entered(), 1u);
  EXPECT_FALSE(t.cooling_down(110));
  EXPECT_EQ(admit(t, "c", 110), ThrottleVerdict::kGo);
}

TEST(PrefetchThrottleTest, NeutralOutcomesDoNotCoolDown) {
  PrefetchThrottle t(options());
  for (int i = 0; i < 50; ++i) {
    std::string k = "k" + std::to_string(i);
    ASSERT_EQ(admit(t, k, i), ThrottleVerdict::kGo);
    finish(t, k, ThrottleOutcome::kNeutral, i);
  }
  EXPECT_EQ(t.cooldowns_entered(), 0u);
  EXPECT_DOUBLE_EQ(t.recent_success_ratio(), 1.0);
}

// Saturates once per cooldown and returns the cooldown length each time.
std::vector<int64_t> saturate_repeatedly(PrefetchThrottle& t, int times, int64_t& now) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < times; ++i) {
    std::string k = "s" + std::to_string(i) + "@" + std::to_string(now);
    EXPECT_EQ(admit(t, k, now), ThrottleVerdict::kGo);
    finish(t, k, ThrottleOutcome::kSaturated, now);
    lengths.push_back(t.cooldown_remaining_ms(now));
    now += lengths.back();
  }
  return lengths;
}

TEST(PrefetchThrottleTest, CooldownGrowsWhileFailingAndResetsOnRecovery) {
  PrefetchThrottle t(options());
  int64_t now = 0;
  std::vector<int64_t> lengths = saturate_repeatedly(t, 6, now);
  EXPECT_EQ(lengths, (std::vector<int64_t>{100, 200, 400, 800, 800, 800}))
      << "doubles from cooldown_ms up to max_cooldown_ms";
  // Successes bring the recent ratio back over the threshold: reset.
  for (int i = 0; i < 40; ++i) {
    std::string k = "ok" + std::to_string(i);
    ASSERT_EQ(admit(t, k, now), ThrottleVerdict::kGo);
    finish(t, k, ThrottleOutcome::kPromoted, now);
  }
  EXPECT_EQ(t.cooldown_length_ms(), 100);
  EXPECT_EQ(saturate_repeatedly(t, 1, now)[0], 100);
}

TEST(PrefetchThrottleTest, LowAccuracyAlsoBacksOff) {
  PrefetchThrottle t(options());
  int64_t now = 0;
  // Every prefetch promotes, but none is read before its lease ends.
  for (int i = 0; i < 40; ++i) {
    std::string k = "p" + std::to_string(i);
    ASSERT_EQ(admit(t, k, now), ThrottleVerdict::kGo);
    finish(t, k, ThrottleOutcome::kPromoted, now);
  }
  t.observe_accuracy(/*reads=*/1, /*wasted=*/30);
  EXPECT_LT(t.recent_accuracy(), 0.1);
  std::vector<int64_t> lengths = saturate_repeatedly(t, 3, now);
  EXPECT_EQ(lengths, (std::vector<int64_t>{100, 200, 400}));
  // Reads catch up: accuracy recovers and the next success resets.
  t.observe_accuracy(200, 30);
  EXPECT_GT(t.recent_accuracy(), 0.5);
  ASSERT_EQ(admit(t, "good", now), ThrottleVerdict::kGo);
  finish(t, "good", ThrottleOutcome::kPromoted, now);
  // The success ratio is 40 good of 43: no backoff left.
  EXPECT_EQ(t.cooldown_length_ms(), 100);
}

TEST(PrefetchThrottleTest, KickBypassesTheCooldownOnlyUntilItFailsNTimes) {
  PrefetchThrottle t(options());  // kick_max_failures = 2
  ASSERT_EQ(admit(t, "a", 0), ThrottleVerdict::kGo);
  finish(t, "a", ThrottleOutcome::kSaturated, 0);
  ASSERT_TRUE(t.cooling_down(1));
  EXPECT_TRUE(t.admit_kick(1)) << "a demand kick bypasses the probe cooldown";
  t.finish_kick(ThrottleOutcome::kSaturated, 1);
  EXPECT_TRUE(t.admit_kick(2));
  t.finish_kick(ThrottleOutcome::kSaturated, 2);
  EXPECT_FALSE(t.admit_kick(3)) << "two kicks in a row failed: kicks obey the cooldown now";
  EXPECT_TRUE(t.admit_kick(100)) << "no cooldown: kicks go";
  t.finish_kick(ThrottleOutcome::kPromoted, 100);
  // After a success the bypass is available again during a cooldown.
  ASSERT_EQ(admit(t, "b", 100), ThrottleVerdict::kGo);
  finish(t, "b", ThrottleOutcome::kSaturated, 100);
  ASSERT_TRUE(t.cooling_down(101));
  EXPECT_TRUE(t.admit_kick(101));
}

TEST(PrefetchThrottleTest, RuntimeOptionsTakeEffect) {
  PrefetchThrottle t(options());
  PrefetchThrottleOptions o = options();
  o.dedup_ttl_ms = 0;
  o.cooldown_ms = 7;
  o.max_cooldown_ms = 7;
  t.set_options(o);
  ASSERT_EQ(admit(t, "a", 0), ThrottleVerdict::kGo);
  EXPECT_EQ(admit(t, "a", 0), ThrottleVerdict::kGo) << "TTL 0: no dedup";
  finish(t, "a", ThrottleOutcome::kSaturated, 0);
  EXPECT_EQ(t.cooldown_remaining_ms(0), 7);
}

// Seeded random events: the table never passes its cap, a key in flight is
// never admitted twice, and a settled key is a duplicate exactly within
// its TTL.
TEST(PrefetchThrottleTest, RandomEventsKeepTheInvariants) {
  PrefetchThrottleOptions o = options();
  o.cooldown_ms = 0;  // no cooldown, so every verdict is about the table
  o.max_cooldown_ms = 0;
  PrefetchThrottle t(o);
  std::mt19937_64 rng(42);
  std::set<std::string> in_flight;
  std::map<std::string, int64_t> settled_until;
  int64_t now = 0;
  for (int step = 0; step < 20000; ++step) {
    now += static_cast<int64_t>(rng() % 20);
    std::string k = "k" + std::to_string(rng() % 400);
    if (rng() % 2 == 0 && in_flight.count(k)) {
      // Only a failure is remembered for the TTL.
      const bool failed = rng() % 2 == 0;
      finish(t, k, failed ? ThrottleOutcome::kFailed : ThrottleOutcome::kNeutral, now);
      in_flight.erase(k);
      if (failed)
        settled_until[k] = now + o.dedup_ttl_ms;
      else
        settled_until.erase(k);
      continue;
    }
    ThrottleVerdict v = admit(t, k, now);
    if (in_flight.count(k)) {
      ASSERT_EQ(v, ThrottleVerdict::kDuplicate) << k << " in flight admitted twice";
    } else if (settled_until.count(k) && now < settled_until[k]) {
      ASSERT_EQ(v, ThrottleVerdict::kDuplicate) << k << " within its TTL";
    } else if (v == ThrottleVerdict::kGo) {
      in_flight.insert(k);
    } else {
      ASSERT_EQ(v, ThrottleVerdict::kTableFull);
    }
    ASSERT_LE(t.entries(), static_cast<size_t>(o.max_entries));
  }
}

}  // namespace
}  // namespace tierkv
