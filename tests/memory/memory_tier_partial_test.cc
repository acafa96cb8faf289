// MemoryTier: the chunk as the unit of residency. The contract:
// * a clean object (its version held below) leaves memory chunk by chunk,
//   in the policy's order; a dirty one is offloaded whole;
// * get() answers only a range held whole; resident_chunks() pins what is
//   held; contains() is false for an object held in part;
// * a promotion's copy of the same version fills the holes;
// * a part whose copy below is gone is dropped on sight;
// * prepare_partial() holds the first chunks that fit, and only a copy of a
//   lower-tier version may be published with holes;
// * a pinned or leased chunk stays while its neighbours go.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "memory/memory_tier.h"
#include "tests/memory/tier_test_util.h"

namespace tierkv::memory {
namespace {

constexpr uint32_t kChunk = 4096;
constexpr uint32_t kChunks = 8;
constexpr uint64_t kVersion = 7;  // the version the lower tier holds

class HoldingLower final : public LowerTier {
 public:
  bool holds(std::string_view, uint64_t, uint64_t version, uint32_t) override {
    return holding.load() && version == kVersion;
  }
  OffloadAnswer offload(OffloadItem& item) override {
    offloaded_chunks.push_back(item.chunks.size());
    return OffloadAnswer::kBusy;
  }
  void reconcile_expiry(std::string_view, uint64_t, int64_t) override {}

  std::atomic<bool> holding{true};
  std::vector<size_t> offloaded_chunks;
};

class PartialTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MemoryTierOptions o;
    o.chunk_size = kChunk;
    o.shards = 1;
    o.policy = PolicyKind::kLru;
    o.budget_bytes = 1 << 20;
    tier_ = std::make_unique<MemoryTier>(o);
    tier_->set_lower_tier(&lower_);
    value_ = testing::make_value("big", 1, kChunks * kChunk - 100);
  }
  // "big" as a clean copy of kVersion, then the budget shrunk to what it
  // takes: every later insert must evict.
  void install_big_and_fill_budget() {
    ASSERT_TRUE(tier_->put("big", value_, WriteOptions{.install_version = kVersion}));
    ASSERT_TRUE(tier_->set_budget(tier_->used_bytes()).is_ok());
  }
  // Indexes of the chunks of "big" that memory holds.
  std::vector<uint32_t> resident() {
    std::vector<uint32_t> out;
    if (std::optional<ObjectInfo> info = tier_->stat("big"))
      for (const ChunkInfo& c : info->chunks) out.push_back(c.index);
    return out;
  }
  void put_small(int i) {
    ASSERT_TRUE(tier_->put(testing::key_of(i), std::string(kChunk - 200, 's'),
                           WriteOptions{.install_version = kVersion}));
  }

  HoldingLower lower_;
  std::unique_ptr<MemoryTier> tier_;
  std::string value_;
};

TEST_F(PartialTest, CleanObjectLeavesChunkByChunkInPolicyOrder) {
  install_big_and_fill_budget();
  for (int i = 0; i < 3; ++i) put_small(i);
  std::vector<uint32_t> held = resident();
  ASSERT_FALSE(held.empty());
  ASSERT_LT(held.size(), kChunks);
  // LRU: the oldest chunks (the first inserted) went first; the rest stay.
  for (size_t j = 0; j < held.size(); ++j) EXPECT_EQ(held[j], kChunks - held.size() + j);
  const MemoryTierStats st = tier_->stats();
  EXPECT_EQ(st.evicted_objects, 0u);
  EXPECT_EQ(st.evicted_chunks, kChunks - held.size());
  EXPECT_EQ(st.chunks, held.size() + 3);
  EXPECT_LE(st.used_bytes, st.budget_bytes);
  EXPECT_TRUE(lower_.offloaded_chunks.empty());  // clean: nothing written

  // Whole reads and ranges over a hole are not memory's; a held range is.
  EXPECT_FALSE(tier_->contains("big"));
  EXPECT_EQ(tier_->get("big").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier_->get("big", GetOptions{.offset = 0, .length = 10}).status().code(),
            StatusCode::kNotFound);
  const uint64_t off = uint64_t{held.back()} * kChunk + 5;
  auto tail = tier_->get("big", GetOptions{.offset = off, .length = 50});
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->to_string(), value_.substr(off, 50));

  std::vector<ChunkPin> pins = tier_->resident_chunks("big", kVersion, 0, kChunks - 1);
  ASSERT_EQ(pins.size(), kChunks);
  for (uint32_t i = 0; i < kChunks; ++i) {
    const bool in = std::find(held.begin(), held.end(), i) != held.end();
    ASSERT_EQ(!pins[i].empty(), in) << i;
    if (in) {
      EXPECT_EQ(pins[i].bytes(), std::string_view(value_).substr(i * kChunk, kChunk)) << i;
    }
  }
  EXPECT_TRUE(tier_->resident_chunks("big", kVersion + 1, 0, kChunks - 1).empty());
}

TEST_F(PartialTest, DirtyObjectIsOffloadedWhole) {
  ASSERT_TRUE(tier_->put("big", value_));  // dirty: memory holds the only copy
  ASSERT_TRUE(tier_->set_budget(tier_->used_bytes()).is_ok());
  {
    MemoryTier::NoWaitScope no_wait;  // the lower tier refuses: no room
    EXPECT_FALSE(tier_->put("s", "s", WriteOptions{.install_version = kVersion}));
  }
  ASSERT_FALSE(lower_.offloaded_chunks.empty());
  EXPECT_EQ(lower_.offloaded_chunks.front(), kChunks);
  EXPECT_EQ(resident().size(), kChunks);  // refused (kBusy): it stays whole
}

TEST_F(PartialTest, ACopyOfTheSameVersionFillsTheHoles) {
  install_big_and_fill_budget();
  put_small(0);
  ASSERT_LT(resident().size(), kChunks);
  ASSERT_TRUE(tier_->set_budget(1 << 20).is_ok());
  // A copy of another version does not replace the part.
  auto other = tier_->put(
      "big", value_, WriteOptions{.condition = WriteCondition::kIfAbsent, .install_version = 3});
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->written);
  auto filled =
      tier_->put("big", value_,
                 WriteOptions{.condition = WriteCondition::kIfAbsent, .install_version = kVersion});
  ASSERT_TRUE(filled);
  EXPECT_TRUE(filled->written);
  EXPECT_EQ(resident().size(), kChunks);
  EXPECT_TRUE(tier_->contains("big"));
  auto whole = tier_->get("big");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->to_string(), value_);
}

TEST_F(PartialTest, APartWhoseCopyBelowIsGoneIsDropped) {
  install_big_and_fill_budget();
  put_small(0);
  ASSERT_FALSE(resident().empty());
  const uint64_t objects = tier_->object_count();
  lower_.holding = false;
  EXPECT_FALSE(tier_->stat("big"));
  EXPECT_EQ(tier_->object_count(), objects - 1);
  EXPECT_EQ(tier_->stats().chunks, 1u);  // the small one
  EXPECT_TRUE(tier_->resident_chunks("big", kVersion, 0, kChunks - 1).empty());
}

TEST_F(PartialTest, PreparePartialHoldsTheFirstChunksThatFit) {
  const int64_t cap = static_cast<int64_t>(tier_->charge_for_object(3, 3 * kChunk)) + 100;
  auto w = tier_->prepare_partial("big", value_.size(), cap);
  ASSERT_TRUE(w);
  for (uint32_t i = 0; i < kChunks; ++i) {
    ASSERT_EQ(w->chunk_data(i) != nullptr, i < 3) << i;
    if (char* to = w->chunk_data(i)) std::memcpy(to, value_.data() + i * kChunk, kChunk);
  }
  w->advance(value_.size());
  // Holes must come from below: a new version may not have them.
  auto fresh = tier_->prepare_partial("fresh", value_.size(), cap);
  ASSERT_TRUE(fresh);
  fresh->advance(value_.size());
  EXPECT_EQ(tier_->publish(std::move(*fresh)).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(tier_->publish(std::move(*w), WriteOptions{.install_version = kVersion}));
  EXPECT_EQ(resident(), (std::vector<uint32_t>{0, 1, 2}));
  auto head = tier_->get("big", GetOptions{.offset = 0, .length = 3 * kChunk});
  ASSERT_TRUE(head);
  EXPECT_EQ(head->to_string(), value_.substr(0, 3 * kChunk));
  // Nothing fits: no writer, and nothing stays charged.
  const int64_t used = tier_->used_bytes();
  EXPECT_EQ(tier_->prepare_partial("none", value_.size(), 10).status().code(),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(tier_->used_bytes(), used);
}

TEST_F(PartialTest, APinnedChunkStaysWhileItsNeighboursGo) {
  install_big_and_fill_budget();
  // Chunk 0 is the LRU's first victim: pin it.
  std::vector<ChunkPin> pin =
      tier_->resident_chunks("big", kVersion, 0, 0, GetOptions{.touch = false, .end_lease = false});
  ASSERT_EQ(pin.size(), 1u);
  for (int i = 0; i < 3; ++i) put_small(i);
  std::vector<uint32_t> held = resident();
  ASSERT_FALSE(held.empty());
  EXPECT_EQ(held.front(), 0u);  // kept although it is the oldest
  EXPECT_LT(held.size(), kChunks);
  EXPECT_EQ(pin[0].bytes(), std::string_view(value_).substr(0, kChunk));
}

TEST_F(PartialTest, LeasedChunksStayUntilARead) {
  install_big_and_fill_budget();
  tier_->set_lease_max_fraction(1.0);
  ASSERT_TRUE(tier_->grant_lease("big", 60'000).is_ok());
  {
    MemoryTier::NoWaitScope no_wait;
    EXPECT_EQ(
        tier_->put("s", std::string(kChunk - 200, 's'), WriteOptions{.install_version = kVersion})
            .status()
            .code(),
        StatusCode::kOutOfMemory);
  }
  EXPECT_EQ(resident().size(), kChunks);
  // A read of chunks 0-3 ends their leases: those may go now, the rest not.
  ASSERT_TRUE(tier_->get("big", GetOptions{.offset = 0, .length = 4 * kChunk}));
  for (int i = 0; i < 3; ++i) put_small(i);
  std::vector<uint32_t> held = resident();
  ASSERT_GE(held.size(), 4u);
  ASSERT_LT(held.size(), kChunks);
  for (uint32_t c = 4; c < kChunks; ++c)
    EXPECT_NE(std::find(held.begin(), held.end(), c), held.end()) << c;
}

}  // namespace
}  // namespace tierkv::memory
