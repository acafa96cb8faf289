// MemoryTier: the dirty-byte count through every flash-state transition, and
// take_cold_dirty() (the memory side of background writeback), against a
// lower tier that records what it is asked.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "memory/memory_tier.h"

namespace tierkv::memory {
namespace {

constexpr size_t kValueSize = 1000;

class RecordingLower final : public LowerTier {
 public:
  bool holds(std::string_view key, uint64_t, uint64_t version, uint32_t) override {
    std::lock_guard lock(mu_);
    return held_.contains(id(key, version));
  }
  OffloadAnswer offload(OffloadItem& item) override {
    std::lock_guard lock(mu_);
    ++offloads_;
    if (answer_ == OffloadAnswer::kQueued) queued_.push_back(std::move(item));
    return answer_;
  }
  void reconcile_expiry(std::string_view, uint64_t, int64_t) override {}

  // Lands a copy handed out by take_cold_dirty(): the tier marks it clean
  // (or dirty again if !ok), and, if ok, this tier holds it from now on.
  void land(MemoryTier& t, const OffloadItem& item, bool ok) {
    if (ok) {
      std::lock_guard lock(mu_);
      held_.insert(id(item.key, item.version));
    }
    t.finish_flash_write(item.key, item.version, item.evicted, ok, item.expire_at_ms);
  }
  // Lands every offload queued so far.
  void land_offloads(MemoryTier& t) {
    std::vector<OffloadItem> items;
    {
      std::lock_guard lock(mu_);
      items.swap(queued_);
    }
    for (const OffloadItem& item : items) land(t, item, true);
  }
  void set_answer(OffloadAnswer a) {
    std::lock_guard lock(mu_);
    answer_ = a;
  }
  int offloads() {
    std::lock_guard lock(mu_);
    return offloads_;
  }
  // The keys of the offloads queued and not landed yet, oldest first.
  std::string queued_keys() {
    std::lock_guard lock(mu_);
    std::string out;
    for (const OffloadItem& i : queued_) out += i.key;
    return out;
  }

 private:
  static std::string id(std::string_view key, uint64_t version) {
    return std::string(key) + "@" + std::to_string(version);
  }
  std::mutex mu_;
  std::set<std::string> held_;
  std::vector<OffloadItem> queued_;
  OffloadAnswer answer_ = OffloadAnswer::kQueued;
  int offloads_ = 0;
};

// A one-shard tier (one policy order) over `lower`; with capacity > 0 the
// budget holds exactly that many objects with one-letter keys.
std::unique_ptr<MemoryTier> tier(RecordingLower& lower, PolicyKind policy, int capacity = 0) {
  MemoryTierOptions o;
  o.chunk_size = 4096;
  o.shards = 1;
  o.policy = policy;
  o.expected_objects = 64;
  o.offload_wait_ms = 0;  // a full memory fails at once: tests never wait
  if (capacity > 0) {
    MemoryTier probe(o);
    o.budget_bytes = probe.used_bytes() +
                     capacity * static_cast<int64_t>(probe.charge_for_object(1, kValueSize));
  }
  auto t = std::make_unique<MemoryTier>(o);
  t->set_lower_tier(&lower);
  return t;
}

bool put(MemoryTier& t, char key, const WriteOptions& w = {}) {
  return t.put(std::string(1, key), std::string(kValueSize, key), w).is_ok();
}

void put_all(MemoryTier& t, std::string_view keys) {
  for (char c : keys) ASSERT_TRUE(put(t, c)) << c;
}

std::string keys_of(const std::vector<OffloadItem>& items) {
  std::string out;
  for (const OffloadItem& i : items) out += i.key;
  return out;
}

FlashState state_of(MemoryTier& t, char key) {
  std::optional<ObjectInfo> info = t.stat(std::string(1, key));
  EXPECT_TRUE(info) << key;
  return info ? info->flash_state : FlashState::kDirty;
}

// The chunk charge of one kValueSize object under `policy` (which may add
// per-entry overhead): what it adds to the dirty bytes.
int64_t one_object(RecordingLower& lower, PolicyKind policy = PolicyKind::kLru) {
  auto t = tier(lower, policy);
  EXPECT_TRUE(put(*t, 'z'));
  return t->dirty_bytes();
}

TEST(MemoryTierWritebackTest, DirtyBytesFollowEveryTransition) {
  RecordingLower lower;
  const int64_t d = one_object(lower);
  ASSERT_GE(d, static_cast<int64_t>(kValueSize));
  auto t = tier(lower, PolicyKind::kLru);
  put_all(*t, "abcd");
  EXPECT_EQ(t->dirty_bytes(), 4 * d);
  EXPECT_EQ(t->stats().dirty_bytes, 4 * d);

  std::vector<OffloadItem> items = t->take_cold_dirty(INT64_MAX, 100);
  ASSERT_EQ(keys_of(items), "abcd");
  EXPECT_EQ(t->dirty_bytes(), 0) << "copies under way are not dirty";
  EXPECT_EQ(state_of(*t, 'a'), FlashState::kFlushing);

  lower.land(*t, items[0], true);
  EXPECT_EQ(state_of(*t, 'a'), FlashState::kClean);
  EXPECT_EQ(t->stats().clean_objects, 1u);
  lower.land(*t, items[1], false);  // a failed copy leaves b dirty again
  EXPECT_EQ(state_of(*t, 'b'), FlashState::kDirty);
  EXPECT_EQ(t->dirty_bytes(), d);

  ASSERT_TRUE(put(*t, 'c'));  // overwrite while c's copy is under way
  EXPECT_EQ(t->dirty_bytes(), 2 * d);
  lower.land(*t, items[2], true);  // the old version's copy: no effect
  EXPECT_EQ(state_of(*t, 'c'), FlashState::kDirty);
  EXPECT_EQ(t->dirty_bytes(), 2 * d);

  EXPECT_TRUE(t->remove("b"));
  EXPECT_TRUE(t->remove("a"));
  EXPECT_EQ(t->dirty_bytes(), d);
  EXPECT_EQ(t->stats().clean_objects, 0u);
  lower.land(*t, items[3], true);

  // The write-through and shutdown paths: begin_flush(), flush_all_dirty().
  put_all(*t, "ef");
  EXPECT_EQ(t->dirty_bytes(), 3 * d);
  std::optional<OffloadItem> e = t->begin_flush("e", t->stat("e")->version);
  ASSERT_TRUE(e);
  EXPECT_EQ(t->dirty_bytes(), 2 * d);
  std::vector<OffloadItem> rest;
  t->flush_all_dirty([&](OffloadItem&& i) { rest.push_back(std::move(i)); });
  std::string flushed = keys_of(rest);
  std::sort(flushed.begin(), flushed.end());  // index order
  EXPECT_EQ(flushed, "cf");
  EXPECT_EQ(t->dirty_bytes(), 0);
  lower.land(*t, *e, false);
  EXPECT_EQ(t->dirty_bytes(), d);
  t->clear();
  EXPECT_EQ(t->dirty_bytes(), 0);
  EXPECT_EQ(t->stats().clean_objects, 0u);
}

TEST(MemoryTierWritebackTest, OffloadsAndRefusedOffloadsKeepTheCountExact) {
  RecordingLower lower;
  const int64_t d = one_object(lower);
  auto t = tier(lower, PolicyKind::kLru, 4);
  // Refused from the start: a lower tier makes the fourth write start an
  // offload ahead of need, which must not land before the checks below.
  lower.set_answer(OffloadAnswer::kBusy);
  put_all(*t, "abcd");
  EXPECT_FALSE(put(*t, 'e')) << "every victim's offload was refused";
  EXPECT_GE(lower.offloads(), 1);
  EXPECT_EQ(t->dirty_bytes(), 4 * d) << "a refused offload leaves its object dirty";
  EXPECT_EQ(t->stats().offloading_bytes, 0);

  lower.set_answer(OffloadAnswer::kQueued);
  (void)put(*t, 'e');  // starts offloads; it may or may not fit meanwhile
  MemoryTierStats st = t->stats();
  EXPECT_GT(st.offloading_bytes, 0);
  EXPECT_EQ(st.dirty_bytes + st.offloading_bytes, static_cast<int64_t>(st.objects) * d);
  lower.land_offloads(*t);
  st = t->stats();
  EXPECT_EQ(st.offloading_bytes, 0);
  EXPECT_EQ(st.dirty_bytes, static_cast<int64_t>(st.objects) * d);
  t->clear();
  EXPECT_EQ(t->dirty_bytes(), 0);
}

TEST(MemoryTierWritebackTest, TakesTheColdestFirstAndResumes) {
  RecordingLower lower;
  const int64_t d = one_object(lower);
  auto t = tier(lower, PolicyKind::kLru);
  put_all(*t, "abcdefgh");
  ASSERT_TRUE(t->get("a"));
  ASSERT_TRUE(t->get("b"));  // LRU order, coldest first: c d e f g h a b
  // Objects are taken while the bytes are under the limit: the last may pass it.
  EXPECT_EQ(keys_of(t->take_cold_dirty(3 * d - 1, 100)), "cde");
  EXPECT_EQ(keys_of(t->take_cold_dirty(2 * d, 100)), "fg");
  EXPECT_EQ(keys_of(t->take_cold_dirty(INT64_MAX, 100)), "hab");
  EXPECT_TRUE(t->take_cold_dirty(INT64_MAX, 100).empty()) << "nothing dirty is left";
}

TEST(MemoryTierWritebackTest, BoundedStepsResumeWhereTheyStopped) {
  RecordingLower lower;
  auto t = tier(lower, PolicyKind::kLru);
  put_all(*t, "abcdefg");
  // Copies of a..c land: clean objects the next walk must step over.
  std::vector<OffloadItem> first = t->take_cold_dirty(INT64_MAX, 3);
  ASSERT_EQ(keys_of(first), "abc");
  for (const OffloadItem& i : first) lower.land(*t, i, true);
  EXPECT_EQ(keys_of(t->take_cold_dirty(INT64_MAX, 2)), "de");
  EXPECT_EQ(keys_of(t->take_cold_dirty(INT64_MAX, 2)), "fg");
  // A new walk steps over the clean and flushing objects, two per call.
  ASSERT_TRUE(put(*t, 'h'));
  std::string found;
  for (int call = 0; call < 8 && found.empty(); ++call)
    found = keys_of(t->take_cold_dirty(INT64_MAX, 2));
  EXPECT_EQ(found, "h");
}

TEST(MemoryTierWritebackTest, SkipsExpiredObjectsAndNeedsALowerTier) {
  RecordingLower lower;
  auto t = tier(lower, PolicyKind::kLru);
  ASSERT_TRUE(put(*t, 'a', WriteOptions{.expire_at_ms = 1}));  // long expired
  ASSERT_TRUE(put(*t, 'b'));
  EXPECT_EQ(keys_of(t->take_cold_dirty(INT64_MAX, 100)), "b");

  MemoryTierOptions o;
  MemoryTier alone(o);
  ASSERT_TRUE(alone.put("k", "v"));
  EXPECT_GT(alone.dirty_bytes(), 0) << "memory alone holds nothing anywhere else";
  EXPECT_TRUE(alone.take_cold_dirty(INT64_MAX, 100).empty());
}

class WritebackPolicyTest : public ::testing::TestWithParam<PolicyKind> {};

TEST_P(WritebackPolicyTest, TakesInEvictionOrder) {
  RecordingLower lower;
  const int64_t d = one_object(lower, GetParam());
  auto t = tier(lower, GetParam());
  put_all(*t, "abcdef");
  EXPECT_EQ(keys_of(t->take_cold_dirty(2 * d - 1, 100)), "ab");
  EXPECT_EQ(keys_of(t->take_cold_dirty(4 * d, 100)), "cdef");
}

// Once writeback has copied memory down, making room costs no flash write.
TEST_P(WritebackPolicyTest, EvictingCleanObjectsNeedsNoFlashWrite) {
  RecordingLower lower;
  const int64_t d = one_object(lower, GetParam());
  auto t = tier(lower, GetParam(), 8);
  // Refused while filling: the last write's offload-ahead must not land.
  lower.set_answer(OffloadAnswer::kBusy);
  put_all(*t, "abcdefgh");
  std::vector<OffloadItem> items = t->take_cold_dirty(INT64_MAX, 100);
  ASSERT_EQ(items.size(), 8u);
  for (const OffloadItem& i : items) lower.land(*t, i, true);
  items.clear();  // drops the pins
  EXPECT_EQ(t->stats().clean_objects, 8u);
  const int offloads = lower.offloads();
  // Four more writes evict four or five (room is kept ahead) clean objects.
  put_all(*t, "ijkl");
  EXPECT_EQ(lower.offloads(), offloads) << "making room wrote to the lower tier";
  EXPECT_GE(t->stats().evicted_objects, 4u);
  for (char c : std::string("ijkl")) EXPECT_TRUE(t->contains(std::string(1, c))) << c;
  EXPECT_EQ(t->dirty_bytes(), 4 * d);
}

// A victim whose offload the lower tier refuses (its queue is full) is still
// the coldest object: it is the next one offloaded, not treated as new (and,
// under S3-FIFO, not promoted to the main queue by its own ghost entry).
TEST_P(WritebackPolicyTest, RefusedVictimStaysTheNextVictim) {
  RecordingLower lower;
  auto t = tier(lower, GetParam(), 4);
  lower.set_answer(OffloadAnswer::kBusy);
  put_all(*t, "abcd");
  EXPECT_FALSE(put(*t, 'e')) << "every victim's offload was refused";
  const int refused = lower.offloads();
  ASSERT_GE(refused, 1);
  lower.set_answer(OffloadAnswer::kQueued);
  (void)put(*t, 'e');
  std::string queued = lower.queued_keys();
  ASSERT_FALSE(queued.empty());
  EXPECT_EQ(queued.front(), 'a') << "offloaded " << queued << " after " << refused << " refusals";
  lower.land_offloads(*t);
  EXPECT_FALSE(t->contains("a"));
}

INSTANTIATE_TEST_SUITE_P(All, WritebackPolicyTest, ::testing::ValuesIn(kAllPolicies),
                         [](const auto& info) { return std::string(policy_name(info.param)); });

}  // namespace
}  // namespace tierkv::memory
