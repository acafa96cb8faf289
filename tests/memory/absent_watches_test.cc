// The contract of WATCH on an absent key, at the memory tier: a creation of
// the key after the watch began is seen, even if the key is gone again; a
// creation before it, or of another key, is not; watches leave nothing
// behind.
#include "memory/absent_watches.h"

#include <gtest/gtest.h>

#include "core/hash.h"
#include "memory/memory_tier.h"

namespace tierkv::memory {
namespace {

MemoryTierOptions small_tier() {
  MemoryTierOptions o;
  o.budget_bytes = 8 << 20;
  o.chunk_size = 64 << 10;
  return o;
}

TEST(AbsentWatchesTest, CreationAfterTheWatchIsSeenEvenWhenTheKeyIsGoneAgain) {
  MemoryTier tier(small_tier());
  AbsentWatches::Handle w = tier.watch_absent("k");
  EXPECT_FALSE(w.created_since());
  ASSERT_TRUE(tier.put("k", "v", WriteOptions{}).is_ok());
  ASSERT_TRUE(tier.remove("k"));
  EXPECT_FALSE(tier.stat("k").has_value());
  EXPECT_TRUE(w.created_since());
}

TEST(AbsentWatchesTest, OtherKeysAndEarlierCreationsAreNotSeen) {
  MemoryTier tier(small_tier());
  ASSERT_TRUE(tier.put("k", "old", WriteOptions{}).is_ok());
  ASSERT_TRUE(tier.remove("k"));
  AbsentWatches::Handle w = tier.watch_absent("k");
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(tier.put("other" + std::to_string(i), "v", WriteOptions{}).is_ok());
  }
  EXPECT_FALSE(w.created_since());
}

TEST(AbsentWatchesTest, AnOverwriteIsNotACreationButAWriteAfterExpiryIs) {
  MemoryTier tier(small_tier());
  ASSERT_TRUE(tier.put("k", "v", WriteOptions{.expire_at_ms = 1}).is_ok());  // long expired
  AbsentWatches::Handle w = tier.watch_absent("k");
  ASSERT_TRUE(tier.put("k", "again", WriteOptions{}).is_ok());
  EXPECT_TRUE(w.created_since());
}

TEST(AbsentWatchesTest, NoteCreatedCountsForEveryWatcherOfTheHash) {
  auto watches = std::make_shared<AbsentWatches>();
  AbsentWatches::Handle a = watches->watch(hash64("k"));
  AbsentWatches::Handle b = watches->watch(hash64("k"));
  EXPECT_EQ(watches->watched_hashes(), 1u);
  watches->note_created(hash64("k"));
  EXPECT_TRUE(a.created_since());
  EXPECT_TRUE(b.created_since());
  // A watch that begins after the creation starts from it.
  AbsentWatches::Handle c = watches->watch(hash64("k"));
  EXPECT_FALSE(c.created_since());
}

TEST(AbsentWatchesTest, HandlesUnregisterWhenDestroyedOrMoved) {
  auto watches = std::make_shared<AbsentWatches>();
  {
    AbsentWatches::Handle a = watches->watch(hash64("a"));
    AbsentWatches::Handle b = watches->watch(hash64("b"));
    EXPECT_EQ(watches->watched_hashes(), 2u);
    AbsentWatches::Handle moved = std::move(a);
    EXPECT_EQ(watches->watched_hashes(), 2u);
    EXPECT_FALSE(a.created_since());  // NOLINT(bugprone-use-after-move): moved-from is empty
    b.reset();
    EXPECT_EQ(watches->watched_hashes(), 1u);
  }
  EXPECT_EQ(watches->watched_hashes(), 0u);
  // Nothing registered: a creation takes the fast path and leaves nothing.
  watches->note_created(hash64("a"));
  EXPECT_EQ(watches->watched_hashes(), 0u);
}

}  // namespace
}  // namespace tierkv::memory
