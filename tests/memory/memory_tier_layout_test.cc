// MemoryTier over both object layouts (object.h): small values fused with
// their object, larger ones separate, and a key moving between the two as
// it is overwritten. Contract, checked against a model with seeded random
// puts, overwrites with and without KEEPTTL, EXPIRE, PERSIST, past
// expiries and deletes: every key reads back its last value and expiry and
// nothing else; a pinned view keeps its bytes through a delete or
// overwrite; and when everything is gone, every byte charged has been
// credited back (used bytes return to 0), so no layout leaks budget.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "core/clock.h"
#include "memory/memory_tier.h"
#include "memory/object.h"
#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

using testing::key_of;
using testing::make_value;

constexpr uint32_t kChunk = 4096;

MemoryTierOptions roomy_tier() {
  MemoryTierOptions o;
  o.budget_bytes = 256 << 20;  // nothing is evicted: the model is exact
  o.chunk_size = kChunk;
  o.shards = 4;
  return o;
}

struct Expected {
  uint64_t seed = 0;
  size_t size = 0;
  int64_t expire_at_ms = 0;
};

size_t random_size(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return rng() % 200;  // fused
    case 1:
      return kChunk - 1 - rng() % 8;  // fused, at the edge
    case 2:
      return kChunk;  // one full chunk: separate, pooled
    default:
      return kChunk + rng() % (3 * kChunk);  // several chunks
  }
}

void check_key(MemoryTier& t, const std::string& key, const std::optional<Expected>& want,
               int step) {
  auto got = t.get(key);
  if (!want) {
    ASSERT_FALSE(got) << key << " step " << step;
    return;
  }
  ASSERT_TRUE(got) << key << " step " << step;
  ASSERT_EQ(got->to_string(), make_value(key, want->seed, want->size)) << key << " step " << step;
  ASSERT_EQ(got->expire_at_ms(), want->expire_at_ms) << key << " step " << step;
  auto info = t.stat(key);
  ASSERT_TRUE(info);
  ASSERT_EQ(info->expire_at_ms, want->expire_at_ms);
  ASSERT_EQ(info->size, want->size);
}

TEST(MemoryTierLayoutTest, BothLayoutsMatchAModelAndCreditEveryByte) {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    MemoryTier t(roomy_tier());
    std::mt19937_64 rng(20261207 + seed);
    std::map<std::string, Expected> model;
    const int64_t far = unix_time_ms() + 3'600'000;
    for (int step = 0; step < 3000; ++step) {
      const std::string key = key_of(static_cast<int>(rng() % 48));
      auto it = model.find(key);
      switch (rng() % 8) {
        case 0:
        case 1:
        case 2: {
          Expected e{rng(), random_size(rng), 0};
          WriteOptions o;
          if (rng() % 3 == 0) o.expire_at_ms = e.expire_at_ms = far + step;
          if (rng() % 4 == 0) {
            o.keep_ttl = true;
            o.expire_at_ms = 0;
            e.expire_at_ms = it != model.end() ? it->second.expire_at_ms : 0;
          }
          ASSERT_TRUE(t.put(key, make_value(key, e.seed, e.size), o)) << "step " << step;
          model[key] = e;
          break;
        }
        case 3: {  // EXPIRE in the future, or PERSIST
          const int64_t at = rng() % 2 ? far - step : 0;
          ASSERT_EQ(t.set_expiry(key, at), it != model.end());
          if (it != model.end()) it->second.expire_at_ms = at;
          break;
        }
        case 4:  // an expiry already past: gone at the next access
          ASSERT_EQ(t.set_expiry(key, 1), it != model.end());
          model.erase(key);
          break;
        case 5:
          ASSERT_EQ(t.remove(key), it != model.end());
          model.erase(key);
          break;
        default: {
          auto found = model.find(key);
          check_key(t, key, found == model.end() ? std::nullopt : std::optional(found->second),
                    step);
        }
      }
    }
    for (int i = 0; i < 48; ++i) {
      const std::string key = key_of(i);
      auto found = model.find(key);
      check_key(t, key, found == model.end() ? std::nullopt : std::optional(found->second), -1);
    }
    EXPECT_EQ(t.object_count(), model.size());
    t.clear();
    EXPECT_EQ(t.used_bytes(), 0) << "seed " << seed;
  }
}

TEST(MemoryTierLayoutTest, APinnedSmallValueOutlivesItsDeleteAndOverwrite) {
  MemoryTier t(roomy_tier());
  // The index's table keeps its capacity once grown: its charge aside.
  auto outside_index = [&t] { return t.used_bytes() - t.stats().index_bytes; };
  const int64_t empty = outside_index();
  ASSERT_TRUE(t.put("k", "first value"));
  auto got = t.get("k");
  ASSERT_TRUE(got);
  std::optional<ObjectView> view(std::move(*got));
  ASSERT_TRUE(t.remove("k"));
  ASSERT_TRUE(t.put("k", std::string(3 * kChunk, 'x')));  // now separate
  ASSERT_TRUE(t.put("k", "third"));                       // fused again
  EXPECT_EQ(view->to_string(), "first value");
  const int64_t with_pin = t.used_bytes();
  view.reset();
  EXPECT_LT(t.used_bytes(), with_pin) << "the pinned block's charge returns on release";
  ASSERT_TRUE(t.remove("k"));
  EXPECT_EQ(outside_index(), empty);
}

TEST(MemoryTierLayoutTest, ASmallValueCostsOneBlockOfHeaderKeyAndValue) {
  MemoryTier t(roomy_tier());
  const size_t overhead = t.policy_overhead();
  EXPECT_EQ(t.charge_for_object(16, 100), Object::fused_charge(16, 100) + overhead);
  const int64_t index_before = t.stats().index_bytes;
  const int64_t before = t.used_bytes();
  ASSERT_TRUE(t.put(std::string(16, 'k'), std::string(100, 'v')));
  const int64_t index_growth = t.stats().index_bytes - index_before;
  EXPECT_EQ(t.used_bytes() - before,
            static_cast<int64_t>(t.charge_for_object(16, 100)) + index_growth);
}

}  // namespace
}  // namespace tierkv::memory
