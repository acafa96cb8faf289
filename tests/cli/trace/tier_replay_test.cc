#include "cli/trace/tier_replay.h"

#include <gtest/gtest.h>

#include <list>
#include <random>
#include <unordered_map>

#include "cli/trace/belady.h"

namespace tierkv::trace {
namespace {

using memory::PolicyKind;

// Textbook LRU with a capacity in objects.
uint64_t reference_lru_misses(const std::vector<uint32_t>& ids, size_t capacity) {
  std::list<uint32_t> order;  // front = most recent
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> where;
  uint64_t misses = 0;
  for (uint32_t id : ids) {
    auto it = where.find(id);
    if (it != where.end()) {
      order.splice(order.begin(), order, it->second);
      continue;
    }
    ++misses;
    if (order.size() == capacity) {
      where.erase(order.back());
      order.pop_back();
    }
    order.push_front(id);
    where[id] = order.begin();
  }
  return misses;
}

// Skewed random ids: a few hot ones, a long tail, and an occasional scan.
std::vector<uint64_t> skewed_sequence(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint64_t> seq;
  while (seq.size() < n) {
    if (rng() % 50 == 0) {
      uint64_t base = 100000 + rng() % 1000;
      for (uint64_t i = 0; i < 40 && seq.size() < n; ++i) seq.push_back(base + i);
    } else {
      double u = std::uniform_real_distribution<double>(0, 1)(rng);
      seq.push_back(static_cast<uint64_t>(600 * u * u * u));
    }
  }
  return seq;
}

TEST(TierReplay, LruThroughTheTierMatchesAReferenceLru) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    DenseTrace t = densify(skewed_sequence(20000, seed));
    for (size_t capacity : {1, 7, 50, 333}) {
      Result<ReplayResult> r = replay_through_tier(t, PolicyKind::kLru, capacity);
      ASSERT_TRUE(r) << r.status().to_string();
      EXPECT_EQ(r->requests, t.requests());
      EXPECT_EQ(r->misses, reference_lru_misses(t.ids, capacity))
          << "seed " << seed << " c=" << capacity;
    }
  }
}

TEST(TierReplay, EveryPolicyFillsExactlyTheCapacityAndNoMore) {
  DenseTrace t = densify(skewed_sequence(20000, 9));
  for (PolicyKind policy : memory::kAllPolicies) {
    for (size_t capacity : {5, 64, 400}) {
      Result<ReplayResult> r = replay_through_tier(t, policy, capacity);
      ASSERT_TRUE(r) << memory::policy_name(policy) << ": " << r.status().to_string();
      EXPECT_EQ(r->max_resident, capacity) << memory::policy_name(policy);
      // No online policy beats Belady's MIN, and none escapes the cold misses.
      EXPECT_GE(r->misses, belady_min_misses(t, capacity)) << memory::policy_name(policy);
    }
  }
}

TEST(TierReplay, ACacheLargerThanTheTraceMissesOnlyOnFirstUse) {
  DenseTrace t = densify(skewed_sequence(5000, 4));
  for (PolicyKind policy : memory::kAllPolicies) {
    Result<ReplayResult> r = replay_through_tier(t, policy, t.unique() + 10);
    ASSERT_TRUE(r) << r.status().to_string();
    EXPECT_EQ(r->misses, t.unique());
    EXPECT_EQ(r->max_resident, t.unique());
  }
}

TEST(TierReplay, ZeroCapacityIsRejected) {
  DenseTrace t = densify({1, 2, 3});
  Result<ReplayResult> r = replay_through_tier(t, PolicyKind::kLru, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tierkv::trace
