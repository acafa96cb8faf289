// MemoryTier: each policy through the tier, use-once lane, pins, leases and
// budget accounting.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "core/clock.h"
#include "memory/memory_tier.h"
#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

constexpr size_t kValueSize = 1000;

// A one-shard tier whose budget holds exactly `capacity` objects with
// one-letter keys and kValueSize-byte values (the index is pre-sized, so
// it never grows during a test).
std::unique_ptr<MemoryTier> tier_holding(PolicyKind policy, int capacity,
                                         double lease_fraction = 0.25) {
  MemoryTierOptions o;
  o.chunk_size = 4096;
  o.shards = 1;
  o.policy = policy;
  o.expected_objects = 64;
  o.lease_max_fraction = lease_fraction;
  MemoryTier probe(o);
  o.budget_bytes =
      probe.used_bytes() + capacity * static_cast<int64_t>(probe.charge_for_object(1, kValueSize));
  return std::make_unique<MemoryTier>(o);
}

void put_all(MemoryTier& t, std::string_view keys, const WriteOptions& w = {}) {
  for (char c : keys) ASSERT_TRUE(t.put(std::string(1, c), std::string(kValueSize, c), w)) << c;
}

void get_all(MemoryTier& t, std::string_view keys) {
  for (char c : keys) ASSERT_TRUE(t.get(std::string(1, c))) << c;
}

std::string present(MemoryTier& t) {
  std::string out;
  for (char c = 'a'; c <= 'z'; ++c) {
    if (t.contains(std::string(1, c))) out += c;
  }
  return out;
}

TEST(TierPolicyTest, Lru) {
  auto t = tier_holding(PolicyKind::kLru, 4);
  put_all(*t, "abcd");
  get_all(*t, "a");
  put_all(*t, "e");
  EXPECT_EQ(present(*t), "acde");
  get_all(*t, "c");
  put_all(*t, "f");
  EXPECT_EQ(present(*t), "acef");
  EXPECT_EQ(t->stats().evicted_objects, 2u);
  EXPECT_LE(t->used_bytes(), t->budget_bytes());
}

TEST(TierPolicyTest, Clock) {
  auto t = tier_holding(PolicyKind::kClock, 4);
  put_all(*t, "abcd");
  get_all(*t, "b");
  put_all(*t, "e");  // hand at a: evicted
  EXPECT_EQ(present(*t), "bcde");
  put_all(*t, "f");  // b's bit cleared, c evicted
  EXPECT_EQ(present(*t), "bdef");
}

TEST(TierPolicyTest, Sieve) {
  auto t = tier_holding(PolicyKind::kSieve, 4);
  put_all(*t, "abcd");
  get_all(*t, "a");
  put_all(*t, "e");  // a visited: kept in place; b evicted
  EXPECT_EQ(present(*t), "acde");
  get_all(*t, "c");
  put_all(*t, "f");  // hand at c (visited): cleared; d evicted
  EXPECT_EQ(present(*t), "acef");
}

TEST(TierPolicyTest, S3Fifo) {
  auto t = tier_holding(PolicyKind::kS3Fifo, 4);
  put_all(*t, "abcd");
  get_all(*t, "b");
  put_all(*t, "e");  // a never hit: out of the small queue
  EXPECT_EQ(present(*t), "bcde");
  put_all(*t, "f");  // b hit: promoted to main; c goes
  EXPECT_EQ(present(*t), "bdef");
  put_all(*t, "gh");  // small still over its share: d, e go; b survives in main
  EXPECT_EQ(present(*t), "bfgh");
}

TEST(TierPolicyTest, MultiChunkObjectIsEvictedWhole) {
  MemoryTierOptions o;
  o.chunk_size = 4096;
  o.shards = 1;
  o.policy = PolicyKind::kLru;
  o.budget_bytes = 64 << 10;
  MemoryTier t(o);
  ASSERT_TRUE(t.put("big", std::string(5 * 4096, 'b')));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(t.put(testing::key_of(i), std::string(4000, 'x')));
  EXPECT_FALSE(t.contains("big"));
  EXPECT_GE(t.stats().evicted_chunks, t.stats().evicted_objects + 4);
  EXPECT_EQ(t.stats().chunks, t.stats().objects);  // no stray chunks of "big"
}

TEST(UseOnceLaneTest, EvictedBeforeAnythingThePolicyHolds) {
  for (PolicyKind p : kAllPolicies) {
    auto t = tier_holding(p, 4);
    put_all(*t, "abc");
    put_all(*t, "s", WriteOptions{.use_once = true});
    EXPECT_TRUE(t->stat("s")->chunks[0].use_once);
    // A use-once reader's hit does not move a use-once chunk out of the lane
    // (nor drop it: it is dirty, the only copy).
    ASSERT_TRUE(t->get("s", GetOptions{.offset = 0,
                                       .length = UINT64_MAX,
                                       .touch = true,
                                       .end_lease = true,
                                       .use_once = true}));
    put_all(*t, "e");
    EXPECT_EQ(present(*t), "abce") << policy_name(p);
  }
}

TEST(UseOnceLaneTest, APlainReadTakesTheChunkOutOfTheLane) {
  auto t = tier_holding(PolicyKind::kLru, 4);
  put_all(*t, "abc");
  put_all(*t, "s", WriteOptions{.use_once = true});
  get_all(*t, "s");  // not use-once for this reader: it joins the policy
  EXPECT_FALSE(t->stat("s")->chunks[0].use_once);
  put_all(*t, "e");
  EXPECT_EQ(present(*t), "bces");  // LRU: the oldest, "a", went instead
}

TEST(PinTest, PinnedChunkIsNeverEvicted) {
  for (PolicyKind p : kAllPolicies) {
    auto t = tier_holding(p, 4);
    put_all(*t, "abcd");
    auto view = t->get("a", GetOptions{.touch = false});
    ASSERT_TRUE(view);
    for (char c = 'e'; c <= 'z'; ++c) put_all(*t, std::string(1, c));
    EXPECT_TRUE(t->contains("a")) << policy_name(p);
    EXPECT_EQ(view->to_string(), std::string(kValueSize, 'a'));
    EXPECT_LE(t->used_bytes(), t->budget_bytes());
  }
}

TEST(PinTest, BudgetFullOfPinnedDataIsOutOfMemory) {
  auto t = tier_holding(PolicyKind::kS3Fifo, 4);
  put_all(*t, "abcd");
  std::vector<ObjectView> views;
  for (char c : std::string("abcd")) views.push_back(*t->get(std::string(1, c)));
  auto r = t->put("e", std::string(kValueSize, 'e'));
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(present(*t), "abcd");
  views.pop_back();  // d unpinned: now it can go
  EXPECT_TRUE(t->put("e", std::string(kValueSize, 'e')));
  EXPECT_EQ(present(*t), "abce");
}

TEST(PinTest, ViewOfEvictedObjectStaysValid) {
  auto t = tier_holding(PolicyKind::kLru, 4);
  put_all(*t, "abcd");
  auto view = t->get("a", GetOptions{.touch = false});
  ASSERT_TRUE(t->remove("a"));
  for (char c = 'e'; c <= 'z'; ++c) put_all(*t, std::string(1, c));
  EXPECT_EQ(view->to_string(), std::string(kValueSize, 'a'));
  // The detached chunk is still charged: only 3 objects fit meanwhile.
  EXPECT_EQ(t->object_count(), 3u);
}

TEST(LeaseTest, LeaseProtectsFromEviction) {
  auto t = tier_holding(PolicyKind::kLru, 4, 1.0);
  put_all(*t, "abcd");
  ASSERT_TRUE(t->grant_lease("a", 10000).is_ok());
  EXPECT_TRUE(t->stat("a")->chunks[0].leased);
  EXPECT_EQ(t->stats().leased_bytes, static_cast<int64_t>(kValueSize));
  put_all(*t, "efg");
  EXPECT_EQ(present(*t), "aefg");
  // A read consumes the lease; then a is an ordinary LRU tail again.
  ASSERT_TRUE(t->get("a", GetOptions{.touch = false}));
  EXPECT_FALSE(t->stat("a")->chunks[0].leased);
  EXPECT_EQ(t->stats().leased_bytes, 0);
  EXPECT_EQ(t->stats().lease_expired_unread, 0u);
  put_all(*t, "h");
  EXPECT_EQ(present(*t), "efgh");
}

// A lease by version goes only to that version: a promotion whose key was
// written after its install leases nothing, and the new value is not held.
TEST(LeaseTest, ALeaseByVersionSkipsAValueWrittenSince) {
  auto t = tier_holding(PolicyKind::kLru, 4, 1.0);
  auto first = t->put("a", std::string(kValueSize, 'a'));
  ASSERT_TRUE(first && first->written);
  auto second = t->put("a", std::string(kValueSize, 'b'));
  ASSERT_TRUE(second && second->written);
  ASSERT_NE(first->version, second->version);
  EXPECT_EQ(t->grant_lease("a", 10000, true, first->version).code(), StatusCode::kNotFound);
  EXPECT_FALSE(t->stat("a")->chunks[0].leased);
  EXPECT_EQ(t->stats().leased_bytes, 0);
  EXPECT_TRUE(t->grant_lease("a", 10000, true, second->version).is_ok());
  EXPECT_TRUE(t->stat("a")->chunks[0].leased);
}

TEST(LeaseTest, ExpiredLeaseNoLongerProtects) {
  auto t = tier_holding(PolicyKind::kLru, 4, 1.0);
  put_all(*t, "abcd");
  ASSERT_TRUE(t->grant_lease("a", 30).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  put_all(*t, "e");
  EXPECT_EQ(present(*t), "bcde");
  EXPECT_EQ(t->stats().lease_expired_unread, 1u);
  EXPECT_EQ(t->stats().leased_bytes, 0);
}

TEST(LeaseTest, LeasedBytesAreCapped) {
  auto t = tier_holding(PolicyKind::kLru, 8, 0.25);
  put_all(*t, "abcdefgh");
  int64_t cap = static_cast<int64_t>(static_cast<double>(t->budget_bytes()) * 0.25);
  int64_t fit = cap / static_cast<int64_t>(kValueSize);
  ASSERT_GE(fit, 1);
  ASSERT_LT(fit, 8);
  int granted = 0;
  Status last;
  for (char c : std::string("abcdefgh")) {
    last = t->grant_lease(std::string(1, c), 10000);
    if (!last.is_ok()) break;
    ++granted;
  }
  EXPECT_EQ(granted, fit);
  EXPECT_EQ(last.code(), StatusCode::kBusy);
  EXPECT_EQ(t->stats().lease_refused, 1u);
  EXPECT_EQ(t->stats().leased_bytes, fit * static_cast<int64_t>(kValueSize));
  // Renewing a lease needs no new room.
  EXPECT_TRUE(t->grant_lease("a", 20000).is_ok());
  EXPECT_EQ(t->grant_lease("zz", 100).code(), StatusCode::kNotFound);
}

TEST(LeaseTest, RunOutLeasesStopCountingAgainstTheCap) {
  auto t = tier_holding(PolicyKind::kLru, 8, 0.25);
  put_all(*t, "abcdefgh");
  int granted = 0;
  for (char c : std::string("abcdefg")) {
    if (!t->grant_lease(std::string(1, c), 300).is_ok()) break;
    ++granted;
  }
  ASSERT_GE(granted, 1);
  EXPECT_EQ(t->grant_lease("h", 10000).code(), StatusCode::kBusy);
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  // Nothing was evicted or read; the cap must not stay full of dead leases.
  EXPECT_TRUE(t->grant_lease("h", 10000).is_ok());
  EXPECT_GE(t->stats().lease_expired_unread, 1u);
  EXPECT_EQ(t->stats().evicted_objects, 0u);
}

TEST(LeaseTest, ActiveExpiryRetiresRunOutLeases) {
  auto t = tier_holding(PolicyKind::kLru, 4, 1.0);
  put_all(*t, "abcd");
  ASSERT_TRUE(t->grant_lease("a", 20).is_ok());
  ASSERT_TRUE(t->grant_lease("b", 20).is_ok());
  ASSERT_TRUE(t->grant_lease("c", 100000).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  t->expire_cycle(tierkv::unix_time_ms());
  EXPECT_EQ(t->stats().leased_bytes, static_cast<int64_t>(kValueSize));  // c's only
  EXPECT_EQ(t->stats().lease_expired_unread, 2u);
  EXPECT_FALSE(t->stat("a")->chunks[0].leased);
  EXPECT_TRUE(t->stat("c")->chunks[0].leased);
}

TEST(LeaseTest, AllOrNothingForMultiChunkObjects) {
  MemoryTierOptions o;
  o.chunk_size = 4096;
  o.budget_bytes = 1 << 20;
  o.lease_max_fraction = 10000.0 / (1 << 20);  // 10000 bytes of leases
  MemoryTier t(o);
  ASSERT_TRUE(t.put("big", std::string(4 * 4096, 'x')));
  EXPECT_EQ(t.grant_lease("big", 10000).code(), StatusCode::kBusy);
  auto big = t.stat("big");
  ASSERT_TRUE(big);
  for (const ChunkInfo& c : big->chunks) EXPECT_FALSE(c.leased);
  EXPECT_EQ(t.stats().leased_bytes, 0);
  ASSERT_TRUE(t.put("two", std::string(2 * 4096, 'x')));
  EXPECT_TRUE(t.grant_lease("two", 10000).is_ok());
  auto two = t.stat("two");
  ASSERT_TRUE(two);
  for (const ChunkInfo& c : two->chunks) EXPECT_TRUE(c.leased);
  // Removal ends the lease and gives its bytes back to the cap.
  EXPECT_TRUE(t.remove("two"));
  EXPECT_EQ(t.stats().leased_bytes, 0);
}

TEST(BudgetTest, AccountedBytesNeverPassTheBudget) {
  for (PolicyKind p : kAllPolicies) {
    MemoryTierOptions o;
    o.chunk_size = 4096;
    o.shards = 8;
    o.policy = p;
    o.budget_bytes = 1 << 20;
    MemoryTier t(o);
    std::mt19937_64 rng(11);
    int64_t now = tierkv::unix_time_ms();
    for (int i = 0; i < 3000; ++i) {
      std::string key = testing::key_of(static_cast<int>(rng() % 1000));
      WriteOptions w;
      if (i % 3 == 0) w.expire_at_ms = now + 3600000;
      auto r = t.put(key, std::string(1 + rng() % 20000, 'v'), w);
      ASSERT_TRUE(r) << r.status().to_string();
      ASSERT_LE(t.used_bytes(), t.budget_bytes()) << i;
      if (i % 5 == 0) (void)t.get(testing::key_of(static_cast<int>(rng() % 1000)));
      if (i % 7 == 0) t.remove(testing::key_of(static_cast<int>(rng() % 1000)));
    }
    EXPECT_GT(t.stats().evicted_objects, 0u);
    // Removing everything leaves only the index (which does not shrink).
    for (int i = 0; i < 1000; ++i) t.remove(testing::key_of(i));
    EXPECT_EQ(t.object_count(), 0u);
    EXPECT_EQ(t.used_bytes(), t.stats().index_bytes) << policy_name(p);
    EXPECT_GT(t.stats().index_bytes, 0);
    // clear() also drops the index tables.
    ASSERT_TRUE(t.put("k", "v"));
    t.clear();
    EXPECT_EQ(t.used_bytes(), 0) << policy_name(p);
    EXPECT_EQ(t.stats().index_bytes, 0);
  }
}

TEST(BudgetTest, IndexBaselineIsCharged) {
  MemoryTierOptions o;
  o.expected_objects = 100000;
  o.shards = 4;
  MemoryTier t(o);
  EXPECT_GT(t.used_bytes(), 100000 * 8);
  EXPECT_EQ(t.used_bytes(), t.stats().index_bytes);
  ASSERT_TRUE(t.put("k", "v"));
  ASSERT_TRUE(t.remove("k"));
  EXPECT_EQ(t.used_bytes(), t.stats().index_bytes);
}

TEST(BudgetTest, ShrinkingTheBudgetEvicts) {
  MemoryTierOptions o;
  o.chunk_size = 4096;
  o.budget_bytes = 4 << 20;
  MemoryTier t(o);
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(t.put(testing::key_of(i), std::string(4000, 'x')));
  ASSERT_TRUE(t.set_budget(1 << 20).is_ok());
  EXPECT_LE(t.used_bytes(), 1 << 20);
  EXPECT_EQ(t.budget_bytes(), 1 << 20);
  EXPECT_LT(t.object_count(), 260u);
  auto view = t.get(*t.random_key());
  EXPECT_FALSE(t.set_budget(100).is_ok()) << "a pinned object cannot be evicted";
}

}  // namespace
}  // namespace tierkv::memory
